package run_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
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

// input is rank r's input: every worker regenerates any rank's input from
// the seed, so outputs are checked on the workers against a float64
// reference without data leaving them.
func input(dt tensor.DType, count int64, seed uint64, r int) (*tensor.Tensor, error) {
	t, err := tensor.New(dt, tensor.Shape{count})
	if err != nil {
		return nil, err
	}
	return t, tensor.Random(t, seed+uint64(r)*7919)
}

func fold(op reduce.Op, acc, v float64, first bool) float64 {
	switch {
	case first:
		return v
	case op == reduce.Min:
		return math.Min(acc, v)
	case op == reduce.Max:
		return math.Max(acc, v)
	}
	return acc + v
}

func init() {
	registry.MustRegisterTyped("runtest.input", func(env registry.Env, dt tensor.DType, count int64, seed int64) (*tensor.Tensor, error) {
		return input(dt, count, uint64(seed), env.WorkerID())
	})
	registry.MustRegisterTyped("runtest.poisoned", func(dt tensor.DType, count int64) (*tensor.Tensor, error) {
		t, err := tensor.New(dt, tensor.Shape{count})
		if err != nil {
			return nil, err
		}
		return t, tensor.Poison(t)
	})
	// check(recv, collective, op, count, seed): recv against the float64
	// reference of the collective over every rank's input.
	registry.MustRegisterTyped("runtest.check", func(env registry.Env, recv *tensor.Tensor, coll, opName string, count, seed int64) error {
		op, err := reduce.ParseOp(opName)
		if err != nil {
			return err
		}
		n, r := env.NumWorkers(), env.WorkerID()
		vals := make([][]float64, n)
		for q := range n {
			in, err := input(recv.DType(), count, uint64(seed), q)
			if err != nil {
				return err
			}
			if vals[q], err = tensor.ToFloat64(in); err != nil {
				return err
			}
		}
		var want []float64
		switch plan.Collective(coll) {
		case plan.AllGather:
			for q := range n {
				want = append(want, vals[q]...)
			}
		case plan.ReduceScatter:
			blk := int(count) / n
			want = make([]float64, blk)
			for i := range want {
				for q := range n {
					want[i] = fold(op, want[i], vals[q][r*blk+i], q == 0)
				}
			}
		default:
			want = make([]float64, count)
			for i := range want {
				for q := range n {
					want[i] = fold(op, want[i], vals[q][i], q == 0)
				}
			}
		}
		if pc, err := tensor.PoisonCount(recv); err != nil || pc != 0 {
			return fmt.Errorf("rank %d: %d output elements never written (%v)", r, pc, err)
		}
		rtol, atol := tensor.DefaultTolerance(recv.DType())
		return tensor.CloseTo(recv, want, rtol, atol*float64(n))
	})
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newSession(t *testing.T, kind string, n int) *session.Session {
	t.Helper()
	var s *session.Session
	var err error
	switch kind {
	case "threaded":
		s, err = session.NewThreaded(session.Options{NumWorkers: n})
	default:
		s, err = session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n}})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

func fn(t *testing.T, s *session.Session, name string) *session.DRef {
	t.Helper()
	f, err := s.GetGlobalFunc(bg(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type tcase struct {
	dt    tensor.DType
	op    reduce.Op
	count int64
}

// check runs c once per case on fresh rank-dependent inputs and poisoned
// outputs, and checks every worker's output.
func check(t *testing.T, s *session.Session, c *run.Collective, cases []tcase) {
	t.Helper()
	ctx := bg(t)
	mk, pois, chk := fn(t, s, "runtest.input"), fn(t, s, "runtest.poisoned"), fn(t, s, "runtest.check")
	p := c.Plan()
	n := int64(s.NumWorkers())
	for i, tc := range cases {
		outN := tc.count
		switch p.Collective {
		case plan.AllGather:
			outN *= n
		case plan.ReduceScatter:
			outN /= n
		}
		seed := int64(1000*i + 17)
		send, err := s.CallPacked(mk, tc.dt, tc.count, seed)
		if err != nil {
			t.Fatal(err)
		}
		recv, err := s.CallPacked(pois, tc.dt, outN)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx, send, recv, tc.op); err != nil {
			t.Fatal(err)
		}
		if err := s.CallPackedDiscard(chk, recv, string(p.Collective), tc.op.String(), tc.count, seed); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Errorf("plan %q %s %s x %d: %v", p.Name, tc.op, tc.dt, tc.count, err)
		}
		send.Release()
		recv.Release()
	}
}

// cases returns dtype x op x counts, skipping counts the plan refuses.
func cases(p *plan.Plan, dts []tensor.DType, ops []reduce.Op, sizes []int64) []tcase {
	var out []tcase
	for _, dt := range dts {
		for _, op := range ops {
			if len(p.GPUs) > 0 && !reduces(p) && op != reduce.Sum {
				continue
			}
			for _, b := range sizes {
				in, _ := run.Counts(p, dt, b*int64(dt.Size()))
				if in > 0 {
					out = append(out, tcase{dt, op, in})
				}
			}
		}
	}
	return out
}

func reduces(p *plan.Plan) bool {
	return p.Collective == plan.AllReduce || p.Collective == plan.ReduceScatter
}

var (
	allDTypes = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Int32}
	allOps    = []reduce.Op{reduce.Sum, reduce.Min, reduce.Max}
)

// handPlans are the hand-built plans for n ranks, with options that make
// odd element counts possible.
func handPlans(t *testing.T, n int) []*plan.Plan {
	var ps []*plan.Plan
	for _, b := range []func() (*plan.Plan, error){
		func() (*plan.Plan, error) { return handplan.AllPairsAllReduce(n, handplan.Options{}) },
		func() (*plan.Plan, error) {
			return handplan.AllPairsAllReduce(n, handplan.Options{TBs: 2, Alignment: 4})
		},
		func() (*plan.Plan, error) { return handplan.AllPairsAllReduce(n, handplan.Options{LL: true}) },
		func() (*plan.Plan, error) { return handplan.AllPairsAllGather(n, handplan.Options{Alignment: 2}) },
		func() (*plan.Plan, error) {
			return handplan.AllPairsReduceScatter(n, handplan.Options{TBs: 3, Alignment: 4})
		},
	} {
		p, err := b()
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

func TestThreaded(t *testing.T) {
	leaktest.Check(t)
	for n := 2; n <= 8; n++ {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			s := newSession(t, "threaded", n)
			for _, p := range handPlans(t, n) {
				c, err := run.Load(bg(t), s, p, 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				// Element counts: 1, odd ones, and larger.
				sizes := []int64{1, 7, int64(16 * n), 1001, 1 << 14}
				if n > 4 {
					sizes = []int64{7, 1001}
				}
				check(t, s, c, cases(p, allDTypes, allOps, sizes))
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestProcess(t *testing.T) {
	leaktest.Check(t)
	for n := 2; n <= 4; n++ {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			s := newSession(t, "process", n)
			for i, p := range handPlans(t, n) {
				c, err := run.Load(bg(t), s, p, 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				dts := allDTypes[i%2 : i%2+3]
				check(t, s, c, cases(p, dts, allOps[:2+i%2], []int64{7, int64(48 * n), 1 << 16}))
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The MSCCL++-format golden plan, retargeted to every op.
func TestGoldenPlan(t *testing.T) {
	leaktest.Check(t)
	data, err := os.ReadFile(filepath.Join("..", "plan", "testdata", "allreduce_allpairs_2.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"threaded", "process"} {
		t.Run(kind, func(t *testing.T) {
			s := newSession(t, kind, 2)
			for _, op := range allOps {
				q, err := cpuexec.WithReduceOp(p, op)
				if err != nil {
					t.Fatal(err)
				}
				c, err := run.Load(bg(t), s, q, 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				check(t, s, c, cases(q, allDTypes, []reduce.Op{op}, []int64{8, 1000, 1 << 15}))
				c.Close()
			}
		})
	}
}

// Mismatched sizes across workers, sizes the plan refuses and a sum plan
// asked for max: errors at Sync on every worker, never a hang, and the
// collective is usable afterwards.
func TestErrors(t *testing.T) {
	leaktest.Check(t)
	for _, kind := range []string{"threaded", "process"} {
		t.Run(kind, func(t *testing.T) {
			s := newSession(t, kind, 3)
			p, err := handplan.AllPairsAllReduce(3, handplan.Options{Reduce: plan.ReduceSum})
			if err != nil {
				t.Fatal(err)
			}
			ctx := bg(t)
			c, err := run.Load(ctx, s, p, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ranked := fn(t, s, "runtest.ranked")
			for _, tc := range []struct {
				counts [3]int64
				op     reduce.Op
				want   error
				msg    string
			}{
				{[3]int64{12, 12, 24}, reduce.Sum, ccl.ErrMismatch, "rank"},
				{[3]int64{13, 13, 13}, reduce.Sum, ccl.ErrBadArgs, "alignment"},
				{[3]int64{12, 12, 12}, reduce.Max, ccl.ErrBadArgs, "reduces with sum"},
			} {
				buf, err := s.CallPacked(ranked, tensor.Shape(tc.counts[:]))
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Run(ctx, buf, buf, tc.op); err != nil {
					t.Fatal(err)
				}
				err = s.Sync(ctx)
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("counts %v %v: %v, want %v containing %q", tc.counts, tc.op, err, tc.want, tc.msg)
				}
				buf.Release()
			}
			check(t, s, c, []tcase{{tensor.Float32, reduce.Sum, 48}})
			// A handle that is not a plan.
			run := fn(t, s, run.FuncRun)
			buf, err := s.CallPacked(ranked, tensor.Shape{12, 12, 12})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CallPackedDiscard(run, int64(3), buf, buf, "sum"); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(ctx); err == nil || !strings.Contains(err.Error(), "not a loaded plan") {
				t.Errorf("bad handle: %v", err)
			}
			c.Close()
			if err := c.Run(ctx, nil, nil, reduce.Sum); err == nil {
				t.Errorf("Run after Close succeeded")
			}
		})
	}
}

func init() {
	// ranked(counts): a float32 tensor of counts[worker] elements.
	registry.MustRegisterTyped("runtest.ranked", func(env registry.Env, counts tensor.Shape) (*tensor.Tensor, error) {
		return tensor.New(tensor.Float32, tensor.Shape{counts[env.WorkerID()]})
	})
}

func TestLoadErrors(t *testing.T) {
	leaktest.Check(t)
	s := newSession(t, "threaded", 2)
	p, _ := handplan.AllPairsAllReduce(3, handplan.Options{})
	if _, err := run.Load(bg(t), s, p, 0); err == nil || !strings.Contains(err.Error(), "3 ranks") {
		t.Errorf("3-rank plan on 2 workers: %v", err)
	}
	if _, err := run.Load(bg(t), s, nil, 0); err == nil {
		t.Errorf("nil plan loaded")
	}
}
