package interp_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/kernels"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/compiler/vm/interp"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// fill(shape, seed): a float32 tensor of uniform values in [-1, 1),
	// the same on every worker.
	registry.MustRegisterTyped("vmtest.fill", func(env registry.Env, shape tensor.Shape, seed int64) (*tensor.Tensor, error) {
		return fill(shape, seed)
	})
	// scale_by_rank(x): a new tensor x * (worker_id + 1).
	registry.MustRegisterTyped("vmtest.scale_by_rank", func(env registry.Env, x *tensor.Tensor) (*tensor.Tensor, error) {
		y, err := x.Clone()
		if err != nil {
			return nil, err
		}
		d, err := tensor.Data[float32](y)
		if err != nil {
			return nil, err
		}
		for i := range d {
			d[i] *= float32(env.WorkerID() + 1)
		}
		return y, nil
	})
	registry.MustRegisterTyped("vmtest.fail", func(env registry.Env, x *tensor.Tensor) error {
		return errors.New("vmtest.fail refuses")
	})
}

func fill(shape tensor.Shape, seed int64) (*tensor.Tensor, error) {
	t, err := tensor.New(tensor.Float32, shape)
	if err != nil {
		return nil, err
	}
	return t, tensor.RandomRange(t, uint64(seed), -1, 1)
}

// compileCPU parses IR text and runs the CPU pipeline on it.
func compileCPU(t *testing.T, text string) *ir.Module {
	t.Helper()
	m, err := ir.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	p, err := vm.Pipeline(tensor.CPUDevice, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Run(m, passes.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newWorker is a lone worker (no session) for load and run checks that
// need no collectives.
func newWorker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.NumWorkers == 0 {
		cfg.NumWorkers = 1
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

const planned = `tensor<[4], float32, {cpu:0 scope="global"}>`

func TestLoadErrors(t *testing.T) {
	cpu := newWorker(t, worker.Config{})
	fakeGPU := newWorker(t, worker.Config{Device: tensor.CUDADevice(0), OpenDevice: worker.OpenFake})
	cases := []struct {
		name string
		env  *worker.Worker
		text string
		want error
		msg  string
	}{
		{"syntax", cpu, "module @m func", interp.ErrLoad, "1:"},
		{"unplanned", cpu, "module @m\nfunc @f(%x: tensor<[4], float32>) {\n  return %x\n}\n", interp.ErrLoad, "run plan-devices first"},
		{"cuda on a cpu worker", cpu, "module @m\nfunc @f(%x: tensor<[4], float32, {cuda:0 scope=\"global\"}>) {\n  return %x\n}\n",
			interp.ErrUnsupported, "worker 0 is on cpu"},
		{"cuda:1", fakeGPU, "module @m\nfunc @f(%x: tensor<[4], float32, {cuda:1 scope=\"global\"}>) {\n  return %x\n}\n",
			interp.ErrUnsupported, "each worker drives one GPU"},
		{"ipc_memory on the host", cpu, "module @m\nfunc @f() {\n  block {\n    %t = alloc_tensor([4], float32, {cpu:0}, \"ipc_memory\") : tensor<[4], float32, {cpu:0 scope=\"ipc_memory\"}>\n  }\n  return %t\n}\n",
			interp.ErrUnsupported, "CPU workers have only \"global\" memory"},
		{"custom_allreduce on the host", cpu, "module @m\nfunc @f(%x: tensor<[4], float32, {cpu:0 scope=\"ipc_memory\"}>, %y: " + planned + ") {\n  block {\n    custom_allreduce(%x, one_shot, %y)\n  }\n  return %y\n}\n",
			interp.ErrUnsupported, "runs on GPUs only"},
		{"int matmul", cpu, "module @m\nfunc @f(%x: tensor<[2, 2], int32, {cpu:0 scope=\"global\"}>, %y: tensor<[2, 2], int32, {cpu:0 scope=\"global\"}>) {\n  block {\n    matmul(%x, %x, %y)\n  }\n  return %y\n}\n",
			interp.ErrUnsupported, "matmul of int32"},
		{"unknown function", cpu, "module @m\nfunc @f() {\n  block {\n    call_packed(\"vmtest.nope\")\n  }\n  return\n}\n", interp.ErrLoad, `unknown function "vmtest.nope"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := interp.LoadText(c.env, c.text)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("got %v, want %v containing %q", err, c.want, c.msg)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	cpu := newWorker(t, worker.Config{})
	fakeGPU := newWorker(t, worker.Config{Device: tensor.CUDADevice(0), OpenDevice: worker.OpenFake})
	x4, _ := fill(tensor.Shape{4}, 1)
	cases := []struct {
		name string
		env  *worker.Worker
		text string
		args []any
		want error
		msg  string
	}{
		{"packed call fails", cpu, "module @m\nfunc @f(%x: " + planned + ") {\n  block {\n    call_packed(\"vmtest.fail\", %x)\n  }\n  return\n}\n",
			[]any{x4}, nil, `func @f: binding 0 (call_packed("vmtest.fail", %x)): call_packed "vmtest.fail": vmtest.fail refuses`},
		{"no communicator", cpu, "module @m\nfunc @f(%x: " + planned + ", %y: " + planned + ") {\n  block {\n    allreduce(%x, sum, %y)\n  }\n  return %y\n}\n",
			[]any{x4, x4}, registry.ErrNoCCL, "binding 0 (allreduce(%x, sum, %y))"},
		{"host tensor for a GPU parameter", fakeGPU, "module @m\nfunc @f(%x: tensor<[4], float32, {cuda:0 scope=\"global\"}>) {\n  return %x\n}\n",
			[]any{x4}, interp.ErrArgs, "want a tensor on cuda:0, got one on cpu"},
		{"wrong function", cpu, "module @m\nfunc @f() {\n  return\n}\n", nil, interp.ErrArgs, "no function @g"},
		{"GPU kernel without device access", fakeGPU, "module @m\nfunc @f() {\n  block {\n    %a = alloc_tensor([2, 2], float32, {cuda:0}, \"global\") : tensor<[2, 2], float32, {cuda:0 scope=\"global\"}>\n    gelu(%a, %a)\n  }\n  return %a\n}\n",
			nil, interp.ErrUnsupported, "binding 1 (gelu(%a, %a))"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := interp.LoadText(c.env, c.text)
			if err != nil {
				t.Fatal(err)
			}
			name := "f"
			if c.name == "wrong function" {
				name = "g"
			}
			_, err = m.Run(c.env, name, c.args)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("got %v, want %v containing %q", err, c.want, c.msg)
			}
		})
	}
}

// TestWorkspaceReuse runs a function twice on one worker: planned storage
// is reused, results are fresh.
func TestWorkspaceReuse(t *testing.T) {
	w := newWorker(t, worker.Config{})
	text := `module @m

func @f(%x: tensor<[2, 3], float32>, %b: tensor<[3], float32>) {
  block {
    %t = alloc_tensor([2, 3], float32, {}, "global") : tensor<[2, 3], float32, {scope="global"}>
    add(%x, %b, %t)
    %y = alloc_tensor([2, 3], float32, {}, "global") : tensor<[2, 3], float32, {scope="global"}>
    gelu(%t, %y)
  }
  return %y
}
`
	m, err := interp.LoadModule(w, compileCPU(t, text))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := fill(tensor.Shape{2, 3}, 1)
	b1, b2 := tensor.MustNew(tensor.Float32, tensor.Shape{3}), tensor.FromSlice([]float32{1, 2, 3})
	r1, err := m.Run(w, "f", []any{x, b1})
	if err != nil {
		t.Fatal(err)
	}
	keep, _ := r1.(*tensor.Tensor).Clone()
	r2, err := m.Run(w, "f", []any{x, b2})
	if err != nil {
		t.Fatal(err)
	}
	if r1.(*tensor.Tensor).Storage() == r2.(*tensor.Tensor).Storage() {
		t.Fatal("two runs returned the same storage")
	}
	if err := tensor.Equal(r1.(*tensor.Tensor), keep); err != nil {
		t.Errorf("the second run changed the first result: %v", err)
	}
	xf, _ := tensor.ToFloat64(x)
	want := make([]float64, 6)
	for i := range want {
		want[i] = kernels.Gelu(xf[i] + float64(i%3+1))
	}
	if err := tensor.CloseTo(r2.(*tensor.Tensor), want, 1e-5, 1e-6); err != nil {
		t.Error(err)
	}
}

// TestCapture: a GPU function (on a fake GPU: views and allocations only)
// captures without allocating inside the capture, and every replay
// returns the warm-up's result; work that would run on the host once
// instead of at every replay is refused; CPU workers cannot capture.
func TestCapture(t *testing.T) {
	fakeGPU := newWorker(t, worker.Config{Device: tensor.CUDADevice(0), OpenDevice: worker.OpenFake})
	gpuText := "module @m\nfunc @f() {\n  block {\n    %s = alloc_storage(64, 16, {cuda:0}, \"global\") : storage<{cuda:0 scope=\"global\"}>\n    %a = alloc_tensor(%s, 0, [2, 2], float32) : tensor<[2, 2], float32, {cuda:0 scope=\"global\"}>\n    %b = reshape(%a, [4]) : tensor<[4], float32, {cuda:0 scope=\"global\"}>\n  }\n  return %b\n}\n"
	m, err := interp.LoadText(fakeGPU, gpuText)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Capture(fakeGPU, "f", nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := g.Replay()
	if err != nil {
		t.Fatal(err)
	}
	r2, err := g.Replay()
	if err != nil {
		t.Fatal(err)
	}
	if r1.(*tensor.Tensor).Storage() != r2.(*tensor.Tensor).Storage() || r1.(*tensor.Tensor).Device() != tensor.CUDADevice(0) {
		t.Errorf("replays returned different results or a host one: %v %v", r1, r2)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Replay(); err == nil {
		t.Error("replay of a released graph succeeded")
	}

	cpu := newWorker(t, worker.Config{})
	x4, _ := fill(tensor.Shape{4}, 1)
	cases := []struct {
		name string
		env  *worker.Worker
		text string
		args []any
		want error
		msg  string
	}{
		{"cpu worker", cpu, "module @m\nfunc @f(%x: " + planned + ", %y: " + planned + ") {\n  block {\n    gelu(%x, %y)\n  }\n  return %y\n}\n",
			[]any{x4, x4}, registry.ErrNoDevice, "graph capture needs a GPU"},
		{"host kernel on a GPU worker", fakeGPU, "module @m\nfunc @f(%x: " + planned + ", %y: " + planned + ") {\n  block {\n    gelu(%x, %y)\n  }\n  return %y\n}\n",
			[]any{x4, x4}, interp.ErrUnsupported, "gelu of host memory in a captured function"},
		{"call_packed", fakeGPU, "module @m\nfunc @f(%x: " + planned + ") {\n  block {\n    %y = call_packed(\"vmtest.scale_by_rank\", %x) : " + planned + "\n  }\n  return %y\n}\n",
			[]any{x4}, interp.ErrUnsupported, `call_packed "vmtest.scale_by_rank" in a captured function`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := interp.LoadText(c.env, c.text)
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Capture(c.env, "f", c.args)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("got %v, want %v containing %q", err, c.want, c.msg)
			}
		})
	}
}
