package transport

import (
	"context"
	"errors"
)

// Sentinel errors.
var (
	// ErrClosed: the local end was closed.
	ErrClosed = errors.New("transport: connection closed")
	// ErrPeerGone: the other end went away (EOF, or Abort was called).
	ErrPeerGone = errors.New("transport: peer gone")
	// ErrFrameTooLarge: a frame exceeds the connection's limit.
	ErrFrameTooLarge = errors.New("transport: frame too large")
)

// MaxFrame is the default limit on one frame (1 GiB + headroom for the
// header), so a corrupted length cannot make a reader allocate without bound.
const MaxFrame = 1<<30 + 1<<20

// Conn is one bidirectional, ordered, frame-preserving connection.
// A Conn is used by one sender goroutine and one receiver goroutine at a
// time; Abort and Close may be called from anywhere.
type Conn interface {
	// Send queues one frame. It may block while the peer is behind, and
	// returns an error once the connection is aborted or closed.
	Send(frame []byte) error
	// Flush makes queued frames visible to the peer and wakes it if it
	// sleeps.
	Flush() error
	// Recv returns the next frame. The slice stays valid until the next
	// Recv. It returns ctx.Err() if ctx is done first; the frame is then
	// still delivered by a later Recv.
	Recv(ctx context.Context) ([]byte, error)
	// Abort makes every blocked and later Send, Flush and Recv return err
	// (wrapped with ErrPeerGone). The owner calls it when it learns the peer
	// died by other means (for example the worker process exited).
	Abort(err error)
	// Close releases the connection's resources.
	Close() error
}

// Poller is implemented by connections that can tell, without blocking,
// whether a frame has begun to arrive. Controllers use it to pick up
// failure notices from workers they are not waiting on.
type Poller interface {
	// Pending reports whether Recv would find frame bytes at once. It is
	// called from the receiving goroutine only.
	Pending() bool
}
