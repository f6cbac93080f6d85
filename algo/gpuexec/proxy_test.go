package gpuexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// fakeEngine is the proxy's engine on device.Fake: device addresses are
// resolved to the fake's buffers.
type fakeEngine struct {
	dev    *device.Fake
	bufs   []*device.Buffer
	mu     sync.Mutex
	log    []string
	failAt int // fail the n-th call (1-based); 0 never
	calls  int
}

func (e *fakeEngine) find(addr, n uint64) (*device.Buffer, int64, error) {
	for _, b := range e.bufs {
		base := uint64(b.Ptr())
		if addr >= base && addr+n <= base+uint64(b.Size()) {
			return b, int64(addr - base), nil
		}
	}
	return nil, 0, fmt.Errorf("address %#x (+%d) is in no buffer", addr, n)
}

func (e *fakeEngine) note(s string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls++
	e.log = append(e.log, s)
	if e.calls == e.failAt {
		return errors.New("injected engine failure")
	}
	return nil
}

func (e *fakeEngine) Copy(dst, src, n uint64) error {
	if err := e.note("copy"); err != nil {
		return err
	}
	db, doff, err := e.find(dst, n)
	if err != nil {
		return err
	}
	sb, soff, err := e.find(src, n)
	if err != nil {
		return err
	}
	return e.dev.Copy(db, doff, sb, soff, int64(n))
}

func (e *fakeEngine) Signal(dst, v uint64) error {
	if err := e.note("signal"); err != nil {
		return err
	}
	b, off, err := e.find(dst, 8)
	if err != nil {
		return err
	}
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], v)
	return e.dev.CopyIn(b, off, w[:])
}

func (e *fakeEngine) Flush() error {
	if err := e.note("flush"); err != nil {
		return err
	}
	return e.dev.Sync()
}

func newFIFO(size int) *FIFO {
	mem := make([]uint64, FIFOBytes(size)/8)
	return NewFIFO(unsafe.Pointer(&mem[0]), size)
}

func waitDone(t *testing.T, f *FIFO, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.Done() < seq {
		if time.Now().After(deadline) {
			t.Fatalf("flush %d never completed (done %d)", seq, f.Done())
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// Several pushers (thread blocks) share a small FIFO, so it wraps many
// times: every put lands, every signal counter ends at the number of
// signals, and each pusher's flush completes only after its own puts.
func TestProxyMovesDataAndSignals(t *testing.T) {
	leaktest.Check(t)
	for _, size := range []int{1, 4, 64} {
		t.Run(fmt.Sprint("fifo", size), func(t *testing.T) {
			dev := device.NewFake(0, 1<<20)
			const blocks, puts, piece = 4, 25, 64
			src, _ := dev.Alloc(blocks * puts * piece)
			dst, _ := dev.Alloc(blocks * puts * piece)
			ctr, _ := dev.Alloc(blocks * 8)
			pattern := make([]byte, src.Size())
			for i := range pattern {
				pattern[i] = byte(i*7 + 1)
			}
			if err := dev.CopyIn(src, 0, pattern); err != nil {
				t.Fatal(err)
			}
			e := &fakeEngine{dev: dev, bufs: []*device.Buffer{src, dst, ctr}}
			f := newFIFO(size)
			p := StartProxy(f, e, nil)
			var wg sync.WaitGroup
			for b := range blocks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range puts {
						off := uint64((b*puts + i) * piece)
						f.push(Entry{Kind: KindPut, Src: uint64(src.Ptr()) + off, Dst: uint64(dst.Ptr()) + off, Bytes: piece})
						f.push(Entry{Kind: KindSignal, Signal: uint64(ctr.Ptr()) + uint64(8*b)})
					}
					seq := f.push(Entry{Kind: KindFlush})
					waitDone(t, f, seq)
				}()
			}
			wg.Wait()
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, dst.Size())
			if err := dev.CopyOut(got, dst, 0); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != pattern[i] {
					t.Fatalf("byte %d: got %d, want %d", i, got[i], pattern[i])
				}
			}
			cs := make([]byte, ctr.Size())
			if err := dev.CopyOut(cs, ctr, 0); err != nil {
				t.Fatal(err)
			}
			for b := range blocks {
				if v := binary.LittleEndian.Uint64(cs[8*b:]); v != puts {
					t.Errorf("counter %d = %d, want %d", b, v, puts)
				}
			}
			if want := uint64(blocks * (2*puts + 1)); p.Served() != want {
				t.Errorf("served %d entries, want %d", p.Served(), want)
			}
		})
	}
}

// The proxy runs entries in sequence order even when pushers finish
// writing them out of order: a later entry whose header is written first
// waits for the earlier one.
func TestProxyKeepsSequenceOrder(t *testing.T) {
	leaktest.Check(t)
	dev := device.NewFake(0, 1<<20)
	ctr, _ := dev.Alloc(8)
	e := &fakeEngine{dev: dev, bufs: []*device.Buffer{ctr}}
	f := newFIFO(8)
	p := StartProxy(f, e, nil)
	defer p.Close()
	// Reserve seq 1 and 2 by hand; publish 2 before 1.
	f.head.Store(2)
	w1, w2 := f.entries[0:], f.entries[entryWords:]
	atomic.StoreUint64(&w2[0], 2<<8|KindFlush)
	time.Sleep(2 * time.Millisecond)
	if p.Served() != 0 || f.Done() != 0 {
		t.Fatalf("entry 2 ran before entry 1 was published (served %d, done %d)", p.Served(), f.Done())
	}
	atomic.StoreUint64(&w1[4], uint64(ctr.Ptr()))
	atomic.StoreUint64(&w1[0], 1<<8|KindSignal)
	waitDone(t, f, 2)
	if got := fmt.Sprint(e.log); got != "[signal flush]" {
		t.Errorf("engine calls %s, want [signal flush]", got)
	}
}

// An engine failure is reported (ErrProxy naming the entry); the proxy
// keeps consuming so pushers never block, and later flushes never
// complete, so the kernel's wait times out and names its op.
func TestProxyEngineFailure(t *testing.T) {
	leaktest.Check(t)
	dev := device.NewFake(0, 1<<20)
	ctr, _ := dev.Alloc(8)
	e := &fakeEngine{dev: dev, bufs: []*device.Buffer{ctr}, failAt: 1}
	f := newFIFO(2)
	p := StartProxy(f, e, nil)
	for range 10 {
		f.push(Entry{Kind: KindSignal, Signal: uint64(ctr.Ptr())})
	}
	seq := f.push(Entry{Kind: KindFlush})
	deadline := time.Now().Add(5 * time.Second)
	for p.Served() < seq && time.Now().Before(deadline) {
		time.Sleep(10 * time.Microsecond)
	}
	if f.Done() != 0 {
		t.Errorf("a flush completed after the engine failed")
	}
	err := p.Close()
	if !errors.Is(err, ErrProxy) || p.Served() != seq {
		t.Fatalf("Close: %v after %d of %d entries, want ErrProxy after all", err, p.Served(), seq)
	}
}

func TestProxySetupFailure(t *testing.T) {
	leaktest.Check(t)
	p := StartProxy(newFIFO(2), &fakeEngine{}, func() error { return errors.New("no context") })
	if err := p.Close(); !errors.Is(err, ErrProxy) {
		t.Fatalf("got %v, want ErrProxy", err)
	}
}
