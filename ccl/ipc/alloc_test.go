package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// fakeDevices is host "device memory" shared by the ranks of one test:
// addresses are synthetic, handles name them, and it counts what is live.
type fakeDevices struct {
	mu      sync.Mutex
	next    uint64
	live    map[uint64]int64 // allocations
	opened  map[uint64]int   // mappings of peers' allocations
	zeroed  map[uint64]int
	failNth map[int]int // rank -> fail its Nth Alloc (1-based)
	allocs  map[int]int
}

func newFakeDevices() *fakeDevices {
	return &fakeDevices{next: 1 << 20, live: map[uint64]int64{}, opened: map[uint64]int{}, zeroed: map[uint64]int{},
		failNth: map[int]int{}, allocs: map[int]int{}}
}

type fakeMemory struct {
	d    *fakeDevices
	rank int
}

func (m fakeMemory) Alloc(n int64) (uint64, cuda.IpcMemHandle, error) {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	m.d.allocs[m.rank]++
	if m.d.failNth[m.rank] == m.d.allocs[m.rank] {
		return 0, cuda.IpcMemHandle{}, errors.New("fake: out of memory")
	}
	p := m.d.next
	m.d.next += uint64(n+4095) &^ 4095
	m.d.live[p] = n
	var h cuda.IpcMemHandle
	binary.LittleEndian.PutUint64(h[:], p)
	return p, h, nil
}

func (m fakeMemory) Zero(p uint64, n int64) error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.d.live[p] != n {
		return fmt.Errorf("fake: zero %d bytes at %#x, allocation is %d", n, p, m.d.live[p])
	}
	m.d.zeroed[p]++
	return nil
}

func (m fakeMemory) Free(p uint64) error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if _, ok := m.d.live[p]; !ok {
		return fmt.Errorf("fake: free of unknown %#x", p)
	}
	delete(m.d.live, p)
	return nil
}

func (m fakeMemory) Open(h cuda.IpcMemHandle) (uint64, error) {
	p := binary.LittleEndian.Uint64(h[:])
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if _, ok := m.d.live[p]; !ok {
		return 0, fmt.Errorf("fake: open of unknown handle %#x", p)
	}
	m.d.opened[p]++
	return p, nil
}

func (m fakeMemory) Close(p uint64) error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.d.opened[p] == 0 {
		return fmt.Errorf("fake: close of unopened %#x", p)
	}
	m.d.opened[p]--
	return nil
}

func (fakeMemory) EnablePeer(int) error { return nil }
func (fakeMemory) ReleasePeers() error  { return nil }
func (fakeMemory) Sync() error          { return nil }

// allocators joins n ranks (goroutines of this test) over a cpu control
// communicator, each with fake memory. pid is faked per rank so peers
// are "other processes" and open each other's handles.
func allocators(t *testing.T, n int, d *fakeDevices) []*Allocator {
	t.Helper()
	b, err := ccl.Lookup("cpu")
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.NewID()
	if err != nil {
		t.Fatal(err)
	}
	as := make([]*Allocator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := b.Join(context.Background(), ccl.Config{ID: id, Rank: r, Size: n, Timeout: 5 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { c.Close() })
			as[r], errs[r] = NewAllocator(Config{Rank: r, Size: n, Ordinal: r, Control: c, Memory: fakeMemory{d, r}})
			if errs[r] == nil {
				as[r].pid = 1000 + r
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return as
}

// onAll runs f on every rank at once and returns each rank's error.
func onAll(as []*Allocator, f func(r int, a *Allocator) error) []error {
	errs := make([]error, len(as))
	var wg sync.WaitGroup
	for r, a := range as {
		wg.Go(func() { errs[r] = f(r, a) })
	}
	wg.Wait()
	return errs
}

var _ = cpu.Backend{} // the control communicators are the cpu backend's

func TestAllocatorProtocol(t *testing.T) {
	leaktest.Check(t)
	const n = 3
	d := newFakeDevices()
	as := allocators(t, n, d)
	ctx := context.Background()
	bufs := make([]*Buffer, n)

	// Same size everywhere: every rank sees every rank's memory.
	for _, err := range onAll(as, func(r int, a *Allocator) (err error) { bufs[r], err = a.Alloc(ctx, 1000); return }) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r, b := range bufs {
		if b.NumWorkers() != n || b.WorkerID() != r || b.Size != 1000 || b.Seq != 1 {
			t.Fatalf("rank %d: buffer %+v", r, b)
		}
		for q := range n {
			if b.Data[q] != bufs[q].Data[q] {
				t.Fatalf("rank %d sees rank %d's data at %#x, rank %d has it at %#x", r, q, b.Data[q], q, bufs[q].Data[q])
			}
			if b.BarrierIn[q] <= b.Scratch[q] || b.BarrierOut[q] <= b.BarrierMid[q] {
				t.Fatalf("rank %d: regions out of order for rank %d", r, q)
			}
		}
		if got, off, ok := as[r].Lookup(b.Data[r] + 48); !ok || got != b || off != 48 {
			t.Fatalf("rank %d: Lookup = %v, %d, %v", r, got, off, ok)
		}
		if _, _, ok := as[r].Lookup(b.Data[r] + 1000); ok {
			t.Fatalf("rank %d: Lookup past the end succeeded", r)
		}
	}

	// A rank that asks for another size: every rank gets ErrOrder.
	for r, err := range onAll(as, func(r int, a *Allocator) error {
		_, err := a.Alloc(ctx, int64(500+r))
		return err
	}) {
		if !errors.Is(err, ErrOrder) || !errors.Is(err, ccl.ErrMismatch) {
			t.Fatalf("rank %d: skewed sizes: %v", r, err)
		}
	}

	// Free and allocate again: the pool is reused, memory zeroed again.
	for r, a := range as {
		a.Free(bufs[r])
		a.Free(bufs[r]) // a second Free is a no-op
	}
	before := as[0].Stats().Allocations
	for _, err := range onAll(as, func(r int, a *Allocator) (err error) { bufs[r], err = a.Alloc(ctx, 1000); return }) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := as[0].Stats(); s.Allocations != before || s.Live != 1 {
		t.Fatalf("after reuse: %+v (allocations were %d)", s, before)
	}
	if z := d.zeroed[bufs[0].Data[0]]; z < 2 {
		t.Fatalf("a reused allocation was zeroed %d times, want every time", z)
	}

	// One rank fails to allocate: every rank gets an error, none hangs.
	d.mu.Lock()
	d.failNth[1] = d.allocs[1] + 1
	d.mu.Unlock()
	for r, err := range onAll(as, func(r int, a *Allocator) error { _, err := a.Alloc(ctx, 1<<20); return err }) {
		if err == nil {
			t.Fatalf("rank %d: allocation succeeded although rank 1 failed", r)
		}
	}

	// Close unmaps and frees everything.
	for r, err := range onAll(as, func(r int, a *Allocator) error { return a.Close(ctx) }) {
		if err != nil {
			t.Fatalf("rank %d: close: %v", r, err)
		}
	}
	for p, c := range d.opened {
		if c != 0 {
			t.Errorf("mapping of %#x still open (%d)", p, c)
		}
	}
	if len(d.live) != 0 {
		t.Errorf("%d allocations not freed", len(d.live))
	}
	if _, err := as[0].Alloc(ctx, 10); !errors.Is(err, ccl.ErrClosed) {
		t.Errorf("alloc after close: %v", err)
	}
}
