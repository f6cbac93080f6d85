package device

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/sys/tsc"
)

// ErrStopwatch: more marks than the stopwatch was made for, or a closed
// stopwatch.
var ErrStopwatch = errors.New("device: stopwatch misuse")

// Timer is a Device that can time its own work: marks recorded on its
// stream between operations give the device time between them (CUDA
// events on a GPU), so a measurement sees each call separately instead of
// an average that can hide a stall.
type Timer interface {
	Device
	// NewStopwatch makes a stopwatch for up to marks marks.
	NewStopwatch(marks int) (Stopwatch, error)
}

// Stopwatch records marks in stream order. Mark queues one; Laps waits
// for the last and returns the time between consecutive marks (len =
// marks - 1), then starts over. Not safe for concurrent use.
type Stopwatch interface {
	Mark() error
	Laps() ([]time.Duration, error)
	Close() error
}

var (
	_ Timer = (*CUDA)(nil)
	_ Timer = (*Fake)(nil)
)

// NewStopwatch on a GPU pre-creates the events (cuEventCreate costs
// microseconds; Mark only records, about a microsecond of host time).
func (c *CUDA) NewStopwatch(marks int) (Stopwatch, error) {
	if marks < 2 {
		return nil, fmt.Errorf("%w: NewStopwatch(%d): need at least 2 marks", ErrStopwatch, marks)
	}
	s := &cudaStopwatch{c: c, ev: make([]cuda.Event, 0, marks)}
	err := c.do(func() error {
		for range marks {
			e, err := c.d.EventCreate(0)
			if err != nil {
				return err
			}
			s.ev = append(s.ev, e)
		}
		return nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

type cudaStopwatch struct {
	c  *CUDA
	ev []cuda.Event
	n  int // marks recorded since the last Laps
}

func (s *cudaStopwatch) Mark() error {
	if s.n >= len(s.ev) {
		return fmt.Errorf("%w: Mark %d of a %d-mark stopwatch", ErrStopwatch, s.n+1, len(s.ev))
	}
	err := s.c.do(func() error {
		if s.c.capturing {
			return fmt.Errorf("Mark: %w", ErrCapturing)
		}
		return s.c.d.EventRecord(s.ev[s.n], s.c.stream)
	})
	if err == nil {
		s.n++
	}
	return err
}

func (s *cudaStopwatch) Laps() ([]time.Duration, error) {
	n := s.n
	s.n = 0
	if n < 2 {
		return nil, nil
	}
	out := make([]time.Duration, n-1)
	// Waiting for the last event does not hold the device's lock, so
	// other calls (an Abort, say) are not held up behind it.
	runtime.LockOSThread()
	err := s.c.d.SetCurrent(s.c.ctx)
	if err == nil {
		err = s.c.d.EventSynchronize(s.ev[n-1])
	}
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", s.c.ordinal, err)
	}
	err = s.c.do(func() error {
		for i := range n - 1 {
			ms, err := s.c.d.EventElapsed(s.ev[i], s.ev[i+1])
			if err != nil {
				return err
			}
			out[i] = time.Duration(float64(ms) * 1e6)
		}
		return nil
	})
	return out, err
}

func (s *cudaStopwatch) Close() error {
	ev := s.ev
	s.ev, s.n = nil, 0
	return s.c.do(func() error {
		var first error
		for _, e := range ev {
			if err := s.c.d.EventDestroy(e); err != nil && first == nil {
				first = err
			}
		}
		return first
	})
}

// NewStopwatch on the fake reads the host clock: the fake's operations
// complete before they return.
func (f *Fake) NewStopwatch(marks int) (Stopwatch, error) {
	if marks < 2 {
		return nil, fmt.Errorf("%w: NewStopwatch(%d): need at least 2 marks", ErrStopwatch, marks)
	}
	return NewHostStopwatch(marks), nil
}

// HostStopwatch times host work with the host clock (the Stopwatch of
// host-only workers and of the fake device). A mark reads the
// monotonic clock through internal/sys/tsc: the time-stamp counter,
// calibrated against time.Since of the stopwatch's start, where the
// kernel trusts it (a few ns; time.Since costs about 25 ns on a 2-vCPU
// VM, time.Now 70), because benchmarks mark every call of a
// sub-microsecond collective and each lap includes one mark.
type HostStopwatch struct {
	clk tsc.Clock
	t   []time.Duration // marks, since start
}

// NewHostStopwatch makes a host stopwatch for up to marks marks.
func NewHostStopwatch(marks int) *HostStopwatch {
	start := time.Now()
	return &HostStopwatch{clk: tsc.New(func() int64 { return int64(time.Since(start)) }), t: make([]time.Duration, 0, max(marks, 2))}
}

func (s *HostStopwatch) Mark() error {
	if s.t == nil || len(s.t) == cap(s.t) {
		return fmt.Errorf("%w: Mark %d of a %d-mark stopwatch", ErrStopwatch, len(s.t)+1, cap(s.t))
	}
	s.t = append(s.t, time.Duration(s.clk.Now()))
	return nil
}

func (s *HostStopwatch) Laps() ([]time.Duration, error) {
	defer func() { s.t = s.t[:0] }()
	if len(s.t) < 2 {
		return nil, nil
	}
	out := make([]time.Duration, len(s.t)-1)
	for i := range out {
		out[i] = s.t[i+1] - s.t[i]
	}
	return out, nil
}

func (s *HostStopwatch) Close() error { s.t = nil; return nil }
