package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/runtime/transport"
	"github.com/chorus-rt/chorus/runtime/transport/transporttest"
)

// peerEnv makes the test binary act as the worker end of a cross-process
// test: it opens fd 3 and runs the mode named by the variable.
const peerEnv = "CHORUS_SHM_TEST_PEER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(peerEnv); mode != "" {
		os.Exit(runPeer(mode))
	}
	os.Exit(m.Run())
}

// runPeer is the child side: "echo" echoes every frame until the controller
// closes; "exit" echoes one frame and exits without closing.
func runPeer(mode string) int {
	c, err := Open(os.NewFile(3, "shm"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer: Open:", err)
		return 2
	}
	for {
		f, err := c.Recv(context.Background())
		if errors.Is(err, transport.ErrPeerGone) {
			c.Close()
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "peer: Recv:", err)
			return 3
		}
		if err := c.Send(f); err != nil {
			fmt.Fprintln(os.Stderr, "peer: Send:", err)
			return 4
		}
		if err := c.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, "peer: Flush:", err)
			return 5
		}
		if mode == "exit" {
			return 0 // without Close: as if the process died
		}
	}
}

// dupFile duplicates f the way a child would receive it: a separate fd.
func dupFile(t testing.TB, f *os.File) *os.File {
	t.Helper()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "shm-dup")
}

// newPair makes a connected controller/worker pair in this process.
func newPair(t testing.TB, opts Options) (*Conn, *Conn) {
	t.Helper()
	c, memfd, err := Create(opts)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	w, err := Open(dupFile(t, memfd))
	memfd.Close()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return c, w
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		{"ring4K", Options{RingSize: 4096}},
		{"ring4K-nospin", Options{RingSize: 4096, SpinDuration: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) (a, b transport.Conn) {
				return newPair(t, tc.opts)
			})
		})
	}
}

func TestCreateOptions(t *testing.T) {
	for _, rs := range []int{-1, 1, 63, 100, 3 << 10, MaxRingSize + 1} {
		if c, f, err := Create(Options{RingSize: rs}); err == nil {
			c.Close()
			f.Close()
			t.Errorf("Create(RingSize %d) succeeded", rs)
		}
	}
}

// mutate makes a segment with Create and applies fn to its header bytes
// (through a separate mapping), returning the memfd.
func mutate(t *testing.T, fn func(h []byte)) *os.File {
	t.Helper()
	c, memfd, err := Create(Options{RingSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	m, err := syscall.Mmap(int(memfd.Fd()), 0, dataOff, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	fn(m[:headerSize])
	syscall.Munmap(m)
	return memfd
}

// rawMemfd makes an unsealed memfd of the given size (optionally sealed).
func rawMemfd(t *testing.T, size int64, seal bool) *os.File {
	t.Helper()
	fd, err := memfdCreate("test")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := fcntl(fd, fAddSeals, fSealShrink|fSealGrow); err != nil {
			t.Fatal(err)
		}
	}
	return os.NewFile(uintptr(fd), "test")
}

func TestOpenValidation(t *testing.T) {
	tmp, err := os.CreateTemp(t.TempDir(), "notshm")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Write(make([]byte, 16384))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()

	cases := []struct {
		name string
		file func(t *testing.T) *os.File
	}{
		{"regular file", func(t *testing.T) *os.File { return tmp }},
		{"pipe", func(t *testing.T) *os.File { return pr }},
		{"unsealed", func(t *testing.T) *os.File { return rawMemfd(t, int64(segmentSize(4096)), false) }},
		{"empty", func(t *testing.T) *os.File { return rawMemfd(t, 0, true) }},
		{"truncated", func(t *testing.T) *os.File { return rawMemfd(t, 100, true) }},
		{"zeros", func(t *testing.T) *os.File { return rawMemfd(t, int64(segmentSize(4096)), true) }},
		{"bad magic", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) { h[offMagic] ^= 1 })
		}},
		{"bad version", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) { binary.LittleEndian.PutUint32(h[offVersion:], 99) })
		}},
		{"ring size not a power of two", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) { binary.LittleEndian.PutUint64(h[offRingSize:], 4095) })
		}},
		{"ring size larger than file", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) {
				binary.LittleEndian.PutUint64(h[offRingSize:], 1<<20)
				binary.LittleEndian.PutUint64(h[offTotal:], segmentSize(1<<20))
			})
		}},
		{"huge ring size", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) { binary.LittleEndian.PutUint64(h[offRingSize:], 1<<62) })
		}},
		{"bad total", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) { binary.LittleEndian.PutUint64(h[offTotal:], 1) })
		}},
		{"bad spin", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) { binary.LittleEndian.PutUint64(h[offSpin:], 1<<63) })
		}},
		{"already opened", func(t *testing.T) *os.File {
			return mutate(t, func(h []byte) { binary.LittleEndian.PutUint32(h[offAttached:], 1) })
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(tc.file(t))
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded")
			}
			t.Logf("Open: %v", err)
		})
	}
	if _, err := Open(nil); err == nil {
		t.Error("Open(nil) succeeded")
	}
}

func TestOpenTwice(t *testing.T) {
	c, memfd, err := Create(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer memfd.Close()
	w, err := Open(dupFile(t, memfd))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w2, err := Open(dupFile(t, memfd)); err == nil {
		w2.Close()
		t.Fatal("second Open succeeded")
	}
}

// rawSend writes bytes straight into c's send ring and publishes them.
func rawSend(c *Conn, p []byte) {
	c.tx.put(c.txTail, p)
	c.txTail += uint64(len(p))
	c.txFrame = c.txTail
	c.publish()
}

func TestRecvFrameTooLarge(t *testing.T) {
	c, w := newPair(t, Options{RingSize: 4096})
	defer c.Close()
	defer w.Close()
	var h [4]byte
	binary.LittleEndian.PutUint32(h[:], transport.MaxFrame+1)
	rawSend(c, h[:])
	for range 2 {
		if _, err := w.Recv(context.Background()); !errors.Is(err, transport.ErrFrameTooLarge) {
			t.Fatalf("Recv: %v, want ErrFrameTooLarge", err)
		}
	}
	if cap(w.rbuf) > 4096 {
		t.Errorf("receive buffer grew to %d bytes", cap(w.rbuf))
	}
}

// TestRecvBufferFollowsData: a (corrupt or real) length announcing a huge
// frame does not allocate more than the bytes that arrive justify.
func TestRecvBufferFollowsData(t *testing.T) {
	c, w := newPair(t, Options{RingSize: 4096})
	defer w.Close()
	var h [4]byte
	binary.LittleEndian.PutUint32(h[:], 1<<30)
	rawSend(c, h[:])
	rawSend(c, make([]byte, 3000))
	c.Close() // ends the stream mid-frame
	_, err := w.Recv(context.Background())
	if !errors.Is(err, transport.ErrPeerGone) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Recv: %v, want ErrPeerGone (unexpected EOF)", err)
	}
	if cap(w.rbuf) > 8192 {
		t.Errorf("receive buffer grew to %d bytes for 3000 bytes received", cap(w.rbuf))
	}
}

func TestCorruptIndices(t *testing.T) {
	c, w := newPair(t, Options{RingSize: 4096})
	defer c.Close()
	defer w.Close()
	*c.tx.tail = 1 << 40 // far beyond what a ring can hold
	if _, err := w.Recv(context.Background()); !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Recv: %v, want ErrPeerGone (corrupt)", err)
	}
}

// TestPeerAbortUnblocksSend: Abort on one end is seen by a live peer that
// is blocked on a full ring.
func TestPeerAbortUnblocksSend(t *testing.T) {
	c, w := newPair(t, Options{RingSize: 4096})
	defer c.Close()
	defer w.Close()
	res := make(chan error, 1)
	go func() {
		f := make([]byte, 1<<20)
		for {
			if err := c.Send(f); err != nil {
				res <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	w.Abort(errors.New("worker gave up"))
	if err := <-res; !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Send: %v, want ErrPeerGone", err)
	}
}

// TestCloseFlushesCompleteFrames: frames sent but not flushed are published
// by Close.
func TestCloseFlushesCompleteFrames(t *testing.T) {
	c, w := newPair(t, Options{})
	defer w.Close()
	for i := range 10 {
		if err := c.Send([]byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	for i := range 10 {
		f, err := w.Recv(context.Background())
		if err != nil || string(f) != strconv.Itoa(i) {
			t.Fatalf("Recv %d: %q, %v", i, f, err)
		}
	}
	if _, err := w.Recv(context.Background()); !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Recv: %v, want ErrPeerGone", err)
	}
}

// startPeer runs this test binary as the worker of a new segment.
func startPeer(t testing.TB, mode string, opts Options) (*Conn, *exec.Cmd) {
	t.Helper()
	c, memfd, err := Create(opts)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+mode)
	cmd.ExtraFiles = []*os.File{memfd}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	memfd.Close()
	return c, cmd
}

func TestCrossProcess(t *testing.T) {
	for _, opts := range []Options{{}, {RingSize: 4096}} {
		t.Run(fmt.Sprintf("ring%d", opts.RingSize), func(t *testing.T) {
			c, cmd := startPeer(t, "echo", opts)
			sizes := []int{0, 1, 3, 4, 5, 100, 4091, 4092, 4096, 4097, 65536, 1<<20 - 4, 1 << 20, 1<<20 + 1, 5<<20 + 7}
			for i := range 2000 {
				sizes = append(sizes, (i*7919)%5000)
			}
			for i, n := range sizes {
				f := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, n/3+1)[:n]
				// Large frames cannot fit in the ring while the peer is
				// also echoing them back: send from another goroutine.
				sent := make(chan error, 1)
				go func() {
					err := c.Send(f)
					if err == nil {
						err = c.Flush()
					}
					sent <- err
				}()
				got, err := c.Recv(context.Background())
				if err != nil {
					t.Fatalf("Recv %d: %v", i, err)
				}
				if err := <-sent; err != nil {
					t.Fatalf("Send %d: %v", i, err)
				}
				if !bytes.Equal(got, f) {
					t.Fatalf("frame %d (%d bytes) corrupted", i, n)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("peer: %v", err)
			}
		})
	}
}

// TestCrossProcessPeerExit: the worker exits without closing; the session
// notices the exit and aborts, which unblocks the controller's Recv.
func TestCrossProcessPeerExit(t *testing.T) {
	c, cmd := startPeer(t, "exit", Options{})
	defer c.Close()
	if err := c.Send([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Recv(context.Background()); err != nil || string(f) != "ping" {
		t.Fatalf("Recv: %q, %v", f, err)
	}
	exited := errors.New("worker exited")
	go func() {
		cmd.Wait()
		c.Abort(exited)
	}()
	_, err := c.Recv(context.Background())
	if !errors.Is(err, transport.ErrPeerGone) || !errors.Is(err, exited) {
		t.Fatalf("Recv: %v, want ErrPeerGone wrapping the abort cause", err)
	}
}

func benchPingPong(b *testing.B, c *Conn) {
	f := make([]byte, 64)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Send(f); err != nil {
			b.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Recv(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

var benchOpts = Options{SpinDuration: benchSpin()}

func benchSpin() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("CHORUS_SHM_BENCH_SPIN"))
	return d
}

// BenchmarkRoundTripInProcess: 64-byte frame, controller -> worker goroutine
// -> controller.
func BenchmarkRoundTripInProcess(b *testing.B) {
	c, w := newPair(b, benchOpts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := w.Recv(context.Background())
			if err != nil {
				return
			}
			if w.Send(f) != nil || w.Flush() != nil {
				return
			}
		}
	}()
	benchPingPong(b, c)
	c.Close()
	<-done
	w.Close()
}

// BenchmarkRoundTripCrossProcess: 64-byte frame, controller -> worker
// process -> controller.
func BenchmarkRoundTripCrossProcess(b *testing.B) {
	c, cmd := startPeer(b, "echo", benchOpts)
	benchPingPong(b, c)
	c.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRoundTripPipe is the baseline: the same ping-pong over two pipes
// to a child process (cat).
func BenchmarkRoundTripPipe(b *testing.B) {
	cmd := exec.Command("cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Skip(err)
	}
	f := make([]byte, 64)
	for b.Loop() {
		if _, err := in.Write(f); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(out, f); err != nil {
			b.Fatal(err)
		}
	}
	in.Close()
	cmd.Wait()
}

// BenchmarkThroughput streams 1 MiB frames one way through a pair in this
// process.
func BenchmarkThroughput(b *testing.B) {
	c, w := newPair(b, benchOpts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := w.Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	f := make([]byte, 1<<20)
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		if err := c.Send(f); err != nil {
			b.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	<-done
	w.Close()
}

// TestTinyRing streams frames of many sizes both ways at once through the
// smallest rings, so that nearly every frame wraps around and most are
// larger than the ring.
func TestTinyRing(t *testing.T) {
	for _, spin := range []time.Duration{0, -1} {
		t.Run(fmt.Sprintf("spin%v", spin), func(t *testing.T) {
			c, w := newPair(t, Options{RingSize: MinRingSize, SpinDuration: spin})
			defer c.Close()
			defer w.Close()
			var sizes []int
			for n := range 300 {
				sizes = append(sizes, n, 3*n+1)
			}
			sizes = append(sizes, 64<<10+5)
			frame := func(i, n int) []byte {
				return bytes.Repeat([]byte{byte(i), byte(i >> 8), byte(n), 7}, n/4+1)[:n]
			}
			stream := func(src, dst *Conn) (chan error, chan error) {
				sent, got := make(chan error, 1), make(chan error, 1)
				go func() {
					for i, n := range sizes {
						if err := src.Send(frame(i, n)); err != nil {
							sent <- err
							return
						}
						if i%3 == 0 {
							if err := src.Flush(); err != nil {
								sent <- err
								return
							}
						}
					}
					sent <- src.Flush()
				}()
				go func() {
					for i, n := range sizes {
						f, err := dst.Recv(context.Background())
						if err != nil {
							got <- err
							return
						}
						if !bytes.Equal(f, frame(i, n)) {
							got <- fmt.Errorf("frame %d (%d bytes) corrupted (got %d bytes)", i, n, len(f))
							return
						}
					}
					got <- nil
				}()
				return sent, got
			}
			s1, r1 := stream(c, w)
			s2, r2 := stream(w, c)
			for _, ch := range []chan error{s1, r1, s2, r2} {
				if err := <-ch; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestHappensBefore: memory written before Send is visible after the
// matching Recv (the race detector must agree, in race builds).
func TestHappensBefore(t *testing.T) {
	c, w := newPair(t, Options{})
	defer c.Close()
	defer w.Close()
	shared := make([]int, 100)
	done := make(chan error, 1)
	go func() {
		for i := range shared {
			if _, err := w.Recv(context.Background()); err != nil {
				done <- err
				return
			}
			if shared[i] != i+1 {
				done <- fmt.Errorf("shared[%d] = %d before its frame", i, shared[i])
				return
			}
		}
		done <- nil
	}()
	for i := range shared {
		shared[i] = i + 1
		if err := c.Send([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// FlushAll publishes what was sent on every connection, wakes receivers
// already asleep, and reports the first connection it cannot flush.
func TestFlushAll(t *testing.T) {
	const n = 4
	var ctl, wk []*Conn
	for range n {
		c, w := newPair(t, Options{RingSize: 4096, SpinDuration: -1}) // receivers sleep at once
		ctl, wk = append(ctl, c), append(wk, w)
	}
	for round := range 3 {
		got := make(chan string, n)
		for i, w := range wk {
			go func() {
				f, err := w.Recv(context.Background())
				if err != nil {
					got <- err.Error()
					return
				}
				got <- fmt.Sprintf("%d:%s", i, f)
			}()
		}
		time.Sleep(time.Millisecond) // let them sleep (no assertion on it)
		for i, c := range ctl {
			if err := c.Send([]byte(fmt.Sprintf("r%d", round))); err != nil {
				t.Fatal(err)
			}
			if i == 0 && round == 2 {
				// One flushed already: FlushAll leaves it alone.
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if i, err := FlushAll(ctl); err != nil || i != n {
			t.Fatalf("FlushAll = %d, %v", i, err)
		}
		seen := map[string]bool{}
		for range n {
			select {
			case s := <-got:
				seen[s] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: a receiver got nothing: %v", round, seen)
			}
		}
		for i := range n {
			if want := fmt.Sprintf("%d:r%d", i, round); !seen[want] {
				t.Fatalf("round %d: missing %q in %v", round, want, seen)
			}
		}
	}
	wk[2].Close()
	ctl[2].Abort(errors.New("gone"))
	if i, err := FlushAll(ctl); i != 2 || !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("FlushAll with connection 2 aborted = %d, %v", i, err)
	}
	ctl[1].Close()
	if i, err := FlushAll(ctl); i != 1 || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("FlushAll with connection 1 closed = %d, %v", i, err)
	}
}

func TestSendAll(t *testing.T) {
	const n = 3
	var ctl, wk []*Conn
	for range n {
		c, w := newPair(t, Options{RingSize: 64, SpinDuration: -1}) // tiny rings: frames wrap and fill them
		ctl, wk = append(ctl, c), append(wk, w)
	}
	for round := range 20 {
		msg := bytes.Repeat([]byte{byte('a' + round)}, 1+round*3) // up to 58 bytes: wraps the 64-byte rings
		if i, err := SendAll(ctl, msg); err != nil || i != n {
			t.Fatalf("round %d: SendAll = %d, %v", round, i, err)
		}
		for i, w := range wk {
			f, err := w.Recv(context.Background())
			if err != nil || !bytes.Equal(f, msg) {
				t.Fatalf("round %d: worker %d got %q, %v; want %q", round, i, f, err, msg)
			}
		}
	}
	wk[1].Close()
	ctl[1].Abort(errors.New("gone"))
	if i, err := SendAll(ctl, []byte("x")); i != 1 || err == nil {
		t.Fatalf("SendAll with connection 1 aborted = %d, %v", i, err)
	}
	ctl[0].Close()
	if i, err := SendAll(ctl, []byte("x")); i != 0 || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("SendAll with connection 0 closed = %d, %v", i, err)
	}
}

// An acknowledgement is seen after the frames sent before it, with or
// without the receiver sleeping, and RecvOrAck with want 0 is Recv.
func TestAck(t *testing.T) {
	for _, spin := range []time.Duration{-1, 0} { // sleep at once; default polling
		t.Run(fmt.Sprint(spin), func(t *testing.T) {
			c, w := newPair(t, Options{RingSize: 4096, SpinDuration: spin})
			defer c.Close()
			defer w.Close()
			ctx := context.Background()
			if got := c.Acked(); got != 0 {
				t.Fatalf("Acked before any Ack = %d", got)
			}
			// Frames, then an ack: frames first.
			for _, m := range []string{"f1", "f2"} {
				if err := w.Send([]byte(m)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Ack(5); err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"f1", "f2"} {
				f, ack, err := c.RecvOrAck(ctx, 5)
				if err != nil || string(f) != m || ack != 0 {
					t.Fatalf("RecvOrAck = %q, %d, %v; want frame %q first", f, ack, err, m)
				}
			}
			if f, ack, err := c.RecvOrAck(ctx, 5); err != nil || f != nil || ack != 5 {
				t.Fatalf("RecvOrAck after the frames = %q, %d, %v; want ack 5", f, ack, err)
			}
			if got := c.Acked(); got != 5 {
				t.Fatalf("Acked = %d, want 5", got)
			}
			// A waiting receiver is woken by an Ack.
			done := make(chan error, 1)
			go func() {
				f, ack, err := c.RecvOrAck(ctx, 6)
				if err == nil && (f != nil || ack != 7) {
					err = fmt.Errorf("got %q, ack %d; want ack 7", f, ack)
				}
				done <- err
			}()
			time.Sleep(time.Millisecond) // let it wait (no assertion on it)
			if err := w.Ack(7); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("RecvOrAck not woken by Ack")
			}
			// An old acknowledgement does not satisfy a newer want; a
			// frame does, and ctx ends the wait.
			short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			if _, _, err := c.RecvOrAck(short, 8); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("RecvOrAck(want 8) with ack 7 = %v, want DeadlineExceeded", err)
			}
			if err := w.Send([]byte("f3")); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if f, _, err := c.RecvOrAck(ctx, 8); err != nil || string(f) != "f3" {
				t.Fatalf("RecvOrAck = %q, %v; want frame f3", f, err)
			}
			w.Close()
			if err := w.Ack(9); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("Ack after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// TestUnannouncedPublication: a publication the waiter's announcement
// did not reach (the publisher, which does not fence, read the flag
// before it was set: played here by publishing without looking at it)
// is found when the waiter's first sleep ends, which lasts firstSlice,
// not sleepSlice.
func TestUnannouncedPublication(t *testing.T) {
	c, w := newPair(t, Options{RingSize: 4096, SpinDuration: -1}) // sleep at once
	defer c.Close()
	defer w.Close()
	slept := recordSleeps(t)
	got := make(chan error, 1)
	go func() {
		f, err := c.Recv(context.Background())
		if err == nil && string(f) != "x" {
			err = fmt.Errorf("got %q, want x", f)
		}
		got <- err
	}()
	first := <-slept // the receiver sleeps: announced
	if err := w.Send([]byte("x")); err != nil {
		t.Fatal(err)
	}
	w.race.release(w.txIdx)
	storeRelease(w.tx.tail, w.txTail) // published, flag not read: no wake-up
	w.txPub = w.txTail
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unannounced publication was never found")
	}
	if first != firstSlice {
		t.Fatalf("first sleep after the announcement: %v, want %v", first, firstSlice)
	}
}

// recordSleeps makes every wait's futex sleep send its duration to the
// returned channel (when there is room) until the test ends.
func recordSleeps(t *testing.T) <-chan time.Duration {
	slept := make(chan time.Duration, 64)
	orig := waitSleep
	t.Cleanup(func() { waitSleep = orig })
	waitSleep = func(addr *uint32, val uint32, d time.Duration) syscall.Errno {
		select {
		case slept <- d:
		default:
		}
		return futexWait(addr, val, d)
	}
	return slept
}

// TestConnOnWait: a Send that must wait for room calls OnWait's func
// first and the func it returned when the wait ends; a Send that finds
// room calls neither. Abort ends the wait (what a session's deadline
// does).
func TestConnOnWait(t *testing.T) {
	c, w := newPair(t, Options{RingSize: 4096, SpinDuration: -1})
	defer c.Close()
	defer w.Close()
	began, ended := make(chan struct{}, 2), make(chan struct{}, 2)
	c.OnWait(func() func() {
		began <- struct{}{}
		return func() { ended <- struct{}{} }
	})
	frame := make([]byte, 1000)
	for range 3 { // 3 x (4 + 1000) bytes fit
		if err := c.Send(frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(began) != 0 {
		t.Fatal("OnWait called for a Send that found room")
	}
	done := make(chan error, 1)
	go func() {
		done <- c.Send(make([]byte, 2000))
	}()
	<-began
	select {
	case err := <-done:
		t.Fatalf("Send returned (%v) with the ring full", err)
	case <-ended:
		t.Fatal("the wait ended with the ring full")
	default:
	}
	boom := errors.New("boom")
	c.Abort(boom)
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("Send: %v, want the Abort's error", err)
	}
	<-ended
	if len(began) != 0 || len(ended) != 0 {
		t.Fatal("OnWait called more than once")
	}
}
