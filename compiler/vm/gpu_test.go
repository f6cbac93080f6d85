package vm_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// fill_on(shape, dtype, seed): uniform [-1, 1) values of dtype on the
	// worker's device (the same values on every worker).
	registry.MustRegisterTyped("vmtest.fill_on", func(env registry.Env, shape tensor.Shape, dt tensor.DType, seed int64) (*tensor.Tensor, error) {
		h, err := tensor.New(dt, shape)
		if err != nil {
			return nil, err
		}
		if err := tensor.RandomRange(h, uint64(seed), -1, 1); err != nil {
			return nil, err
		}
		t, err := env.Alloc(dt, shape, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
}

// gpuCount is the number of GPUs, or skips the test.
func gpuCount(t *testing.T) int {
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "cuInit: %v", err)
	}
	n, err := d.DeviceCount()
	if err != nil || n < 1 {
		gputest.Skipf(t, "no GPU: %d, %v", n, err)
	}
	return n
}

// TestGPUKernels runs y = gelu(x·w + b) through cuBLAS and the NVRTC
// kernels on cuda:0 in float32, float16 and bfloat16, against a float64
// reference of the same inputs.
func TestGPUKernels(t *testing.T) {
	gpuCount(t)
	ctx := bg(t)
	s, err := session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: 1, DeviceIDs: []int{0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	fillOn := mustFunc(t, s, "vmtest.fill_on")
	cuda0, _ := vdevice.New(vdevice.CUDA, 0, nil, "")
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			const m, k, n = 5, 70, 33
			b := ir.NewFunc("f")
			x := b.Param("x", ir.Tensor(tensor.Shape{m, k}, dt, cuda0))
			w := b.Param("w", ir.Tensor(tensor.Shape{k, n}, dt, cuda0))
			bias := b.Param("b", ir.Tensor(tensor.Shape{n}, dt, cuda0))
			h := b.AllocTensor("h", tensor.Shape{m, n}, dt, vdevice.Unconstrained, "")
			b.Matmul(x, w, h)
			hb := b.AllocTensor("hb", tensor.Shape{m, n}, dt, vdevice.Unconstrained, "")
			b.Add(h, bias, hb)
			y := b.AllocTensor("y", tensor.Shape{m, n}, dt, vdevice.Unconstrained, "")
			b.Gelu(hb, y)
			b.Return(y)
			f, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			p, err := vm.Pipeline(tensor.CUDADevice(0), "auto")
			if err != nil {
				t.Fatal(err)
			}
			mod, err := p.Run(&ir.Module{Name: "k", Funcs: []*ir.Function{f}}, passes.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			prog, err := vm.Load(ctx, s, mod)
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Release()
			xs := mustCall(t, s, fillOn, tensor.Shape{m, k}, dt, int64(1))
			ws := mustCall(t, s, fillOn, tensor.Shape{k, n}, dt, int64(2))
			bs := mustCall(t, s, fillOn, tensor.Shape{n}, dt, int64(3))
			r, err := prog.Call(ctx, "f", xs, ws, bs)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := s.DebugGetFromRemote(ctx, r, 0)
			if err != nil {
				t.Fatal(err)
			}
			in := func(shape tensor.Shape, seed uint64) []float64 {
				h := tensor.MustNew(dt, shape)
				if err := tensor.RandomRange(h, seed, -1, 1); err != nil {
					t.Fatal(err)
				}
				v, _ := tensor.ToFloat64(h)
				return v
			}
			xf, wf, bf := in(tensor.Shape{m, k}, 1), in(tensor.Shape{k, n}, 2), in(tensor.Shape{n}, 3)
			want := make([]float64, m*n)
			for i := range m {
				for j := range n {
					acc := 0.0
					for p := range k {
						acc += xf[i*k+p] * wf[p*n+j]
					}
					// The kernels round h and hb to dt, as the VM's stores do.
					want[i*n+j] = vm.Gelu(round(dt, round(dt, acc)+bf[j]))
				}
			}
			rtol, atol := 1e-4, 1e-4
			if dt != tensor.Float32 {
				rtol, atol = 2e-2, 2e-2
			}
			if err := tensor.CloseTo(got.(*tensor.Tensor), want, rtol, atol); err != nil {
				t.Error(fmt.Errorf("%s: %w", dt, err))
			}
		})
	}
}

// round rounds v to dt's precision.
func round(dt tensor.DType, v float64) float64 {
	switch dt {
	case tensor.Float16:
		return tensor.F16FromFloat64(v).Float64()
	case tensor.BFloat16:
		return tensor.BF16FromFloat64(v).Float64()
	case tensor.Float32:
		return float64(float32(v))
	}
	return v
}

// TestGPUCustomAllreducePlan compiles out = allreduce(x + x) with
// ipc-allreduce-rewrite=plan:NAME and runs it on 2 GPU workers (processes
// sharing the GPUs there are, InitCCL "ipc"): the custom all-reduce runs
// the named plan on the GPU executor, eager and replayed from a CUDA
// graph, and every worker gets n*2x exactly (x + x and sums of equal
// values scale by powers of two). Skipped without a GPU.
func TestGPUCustomAllreducePlan(t *testing.T) {
	ngpu := gpuCount(t)
	ctx := bg(t)
	const n = 2
	tracePath := filepath.Join(t.TempDir(), "vm.json")
	s, err := session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: []int{0, 1 % ngpu}, Trace: tracePath}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
		// The VM's kernel and the plan's kernels are timed on each
		// worker's stream when eager: the call and Capture's eager
		// first run, per plan (the capture itself records no marks).
		checkGPUSpans(t, tracePath, n, map[string]int{"add": 4, "allreduce plan allreduce_packet": 2, "allreduce plan allreduce_twoshot": 2})
	}()
	if err := s.InitCCL(ctx, "ipc", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	fillOn := mustFunc(t, s, "vmtest.fill_on")
	for _, c := range []struct {
		plan string
		dt   tensor.DType
	}{{"allreduce_packet", tensor.BFloat16}, {"allreduce_twoshot", tensor.Float32}} {
		t.Run(c.plan, func(t *testing.T) {
			p, err := library.Build(c.plan, n, library.Options{})
			if err != nil {
				t.Fatal(err)
			}
			count, _ := run.Counts(p, c.dt, 4096+6)
			mod := planProgram(t, c.plan, count, c.dt)
			prog, err := vm.Load(ctx, s, mod)
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Release()
			xs := mustCall(t, s, fillOn, tensor.Shape{count}, c.dt, int64(7))
			h := tensor.MustNew(c.dt, tensor.Shape{count})
			if err := tensor.RandomRange(h, 7, -1, 1); err != nil {
				t.Fatal(err)
			}
			xv, _ := tensor.ToFloat64(h)
			want := make([]float64, count)
			for i, v := range xv {
				want[i] = 2 * n * v
			}
			check := func(what string, r *session.DRef) {
				t.Helper()
				if err := s.Sync(ctx); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				for w := range n {
					got, err := s.DebugGetFromRemote(ctx, r, w)
					if err != nil {
						t.Fatal(err)
					}
					if err := tensor.CloseTo(got.(*tensor.Tensor), want, 0, 0); err != nil {
						t.Errorf("%s, worker %d: %v", what, w, err)
					}
				}
			}
			r, err := prog.Call(ctx, "f", xs)
			if err != nil {
				t.Fatal(err)
			}
			check("eager", r)
			g, err := prog.Capture(ctx, "f", xs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				r, err := prog.Replay(ctx, g)
				if err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("replay %d", i), r)
			}
		})
	}
}

// planProgram compiles out = allreduce(x + x) for GPU workers with the
// custom all-reduce naming plan.
func planProgram(t *testing.T, plan string, count int64, dt tensor.DType) *ir.Module {
	t.Helper()
	cuda0, _ := vdevice.New(vdevice.CUDA, 0, nil, "")
	b := ir.NewFunc("f")
	x := b.Param("x", ir.Tensor(tensor.Shape{count}, dt, cuda0))
	a := b.AllocTensor("a", tensor.Shape{count}, dt, vdevice.Unconstrained, "")
	b.Add(x, x, a)
	out := b.AllocTensor("out", tensor.Shape{count}, dt, vdevice.Unconstrained, "")
	b.Allreduce(a, "sum", out)
	b.Return(out)
	f, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := vm.Pipeline(tensor.CUDADevice(0), "plan:"+plan)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := pipe.Run(&ir.Module{Name: "k", Funcs: []*ir.Function{f}}, passes.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

// vm.Pipeline with a strategy plan:NAME leaves a custom_allreduce naming
// the plan on IPC memory (no GPU needed).
func TestPipelinePlanStrategy(t *testing.T) {
	mod := planProgram(t, "allreduce_packet", 1000, tensor.BFloat16)
	text := mod.String()
	for _, want := range []string{`custom_allreduce(%a, "allreduce_packet", %out)`, `call_packed("chorus.ipc.alloc_storage", 2000, `} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	pipe, err := vm.Pipeline(tensor.CUDADevice(0), "plan:")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipe.Run(mod, passes.RunOptions{}); !errors.Is(err, passes.ErrBadOption) {
		t.Errorf("an empty plan name: %v, want ErrBadOption", err)
	}
}

// checkGPUSpans reads the trace at path and wants, on every worker's GPU
// stream track, want[name] timed spans of each name.
func checkGPUSpans(t *testing.T, path string, workers int, want map[string]int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := trace.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(f); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range f.Events {
		if e.Cat == trace.CatGPU {
			got[e.Track.Process+"/"+e.Name]++
			if e.Dur <= 0 {
				t.Errorf("gpu span without device time: %+v", e)
			}
		}
	}
	t.Logf("gpu spans: %v", got)
	for w := range workers {
		for name, n := range want {
			if k := got[trace.ProcWorkerGPU(w)+"/"+name]; k != n {
				t.Errorf("worker %d: %d %q spans, want %d", w, k, name, n)
			}
		}
	}
}
