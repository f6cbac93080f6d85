package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// deadliner is implemented by os.File (pollable descriptors) and net.Conn.
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// Stream frames a byte stream with a 4-byte little-endian length prefix.
// Recv honours ctx only when the stream supports read deadlines (net.Conn,
// or an os.File on a non-blocking descriptor); otherwise it blocks until
// data arrives or the stream is closed.
type Stream struct {
	rwc io.ReadWriteCloser
	dl  deadliner
	w   *bufio.Writer
	max int

	// Read state survives an interrupted Recv, so a deadline in the middle
	// of a frame does not lose bytes.
	hdr    [4]byte
	nhdr   int
	buf    []byte
	need   int
	have   int
	inBody bool

	dlSet bool // a read deadline may be set on the stream

	// onWait (OnWait) is called when a write has waited probe for the
	// peer to read; dlMu orders the write deadline's changes with Abort's.
	onWait func() (end func())
	probe  time.Duration
	dlMu   sync.Mutex

	abort     atomic.Pointer[error]
	closeOnce sync.Once
	closed    atomic.Bool
}

var _ Conn = (*Stream)(nil)

// NewStream wraps rwc. maxFrame <= 0 means MaxFrame.
func NewStream(rwc io.ReadWriteCloser, maxFrame int) *Stream {
	if maxFrame <= 0 {
		maxFrame = MaxFrame
	}
	s := &Stream{rwc: rwc, max: maxFrame}
	s.w = bufio.NewWriterSize(streamWriter{s}, 64<<10)
	if d, ok := rwc.(deadliner); ok {
		// An os.File on a blocking descriptor reports ErrNoDeadline; then
		// we must not rely on deadlines.
		if err := d.SetReadDeadline(time.Time{}); err == nil {
			s.dl = d
		}
	}
	return s
}

// OnWait sets f, which a Send or Flush calls when its write has waited
// probe for the peer to read (the peer is that far behind); the func f
// returns (if not nil) is called when the write ends. Its owner uses it to
// put that wait under a deadline: Abort ends it. It needs a stream with
// write deadlines (a socket, a non-blocking pipe); each write then sets
// one. Not for use during a Send or Flush.
func (s *Stream) OnWait(probe time.Duration, f func() (end func())) error {
	if s.dl == nil {
		return fmt.Errorf("transport: OnWait on a stream without deadlines")
	}
	if probe <= 0 {
		return fmt.Errorf("transport: OnWait with probe %v", probe)
	}
	s.onWait, s.probe = f, probe
	return nil
}

// streamWriter is what the write buffer writes to: the stream, under
// a probe deadline once OnWait is set.
type streamWriter struct{ s *Stream }

func (w streamWriter) Write(p []byte) (int, error) {
	s := w.s
	if s.onWait == nil {
		return s.rwc.Write(p)
	}
	s.setWriteDeadline(time.Now().Add(s.probe))
	n, err := s.rwc.Write(p)
	if !errors.Is(err, os.ErrDeadlineExceeded) || s.abort.Load() != nil {
		return n, err
	}
	end := s.onWait()
	s.setWriteDeadline(time.Time{})
	m, err := s.rwc.Write(p[n:])
	if end != nil {
		end()
	}
	return n + m, err
}

// setWriteDeadline sets t unless the stream was aborted (Abort's deadline
// in the past stays).
func (s *Stream) setWriteDeadline(t time.Time) {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	if s.abort.Load() == nil {
		_ = s.dl.SetWriteDeadline(t)
	}
}

func (s *Stream) err() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if p := s.abort.Load(); p != nil {
		return *p
	}
	return nil
}

// Send queues a frame in the write buffer.
func (s *Stream) Send(frame []byte) error {
	if err := s.err(); err != nil {
		return err
	}
	if len(frame) > s.max {
		return fmt.Errorf("%w: %d bytes > %d", ErrFrameTooLarge, len(frame), s.max)
	}
	var h [4]byte
	binary.LittleEndian.PutUint32(h[:], uint32(len(frame)))
	if _, err := s.w.Write(h[:]); err != nil {
		return s.ioErr(err)
	}
	if _, err := s.w.Write(frame); err != nil {
		return s.ioErr(err)
	}
	return nil
}

// Flush writes buffered frames to the stream.
func (s *Stream) Flush() error {
	if err := s.err(); err != nil {
		return err
	}
	if err := s.w.Flush(); err != nil {
		return s.ioErr(err)
	}
	return nil
}

func (s *Stream) ioErr(err error) error {
	if e := s.err(); e != nil {
		return e
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %v", ErrPeerGone, err)
	}
	return fmt.Errorf("transport: %w", err)
}

// Recv reads the next frame.
func (s *Stream) Recv(ctx context.Context) ([]byte, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.dl != nil && (ctx.Done() != nil || s.dlSet) {
		dl, _ := ctx.Deadline() // zero when ctx has none: no deadline
		_ = s.dl.SetReadDeadline(dl)
		s.dlSet = ctx.Done() != nil
		if ctx.Done() != nil {
			fired := make(chan struct{})
			stop := context.AfterFunc(ctx, func() {
				_ = s.dl.SetReadDeadline(time.Unix(1, 0))
				close(fired)
			})
			defer func() {
				if !stop() {
					// Cancellation raced with the read; wait for the
					// callback so its past deadline cannot hit a later Recv.
					<-fired
				}
			}()
		}
	}
	for {
		if !s.inBody {
			n, err := s.rwc.Read(s.hdr[s.nhdr:])
			s.nhdr += n
			if s.nhdr < 4 {
				if err != nil {
					return nil, s.readErr(ctx, err)
				}
				continue
			}
			s.need = int(binary.LittleEndian.Uint32(s.hdr[:]))
			if s.need > s.max {
				return nil, fmt.Errorf("%w: peer announced %d bytes > %d", ErrFrameTooLarge, s.need, s.max)
			}
			s.inBody, s.have = true, 0
			// Grow only as far as bytes arrive (at most 1 MiB ahead), so a
			// bogus length cannot allocate a gigabyte up front.
			s.buf = s.buf[:0]
		}
		for s.have < s.need {
			if cap(s.buf) < s.need {
				grow := min(s.need, s.have+1<<20)
				if cap(s.buf) < grow {
					nb := make([]byte, s.have, max(grow, 2*cap(s.buf)))
					copy(nb, s.buf[:s.have])
					s.buf = nb
				}
			}
			end := min(s.need, cap(s.buf))
			s.buf = s.buf[:end]
			n, err := s.rwc.Read(s.buf[s.have:end])
			s.have += n
			if err != nil && s.have < s.need {
				return nil, s.readErr(ctx, err)
			}
		}
		s.inBody, s.nhdr = false, 0
		return s.buf[:s.need], nil
	}
}

func (s *Stream) readErr(ctx context.Context, err error) error {
	if e := s.err(); e != nil {
		return e
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if ce := ctx.Err(); ce != nil {
			return ce
		}
		return context.DeadlineExceeded
	}
	if errors.Is(err, io.EOF) {
		if s.nhdr == 0 && !s.inBody {
			return fmt.Errorf("%w: end of stream", ErrPeerGone)
		}
		return fmt.Errorf("%w: stream ended inside a frame", ErrPeerGone)
	}
	return s.ioErr(err)
}

// Abort fails every blocked and later call with err.
func (s *Stream) Abort(err error) {
	e := fmt.Errorf("%w: %w", ErrPeerGone, err)
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	if s.abort.CompareAndSwap(nil, &e) {
		// Unblock a pending read (pollable descriptors and sockets only).
		if s.dl != nil {
			_ = s.dl.SetReadDeadline(time.Unix(1, 0))
			_ = s.dl.SetWriteDeadline(time.Unix(1, 0))
		}
	}
}

// Close closes the underlying stream.
func (s *Stream) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		err = s.rwc.Close()
	})
	return err
}
