package pollread

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Reader reads a connection, polling it for up to the spin budget before
// it blocks. One goroutine reads at a time (as with net.Conn).
type Reader struct {
	c    net.Conn
	rc   syscall.RawConn
	spin atomic.Int64 // nanoseconds; 0: no polling

	// Counters for tests and traces: reads that polling answered, and
	// reads that parked after polling the whole budget.
	polled, parked atomic.Uint64
}

// New returns a Reader of c, which must expose its file descriptor
// (syscall.Conn: *net.TCPConn, *net.UnixConn). The budget starts at 0.
func New(c net.Conn) (*Reader, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("pollread: %T has no file descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("pollread: %w", err)
	}
	return &Reader{c: c, rc: rc}, nil
}

// SetSpin sets how long a read polls before it parks (0: it parks at
// once). It may be called while a read runs; that read keeps its budget.
func (r *Reader) SetSpin(d time.Duration) { r.spin.Store(int64(max(d, 0))) }

// Spin is the current budget.
func (r *Reader) Spin() time.Duration { return time.Duration(r.spin.Load()) }

// Stats returns how many reads found data while polling (after a first
// attempt found none) and how many parked after the whole budget.
func (r *Reader) Stats() (polled, parked uint64) { return r.polled.Load(), r.parked.Load() }

// Read reads into p: at once if data is there, else polling for up to the
// budget, else through the connection's blocking Read.
func (r *Reader) Read(p []byte) (int, error) {
	spin := time.Duration(r.spin.Load())
	if spin <= 0 || len(p) == 0 {
		return r.c.Read(p)
	}
	var start time.Time
	for i := 0; ; i++ {
		n, err, done := r.try(p)
		if done {
			if i > 0 {
				r.polled.Add(1)
			}
			return n, err
		}
		// The clock every 8 polls: a poll (a system call) takes about a
		// microsecond, a clock read a few tens of nanoseconds.
		if i&7 == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) >= spin {
				break
			}
		}
	}
	r.parked.Add(1)
	return r.c.Read(p)
}

// try makes one non-blocking read; done is false when no data was there.
func (r *Reader) try(p []byte) (n int, err error, done bool) {
	var serr error
	rerr := r.rc.Read(func(fd uintptr) bool {
		for {
			n, serr = syscall.Read(int(fd), p)
			if serr != syscall.EINTR {
				return true // never wait in the poller here
			}
		}
	})
	switch {
	case rerr != nil:
		// Closed, or the read deadline has passed.
		return 0, r.opErr(rerr), true
	case serr == syscall.EAGAIN:
		return 0, nil, false
	case serr != nil:
		return 0, r.opErr(serr), true
	case n == 0:
		return 0, io.EOF, true
	}
	return n, nil, true
}

// opErr wraps err as the connection's own Read would (the raw
// connection's errors are already a *net.OpError, of a "raw-read").
func (r *Reader) opErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		e := *oe
		e.Op = "read"
		return &e
	}
	return &net.OpError{Op: "read", Net: r.c.LocalAddr().Network(), Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: err}
}
