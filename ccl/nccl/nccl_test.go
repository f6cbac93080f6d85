package nccl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	_ "github.com/chorus-rt/chorus/ccl/cpu" // the control communicators
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	gnccl "github.com/chorus-rt/chorus/gpu/nccl"
	"github.com/chorus-rt/chorus/tensor"
)

// fakeLib records the NCCL calls a communicator makes; failOn makes the
// call of that name fail with an NCCL error.
type fakeLib struct {
	mu     sync.Mutex
	calls  []string
	failOn string
}

func (f *fakeLib) record(format string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := fmt.Sprintf(format, args...)
	f.calls = append(f.calls, c)
	if f.failOn != "" && strings.HasPrefix(c, f.failOn) {
		return &gnccl.Error{Func: f.failOn, Code: 5, Msg: "invalid usage"}
	}
	return nil
}

func (f *fakeLib) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeLib) CommSplit(c gnccl.Comm, color, key int) (gnccl.Comm, error) {
	return c + 1, f.record("split %d %d", color, key)
}
func (f *fakeLib) CommDestroy(gnccl.Comm) error     { return f.record("destroy") }
func (f *fakeLib) CommAbort(gnccl.Comm) error       { return f.record("abort") }
func (f *fakeLib) Count(gnccl.Comm) (int, error)    { return 1, nil }
func (f *fakeLib) UserRank(gnccl.Comm) (int, error) { return 0, nil }
func (f *fakeLib) GroupStart() error                { return f.record("group-start") }
func (f *fakeLib) GroupEnd() error                  { return f.record("group-end") }
func (f *fakeLib) AllReduce(s, r uint64, n int64, dt gnccl.DataType, op gnccl.RedOp, _ gnccl.Comm, _ uintptr) error {
	return f.record("allreduce %#x %#x %d dt%d op%d", s, r, n, dt, op)
}
func (f *fakeLib) Broadcast(s, r uint64, n int64, dt gnccl.DataType, root int, _ gnccl.Comm, _ uintptr) error {
	return f.record("broadcast %#x %#x %d dt%d root%d", s, r, n, dt, root)
}
func (f *fakeLib) AllGather(s, r uint64, n int64, dt gnccl.DataType, _ gnccl.Comm, _ uintptr) error {
	return f.record("allgather %#x %#x %d dt%d", s, r, n, dt)
}
func (f *fakeLib) ReduceScatter(s, r uint64, n int64, dt gnccl.DataType, op gnccl.RedOp, _ gnccl.Comm, _ uintptr) error {
	return f.record("reducescatter %#x %#x %d dt%d op%d", s, r, n, dt, op)
}
func (f *fakeLib) Send(b uint64, n int64, dt gnccl.DataType, peer int, _ gnccl.Comm, _ uintptr) error {
	return f.record("send %#x %d dt%d to%d", b, n, dt, peer)
}
func (f *fakeLib) Recv(b uint64, n int64, dt gnccl.DataType, peer int, _ gnccl.Comm, _ uintptr) error {
	return f.record("recv %#x %d dt%d from%d", b, n, dt, peer)
}

// fakeDriver is the CUDA driver of the device-side exchange; capturing
// makes every stream look captured.
type fakeDriver struct {
	fakeLib
	capturing bool
}

func (f *fakeDriver) MemAlloc(n int64) (cuda.DevicePtr, error) {
	return 1 << 30, f.record("memalloc %d", n)
}
func (f *fakeDriver) MemFree(cuda.DevicePtr) error { return f.record("memfree") }
func (f *fakeDriver) StreamIsCapturing(cuda.Stream) (int, error) {
	if f.capturing {
		return cuda.CaptureActive, nil
	}
	return cuda.CaptureNone, nil
}
func (f *fakeDriver) StreamSynchronize(cuda.Stream) error { return f.record("sync") }
func (f *fakeDriver) MemcpyHtoDAsync(cuda.DevicePtr, []byte, cuda.Stream) error {
	return f.record("htod")
}
func (f *fakeDriver) MemcpyDtoHAsync([]byte, cuda.DevicePtr, cuda.Stream) error {
	return f.record("dtoh")
}
func (f *fakeDriver) MemcpyDtoDAsync(dst, src cuda.DevicePtr, n int64, _ cuda.Stream) error {
	return f.record("dtod %#x %#x %d", dst, src, n)
}

// devBuf is device memory at a made-up address (nothing dereferences it).
type devBuf struct {
	p uintptr
	n int64
}

func (b devBuf) Ptr() uintptr { return b.p }
func (b devBuf) Size() int64  { return b.n }

// gpuTensor is a tensor on cuda:dev at address p.
func gpuTensor(t *testing.T, dev int, p uintptr, dt tensor.DType, n int64) *tensor.Tensor {
	t.Helper()
	x, err := tensor.View(tensor.NewDeviceStorage(tensor.CUDADevice(dev), "", devBuf{p, n * int64(dt.Size())}), 0, dt, tensor.Shape{n})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// ranks makes n communicators over fakes, exchanging descriptors through
// a cpu control communicator (as sessions do) unless noControl.
func ranks(t *testing.T, n int, noControl bool) ([]*Comm, []*fakeDriver) {
	t.Helper()
	comms, drvs := make([]*Comm, n), make([]*fakeDriver, n)
	var controls []ccl.Comm
	if !noControl {
		b, err := ccl.Lookup("cpu")
		if err != nil {
			t.Fatal(err)
		}
		id, err := b.NewID()
		if err != nil {
			t.Fatal(err)
		}
		controls = make([]ccl.Comm, n)
		errs := onAll(n, func(r int) error {
			var err error
			controls[r], err = b.Join(context.Background(), ccl.Config{ID: id, Rank: r, Size: n, Timeout: 5 * time.Second})
			return err
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for r := range n {
		drvs[r] = &fakeDriver{}
		cfg := ccl.Config{Rank: r, Size: n, Device: tensor.CUDADevice(r),
			Exec: func(fn func(uintptr) error) error { return fn(0) }}
		if controls != nil {
			cfg.Control = controls[r]
			t.Cleanup(func() { controls[r].Close() })
		}
		comms[r] = newComm(&drvs[r].fakeLib, drvs[r], cfg, Options{})
		if err := comms[r].setup(gnccl.Comm(100 + r)); err != nil {
			t.Fatal(err)
		}
	}
	return comms, drvs
}

func onAll(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

// TestDescriptorCheck: descriptors encode and decode as the ranks
// compare them; a difference in any field, or a rank whose own arguments
// were bad, fails every rank with ErrMismatch; this rank's own bad
// arguments come back as they are.
func TestDescriptorCheck(t *testing.T) {
	base := ccl.Desc{Kind: ccl.KindAllReduce, DType: tensor.BFloat16, Op: reduce.Max, Root: 3, Count: 1<<40 + 7}
	errLocal := fmt.Errorf("%w: local", ccl.ErrBadArgs)
	cases := []struct {
		name  string
		other ccl.Desc // rank 2's descriptor
		bad   bool     // rank 2's arguments were bad
		local error    // this rank's own
		want  error
		has   string
	}{
		{"same", base, false, nil, nil, ""},
		{"kind", ccl.Desc{Kind: ccl.KindAllGather, DType: base.DType, Op: base.Op, Root: 3, Count: base.Count}, false, nil, ccl.ErrMismatch, "rank 2"},
		{"dtype", ccl.Desc{Kind: base.Kind, DType: tensor.Float16, Op: base.Op, Root: 3, Count: base.Count}, false, nil, ccl.ErrMismatch, "rank 2"},
		{"op", ccl.Desc{Kind: base.Kind, DType: base.DType, Op: reduce.Sum, Root: 3, Count: base.Count}, false, nil, ccl.ErrMismatch, "rank 2"},
		{"root", ccl.Desc{Kind: base.Kind, DType: base.DType, Op: base.Op, Root: 1, Count: base.Count}, false, nil, ccl.ErrMismatch, "rank 2"},
		{"count", ccl.Desc{Kind: base.Kind, DType: base.DType, Op: base.Op, Root: 3, Count: 1 << 40}, false, nil, ccl.ErrMismatch, "rank 2"},
		{"peer's bad arguments", base, true, nil, ccl.ErrMismatch, "rank 2 passed bad arguments"},
		{"own bad arguments", base, false, errLocal, errLocal, "local"},
	}
	for _, tc := range cases {
		c := &Comm{rank: 0, n: 3}
		all := make([]byte, 3*descBytes)
		encodeDesc(all, base, tc.local)
		encodeDesc(all[descBytes:], base, nil)
		var bad error
		if tc.bad {
			bad = errors.New("bad")
		}
		encodeDesc(all[2*descBytes:], tc.other, bad)
		err := c.check(all, base, tc.local)
		if tc.want == nil && err != nil || tc.want != nil && (!errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.has)) {
			t.Errorf("%s: check = %v, want %v naming %q", tc.name, err, tc.want, tc.has)
		}
	}
}

func TestRedOp(t *testing.T) {
	cases := []struct {
		op   reduce.Op
		dt   tensor.DType
		want gnccl.RedOp
		bad  bool
	}{
		{reduce.Sum, tensor.Float32, gnccl.Sum, false},
		{reduce.Prod, tensor.Int32, gnccl.Prod, false},
		{reduce.Min, tensor.BFloat16, gnccl.Min, false},
		{reduce.Max, tensor.Int64, gnccl.Max, false},
		{reduce.Avg, tensor.Float16, gnccl.Avg, false},
		{reduce.Avg, tensor.Int32, 0, true}, // NCCL has no integer average
		{reduce.Avg, tensor.Bool, 0, true},
		{reduce.Op(99), tensor.Float32, 0, true},
	}
	for _, tc := range cases {
		got, err := redOp(tc.op, tc.dt)
		if tc.bad != (err != nil) || !tc.bad && got != tc.want || tc.bad && !errors.Is(err, ccl.ErrBadArgs) {
			t.Errorf("redOp(%v, %v) = %v, %v; want %v (bad %v, ErrBadArgs)", tc.op, tc.dt, got, err, tc.want, tc.bad)
		}
	}
}

// TestArgumentChecks: what a rank refuses before any exchange.
func TestArgumentChecks(t *testing.T) {
	c := &Comm{rank: 0, n: 2, dev: tensor.CUDADevice(0)}
	f32 := func(n int64) *tensor.Tensor { return gpuTensor(t, 0, 0x1000, tensor.Float32, n) }
	host := tensor.MustNew(tensor.Float32, tensor.Shape{4})
	same := func(s, r int64) bool { return s == r }
	cases := []struct {
		name       string
		send, recv *tensor.Tensor
		has        string
	}{
		{"nil send", nil, f32(4), "send tensor is nil"},
		{"host recv", f32(4), host, "recv is on"},
		{"other GPU", gpuTensor(t, 1, 0x1000, tensor.Float32, 4), f32(4), "send is on cuda:1"},
		{"dtypes", f32(4), gpuTensor(t, 0, 0x2000, tensor.Float16, 4), "send is float32, recv is float16"},
		{"no NCCL type", gpuTensor(t, 0, 0x1000, tensor.Bool, 4), gpuTensor(t, 0, 0x2000, tensor.Bool, 4), "bool"},
		{"counts", f32(4), f32(5), "send has 4 elements, recv 5"},
	}
	for _, tc := range cases {
		_, _, _, err := c.args(tc.send, tc.recv, same)
		if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), tc.has) {
			t.Errorf("%s: %v, want ErrBadArgs naming %q", tc.name, err, tc.has)
		}
	}
	sp, rp, dt, err := c.args(gpuTensor(t, 0, 0x1000, tensor.BFloat16, 8), gpuTensor(t, 0, 0x3000, tensor.BFloat16, 8), same)
	if err != nil || sp != 0x1000 || rp != 0x3000 || dt != gnccl.BFloat16 {
		t.Errorf("good arguments: %#x %#x %v %v", sp, rp, dt, err)
	}
}

// TestCollectivesCallNCCL: agreeing ranks reach NCCL with the right
// addresses, counts, types and ops; ranks that disagree, or one with bad
// arguments, fail everywhere before NCCL is called.
func TestCollectivesCallNCCL(t *testing.T) {
	comms, drvs := ranks(t, 2, false)
	ctx := context.Background()
	t32 := func(r int, p uintptr, n int64) *tensor.Tensor { return gpuTensor(t, r, p, tensor.Float32, n) }
	cases := []struct {
		name string
		call func(r int, c *Comm) error
		want []string // each rank's NCCL calls, "%d" for the rank
		err  error    // every rank's error
	}{
		{"allreduce", func(r int, c *Comm) error { return c.AllReduce(ctx, t32(r, 0x1000, 6), t32(r, 0x2000, 6), reduce.Max) },
			[]string{"allreduce 0x1000 0x2000 6 dt7 op2"}, nil},
		{"reducescatter", func(r int, c *Comm) error {
			return c.ReduceScatter(ctx, t32(r, 0x1000, 6), t32(r, 0x2000, 3), reduce.Sum)
		}, []string{"reducescatter 0x1000 0x2000 3 dt7 op0"}, nil},
		{"allgather", func(r int, c *Comm) error { return c.AllGather(ctx, t32(r, 0x1000, 3), t32(r, 0x2000, 6)) },
			[]string{"allgather 0x1000 0x2000 3 dt7"}, nil},
		{"broadcast", func(r int, c *Comm) error { return c.Broadcast(ctx, t32(r, 0x1000, 5), t32(r, 0x2000, 5), 1) },
			[]string{"broadcast %s 0x2000 5 dt7 root1"}, nil},
		{"counts differ", func(r int, c *Comm) error {
			return c.AllReduce(ctx, t32(r, 0x1000, 6+int64(r)), t32(r, 0x2000, 6+int64(r)), reduce.Sum)
		}, nil, ccl.ErrMismatch},
		{"ops differ", func(r int, c *Comm) error {
			return c.AllReduce(ctx, t32(r, 0x1000, 6), t32(r, 0x2000, 6), reduce.Op(1+r))
		}, nil, ccl.ErrMismatch},
		{"rank 1's arguments bad", func(r int, c *Comm) error {
			recv := t32(r, 0x2000, 6)
			if r == 1 {
				recv = tensor.MustNew(tensor.Float32, tensor.Shape{6})
			}
			return c.AllReduce(ctx, t32(r, 0x1000, 6), recv, reduce.Sum)
		}, nil, ccl.ErrBadArgs}, // rank 1: ErrBadArgs; rank 0: ErrMismatch (checked below)
		{"barrier", func(r int, c *Comm) error { return c.Barrier(ctx) }, []string{"sync"}, nil},
	}
	for _, tc := range cases {
		for _, d := range drvs {
			d.calls = nil
		}
		errs := onAll(2, func(r int) error { return tc.call(r, comms[r]) })
		for r, err := range errs {
			want := tc.err
			if tc.err == ccl.ErrBadArgs && r == 0 {
				want = ccl.ErrMismatch
			}
			if want == nil && err != nil || want != nil && !errors.Is(err, want) {
				t.Errorf("%s: rank %d: %v, want %v", tc.name, r, err, want)
			}
			var calls []string
			for _, w := range tc.want {
				if strings.Contains(w, "%s") { // broadcast: the root sends its send, others their recv
					src := "0x2000"
					if r == 1 {
						src = "0x1000"
					}
					w = fmt.Sprintf(w, src)
				}
				calls = append(calls, w)
			}
			if got := drvs[r].log(); strings.Join(got, "; ") != strings.Join(calls, "; ") {
				t.Errorf("%s: rank %d called %q, want %q", tc.name, r, got, calls)
			}
		}
	}
}

// TestRootedAreGroups: scatter and gather are one NCCL group on the
// root (a device copy for its own part) and one recv or send elsewhere.
func TestRootedAreGroups(t *testing.T) {
	comms, drvs := ranks(t, 2, false)
	ctx := context.Background()
	errs := onAll(2, func(r int) error {
		send := gpuTensor(t, r, 0x1000, tensor.Int32, 8)
		return comms[r].Scatter(ctx, send, gpuTensor(t, r, 0x8000, tensor.Int32, 4), 0)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("scatter: rank %d: %v", r, err)
		}
	}
	want := [][]string{
		{"group-start", "dtod 0x8000 0x1000 16", "send 0x1010 4 dt2 to1", "group-end"},
		{"recv 0x8000 4 dt2 from0"},
	}
	for r := range 2 {
		if got := drvs[r].log(); strings.Join(got, "; ") != strings.Join(want[r], "; ") {
			t.Errorf("scatter: rank %d called %q, want %q", r, got, want[r])
		}
	}
}

// TestNCCLFailureFailsTheCommunicator: an NCCL error makes every later
// call fail with ErrFailed, and Close aborts instead of destroying; an
// Abort makes Close call nothing more.
func TestNCCLFailureFailsTheCommunicator(t *testing.T) {
	comms, drvs := ranks(t, 2, false)
	ctx := context.Background()
	drvs[0].failOn = "allreduce"
	errs := onAll(2, func(r int) error {
		return comms[r].AllReduce(ctx, gpuTensor(t, r, 0x1000, tensor.Float32, 4), gpuTensor(t, r, 0x2000, tensor.Float32, 4), reduce.Sum)
	})
	var ne *gnccl.Error
	if !errors.As(errs[0], &ne) || errs[1] != nil {
		t.Fatalf("errors %v, %v; want rank 0's NCCL error", errs[0], errs[1])
	}
	if err := comms[0].Barrier(ctx); !errors.Is(err, ccl.ErrFailed) {
		t.Errorf("after the failure: %v, want ErrFailed", err)
	}
	for r, want := range []string{"abort", "destroy"} {
		drvs[r].calls = nil
		if err := comms[r].Close(); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
		if got := drvs[r].log(); len(got) != 1 || got[0] != want {
			t.Errorf("rank %d: Close called %q, want %q", r, got, want)
		}
	}
	// Abort, then Close: NCCL sees one abort.
	comms, drvs = ranks(t, 1, true)
	if err := comms[0].Abort(errors.New("peer lost")); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].AllReduce(ctx, gpuTensor(t, 0, 0x1000, tensor.Float32, 4), gpuTensor(t, 0, 0x2000, tensor.Float32, 4), reduce.Sum); !errors.Is(err, ccl.ErrFailed) || !strings.Contains(err.Error(), "peer lost") {
		t.Errorf("after Abort: %v, want ErrFailed with the reason", err)
	}
	comms[0].Close()
	if got := drvs[0].log(); strings.Join(got, "; ") != "memalloc 32; abort; memfree" {
		t.Errorf("Abort then Close called %q", got)
	}
}

// TestDeviceExchange: without a control communicator the descriptors
// travel through the GPU (copy in, NCCL allgather, copy out, sync), and
// refuse a stream being captured into a graph.
func TestDeviceExchange(t *testing.T) {
	comms, drvs := ranks(t, 1, true)
	ctx := context.Background()
	x := func(p uintptr) *tensor.Tensor { return gpuTensor(t, 0, p, tensor.Float32, 4) }
	drvs[0].calls = nil
	if err := comms[0].AllReduce(ctx, x(0x1000), x(0x2000), reduce.Sum); err != nil {
		t.Fatal(err)
	}
	want := "htod; allgather 0x40000000 0x40000000 32 dt1; dtoh; sync; allreduce 0x1000 0x2000 4 dt7 op0"
	if got := strings.Join(drvs[0].log(), "; "); got != want {
		t.Errorf("calls %q, want %q", got, want)
	}
	drvs[0].capturing = true
	if err := comms[0].AllReduce(ctx, x(0x1000), x(0x2000), reduce.Sum); !errors.Is(err, device.ErrCapturing) {
		t.Errorf("while capturing: %v, want device.ErrCapturing", err)
	}
}
