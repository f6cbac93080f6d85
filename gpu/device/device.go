package device

import (
	"errors"
	"fmt"
)

// ErrClosed: the device was closed.
var ErrClosed = errors.New("device: closed")

// Buffer is an allocation on one device. It satisfies tensor.DeviceBuffer.
type Buffer struct {
	ptr  uint64
	size int64
	dev  int
}

// Ptr is the device address of the first byte.
func (b *Buffer) Ptr() uintptr { return uintptr(b.ptr) }

// Size is the allocation's usable size in bytes.
func (b *Buffer) Size() int64 { return b.size }

// Wrap describes device memory that another allocator owns (for example
// CUDA IPC memory) so tensors and copies can use it. Never pass a wrapped
// buffer to Device.Free or Pool.Put.
func Wrap(ptr uint64, size int64, ordinal int) *Buffer {
	return &Buffer{ptr: ptr, size: size, dev: ordinal}
}

// Ordinal is the device the buffer lives on.
func (b *Buffer) Ordinal() int { return b.dev }

// Device is one GPU (or a fake). Methods are safe for concurrent use;
// operations are ordered as if on one stream, and Sync waits for all.
type Device interface {
	Ordinal() int
	Alloc(n int64) (*Buffer, error)
	Free(b *Buffer) error
	// CopyIn copies host bytes to b at byte offset off.
	CopyIn(b *Buffer, off int64, src []byte) error
	// CopyOut copies from b at off into dst (len(dst) bytes).
	CopyOut(dst []byte, b *Buffer, off int64) error
	// Copy copies n bytes between buffers of this device.
	Copy(dst *Buffer, doff int64, src *Buffer, soff int64, n int64) error
	Memset(b *Buffer, off int64, v byte, n int64) error
	Sync() error
	MemInfo() (free, total int64, err error)
	Close() error
}

func checkRange(op string, b *Buffer, off, n int64, dev int) error {
	if b == nil {
		return fmt.Errorf("device %d: %s: nil buffer", dev, op)
	}
	if b.dev != dev {
		return fmt.Errorf("device %d: %s: buffer lives on device %d", dev, op, b.dev)
	}
	if off < 0 || n < 0 || off > b.size || n > b.size-off {
		return fmt.Errorf("device %d: %s: range [%d, %d) outside a %d-byte buffer", dev, op, off, off+n, b.size)
	}
	return nil
}
