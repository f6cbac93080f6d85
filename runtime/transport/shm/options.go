package shm

import (
	"errors"
	"fmt"
	"time"

	"github.com/chorus-rt/chorus/runtime/transport"
)

// Defaults and limits for Options.
const (
	// DefaultRingSize is the capacity of each ring when Options.RingSize is 0.
	DefaultRingSize = 1 << 20
	// MinRingSize and MaxRingSize bound Options.RingSize.
	MinRingSize = 64
	MaxRingSize = 1 << 30
	// DefaultSpin is the polling time before a waiter sleeps when
	// Options.SpinDuration is 0.
	DefaultSpin = 50 * time.Microsecond
	// MaxSpin bounds Options.SpinDuration.
	MaxSpin = 10 * time.Millisecond
)

// Options configures a segment made by Create. The worker side (Open) reads
// the same settings from the segment header.
type Options struct {
	// RingSize is the capacity in bytes of each of the two rings. It must
	// be a power of two in [MinRingSize, MaxRingSize]; 0 means
	// DefaultRingSize. Frames larger than the ring are still allowed.
	RingSize int
	// SpinDuration is the most a waiter (a Recv with no data, a Send with
	// a full ring) polls the shared index before it sleeps in a futex. The
	// actual polling time adapts below it: it shrinks while polling keeps
	// failing (slow peer) and grows back while it succeeds. 0 means
	// DefaultSpin; a negative value disables polling. Values above MaxSpin
	// are clamped. Worker ends use the value stored in the segment.
	SpinDuration time.Duration
	// Yield makes a polling waiter give its CPU away (sched_yield) between
	// polls instead of busy-polling. Use it when the processes that talk
	// over segments outnumber the CPUs: a busy poller then delays the very
	// peer it waits for. It hurts next to unrelated CPU-bound processes
	// (the scheduler pushes a yielding task back a whole slice), so it is
	// off by default. Worker ends use the value stored in the segment.
	Yield bool
}

// ErrUnsupported is returned by Create and Open on systems other than Linux.
var ErrUnsupported = fmt.Errorf("shm: shared-memory transport needs linux: %w", errors.ErrUnsupported)

// Compile-time check that *Conn satisfies transport.Conn on every system.
var _ transport.Conn = (*Conn)(nil)

func (o Options) normalize() (ringSize uint64, spin time.Duration, err error) {
	rs := o.RingSize
	if rs == 0 {
		rs = DefaultRingSize
	}
	if rs < MinRingSize || rs > MaxRingSize || rs&(rs-1) != 0 {
		return 0, 0, fmt.Errorf("shm: ring size %d is not a power of two in [%d, %d]", o.RingSize, MinRingSize, MaxRingSize)
	}
	spin = o.SpinDuration
	switch {
	case spin == 0:
		spin = DefaultSpin
	case spin < 0:
		spin = 0
	case spin > MaxSpin:
		spin = MaxSpin
	}
	return uint64(rs), spin, nil
}

// Compile-time check that *LogConn satisfies transport.Conn on every system.
var _ transport.Conn = (*LogConn)(nil)
