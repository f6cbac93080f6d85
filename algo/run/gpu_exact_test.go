package run_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// gpu_input(dt, count, seed): runtest.input's values on the worker's GPU.
	registry.MustRegisterTyped("runtest.gpu_input", func(env registry.Env, dt tensor.DType, count, seed int64) (*tensor.Tensor, error) {
		h, err := input(dt, count, uint64(seed), env.WorkerID())
		if err != nil {
			return nil, err
		}
		t, err := env.Alloc(dt, tensor.Shape{count}, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
	registry.MustRegisterTyped("runtest.gpu_poisoned", func(env registry.Env, dt tensor.DType, count int64) (*tensor.Tensor, error) {
		h, err := tensor.New(dt, tensor.Shape{count})
		if err != nil {
			return nil, err
		}
		if err := tensor.Poison(h); err != nil {
			return nil, err
		}
		t, err := env.Alloc(dt, tensor.Shape{count}, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
	registry.MustRegisterTyped("runtest.to_host", func(env registry.Env, t *tensor.Tensor) (*tensor.Tensor, error) {
		return registry.ToHost(env, t)
	})
}

// gpuSession starts n worker processes on the GPUs there are (several
// share one when there are fewer) with the "ipc" backend.
func gpuSession(t *testing.T, n int) *session.Session {
	t.Helper()
	ngpu := gpuCount()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i % ngpu
	}
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: ids}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	if err := s.InitCCL(bg(t), "ipc", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return s
}

// smallestCount is the smallest input element count the plan's layout
// accepts for dt (0 if none up to 64 KiB).
func smallestCount(p *plan.Plan, dt tensor.DType) (int64, int64) {
	es := int64(dt.Size())
	for b := es; b <= 64<<10; b += es {
		in, out := run.Counts(p, dt, b)
		if in*es == b || (p.Collective == plan.AllGather && out*es == b) {
			return in, out
		}
	}
	return 0, 0
}

// TestGPUMatchesCPU runs every library algorithm, the in-place golden
// plan and the hand-built plans with 4-byte alignment (odd counts) on GPU
// workers and on the CPU executor with the same
// random inputs (float32, bfloat16, sum) and wants the same bits: both
// executors reduce an op's sources in source order with float
// accumulation rounded once per op (docs/gpu-executor.md). Sizes: 1
// element (run, or refused with ccl.ErrBadArgs on every rank when the
// layout does not take it), the smallest the layout takes, an odd count
// near 4099 elements and one near 4 MiB (the library plans have no
// maximum message size; 4 MiB keeps the test short on a shared GPU).
// Plans that take send == recv (gpuexec.Buffers.AliasUnsafe) also run in
// place and must give the same bits. Skipped without a GPU.
func TestGPUMatchesCPU(t *testing.T) {
	gputest.Require(t, 1)
	const n = 2
	gs := gpuSession(t, n)
	cs, err := session.NewThreaded(session.Options{NumWorkers: n})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Shutdown()
	f := func(s *session.Session, name string) *session.DRef {
		d, err := s.GetGlobalFunc(bg(t), name)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	gIn, gPoison, gHost := f(gs, "runtest.gpu_input"), f(gs, "runtest.gpu_poisoned"), f(gs, "runtest.to_host")
	cIn, cPoison := f(cs, "runtest.input"), f(cs, "runtest.poisoned")
	call := func(s *session.Session, fn *session.DRef, args ...any) *session.DRef {
		t.Helper()
		r, err := s.CallPacked(fn, args...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	fetch := func(s *session.Session, r *session.DRef, w int) []byte {
		t.Helper()
		v, err := s.DebugGetFromRemote(bg(t), r, w)
		if err != nil {
			t.Fatal(err)
		}
		return v.(*tensor.Tensor).Bytes()
	}
	var plans []*plan.Plan
	for _, name := range library.Names() {
		p, err := library.Build(name, n, library.Options{})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	plans = append(plans, readPlanFile(t, filepath.Join("..", "plan", "testdata", "allreduce_allpairs_2.json")))
	// The hand-built plans with 4-byte alignment take odd element counts
	// per rank (and 1 float32 element for the allgather).
	for _, name := range handplan.Names() {
		p, err := handplan.Build(name, n, handplan.Options{Alignment: 4})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	for _, p := range plans {
		t.Run(p.Name, func(t *testing.T) {
			gc, err := run.LoadGPU(bg(t), gs, p, run.GPUOptions{Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer gc.Close()
			cc, err := run.Load(bg(t), cs, p, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			bufs, err := gpuexec.PlanBuffers(p)
			if err != nil {
				t.Fatal(err)
			}
			inPlaceOK := p.Collective == plan.AllReduce && !bufs.AliasUnsafe(p.InPlace)
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				es := int64(dt.Size())
				type size struct{ in, out int64 }
				var sizes []size
				// One element (of the input; of the output for a
				// reduce-scatter): run when the layout takes it, else every
				// rank refuses it before launch.
				one := map[plan.Collective]size{plan.AllReduce: {1, 1}, plan.AllGather: {1, n}, plan.ReduceScatter: {n, 1}}[p.Collective]
				small, smallOut := smallestCount(p, dt)
				if small == one.in && smallOut == one.out {
					sizes = append(sizes, one)
				} else {
					send, recv := call(gs, gIn, dt, one.in, int64(1)), call(gs, gPoison, dt, one.out)
					if err := gc.Run(bg(t), send, recv, reduce.Sum); err != nil {
						t.Fatal(err)
					}
					if err := gs.Sync(bg(t)); !errors.Is(err, ccl.ErrBadArgs) {
						t.Errorf("%s: 1 element: %v, want ccl.ErrBadArgs", dt, err)
					}
					if small > 0 {
						sizes = append(sizes, size{small, smallOut})
					}
				}
				for _, b := range []int64{4099 * es, 4<<20 + 4099*es} {
					if in, out := run.Counts(p, dt, b); in > 0 {
						sizes = append(sizes, size{in, out})
					}
				}
				for i, sz := range sizes {
					seed := int64(100*i + int(dt))
					gsend, grecv := call(gs, gIn, dt, sz.in, seed), call(gs, gPoison, dt, sz.out)
					csend, crecv := call(cs, cIn, dt, sz.in, seed), call(cs, cPoison, dt, sz.out)
					if err := gc.Run(bg(t), gsend, grecv, reduce.Sum); err != nil {
						t.Fatal(err)
					}
					if err := cc.Run(bg(t), csend, crecv, reduce.Sum); err != nil {
						t.Fatal(err)
					}
					gout := call(gs, gHost, grecv)
					var ginp *session.DRef
					if inPlaceOK {
						inout := call(gs, gIn, dt, sz.in, seed)
						if err := gc.Run(bg(t), inout, inout, reduce.Sum); err != nil {
							t.Fatal(err)
						}
						ginp = call(gs, gHost, inout)
					}
					if err := gs.Sync(bg(t)); err != nil {
						t.Fatalf("%s %d -> %d elements on GPUs: %v", dt, sz.in, sz.out, err)
					}
					if err := cs.Sync(bg(t)); err != nil {
						t.Fatalf("%s %d -> %d elements on the CPU executor: %v", dt, sz.in, sz.out, err)
					}
					for w := range n {
						want := fetch(cs, crecv, w)
						if d := firstDiff(fetch(gs, gout, w), want, int(es)); d >= 0 {
							t.Errorf("%s %d -> %d elements, rank %d: GPU and CPU executors differ first at element %d", dt, sz.in, sz.out, w, d)
						}
						if ginp != nil {
							if d := firstDiff(fetch(gs, ginp, w), want, int(es)); d >= 0 {
								t.Errorf("%s %d elements in place, rank %d: differs from the CPU executor first at element %d", dt, sz.in, w, d)
							}
						}
					}
				}
			}
		})
	}
}

// firstDiff is the first element (of es bytes) where a and b differ, -1
// if none (different lengths differ at the shorter length).
func firstDiff(a, b []byte, es int) int {
	if len(a) != len(b) {
		return min(len(a), len(b)) / es
	}
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i / es
		}
	}
	return -1
}

func readPlanFile(t *testing.T, path string) *plan.Plan {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dropSignals returns p without rank r's signal ops: its peers' waits
// for those signals never complete (the verifier rejects the plan; it is
// loaded with Force).
func dropSignals(t *testing.T, p *plan.Plan, r int) *plan.Plan {
	t.Helper()
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	q, err := plan.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	for ti := range q.GPUs[r].ThreadBlocks {
		tb := &q.GPUs[r].ThreadBlocks[ti]
		var keep []plan.Op
		for _, op := range tb.Ops {
			if op.Name != plan.OpSignal {
				keep = append(keep, op)
			}
		}
		tb.Ops = keep
	}
	return q
}

var waitErrRe = regexp.MustCompile(`plan "[^"]*" rank (\d+) tb (\d+) op (\d+)`)

// TestGPUPlanWaitTimeout: rank 1 of allreduce_oneshot never signals, so
// rank 0's wait for it never completes; with a 1 s timeout the call ends
// with ccl.ErrTimeout naming rank 0, a thread block and the wait op it
// was in; the executor then refuses later calls. Skipped without a GPU.
func TestGPUPlanWaitTimeout(t *testing.T) {
	gputest.Require(t, 1)
	const n = 2
	s := gpuSession(t, n)
	base, err := library.Build("allreduce_oneshot", n, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := dropSignals(t, base, 1)
	if _, err := run.LoadGPU(bg(t), s, p, run.GPUOptions{Timeout: time.Second}); !errors.Is(err, gpuexec.ErrRejected) {
		t.Fatalf("a plan that deadlocks loaded without Force: %v", err)
	}
	c, err := run.LoadGPU(bg(t), s, p, run.GPUOptions{Timeout: time.Second, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	inN, outN := run.Counts(p, tensor.Float32, 4096)
	in, err := s.GetGlobalFunc(bg(t), "runtest.gpu_input")
	if err != nil {
		t.Fatal(err)
	}
	send, err := s.CallPacked(in, tensor.Float32, inN, int64(1))
	if err != nil {
		t.Fatal(err)
	}
	recv, err := s.CallPacked(in, tensor.Float32, outN, int64(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(bg(t), send, recv, reduce.Sum); err != nil {
		t.Fatal(err)
	}
	// Sync waits for the kernels and reports a wait that gave up.
	err = s.Sync(bg(t))
	if !errors.Is(err, ccl.ErrTimeout) {
		t.Fatalf("a wait that never completes: %v, want ccl.ErrTimeout", err)
	}
	m := waitErrRe.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("the error names no rank, thread block and op: %v", err)
	}
	rank, _ := strconv.Atoi(m[1])
	tb, _ := strconv.Atoi(m[2])
	op, _ := strconv.Atoi(m[3])
	if rank != 0 || tb >= len(p.GPUs[0].ThreadBlocks) || op >= len(p.GPUs[0].ThreadBlocks[tb].Ops) || p.GPUs[0].ThreadBlocks[tb].Ops[op].Name != plan.OpWait {
		t.Errorf("the error names rank %d tb %d op %d, want a wait of rank 0: %v", rank, tb, op, err)
	}
	// The executor is spent: the next call fails on every rank before
	// launch, the failed rank's peers included (they learn it in the
	// host exchange instead of waiting).
	if err := c.Run(bg(t), send, recv, reduce.Sum); err != nil {
		t.Fatal(err)
	}
	err = s.Sync(bg(t))
	for w := range n {
		if !errors.Is(err, ccl.ErrFailed) || !strings.Contains(err.Error(), fmt.Sprintf("worker %d", w)) {
			t.Errorf("a call after the timeout: %v, want ccl.ErrFailed on worker %d", err, w)
		}
	}
	c.Close()
	if err := s.Sync(bg(t)); err != nil {
		t.Logf("sync after close: %v", err)
	}
}
