package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/runtime/transport"
)

// newLog makes a log with n readers in this process.
func newLog(t testing.TB, n int, opts Options) (*LogWriter, []*LogReader) {
	t.Helper()
	w, memfd, err := CreateLog(n, opts)
	if err != nil {
		t.Fatalf("CreateLog: %v", err)
	}
	defer memfd.Close()
	rs := make([]*LogReader, n)
	for i := range rs {
		if rs[i], err = OpenLog(dupFile(t, memfd), i); err != nil {
			t.Fatalf("OpenLog(%d): %v", i, err)
		}
	}
	return w, rs
}

func TestEntrySlots(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, 1}, {1, 1}, {112, 1}, {113, 2}, {232, 2}, {233, 3}, {LogMaxInline, maxEntrySlots},
	} {
		if got := entrySlots(tc.n); got != uint64(tc.want) {
			t.Errorf("entrySlots(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// logMsg is what the property test appends: a frame (or a redirect) for
// one reader or all.
type logMsg struct {
	to       int
	frame    []byte
	redirect bool
}

// TestLogProperty appends random entries (every size up to LogMaxInline,
// for one reader or all, some redirects) through several laps of the log,
// with readers that stall now and then (so the writer waits for space),
// and checks that every reader gets exactly its entries, in order, bit
// for bit.
func TestLogProperty(t *testing.T) {
	for _, tc := range []struct {
		name    string
		readers int
		opts    Options
	}{
		{"1-spin", 1, Options{}},
		{"3-spin", 3, Options{}},
		{"8-nospin", 8, Options{SpinDuration: -1}},
		{"5-yield", 5, Options{Yield: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.readers), 7))
			w, rs := newLog(t, tc.readers, tc.opts)
			const entries = 3 * LogSlots
			msgs := make([]logMsg, entries)
			want := make([][]logMsg, tc.readers)
			for i := range msgs {
				m := logMsg{to: LogAll}
				if rng.IntN(3) == 0 {
					m.to = rng.IntN(tc.readers)
				}
				switch r := rng.IntN(10); {
				case r == 0:
					m.redirect = true
				case r < 3:
					m.frame = make([]byte, rng.IntN(LogMaxInline+1))
				default:
					m.frame = make([]byte, rng.IntN(64))
				}
				for j := range m.frame {
					m.frame[j] = byte(rng.Uint32())
				}
				msgs[i] = m
				for r := range want {
					if m.to == LogAll || m.to == r {
						want[r] = append(want[r], m)
					}
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, tc.readers)
			for r, lr := range rs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					stall := rand.New(rand.NewPCG(uint64(r), 1))
					for k, m := range want[r] {
						if stall.IntN(500) == 0 {
							time.Sleep(time.Millisecond)
						}
						f, redirect, err := lr.Next(context.Background())
						if err != nil {
							errs <- fmt.Errorf("reader %d entry %d: %w", r, k, err)
							return
						}
						if redirect != m.redirect || (!redirect && !bytes.Equal(f, m.frame)) {
							errs <- fmt.Errorf("reader %d entry %d: got redirect=%v %d bytes, want redirect=%v %d bytes", r, k, redirect, len(f), m.redirect, len(m.frame))
							return
						}
					}
					// Nothing more for this reader: the writer's Close.
					if _, _, err := lr.Next(context.Background()); !errors.Is(err, transport.ErrPeerGone) {
						errs <- fmt.Errorf("reader %d after the last entry: %v, want ErrPeerGone", r, err)
					}
				}()
			}
			for i, m := range msgs {
				var err error
				if m.redirect {
					_, err = w.PutRedirect(m.to)
				} else {
					_, err = w.Put(m.to, m.frame)
				}
				if err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for _, r := range rs {
				if err := r.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestLogPutRefusals(t *testing.T) {
	w, rs := newLog(t, 2, Options{})
	defer rs[0].Close()
	defer rs[1].Close()
	defer w.Close()
	if _, err := w.Put(LogAll, make([]byte, LogMaxInline+1)); !errors.Is(err, transport.ErrFrameTooLarge) {
		t.Errorf("oversized entry: %v, want ErrFrameTooLarge", err)
	}
	for _, to := range []int{-2, 2, 100} {
		if _, err := w.Put(to, nil); err == nil {
			t.Errorf("Put to consumer %d succeeded", to)
		}
	}
	// Nothing was appended: the first entry a reader sees is the next one.
	if _, err := w.Put(1, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if f, _, err := rs[1].Next(context.Background()); err != nil || string(f) != "a" {
		t.Fatalf("Next = %q, %v", f, err)
	}
}

// fill appends entries for reader 0 until the log is full and returns how
// many it appended.
func fill(t *testing.T, w *LogWriter) int {
	t.Helper()
	for i := range LogSlots {
		if _, err := w.Put(0, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	return LogSlots
}

// TestLogFullThenClosedReader: a Put waiting for a reader that closes its
// end fails with ErrPeerGone and names that reader.
func TestLogFullThenClosedReader(t *testing.T) {
	w, rs := newLog(t, 2, Options{SpinDuration: -1})
	defer w.Close()
	defer rs[0].Close()
	fill(t, w)
	done := make(chan error, 1)
	var who int
	go func() {
		var err error
		who, err = w.Put(LogAll, []byte("x"))
		done <- err
	}()
	rs[1].Close() // reader 1 never read anything: the log stays full
	// Reader 0 drains its entries: space does not come free (reader 1
	// has not passed them), so the Put can only end through the close.
	for range LogSlots {
		if _, _, err := rs[0].Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; !errors.Is(err, transport.ErrPeerGone) || who != 1 {
		t.Fatalf("Put: %v (consumer %d), want ErrPeerGone from consumer 1", err, who)
	}
}

// TestLogFullThenAbort: Abort ends a Put waiting for space; readers get
// the entries published before, then ErrPeerGone.
func TestLogFullThenAbort(t *testing.T) {
	w, rs := newLog(t, 1, Options{})
	defer w.Close()
	defer rs[0].Close()
	n := fill(t, w)
	done := make(chan error, 1)
	go func() {
		_, err := w.Put(0, []byte("x"))
		done <- err
	}()
	cause := errors.New("test abort")
	w.Abort(cause)
	if err := <-done; !errors.Is(err, transport.ErrPeerGone) || !errors.Is(err, cause) {
		t.Fatalf("Put: %v, want ErrPeerGone wrapping the cause", err)
	}
	for i := range n {
		f, _, err := rs[0].Next(context.Background())
		if err != nil || len(f) != 1 || f[0] != byte(i) {
			t.Fatalf("entry %d after Abort: %v %v", i, f, err)
		}
	}
	if _, _, err := rs[0].Next(context.Background()); !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Next after the last entry: %v, want ErrPeerGone", err)
	}
	if _, err := w.Put(0, nil); !errors.Is(err, cause) {
		t.Fatalf("Put after Abort: %v", err)
	}
}

func TestLogNextContext(t *testing.T) {
	w, rs := newLog(t, 1, Options{})
	defer w.Close()
	defer rs[0].Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := rs[0].Next(ctx)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v, want context.Canceled", err)
	}
	if _, err := w.Put(0, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if f, _, err := rs[0].Next(context.Background()); err != nil || string(f) != "after" {
		t.Fatalf("Next = %q, %v", f, err)
	}
}

// TestLogCloseWakesNext: a reader's Close ends its blocked Next, and a
// reader's Abort tells the writer.
func TestLogCloseWakesNext(t *testing.T) {
	w, rs := newLog(t, 2, Options{SpinDuration: -1})
	defer w.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := rs[0].Next(context.Background())
		done <- err
	}()
	rs[0].Close()
	if err := <-done; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Next: %v, want ErrClosed", err)
	}
	rs[1].Abort(errors.New("gone"))
	if _, _, err := rs[1].Next(context.Background()); !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Next after Abort: %v", err)
	}
	rs[1].Close()
}

func TestOpenLogValidation(t *testing.T) {
	w, memfd, err := CreateLog(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	defer memfd.Close()
	seg, segfd, err := Create(Options{RingSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	seg.Close()
	defer segfd.Close()
	for _, tc := range []struct {
		name  string
		f     func() *os.File
		index int
	}{
		{"index-negative", func() *os.File { return dupFile(t, memfd) }, -1},
		{"index-past-end", func() *os.File { return dupFile(t, memfd) }, 2},
		{"ring-segment", func() *os.File { return dupFile(t, segfd) }, 0},
		{"unsealed", func() *os.File { return rawMemfd(t, int64(logSize(2)), false) }, 0},
		{"zeros", func() *os.File { return rawMemfd(t, int64(logSize(2)), true) }, 0},
		{"tiny", func() *os.File { return rawMemfd(t, 8, true) }, 0},
	} {
		if r, err := OpenLog(tc.f(), tc.index); err == nil {
			r.Close()
			t.Errorf("%s: OpenLog succeeded", tc.name)
		}
	}
	r, err := OpenLog(dupFile(t, memfd), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r2, err := OpenLog(dupFile(t, memfd), 1); err == nil {
		r2.Close()
		t.Error("a consumer index opened twice")
	}
	for _, n := range []int{0, -1, MaxLogConsumers + 1} {
		if w, f, err := CreateLog(n, Options{}); err == nil {
			w.Close()
			f.Close()
			t.Errorf("CreateLog(%d) succeeded", n)
		}
	}
}

// TestLogCorruptPosition: a reader position the writer never handed out
// fails the writer's next wait for space, naming the reader.
func TestLogCorruptPosition(t *testing.T) {
	w, rs := newLog(t, 3, Options{})
	defer w.Close()
	for _, r := range rs {
		defer r.Close()
	}
	fill(t, w)
	storeRelease(rs[2].me.pos, 1<<40)
	if who, err := w.Put(LogAll, nil); !errors.Is(err, errCorrupt) || who != 2 {
		t.Fatalf("Put: %v (consumer %d), want errCorrupt from consumer 2", err, who)
	}
}

// TestLogUnannouncedEntry acts out the race the writer's missing fence
// allows (see Conn.wait): a reader announces itself, the entry is
// published without the writer looking at the announcement, and the
// reader must still find it.
func TestLogUnannouncedEntry(t *testing.T) {
	w, rs := newLog(t, 1, Options{SpinDuration: -1})
	defer w.Close()
	defer rs[0].Close()
	slept := recordSleeps(t)
	got := make(chan error, 1)
	go func() {
		f, _, err := rs[0].Next(context.Background())
		if err == nil && string(f) != "x" {
			err = fmt.Errorf("got %q, want x", f)
		}
		got <- err
	}()
	first := <-slept
	s := w.slot(0)
	binary.LittleEndian.PutUint32(s[8:], uint32(0))
	binary.LittleEndian.PutUint32(s[12:], 1)
	s[firstHead] = 'x'
	w.race.release(0)
	storeRelease(u64at(s, 0), 1) // published, nobody woken
	w.seq, w.next = 1, 1
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unannounced entry was never found")
	}
	if first != firstSlice {
		t.Fatalf("first sleep after the announcement: %v, want %v", first, firstSlice)
	}
}

// FuzzLogEntry: whatever the slots hold, Next returns a frame within
// bounds, a redirect or an error, and never faults.
func FuzzLogEntry(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 'a', 'b', 'c'})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb8, 3, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0xb9, 3, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		w, rs := newLog(t, 1, Options{SpinDuration: -1})
		defer w.Close()
		defer rs[0].Close()
		raw = raw[:min(len(raw), len(w.slots))]
		copy(w.slots, raw)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 4 {
			frame, _, err := rs[0].Next(ctx)
			if err != nil {
				return
			}
			if len(frame) > LogMaxInline {
				t.Fatalf("frame of %d bytes", len(frame))
			}
		}
	})
}

// TestLogConn: a worker's LogConn returns the log's frames and the
// redirected ones from its Conn in the order the producer appended them,
// also a redirected frame larger than the ring (read while written), and
// its replies and acknowledgements reach the controller's Conn.
func TestLogConn(t *testing.T) {
	c, wc := newPair(t, Options{RingSize: 4096})
	w, rs := newLog(t, 1, Options{})
	lc := NewLogConn(wc, rs[0])
	defer c.Close()
	defer w.Close()
	defer lc.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3000) // 48000 bytes
	want := [][]byte{[]byte("one"), big, []byte("three"), make([]byte, LogMaxInline), []byte("five")}
	sent := make(chan error, 1)
	go func() {
		sent <- func() error {
			for _, f := range want {
				if len(f) <= LogMaxInline {
					if _, err := w.Put(0, f); err != nil {
						return err
					}
					continue
				}
				if _, err := w.PutRedirect(0); err != nil {
					return err
				}
				if err := c.Send(f); err != nil {
					return err
				}
				if err := c.Flush(); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	for i, f := range want {
		got, err := lc.Recv(context.Background())
		if err != nil || !bytes.Equal(got, f) {
			t.Fatalf("frame %d: %d bytes, %v; want %d bytes", i, len(got), err, len(f))
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if err := lc.Send([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if err := lc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := lc.Ack(7); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Recv(context.Background()); err != nil || string(f) != "reply" {
		t.Fatalf("reply: %q, %v", f, err)
	}
	if got := c.Acked(); got != 7 {
		t.Fatalf("Acked = %d, want 7", got)
	}
}

// TestLogOnWait: a Put that waits for space tells OnWait which consumer
// it waits for, and ends what OnWait began when the wait ends.
func TestLogOnWait(t *testing.T) {
	w, rs := newLog(t, 2, Options{SpinDuration: -1})
	defer w.Close()
	defer rs[0].Close()
	fill(t, w)
	for range LogSlots {
		if _, _, err := rs[0].Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	began := make(chan int, 1)
	ended := make(chan struct{})
	w.OnWait(func(c int) func() {
		began <- c
		return func() { close(ended) }
	})
	done := make(chan error, 1)
	go func() {
		_, err := w.Put(LogAll, []byte("x"))
		done <- err
	}()
	if c := <-began; c != 1 {
		t.Fatalf("OnWait got consumer %d, want 1 (the one behind)", c)
	}
	rs[1].Close()
	if err := <-done; !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Put: %v", err)
	}
	<-ended
}
