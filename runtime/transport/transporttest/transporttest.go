package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/runtime/transport"
)

// hangLimit bounds each subtest; past it, both ends are aborted so that the
// subtest fails instead of hanging.
const hangLimit = 3 * time.Minute

var errHang = errors.New("transporttest: subtest exceeded its time limit (hang?)")

// Run runs the conformance suite. newPair must return two connected ends;
// every subtest calls it once and closes both ends when done (a second Close
// by the suite's cleanup must be harmless).
func Run(t *testing.T, newPair func(t *testing.T) (a, b transport.Conn)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b transport.Conn)
	}{
		{"ZeroLength", testZeroLength},
		{"PingPong", testPingPong},
		{"OrderedBothDirections", testOrderedBothDirections},
		{"LargeFrames", testLargeFrames},
		{"UnflushedBatches", testUnflushedBatches},
		{"RecvCancelledContext", testRecvCancelled},
		{"RecvDeadline", testRecvDeadline},
		{"RecvCancelWhileBlocked", testRecvCancelWhileBlocked},
		{"RecvShortDeadlinesMidFrame", testRecvMidFrame},
		{"AbortUnblocksRecv", testAbortUnblocksRecv},
		{"AbortUnblocksSend", testAbortUnblocksSend},
		{"AbortThenCalls", testAbortThenCalls},
		{"CloseThenCalls", testCloseThenCalls},
		{"CloseUnblocksRecv", testCloseUnblocksRecv},
		{"PeerCloseAfterFrames", testPeerCloseAfterFrames},
		{"PeerCloseUnblocksRecv", testPeerCloseUnblocksRecv},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			t.Cleanup(func() { checkGoroutines(t, base) })
			a, b := newPair(t)
			t.Cleanup(func() {
				a.Close()
				b.Close()
			})
			limit := hangLimit
			if d, ok := t.Deadline(); ok {
				limit = min(limit, time.Until(d)*9/10)
			}
			timer := time.AfterFunc(limit, func() {
				a.Abort(errHang)
				b.Abort(errHang)
			})
			defer timer.Stop()
			tc.fn(t, a, b)
		})
	}
}

// checkGoroutines waits (boundedly) for the goroutine count to come back to
// base, and fails with a dump of the goroutines if it does not.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("goroutine leak: %d goroutines, %d before the subtest\n%s", n, base, buf)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// goAsync runs f in a goroutine and returns a channel with its result.
func goAsync(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// await waits for the result of a goAsync (the subtest's hang guard aborts
// the connection if it never comes).
func await(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(hangLimit + time.Minute):
		t.Fatalf("%s: no result (hang)", what)
		return nil
	}
}

// fill writes the deterministic content of frame idx of stream seed into p.
// The first 8 bytes hold idx (when they fit), the rest is pseudo-random.
func fill(p []byte, seed uint64, idx int) {
	x := seed ^ uint64(idx)*0x9e3779b97f4a7c15
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], uint64(idx))
	n := copy(p, w[:])
	p = p[n:]
	for len(p) >= 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(p, z^z>>31)
		p = p[8:]
	}
	for i := range p {
		p[i] = byte(x>>uint(8*i)) ^ 0x5a
	}
}

// checkFrame compares got with the expected frame idx of stream seed.
func checkFrame(got []byte, size int, seed uint64, idx int, scratch *[]byte) error {
	if len(got) != size {
		var head string
		if len(got) >= 8 {
			head = fmt.Sprintf(" (its first word says frame %d)", binary.LittleEndian.Uint64(got))
		}
		return fmt.Errorf("frame %d: got %d bytes, want %d%s", idx, len(got), size, head)
	}
	if cap(*scratch) < size {
		*scratch = make([]byte, size)
	}
	want := (*scratch)[:size]
	fill(want, seed, idx)
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		return fmt.Errorf("frame %d (%d bytes): corrupted from byte %d", idx, size, i)
	}
	return nil
}

// sendFrames sends the frames of stream seed with the given sizes, flushing
// after a random subset of them and always at the end.
func sendFrames(c transport.Conn, seed uint64, sizes []int) error {
	r := rand.New(rand.NewPCG(seed, 1))
	var buf []byte
	for i, n := range sizes {
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		f := buf[:n]
		fill(f, seed, i)
		if err := c.Send(f); err != nil {
			return fmt.Errorf("send frame %d (%d bytes): %w", i, n, err)
		}
		if r.IntN(3) == 0 {
			if err := c.Flush(); err != nil {
				return fmt.Errorf("flush after frame %d: %w", i, err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("final Flush: %w", err)
	}
	return nil
}

// recvFrames receives and checks the frames of stream seed.
func recvFrames(c transport.Conn, seed uint64, sizes []int) error {
	var scratch []byte
	for i, n := range sizes {
		got, err := c.Recv(context.Background())
		if err != nil {
			return fmt.Errorf("recv frame %d (%d bytes): %w", i, n, err)
		}
		if err := checkFrame(got, n, seed, i, &scratch); err != nil {
			return err
		}
	}
	return nil
}

// transfer sends sizes from src to dst and checks them, concurrently.
func transfer(src, dst transport.Conn, seed uint64, sizes []int) (send, recv <-chan error) {
	return goAsync(func() error { return sendFrames(src, seed, sizes) }),
		goAsync(func() error { return recvFrames(dst, seed, sizes) })
}

// sizeEdges are frame sizes around common buffer and ring sizes.
var sizeEdges = []int{
	0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129,
	255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 65537,
	1<<18 - 1, 1 << 18, 1<<18 + 1, 1<<20 - 1, 1 << 20, 1<<20 + 1, 0, 1,
}

// randomSizes returns n frame sizes up to maxSize, mostly small.
func randomSizes(seed uint64, n, maxSize int) []int {
	r := rand.New(rand.NewPCG(seed, 2))
	sizes := make([]int, n)
	for i := range sizes {
		limit := maxSize
		switch p := r.IntN(100); {
		case p < 60:
			limit = 64
		case p < 85:
			limit = 4096
		case p < 98:
			limit = 64 << 10
		}
		sizes[i] = r.IntN(min(limit, maxSize) + 1)
	}
	return sizes
}

func testZeroLength(t *testing.T, a, b transport.Conn) {
	if err := a.Flush(); err != nil {
		t.Fatalf("Flush with nothing queued: %v", err)
	}
	for range 3 {
		if err := a.Send(nil); err != nil {
			t.Fatalf("Send(nil): %v", err)
		}
		if err := a.Send([]byte{}); err != nil {
			t.Fatalf("Send(empty): %v", err)
		}
	}
	if err := a.Send([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		got, err := b.Recv(context.Background())
		if err != nil || len(got) != 0 {
			t.Fatalf("Recv %d: got %q, %v; want an empty frame", i, got, err)
		}
	}
	got, err := b.Recv(context.Background())
	if err != nil || string(got) != "x" {
		t.Fatalf("Recv: got %q, %v; want \"x\"", got, err)
	}
}

func testPingPong(t *testing.T, a, b transport.Conn) {
	echo := goAsync(func() error {
		for {
			f, err := b.Recv(context.Background())
			if err != nil {
				return err
			}
			if len(f) == 1 && f[0] == 0xff {
				return nil
			}
			if err := b.Send(f); err != nil {
				return err
			}
			if err := b.Flush(); err != nil {
				return err
			}
		}
	})
	var scratch []byte
	sizes := append(append([]int{}, sizeEdges...), randomSizes(7, 500, 64<<10)...)
	for i, n := range sizes {
		if n == 1 {
			n = 2 // 1-byte 0xff frames stop the echo
			sizes[i] = n
		}
		f := make([]byte, n)
		fill(f, 99, i)
		if err := a.Send(f); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		if err := a.Flush(); err != nil {
			t.Fatalf("Flush %d: %v", i, err)
		}
		got, err := a.Recv(context.Background())
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if err := checkFrame(got, n, 99, i, &scratch); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Send([]byte{0xff}); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "echo", echo); err != nil {
		t.Fatalf("echo: %v", err)
	}
}

func testOrderedBothDirections(t *testing.T, a, b transport.Conn) {
	ab := append(append([]int{}, sizeEdges...), randomSizes(1, 1500, 2<<20)...)
	ba := append(randomSizes(2, 1500, 2<<20), sizeEdges...)
	s1, r1 := transfer(a, b, 11, ab)
	s2, r2 := transfer(b, a, 22, ba)
	for _, x := range []struct {
		what string
		ch   <-chan error
	}{{"a->b send", s1}, {"a->b recv", r1}, {"b->a send", s2}, {"b->a recv", r2}} {
		if err := await(t, x.what, x.ch); err != nil {
			t.Errorf("%s: %v", x.what, err)
		}
	}
}

func testLargeFrames(t *testing.T, a, b transport.Conn) {
	sizes := []int{8<<20 + 3, 1, 3 << 20, 0, 16<<20 - 1, 5}
	s1, r1 := transfer(a, b, 33, sizes)
	s2, r2 := transfer(b, a, 44, sizes)
	for _, ch := range []<-chan error{s1, r1, s2, r2} {
		if err := await(t, "large frames", ch); err != nil {
			t.Error(err)
		}
	}
}

// testUnflushedBatches sends many frames with a single Flush at the end: an
// implementation must make progress on its own when its buffer fills.
func testUnflushedBatches(t *testing.T, a, b transport.Conn) {
	sizes := randomSizes(5, 5000, 64<<10)
	recv := goAsync(func() error { return recvFrames(b, 55, sizes) })
	var buf []byte
	for i, n := range sizes {
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		fill(buf[:n], 55, i)
		if err := a.Send(buf[:n]); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "recv", recv); err != nil {
		t.Fatal(err)
	}
}

func sendFlush(t *testing.T, c transport.Conn, f []byte) {
	t.Helper()
	if err := c.Send(f); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func recvWant(t *testing.T, c transport.Conn, want []byte) {
	t.Helper()
	got, err := c.Recv(context.Background())
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Recv: got %d bytes %.32q, want %d bytes %.32q", len(got), got, len(want), want)
	}
}

func testRecvCancelled(t *testing.T, a, b transport.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Recv(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv with a cancelled context: %v, want context.Canceled", err)
	}
	sendFlush(t, a, []byte("after cancel"))
	// A Recv with a cancelled context may return the error even though
	// a frame is ready; the frame must still come with a live context.
	if _, err := b.Recv(ctx); !errors.Is(err, context.Canceled) && err != nil {
		t.Fatalf("Recv with a cancelled context: %v", err)
	} else if err == nil {
		t.Logf("Recv with a cancelled context returned the ready frame")
		return
	}
	recvWant(t, b, []byte("after cancel"))
}

func testRecvDeadline(t *testing.T, a, b transport.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Recv(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv past its deadline: %v, want context.DeadlineExceeded", err)
	}
	sendFlush(t, a, []byte("after deadline"))
	recvWant(t, b, []byte("after deadline"))
	// And again in the other direction, with a frame queued behind.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if _, err := a.Recv(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv past its deadline: %v, want context.DeadlineExceeded", err)
	}
	sendFlush(t, b, []byte("one"))
	sendFlush(t, b, []byte("two"))
	recvWant(t, a, []byte("one"))
	recvWant(t, a, []byte("two"))
}

func testRecvCancelWhileBlocked(t *testing.T, a, b transport.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	res := goAsync(func() error {
		close(started)
		_, err := b.Recv(ctx)
		return err
	})
	<-started
	time.Sleep(20 * time.Millisecond) // let it block (not required for correctness)
	cancel()
	if err := await(t, "blocked Recv", res); !errors.Is(err, context.Canceled) {
		t.Fatalf("blocked Recv after cancel: %v, want context.Canceled", err)
	}
	sendFlush(t, a, []byte("still delivered"))
	recvWant(t, b, []byte("still delivered"))
}

// testRecvMidFrame receives large frames with very short deadlines, so that
// most Recv calls give up in the middle of a frame; the frames must still
// arrive whole and in order.
func testRecvMidFrame(t *testing.T, a, b transport.Conn) {
	sizes := []int{6<<20 + 1, 17, 2 << 20, 0, 1<<20 + 3}
	send := goAsync(func() error { return sendFrames(a, 66, sizes) })
	var scratch []byte
	timeouts := 0
	for i, n := range sizes {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
			got, err := b.Recv(ctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				timeouts++
				continue
			}
			if err != nil {
				t.Fatalf("Recv frame %d: %v", i, err)
			}
			if err := checkFrame(got, n, 66, i, &scratch); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if err := await(t, "send", send); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Recv calls timed out", timeouts)
}

var errTestAbort = errors.New("transporttest: test abort")

func checkAborted(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, transport.ErrPeerGone) || !errors.Is(err, errTestAbort) {
		t.Errorf("%s after Abort: %v, want an error wrapping ErrPeerGone and the Abort error", what, err)
	}
}

func testAbortUnblocksRecv(t *testing.T, a, b transport.Conn) {
	res := goAsync(func() error {
		_, err := b.Recv(context.Background())
		return err
	})
	time.Sleep(20 * time.Millisecond) // let it block (not required for correctness)
	b.Abort(errTestAbort)
	checkAborted(t, "blocked Recv", await(t, "blocked Recv", res))
}

// testAbortUnblocksSend writes to a peer that does not read until Send
// blocks, then aborts the sending end.
func testAbortUnblocksSend(t *testing.T, a, b transport.Conn) {
	const frame, total = 1 << 20, 64 << 20
	var sent atomic.Int64
	res := goAsync(func() error {
		f := make([]byte, frame)
		for sent.Load() < total {
			if err := a.Send(f); err != nil {
				return err
			}
			if err := a.Flush(); err != nil {
				return err
			}
			sent.Add(frame)
		}
		return nil
	})
	// Wait until the sender stops making progress (or finishes: some
	// implementation could buffer it all).
	var err error
	done := false
	for last, still := int64(-1), 0; still < 5; {
		select {
		case err = <-res:
			done = true
		case <-time.After(20 * time.Millisecond):
		}
		if done {
			break
		}
		if n := sent.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	if done {
		if err != nil {
			t.Fatalf("Send to a peer that does not read: %v", err)
		}
		t.Logf("Send never blocked: all %d bytes were buffered", total)
	} else {
		a.Abort(errTestAbort)
		checkAborted(t, "blocked Send", await(t, "blocked Send", res))
	}
	checkAborted(t, "Send", a.Send([]byte("x")))
}

func testAbortThenCalls(t *testing.T, a, b transport.Conn) {
	sendFlush(t, b, []byte("pending"))
	a.Abort(errTestAbort)
	a.Abort(errors.New("second abort")) // must not panic
	checkAborted(t, "Send", a.Send([]byte("x")))
	checkAborted(t, "Flush", a.Flush())
	_, err := a.Recv(context.Background())
	checkAborted(t, "Recv", err)
	if err := a.Close(); err != nil {
		t.Logf("Close after Abort: %v", err)
	}
}

func checkClosed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, transport.ErrClosed) {
		t.Errorf("%s after Close: %v, want ErrClosed", what, err)
	}
}

func testCloseThenCalls(t *testing.T, a, b transport.Conn) {
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkClosed(t, "Send", a.Send([]byte("x")))
	checkClosed(t, "Flush", a.Flush())
	_, err := a.Recv(context.Background())
	checkClosed(t, "Recv", err)
	a.Abort(errTestAbort) // must not panic
	checkClosed(t, "Send after Abort", a.Send(nil))
	a.Close() // must not panic
}

func testCloseUnblocksRecv(t *testing.T, a, b transport.Conn) {
	res := goAsync(func() error {
		_, err := b.Recv(context.Background())
		return err
	})
	time.Sleep(20 * time.Millisecond) // let it block (not required for correctness)
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	checkClosed(t, "blocked Recv", await(t, "blocked Recv", res))
}

func testPeerCloseAfterFrames(t *testing.T, a, b transport.Conn) {
	frames := [][]byte{[]byte("one"), {}, bytes.Repeat([]byte("three"), 100000)}
	// The last frame may not fit in a's buffers, so send from another
	// goroutine; a closes before b has read everything.
	sent := goAsync(func() error {
		for _, f := range frames {
			if err := a.Send(f); err != nil {
				return err
			}
			if err := a.Flush(); err != nil {
				return err
			}
		}
		return a.Close()
	})
	for _, f := range frames {
		recvWant(t, b, f)
	}
	if err := await(t, "send and Close", sent); err != nil {
		t.Errorf("send and Close: %v", err)
	}
	if _, err := b.Recv(context.Background()); !errors.Is(err, transport.ErrPeerGone) {
		t.Errorf("Recv after the peer closed: %v, want ErrPeerGone", err)
	}
}

func testPeerCloseUnblocksRecv(t *testing.T, a, b transport.Conn) {
	res := goAsync(func() error {
		_, err := b.Recv(context.Background())
		return err
	})
	time.Sleep(20 * time.Millisecond) // let it block (not required for correctness)
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := await(t, "blocked Recv", res); !errors.Is(err, transport.ErrPeerGone) {
		t.Errorf("blocked Recv after the peer closed: %v, want ErrPeerGone", err)
	}
}
