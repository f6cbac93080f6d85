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
func (c *Conn) OnWait(f func() (end func()))             {}
func (c *Conn) Close() error                             { return ErrUnsupported }

// Pending reports false: there is no ring.
func (c *Conn) Pending() bool { return false }

// LogWriter is the producer's end of a broadcast log; it needs Linux.
type LogWriter struct{}

// LogReader is a consumer's end of a broadcast log; it needs Linux.
type LogReader struct{}

// LogConn is a worker's end with a broadcast log; it needs Linux.
type LogConn struct{}

// Log limits (as on Linux).
const (
	LogMaxInline    = 952
	LogSlots        = 8192
	MaxLogConsumers = 4096
	LogAll          = -1
)

// CreateLog makes a broadcast log; it needs Linux.
func CreateLog(consumers int, opts Options) (*LogWriter, *os.File, error) {
	return nil, nil, ErrUnsupported
}

// OpenLog attaches to a broadcast log; it needs Linux. It closes f.
func OpenLog(f *os.File, index int) (*LogReader, error) {
	if f != nil {
		f.Close()
	}
	return nil, ErrUnsupported
}

// NewLogConn joins a Conn and a LogReader.
func NewLogConn(c *Conn, log *LogReader) *LogConn { return &LogConn{} }

func (w *LogWriter) Put(to int, frame []byte) (int, error)    { return -1, ErrUnsupported }
func (w *LogWriter) PutRedirect(to int) (int, error)          { return -1, ErrUnsupported }
func (w *LogWriter) Abort(err error)                          {}
func (w *LogWriter) OnWait(f func(consumer int) (end func())) {}
func (w *LogWriter) Close() error                             { return ErrUnsupported }

func (l *LogConn) Send(frame []byte) error                  { return ErrUnsupported }
func (l *LogConn) Flush() error                             { return ErrUnsupported }
func (l *LogConn) Ack(v uint64) error                       { return ErrUnsupported }
func (l *LogConn) Recv(ctx context.Context) ([]byte, error) { return nil, ErrUnsupported }
func (l *LogConn) Abort(err error)                          {}
func (l *LogConn) Close() error                             { return ErrUnsupported }
