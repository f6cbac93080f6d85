package interp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/compiler/ir"
	vmplans "github.com/chorus-rt/chorus/compiler/vm/plans"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// fakePlans replaces the GPU executor with a runner that all-reduces on
// the session's "cpu" communicator and records what the VM asked for.
type fakePlans struct {
	mu    sync.Mutex
	made  []string // "worker plan-name ranks device"
	calls map[string]int
}

type fakeRunner struct {
	f    *fakePlans
	env  registry.Env
	name string
}

func (r *fakeRunner) Run(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	r.f.mu.Lock()
	r.f.calls[fmt.Sprintf("%d %s %s", r.env.WorkerID(), r.name, op)]++
	r.f.mu.Unlock()
	c, err := registry.Comm(r.env, false)
	if err != nil {
		return err
	}
	return c.AllReduce(ctx, send, recv, op)
}

func (r *fakeRunner) Close() error { return nil }

func useFakePlans(t *testing.T) *fakePlans {
	f := &fakePlans{calls: map[string]int{}}
	old := newPlanRunner
	newPlanRunner = func(env registry.Env, p *plan.Plan, dev tensor.Device) (planRunner, error) {
		f.mu.Lock()
		f.made = append(f.made, fmt.Sprintf("%d %s %d %v", env.WorkerID(), p.Name, p.NumRanks(), dev))
		f.mu.Unlock()
		return &fakeRunner{f: f, env: env, name: p.Name}, nil
	}
	t.Cleanup(func() { newPlanRunner = old })
	return f
}

// planModule all-reduces x through plan a into o1 and o3 and y through
// plan b into o2, on the host (the fake runs there).
func planModule(a, b string) string {
	return fmt.Sprintf(`module @plans

func @f(%%x: tensor<[6], float32, {cpu:0 scope="ipc_memory"}>, %%y: tensor<[6], float32, {cpu:0 scope="ipc_memory"}>) {
  block {
    %%o1 = alloc_tensor([6], float32, {cpu:0}, "global") : tensor<[6], float32, {cpu:0 scope="global"}>
    custom_allreduce(%%x, %q, %%o1)
    %%o2 = alloc_tensor([6], float32, {cpu:0}, "global") : tensor<[6], float32, {cpu:0 scope="global"}>
    custom_allreduce(%%y, %q, %%o2)
    %%o3 = alloc_tensor([6], float32, {cpu:0}, "global") : tensor<[6], float32, {cpu:0 scope="global"}>
    custom_allreduce(%%x, %q, %%o3)
  }
  return %%o1, %%o2, %%o3
}
`, a, b, a)
}

func writePlan(t *testing.T, p *plan.Plan) string {
	t.Helper()
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), p.Name+".json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// loaded is a module loaded on every worker of a session through the
// interpreter's functions, with its plans resolved and sent along the way
// compiler/vm.Load does.
type loaded struct {
	handle, run, result *session.DRef
}

func loadWithPlans(t *testing.T, ctx context.Context, s *session.Session, m *ir.Module) loaded {
	t.Helper()
	args := []any{m.String()}
	for _, spec := range vmplans.Specs(m) {
		p, err := vmplans.Resolve(spec, s.NumWorkers())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, spec, raw)
	}
	var l loaded
	fn := func(name string) *session.DRef {
		f, err := s.GetGlobalFunc(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Release() })
		return f
	}
	load := fn(LoadFunc)
	l.run, l.result = fn(RunFunc), fn(ResultFunc)
	h, err := s.CallPacked(load, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Release() })
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	l.handle = h
	return l
}

// A custom_allreduce naming a plan (a library algorithm, a plan file)
// loads one runner per plan on every worker at load, with the plan built
// for the session's size (and sent along as compiler/vm.Load sends it),
// and every call of the plan runs it with sum; results come back in the
// right outputs.
func TestCustomAllreducePlanFake(t *testing.T) {
	leaktest.Check(t)
	f := useFakePlans(t)
	ctx := testCtx(t)
	const n = 3
	s, err := session.NewThreaded(session.Options{NumWorkers: n})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "cpu", 0); err != nil {
		t.Fatal(err)
	}
	ring, err := library.Build("allreduce_ring", n, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	file := writePlan(t, ring)
	m, err := ir.Parse(planModule("allreduce_packet", file))
	if err != nil {
		t.Fatal(err)
	}
	prog := loadWithPlans(t, ctx, s, m)
	fill, err := s.GetGlobalFunc(ctx, "vmtest.fill")
	if err != nil {
		t.Fatal(err)
	}
	scale, err := s.GetGlobalFunc(ctx, "vmtest.scale_by_rank")
	if err != nil {
		t.Fatal(err)
	}
	input := func(seed int64) *session.DRef {
		v, err := s.CallPacked(fill, tensor.Shape{6}, seed)
		if err != nil {
			t.Fatal(err)
		}
		x, err := s.CallPacked(scale, v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	res, err := s.CallPacked(prog.run, prog.handle, "f", input(1), input(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for i, seed := range []int64{1, 2, 1} {
		r, err := s.CallPacked(prog.result, res, i)
		if err != nil {
			t.Fatal(err)
		}
		base, _ := fillHost(seed)
		want := make([]float64, len(base))
		for j := range base {
			want[j] = base[j] * n * (n + 1) / 2
		}
		for w := range n {
			v, err := s.DebugGetFromRemote(ctx, r, w)
			if err != nil {
				t.Fatal(err)
			}
			if err := tensor.CloseTo(v.(*tensor.Tensor), want, 1e-6, 1e-6); err != nil {
				t.Errorf("output %d, worker %d: %v", i+1, w, err)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.made) != 2*n {
		t.Errorf("runners made: %v, want 2 per worker", f.made)
	}
	for w := range n {
		for _, want := range []string{fmt.Sprintf("%d %s %d cpu", w, "allreduce_packet", n), fmt.Sprintf("%d %s %d cpu", w, ring.Name, n)} {
			if !strings.Contains(strings.Join(f.made, "\n"), want) {
				t.Errorf("no runner %q in %v", want, f.made)
			}
		}
		if c := f.calls[fmt.Sprintf("%d allreduce_packet sum", w)]; c != 2 {
			t.Errorf("worker %d: allreduce_packet ran %d times, want 2 (%v)", w, c, f.calls)
		}
	}
}

func fillHost(seed int64) ([]float64, error) {
	x := tensor.MustNew(tensor.Float32, tensor.Shape{6})
	if err := tensor.RandomRange(x, uint64(seed), -1, 1); err != nil {
		return nil, err
	}
	return tensor.ToFloat64(x)
}
