package pollread

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/internal/testutil/loopback"
)

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (a, b *net.TCPConn) { return loopback.TCPPair(t) }

const hour = time.Hour

func TestNewNeedsDescriptor(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := New(a); err == nil {
		t.Fatal("New(net.Pipe) succeeded; want an error: a pipe has no descriptor")
	}
}

// TestRead covers every way a read ends, with the budget off, short and
// longer than any wait of the test.
func TestRead(t *testing.T) {
	for _, spin := range []time.Duration{0, time.Microsecond, hour} {
		for _, tc := range []struct {
			name string
			// act runs on the writing end w (and may close the reader's
			// own end rc) while or before the read runs.
			act   func(w, rc *net.TCPConn)
			setup func(rc *net.TCPConn)
			check func(t *testing.T, n int, err error, buf []byte)
		}{
			{
				name: "data",
				act:  func(w, _ *net.TCPConn) { w.Write([]byte("hello")) },
				check: func(t *testing.T, n int, err error, buf []byte) {
					if err != nil || string(buf[:n]) != "hello" {
						t.Fatalf("read %q, %v; want \"hello\", nil", buf[:n], err)
					}
				},
			},
			{
				name: "eof",
				act:  func(w, _ *net.TCPConn) { w.Close() },
				check: func(t *testing.T, n int, err error, _ []byte) {
					if n != 0 || err != io.EOF {
						t.Fatalf("read %d, %v; want 0, io.EOF", n, err)
					}
				},
			},
			{
				name:  "deadline",
				setup: func(rc *net.TCPConn) { rc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) },
				act:   func(_, _ *net.TCPConn) {},
				check: func(t *testing.T, n int, err error, _ []byte) {
					var ne net.Error
					if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("read %d, %v; want a timeout", n, err)
					}
				},
			},
			{
				name: "closed",
				act:  func(_, rc *net.TCPConn) { rc.Close() },
				check: func(t *testing.T, n int, err error, _ []byte) {
					if n != 0 || !errors.Is(err, net.ErrClosed) {
						t.Fatalf("read %d, %v; want net.ErrClosed", n, err)
					}
				},
			},
		} {
			t.Run(tc.name+"/spin="+spin.String(), func(t *testing.T) {
				leaktest.Check(t)
				w, rc := pair(t)
				r, err := New(rc)
				if err != nil {
					t.Fatal(err)
				}
				r.SetSpin(spin)
				if tc.setup != nil {
					tc.setup(rc)
				}
				type res struct {
					n   int
					err error
				}
				buf := make([]byte, 64)
				done := make(chan res, 1)
				go func() {
					n, err := r.Read(buf)
					done <- res{n, err}
				}()
				tc.act(w, rc)
				got := <-done
				tc.check(t, got.n, got.err, buf)
				if _, parked := r.Stats(); spin == hour && parked != 0 {
					t.Errorf("a read with a budget of an hour parked")
				}
			})
		}
	}
}

// TestStream sends random-sized writes through a reader whose budget
// changes between reads and checks every byte arrives in order.
func TestStream(t *testing.T) {
	leaktest.Check(t)
	w, rc := pair(t)
	r, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	errc := make(chan error, 1)
	go func() {
		for off := 0; off < len(want); {
			n := min(len(want)-off, 1+rng.IntN(200<<10))
			if _, err := w.Write(want[off : off+n]); err != nil {
				errc <- err
				return
			}
			off += n
		}
		errc <- w.CloseWrite()
	}()
	spins := []time.Duration{0, time.Microsecond, 50 * time.Microsecond, hour}
	br := bufio.NewReaderSize(readerFunc(func(p []byte) (int, error) {
		r.SetSpin(spins[rand.IntN(len(spins))])
		return r.Read(p)
	}), 64<<10)
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, or the bytes differ", len(got), len(want))
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestSetSpin(t *testing.T) {
	_, rc := pair(t)
	r, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ set, want time.Duration }{{-time.Second, 0}, {0, 0}, {time.Millisecond, time.Millisecond}} {
		r.SetSpin(tc.set)
		if got := r.Spin(); got != tc.want {
			t.Errorf("SetSpin(%v): Spin() = %v, want %v", tc.set, got, tc.want)
		}
	}
}
