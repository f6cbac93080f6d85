package vm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

// TestMain turns this test binary into a worker when a process session
// starts it.
func TestMain(m *testing.M) {
	worker.Main()
	os.Exit(m.Run())
}

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

func bg(t *testing.T) context.Context { return bgFor(t, 60*time.Second) }

// bgFor is bg with a deadline of d, for tests whose subtests share one
// session and together take longer (the CPU references of long caches).
func bgFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// opsModule exercises every op the VM runs on a CPU, for n workers:
//
//	g   = gelu(x·w + b)                 (views of one storage, a plain alloc)
//	sc  = g * (rank+1)                  (a packed call)
//	sum = allreduce(sc) = g·n(n+1)/2
//	all = allgather(reshape(sum))       ([24n])
//	y   = device_copy(broadcast(reduce_scatter(all, max)))  = reshape(sum)
func opsModule(n int) string {
	return fmt.Sprintf(`module @ops

func @f(%%x: tensor<[4, 8], float32>, %%w: tensor<[8, 6], float32>, %%b: tensor<[6], float32>) {
  block {
    %%s = alloc_storage(256, 64, {}, "global") : storage<{scope="global"}>
    %%h = alloc_tensor(%%s, 0, [4, 6], float32) : tensor<[4, 6], float32, {scope="global"}>
    matmul(%%x, %%w, %%h)
    %%hb = alloc_tensor(%%s, 128, [4, 6], float32) : tensor<[4, 6], float32, {scope="global"}>
    add(%%h, %%b, %%hb)
    %%g = alloc_tensor([4, 6], float32, {}, "global") : tensor<[4, 6], float32, {scope="global"}>
    gelu(%%hb, %%g)
    %%sc = call_packed("vmtest.scale_by_rank", %%g) : tensor<[4, 6], float32>
    %%sum = alloc_tensor([4, 6], float32, {}, "global") : tensor<[4, 6], float32, {scope="global"}>
    allreduce(%%sc, sum, %%sum)
    %%flat = reshape(%%sum, [24]) : tensor<[24], float32, {scope="global"}>
    %%all = alloc_tensor([%d], float32, {}, "global") : tensor<[%d], float32, {scope="global"}>
    allgather(%%flat, %%all)
    %%part = alloc_tensor([24], float32, {}, "global") : tensor<[24], float32, {scope="global"}>
    reduce_scatter(%%all, max, %%part)
    %%bc = alloc_tensor([24], float32, {}, "global") : tensor<[24], float32, {scope="global"}>
    broadcast(%%part, %%bc)
    %%y = alloc_tensor([24], float32, {}, "global") : tensor<[24], float32, {scope="global"}>
    device_copy(%%bc, {cpu}, {cpu}, %%y)
    %%y2 = %%y : tensor<[24], float32, {scope="global"}>
  }
  return %%y2, %%all
}
`, 24*n, 24*n)
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

// wantOps is what opsModule returns for inputs of seeds 1, 2, 3 on n
// workers, in float64.
func wantOps(t *testing.T, n int, seed int64) []float64 {
	t.Helper()
	get := func(s tensor.Shape, seed int64) []float64 {
		x, err := fill(s, seed)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := tensor.ToFloat64(x)
		return v
	}
	x, w, b := get(tensor.Shape{4, 8}, seed), get(tensor.Shape{8, 6}, seed+1), get(tensor.Shape{6}, seed+2)
	out := make([]float64, 24)
	for i := range 4 {
		for j := range 6 {
			acc := b[j]
			for k := range 8 {
				acc += x[i*8+k] * w[k*6+j]
			}
			out[i*6+j] = vm.Gelu(acc) * float64(n*(n+1)/2)
		}
	}
	return out
}

type sessionKind struct {
	name  string
	start func(t *testing.T, n int) *session.Session
}

var sessionKinds = []sessionKind{
	{"threaded", func(t *testing.T, n int) *session.Session {
		s, err := session.NewThreaded(session.Options{NumWorkers: n})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"process", func(t *testing.T, n int) *session.Session {
		s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

func mustFunc(t *testing.T, s *session.Session, name string) *session.DRef {
	t.Helper()
	f, err := s.GetGlobalFunc(bg(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustCall(t *testing.T, s *session.Session, f *session.DRef, args ...any) *session.DRef {
	t.Helper()
	r, err := s.CallPacked(f, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestOpsInSessions runs opsModule on 1, 2 and 4 workers of threaded and
// process sessions, twice (the second run reuses the workspace and must
// not disturb the first run's results).
func TestOpsInSessions(t *testing.T) {
	for _, k := range sessionKinds {
		for _, n := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/%d", k.name, n), func(t *testing.T) {
				leaktest.Check(t)
				ctx := bg(t)
				s := k.start(t, n)
				defer func() {
					if err := s.Shutdown(); err != nil {
						t.Error(err)
					}
				}()
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
				prog, err := vm.Load(ctx, s, compileCPU(t, opsModule(n)))
				if err != nil {
					t.Fatal(err)
				}
				defer prog.Release()
				fillF := mustFunc(t, s, "vmtest.fill")
				run := func(seed int64) (*session.DRef, *session.DRef) {
					x := mustCall(t, s, fillF, tensor.Shape{4, 8}, seed)
					w := mustCall(t, s, fillF, tensor.Shape{8, 6}, seed+1)
					b := mustCall(t, s, fillF, tensor.Shape{6}, seed+2)
					res, err := prog.Call(ctx, "f", x, w, b)
					if err != nil {
						t.Fatal(err)
					}
					y, err := prog.Result(res, 0)
					if err != nil {
						t.Fatal(err)
					}
					all, err := prog.Result(res, 1)
					if err != nil {
						t.Fatal(err)
					}
					return y, all
				}
				y1, all1 := run(1)
				y2, _ := run(10)
				if err := s.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					ref  *session.DRef
					seed int64
				}{{y1, 1}, {y2, 10}} {
					want := wantOps(t, n, c.seed)
					for w := range n {
						v, err := s.DebugGetFromRemote(ctx, c.ref, w)
						if err != nil {
							t.Fatal(err)
						}
						if err := tensor.CloseTo(v.(*tensor.Tensor), want, 1e-5, 1e-5); err != nil {
							t.Errorf("seed %d, worker %d: %v", c.seed, w, err)
						}
					}
				}
				v, err := s.DebugGetFromRemote(ctx, all1, n-1)
				if err != nil {
					t.Fatal(err)
				}
				want := wantOps(t, n, 1)
				var wantAll []float64
				for range n {
					wantAll = append(wantAll, want...)
				}
				if err := tensor.CloseTo(v.(*tensor.Tensor), wantAll, 1e-5, 1e-5); err != nil {
					t.Errorf("allgather result: %v", err)
				}
			})
		}
	}
}

// TestCallErrors checks what the controller rejects and what workers
// report.
func TestCallErrors(t *testing.T) {
	leaktest.Check(t)
	ctx := bg(t)
	s, err := session.NewThreaded(session.Options{NumWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "cpu", 0); err != nil {
		t.Fatal(err)
	}
	prog, err := vm.Load(ctx, s, compileCPU(t, opsModule(2)))
	if err != nil {
		t.Fatal(err)
	}
	fillF := mustFunc(t, s, "vmtest.fill")
	x := mustCall(t, s, fillF, tensor.Shape{4, 8}, int64(1))
	w := mustCall(t, s, fillF, tensor.Shape{8, 6}, int64(2))
	bad := mustCall(t, s, fillF, tensor.Shape{7}, int64(3))
	// Rejected on the controller, before anything is sent.
	for _, c := range []struct {
		name string
		args []any
		want string
	}{
		{"nope", []any{x, w, x}, "module @ops has [@f]"},
		{"f", []any{x, w}, "2 arguments, the function takes 3"},
		{"f", []any{x, w, 3}, "pass a DRef"},
	} {
		if _, err := prog.Call(ctx, c.name, c.args...); !errors.Is(err, vm.ErrArgs) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Call(%s, %v): %v, want ErrArgs with %q", c.name, c.args, err, c.want)
		}
	}
	// Rejected on the workers: a shape that does not match.
	if _, err := prog.Call(ctx, "f", x, w, bad); err != nil {
		t.Fatal(err)
	}
	err = s.Sync(ctx)
	if !errors.Is(err, session.ErrBadArgs) || !strings.Contains(err.Error(), "argument 2 (%b): want float32(6,), got float32(7,)") {
		t.Errorf("bad shape: %v", err)
	}
	// A module that fails to load names the worker and the binding.
	_, err = vm.Load(ctx, s, compileCPU(t, strings.Replace(opsModule(2), "vmtest.scale_by_rank", "vmtest.no_such", 1)))
	if err == nil || !strings.Contains(err.Error(), `(call_packed): vm: cannot load module: call_packed: unknown function "vmtest.no_such"`) {
		t.Errorf("load with an unknown function: %v", err)
	}
	if err := prog.Release(); err != nil {
		t.Error(err)
	}
	if _, err := prog.Call(ctx, "f", x, w, x); !errors.Is(err, session.ErrReleased) {
		t.Errorf("call after Release: %v", err)
	}
}

func TestPipeline(t *testing.T) {
	for _, c := range []struct {
		dev  tensor.Device
		want []string
	}{
		{tensor.CPUDevice, []string{"plan-devices", "plan-memory"}},
		{tensor.CUDADevice(3), []string{"plan-devices", "ipc-allreduce-rewrite", "plan-memory", "lower-gpu-ipc-alloc-storage"}},
	} {
		p, err := vm.Pipeline(c.dev, "one_shot")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, pass := range p.Passes {
			got = append(got, pass.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%v: %v, want %v", c.dev, got, c.want)
		}
	}
	if _, err := vm.Pipeline(tensor.Device{}, ""); !errors.Is(err, vm.ErrUnsupported) {
		t.Errorf("invalid device: %v", err)
	}
}
