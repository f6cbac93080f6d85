package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
)

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

// Plans that cannot serve are refused at Load on the controller, before
// any worker is asked; the real runner refuses host memory.
func TestCustomAllreducePlanRefused(t *testing.T) {
	leaktest.Check(t)
	ctx := testCtx(t)
	s, err := session.NewThreaded(session.Options{NumWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "cpu", 0); err != nil {
		t.Fatal(err)
	}
	three, err := library.Build("allreduce_ring", 3, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gather, err := library.Build("allgather_ring", 2, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	racy, err := library.Build("allreduce_twoshot", 2, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for gi := range racy.GPUs {
		for ti := range racy.GPUs[gi].ThreadBlocks {
			tb := &racy.GPUs[gi].ThreadBlocks[ti]
			var keep []plan.Op
			for _, op := range tb.Ops {
				if op.Name != plan.OpWait {
					keep = append(keep, op)
				}
			}
			tb.Ops = keep
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"name": `), 0o644)
	for _, c := range []struct {
		spec string
		want error
		msg  string
	}{
		{"allreduce_fastest", ErrLoad, "neither a library algorithm"},
		{bad, ErrLoad, "bad.json"},
		{writePlan(t, three), ccl.ErrBadArgs, "3 ranks"},
		{writePlan(t, gather), ErrLoad, "needs an allreduce"},
		{writePlan(t, racy), gpuexec.ErrRejected, ""},
	} {
		m, err := ir.Parse(planModule(c.spec, c.spec))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Load(ctx, s, m)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrLoad) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("plan %q: %v; want %v containing %q", c.spec, err, c.want, c.msg)
		}
	}
	// A good plan on host memory: the GPU executor refuses it on every
	// worker (worker errors reach the controller as text).
	m, err := ir.Parse(planModule("allreduce_packet", "allreduce_oneshot"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, s, m); err == nil || !strings.Contains(err.Error(), ErrUnsupported.Error()+": custom_allreduce of host memory: plans run on GPUs") {
		t.Errorf("plan on host memory: %v, want ErrUnsupported", err)
	}
}
