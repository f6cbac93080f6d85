package shm

import (
	"context"
	"errors"
)

// LogConn is a worker's end of a connection whose commands come through a
// broadcast log: Recv returns the log's entries for this worker, and the
// frames too large for the log from the worker's own Conn, in the order
// the producer appended them; Send, Flush and Ack go through the Conn.
// It implements transport.Conn with the Conn's rules.
type LogConn struct {
	c      *Conn
	log    *LogReader
	inRing bool // a redirect was read; its frame is still to come from c
}

// NewLogConn joins a worker's Conn and its LogReader; the LogConn owns
// both.
func NewLogConn(c *Conn, log *LogReader) *LogConn { return &LogConn{c: c, log: log} }

// Recv returns the next frame for this worker, in a buffer that the next
// Recv reuses. If ctx is done first it returns ctx.Err(), and a later Recv
// delivers the frame.
func (l *LogConn) Recv(ctx context.Context) ([]byte, error) {
	if !l.inRing {
		frame, redirect, err := l.log.Next(ctx)
		if err != nil || !redirect {
			return frame, err
		}
		l.inRing = true
	}
	frame, err := l.c.Recv(ctx)
	if err != nil {
		return nil, err
	}
	l.inRing = false
	return frame, nil
}

// Send queues a frame on the worker's own Conn.
func (l *LogConn) Send(frame []byte) error { return l.c.Send(frame) }

// Flush publishes the frames sent on the worker's own Conn.
func (l *LogConn) Flush() error { return l.c.Flush() }

// Ack is Conn.Ack.
func (l *LogConn) Ack(v uint64) error { return l.c.Ack(v) }

// Abort aborts the log's end and the Conn.
func (l *LogConn) Abort(err error) {
	l.log.Abort(err)
	l.c.Abort(err)
}

// Close closes the Conn and the log's end.
func (l *LogConn) Close() error { return errors.Join(l.c.Close(), l.log.Close()) }
