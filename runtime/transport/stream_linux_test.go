package transport_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/loopback"
	"github.com/chorus-rt/chorus/runtime/transport"
	"github.com/chorus-rt/chorus/runtime/transport/transporttest"
)

// socketPair returns both ends of a unix socket pair as Streams, both
// non-blocking so that deadlines (and therefore ctx and Abort) work.
func socketPair(t *testing.T) (transport.Conn, transport.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if err := syscall.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	a := transport.NewStream(os.NewFile(uintptr(fds[0]), "a"), 0)
	b := transport.NewStream(os.NewFile(uintptr(fds[1]), "b"), 0)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestStreamConformance(t *testing.T) {
	transporttest.Run(t, socketPair)
}

// TCP on loopback: what multi-host sessions will use.
func TestStreamOverTCP(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (transport.Conn, transport.Conn) {
		x, y := loopback.TCPPair(t)
		a, b := transport.NewStream(x, 0), transport.NewStream(y, 0)
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	})
}

// rw is an in-memory stream for framing tests.
type rw struct {
	io.Reader
	io.Writer
}

func (rw) Close() error { return nil }

func TestStreamRejectsOversizeFrames(t *testing.T) {
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], 1<<20+1)
	s := transport.NewStream(rw{bytes.NewReader(hdr[:]), io.Discard}, 1<<20)
	if _, err := s.Recv(context.Background()); !errors.Is(err, transport.ErrFrameTooLarge) {
		t.Errorf("Recv of an oversize announcement: %v", err)
	}
	if err := s.Send(make([]byte, 1<<20+1)); !errors.Is(err, transport.ErrFrameTooLarge) {
		t.Errorf("Send of an oversize frame: %v", err)
	}
}

func TestStreamTruncated(t *testing.T) {
	var buf bytes.Buffer
	w := transport.NewStream(rw{&bytes.Buffer{}, &buf}, 0)
	w.Send([]byte("hello"))
	w.Flush()
	full := buf.Bytes()
	for cut := range len(full) {
		s := transport.NewStream(rw{bytes.NewReader(full[:cut]), io.Discard}, 0)
		if _, err := s.Recv(context.Background()); !errors.Is(err, transport.ErrPeerGone) {
			t.Errorf("cut at %d: %v, want ErrPeerGone", cut, err)
		}
	}
}

// FuzzStreamRecv feeds arbitrary bytes to the framing decoder: it must
// return frames or errors, never panic or allocate past the input.
func FuzzStreamRecv(f *testing.F) {
	var buf bytes.Buffer
	w := transport.NewStream(rw{&bytes.Buffer{}, &buf}, 0)
	w.Send([]byte("frame one"))
	w.Send(nil)
	w.Flush()
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := transport.NewStream(rw{bytes.NewReader(data), io.Discard}, 1<<16)
		total := 0
		for {
			fr, err := s.Recv(context.Background())
			if err != nil {
				return
			}
			total += 4 + len(fr)
			if total > len(data) {
				t.Fatalf("decoded %d bytes from %d", total, len(data))
			}
		}
	})
}

// TestStreamOnWait: a write that waits longer than the probe for the peer
// to read calls OnWait's func, and the func it returned when it ends; an
// Abort ends it. Writes that find room call neither. A stream without
// deadlines refuses OnWait.
func TestStreamOnWait(t *testing.T) {
	a, b := socketPair(t)
	defer a.Close()
	defer b.Close()
	s := a.(*transport.Stream)
	began, ended := make(chan struct{}, 2), make(chan struct{}, 2)
	if err := s.OnWait(time.Millisecond, func() func() {
		began <- struct{}{}
		return func() { ended <- struct{}{} }
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Send([]byte("small")); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(began) != 0 {
		t.Fatal("OnWait called for a write that found room")
	}
	done := make(chan error, 1)
	go func() {
		big := make([]byte, 1<<20)
		var err error
		for i := 0; i < 64 && err == nil; i++ { // far more than the socket holds
			if err = s.Send(big); err == nil {
				err = s.Flush()
			}
		}
		done <- err
	}()
	<-began
	boom := errors.New("boom")
	s.Abort(boom)
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("Send: %v, want the Abort's error", err)
	}
	<-ended
	if len(began) != 0 || len(ended) != 0 {
		t.Fatal("OnWait called more than once")
	}

	f, err := os.CreateTemp(t.TempDir(), "stream") // a regular file: no deadlines
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := transport.NewStream(f, 0).OnWait(time.Millisecond, func() func() { return nil }); err == nil {
		t.Error("OnWait accepted a stream without deadlines")
	}
}
