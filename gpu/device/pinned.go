package device

import (
	"errors"
	"fmt"
)

// ErrPinnedFreed: a pinned buffer used after FreePinned (or freed twice).
var ErrPinnedFreed = errors.New("pinned host buffer already freed")

// PinnedBuffer is page-locked host memory of one device (ordinary host
// memory on the Fake), from which copies to the device run asynchronously
// (DMA) while the host goes on. It is not Go-managed memory: free it with
// FreePinned.
type PinnedBuffer struct {
	b   []byte
	dev int
	// freed is set by FreePinned (guarded by the device's lock).
	freed bool
}

// Bytes is the buffer's memory. It must not be used after FreePinned.
func (p *PinnedBuffer) Bytes() []byte { return p.b }

// Stager is a Device that stages host data through pinned memory: a
// loader fills one pinned buffer while the device copies another.
type Stager interface {
	Device
	AllocPinned(n int64) (*PinnedBuffer, error)
	// FreePinned waits for queued copies (the device's stream) and frees p.
	FreePinned(p *PinnedBuffer) error
	// CopyInAsync queues a copy of src.Bytes()[soff:soff+n] to dst at
	// doff on the device's stream and returns at once: src must not be
	// written until a later Sync returns. Not allowed while capturing.
	CopyInAsync(dst *Buffer, doff int64, src *PinnedBuffer, soff, n int64) error
}

func checkPinned(op string, p *PinnedBuffer, off, n int64, dev int) error {
	switch {
	case p == nil:
		return fmt.Errorf("device %d: %s: nil pinned buffer", dev, op)
	case p.freed:
		return fmt.Errorf("device %d: %s: %w", dev, op, ErrPinnedFreed)
	case p.dev != dev:
		return fmt.Errorf("device %d: %s: pinned buffer of device %d", dev, op, p.dev)
	case off < 0 || n < 0 || off > int64(len(p.b)) || n > int64(len(p.b))-off:
		return fmt.Errorf("device %d: %s: range [%d, %d) outside a %d-byte pinned buffer", dev, op, off, off+n, len(p.b))
	}
	return nil
}
