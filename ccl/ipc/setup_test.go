package ipc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// fakeDriver is a setupDriver that counts what is taken and not given
// back, and fails its failAt-th taking call (1-based; 0: none). Calls
// that give back never fail.
type fakeDriver struct {
	mu                                  sync.Mutex
	calls, failAt                       int
	modules, hosts, mems, ctxs, streams int
	hostWords                           [][]uint64 // keeps the mapped words alive
	// The GPU the fake reports (queries that never fail): uuid (zero:
	// unknown), MPS, the context's SMs (0: the query is refused) and
	// the kernels' occupancy (0: 2).
	uuid      [16]byte
	mps       bool
	activeSMs int
	bps       int
}

var errFake = errors.New("fake driver: injected failure")

// take counts a taking call and reports whether it is the one to fail.
func (f *fakeDriver) take() error {
	f.calls++
	if f.calls == f.failAt {
		return fmt.Errorf("%w (call %d)", errFake, f.calls)
	}
	return nil
}

func (f *fakeDriver) left() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.modules+f.hosts+f.mems+f.ctxs+f.streams == 0 {
		return ""
	}
	return fmt.Sprintf("%d modules, %d host words, %d device words, %d context references, %d streams",
		f.modules, f.hosts, f.mems, f.ctxs, f.streams)
}

func (f *fakeDriver) DeviceGet(ordinal int) (cuda.Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return cuda.Device(ordinal), f.take()
}

func (f *fakeDriver) DeviceAttribute(dev cuda.Device, attr int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if attr == cuda.AttrMPSEnabled {
		if f.mps {
			return 1, nil
		}
		return 0, nil
	}
	v := map[int]int{cuda.AttrComputeCapabilityMajor: 9, cuda.AttrComputeCapabilityMinor: 0,
		cuda.AttrMultiprocessorCount: 132, cuda.AttrClockRate: 1980000}[attr]
	return v, f.take()
}

func (f *fakeDriver) ModuleLoadData([]byte) (cuda.Module, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(); err != nil {
		return 0, err
	}
	f.modules++
	return 1, nil
}

func (f *fakeDriver) ModuleGetFunction(cuda.Module, string) (cuda.Function, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 1, f.take()
}

func (f *fakeDriver) ModuleUnload(cuda.Module) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modules--
	return nil
}

func (f *fakeDriver) MemHostAlloc(bytes int64, _ uint) (unsafe.Pointer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(); err != nil {
		return nil, err
	}
	f.hosts++
	w := make([]uint64, (bytes+7)/8)
	f.hostWords = append(f.hostWords, w)
	return unsafe.Pointer(&w[0]), nil
}

func (f *fakeDriver) MemHostGetDevicePointer(unsafe.Pointer) (cuda.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 1 << 40, f.take()
}

func (f *fakeDriver) MemFreeHost(unsafe.Pointer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts--
	return nil
}

func (f *fakeDriver) MemAlloc(int64) (cuda.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(); err != nil {
		return 0, err
	}
	f.mems++
	return 1 << 30, nil
}

func (f *fakeDriver) MemsetD8(cuda.DevicePtr, byte, int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.take()
}

func (f *fakeDriver) MemFree(cuda.DevicePtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mems--
	return nil
}

func (f *fakeDriver) PrimaryCtxRetain(cuda.Device) (cuda.Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(); err != nil {
		return 0, err
	}
	f.ctxs++
	return 1, nil
}

func (f *fakeDriver) PrimaryCtxRelease(cuda.Device) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctxs--
	return nil
}

func (f *fakeDriver) StreamCreate(uint) (cuda.Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(); err != nil {
		return 0, err
	}
	f.streams++
	return 1, nil
}

func (f *fakeDriver) StreamSynchronize(cuda.Stream) error { return nil }

func (f *fakeDriver) StreamDestroy(cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams--
	return nil
}

// compile is the fake NVRTC: a taking call too (it fails at its turn).
func (f *fakeDriver) DeviceUUID(cuda.Device) ([16]byte, error) { return f.uuid, nil }

func (f *fakeDriver) CtxSMCount() (int, error) {
	if f.activeSMs == 0 {
		return 0, errFake
	}
	return f.activeSMs, nil
}

func (f *fakeDriver) OccupancyMaxActiveBlocksPerMultiprocessor(cuda.Function, int, int64) (int, error) {
	if f.bps == 0 {
		return 2, nil
	}
	return f.bps, nil
}

func (f *fakeDriver) compile(string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []byte("cubin"), f.take()
}

// setupRanks makes n allocators over a cpu control communicator whose
// device work runs on the calling goroutine (the fakes need no thread).
func setupRanks(t *testing.T, n int) []*Allocator {
	t.Helper()
	b, err := ccl.Lookup("cpu")
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.NewID()
	if err != nil {
		t.Fatal(err)
	}
	d := newFakeDevices()
	as := make([]*Allocator, n)
	errs := onAll(as, func(r int, _ *Allocator) error {
		c, err := b.Join(context.Background(), ccl.Config{ID: id, Rank: r, Size: n, Timeout: 5 * time.Second})
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
		as[r], err = NewAllocator(Config{Rank: r, Size: n, Ordinal: r, Control: c, Memory: fakeMemory{d, r},
			Exec: func(fn func(uintptr) error) error { return fn(0) }})
		if err == nil {
			as[r].pid = 1000 + r
		}
		return err
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return as
}

// TestNewAllReducerReleasesOnError fails rank 1's set-up at each taking
// call in turn (the compile, the module, the host and device words, the
// context reference, the stream, ...): both ranks fail, rank 0 because
// rank 1 could not load, and neither keeps anything. Past the last call
// both succeed and Close gives everything back.
func TestNewAllReducerReleasesOnError(t *testing.T) {
	leaktest.Check(t)
	// Count the taking calls of a set-up that succeeds.
	probe := &fakeDriver{}
	as := setupRanks(t, 1)
	var acts []string // the compile is recorded as an activity, begun and ended
	act := func(name string) func() {
		acts = append(acts, "begin "+name)
		return func() { acts = append(acts, "end "+name) }
	}
	r, err := newAllReducer(context.Background(), as[0], nil, Options{Activity: act}, probe, probe.compile)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"begin NVRTC compile chorus_ipc_allreduce.cu", "end NVRTC compile chorus_ipc_allreduce.cu"}; !slices.Equal(acts, want) {
		t.Errorf("activities %q, want %q", acts, want)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	steps := probe.calls
	if steps < 30 { // 5 device queries, compile, load, 27 functions, words, context, stream
		t.Fatalf("a set-up makes %d taking calls; the fake misses some", steps)
	}
	for k := 1; k <= steps+1; k++ {
		as := setupRanks(t, 2)
		drv := []*fakeDriver{{}, {failAt: k}}
		rs := make([]*AllReducer, 2)
		errs := onAll(as, func(q int, a *Allocator) error {
			var err error
			rs[q], err = newAllReducer(context.Background(), a, nil, Options{}, drv[q], drv[q].compile)
			return err
		})
		if k <= steps {
			if !errors.Is(errs[1], errFake) || errs[0] == nil {
				t.Errorf("failing call %d of rank 1: errors %v, %v; want rank 1's injected failure and an error on rank 0", k, errs[0], errs[1])
			}
		} else {
			for q, err := range errs {
				if err != nil {
					t.Fatalf("no failure: rank %d: %v", q, err)
				}
				if err := rs[q].Close(); err != nil {
					t.Errorf("rank %d: Close: %v", q, err)
				}
			}
		}
		for q, d := range drv {
			if left := d.left(); left != "" {
				t.Errorf("failing call %d of rank 1: rank %d keeps %s", k, q, left)
			}
		}
	}
}

// TestNewAllReducerNeedsADriver: an allocator over fake memory has no
// driver, and NewAllReducer says so instead of crashing.
func TestNewAllReducerNeedsADriver(t *testing.T) {
	as := setupRanks(t, 1)
	if _, err := NewAllReducer(context.Background(), as[0], nil, Options{}); !errors.Is(err, ccl.ErrBadArgs) {
		t.Fatalf("NewAllReducer without a driver: %v, want ErrBadArgs", err)
	}
}
