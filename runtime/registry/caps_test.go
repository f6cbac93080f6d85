package registry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/tensor"
)

// gpuEnv is a fakeEnv with the GPU, Copier and Tracer capabilities; it
// counts the calls the helpers make.
type gpuEnv struct {
	fakeEnv
	dev    device.Device
	syncs  int
	copies []string
	ended  []string
}

func (e *gpuEnv) GPUDevice() device.Device { return e.dev }
func (e *gpuEnv) SyncDevice() error        { e.syncs++; return nil }
func (e *gpuEnv) Capture(fn func() error) (device.Graph, error) {
	return nil, fn()
}
func (e *gpuEnv) NewStopwatch(marks int) (device.Stopwatch, error) {
	return nil, errors.New("device stopwatch")
}
func (e *gpuEnv) ToHost(t *tensor.Tensor) (*tensor.Tensor, error) {
	e.copies = append(e.copies, "to host")
	return t, nil
}
func (e *gpuEnv) FromHost(dst, src *tensor.Tensor) error {
	e.copies = append(e.copies, "from host")
	return nil
}
func (e *gpuEnv) CopyTensor(dst, src *tensor.Tensor) error {
	e.copies = append(e.copies, "copy")
	return nil
}
func (e *gpuEnv) Recorder() *trace.Recorder { return nil }
func (e *gpuEnv) BeginCollective(name, comm, backend string, bytes int64) registry.CollectiveSpan {
	return registry.CollectiveSpan{}
}
func (e *gpuEnv) BeginGPU() registry.GPUSpan      { return registry.GPUSpan{Marks: e} }
func (e *gpuEnv) EndGPU(name string, bytes int64) { e.ended = append(e.ended, name) }

var (
	_ registry.GPU    = (*gpuEnv)(nil)
	_ registry.Copier = (*gpuEnv)(nil)
	_ registry.Tracer = (*gpuEnv)(nil)
)

func TestCapabilityErrors(t *testing.T) {
	plain := newEnv()
	unbound := &gpuEnv{fakeEnv: *newEnv()}
	bound := &gpuEnv{fakeEnv: *newEnv(), dev: device.NewFake(1, 1<<20)}
	cases := []struct {
		name string
		get  func() (any, error)
		want error
		msg  string // in the error; "" for no error
	}{
		{"GPU of a plain env", func() (any, error) { return registry.GPUOf(plain) }, registry.ErrNoDevice, "worker 5: device not available: the GPU capability: *registry_test.fakeEnv is not a chorus worker"},
		{"GPU of a host-only worker", func() (any, error) { return registry.GPUOf(unbound) }, registry.ErrNoDevice, "not bound to a GPU"},
		{"GPU of a bound worker", func() (any, error) { return registry.GPUOf(bound) }, nil, ""},
		{"Capture without a GPU", func() (any, error) { return registry.Capture(unbound, func() error { return nil }) }, registry.ErrNoDevice, "graph capture needs a GPU"},
		{"Capture on a GPU", func() (any, error) {
			return registry.Capture(bound, func() error { return ccl.ErrFailed })
		}, ccl.ErrFailed, "failed"},
		{"communicators", func() (any, error) { return registry.CommsOf(plain) }, registry.ErrNoCapability, "the communicator capability: collectives need a chorus worker"},
		{"Comm", func() (any, error) { return registry.Comm(plain, true) }, registry.ErrNoCapability, "communicator capability"},
		{"IPC memory", func() (any, error) { return registry.IPCOf(plain) }, registry.ErrNoCapability, "the IPC memory capability"},
		{"CustomAllReduce", func() (any, error) {
			return nil, registry.CustomAllReduce(plain, nil, nil, "sum", "auto")
		}, registry.ErrNoCapability, "the IPC memory capability"},
		{"trace", func() (any, error) { return registry.TracerOf(plain) }, registry.ErrNoCapability, "the trace capability"},
		{"trace of a worker", func() (any, error) { return registry.TracerOf(bound) }, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.get()
			if c.want == nil {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, c.want, c.msg)
			}
		})
	}
}

func hostTensor(_ *testing.T, vals ...float32) *tensor.Tensor { return tensor.FromSlice(vals) }

func float32s(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	d, err := tensor.Data[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCopyHelpers(t *testing.T) {
	plain := newEnv()
	src := hostTensor(t, 1, 2, 3)
	if got, err := registry.ToHost(plain, src); err != nil || got != src {
		t.Fatalf("ToHost of a host tensor = %p, %v; want the tensor itself", got, err)
	}
	dst := hostTensor(t, 0, 0, 0)
	if err := registry.FromHost(plain, dst, src); err != nil {
		t.Fatal(err)
	}
	if got := float32s(t, dst); got[0] != 1 || got[2] != 3 {
		t.Fatalf("FromHost into a host tensor: %v", got)
	}
	dst2 := hostTensor(t, 0, 0, 0)
	if err := registry.CopyTensor(plain, dst2, src); err != nil || float32s(t, dst2)[1] != 2 {
		t.Fatalf("CopyTensor on the host: %v, %v", float32s(t, dst2), err)
	}
	if err := registry.CopyTensor(plain, hostTensor(t, 0), src); !errors.Is(err, registry.ErrBadArgs) {
		t.Fatalf("CopyTensor of mismatched layouts: %v, want ErrBadArgs", err)
	}

	// Device tensors go to the Copier; without one, the error names it.
	fake := device.NewFake(0, 1<<20)
	buf, err := fake.Alloc(12)
	if err != nil {
		t.Fatal(err)
	}
	onDev, err := tensor.View(tensor.NewDeviceStorage(tensor.CUDADevice(0), tensor.ScopeGlobal, buf), 0, tensor.Float32, tensor.Shape{3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registry.ToHost(plain, onDev); !errors.Is(err, registry.ErrNoCapability) || !strings.Contains(err.Error(), "copy capability") {
		t.Fatalf("ToHost of a device tensor on a plain env: %v", err)
	}
	if err := registry.FromHost(plain, onDev, src); !errors.Is(err, registry.ErrNoCapability) {
		t.Fatalf("FromHost into a device tensor on a plain env: %v", err)
	}
	w := &gpuEnv{fakeEnv: *newEnv(), dev: fake}
	if _, err := registry.ToHost(w, onDev); err != nil {
		t.Fatal(err)
	}
	if err := registry.FromHost(w, onDev, src); err != nil {
		t.Fatal(err)
	}
	if err := registry.CopyTensor(w, onDev, src); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(w.copies, ", "); got != "to host, from host, copy" {
		t.Fatalf("the worker's copies: %s", got)
	}
}

func TestDeviceHelpers(t *testing.T) {
	plain := newEnv()
	if err := registry.SyncDevice(plain); err != nil {
		t.Fatalf("SyncDevice without a GPU: %v", err)
	}
	sw, err := registry.NewStopwatch(plain, 4)
	if _, ok := sw.(*device.HostStopwatch); !ok || err != nil {
		t.Fatalf("NewStopwatch without a GPU = %T, %v; want the host stopwatch", sw, err)
	}
	unbound := &gpuEnv{fakeEnv: *newEnv()}
	if err := registry.SyncDevice(unbound); err != nil || unbound.syncs != 0 {
		t.Fatalf("SyncDevice of a host-only worker: %v, %d device syncs", err, unbound.syncs)
	}
	bound := &gpuEnv{fakeEnv: *newEnv(), dev: device.NewFake(1, 1<<20)}
	if err := registry.SyncDevice(bound); err != nil || bound.syncs != 1 {
		t.Fatalf("SyncDevice of a GPU worker: %v, %d device syncs", err, bound.syncs)
	}
	if _, err := registry.NewStopwatch(bound, 4); err == nil || err.Error() != "device stopwatch" {
		t.Fatalf("NewStopwatch of a GPU worker: %v, want the device's", err)
	}
}

func TestSpans(t *testing.T) {
	// Without a trace, spans record nothing.
	registry.BeginGPU(newEnv()).End("matmul", 8)
	registry.BeginCollective(newEnv(), "allreduce", "plan x", "plan/x", 8).End(nil)

	w := &gpuEnv{fakeEnv: *newEnv()}
	registry.BeginGPU(w).End("matmul", 8)
	if len(w.ended) != 1 || w.ended[0] != "matmul" {
		t.Fatalf("GPU spans ended: %v", w.ended)
	}

	rec := trace.NewRecorder(trace.ProcWorker(5), nil, true)
	site := rec.NewSite(trace.Track{Process: trace.ProcWorker(5), Thread: "collectives"}, "allreduce", trace.CatCollective, trace.Args{})
	registry.CollectiveSpan{Site: site, Seq: 3, Bytes: 64}.End(ccl.ErrFailed)
	var got []trace.Event
	if err := rec.Drain(func(evs []trace.Event) error { got = append(got, evs...); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Phase != trace.End || got[0].Args.Seq != 3 || got[0].Args.Bytes != 64 || got[0].Args.Error != ccl.ErrFailed.Error() {
		t.Fatalf("the span's end: %+v", got)
	}
}
