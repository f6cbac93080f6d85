//go:build !linux

package shm

import (
	"context"
	"os"
)

// Conn is one end of a shared-memory connection. On this system it cannot
// be created; its methods all return ErrUnsupported.
type Conn struct{}

// Create makes a shared-memory segment; it needs Linux.
func Create(opts Options) (*Conn, *os.File, error) { return nil, nil, ErrUnsupported }

// Open attaches to a segment made by Create; it needs Linux. It closes f.
func Open(f *os.File) (*Conn, error) {
	if f != nil {
		f.Close()
	}
	return nil, ErrUnsupported
}

func (c *Conn) Send(frame []byte) error                  { return ErrUnsupported }
func (c *Conn) Flush() error                             { return ErrUnsupported }
func (c *Conn) Recv(ctx context.Context) ([]byte, error) { return nil, ErrUnsupported }
func (c *Conn) Abort(err error)                          {}
func (c *Conn) Close() error                             { return ErrUnsupported }

// Pending reports false: there is no ring.
func (c *Conn) Pending() bool { return false }
