package cpuexec_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

func newID(t testing.TB) []byte {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	return id
}

// ranks joins n executors of p (goroutine ranks) and returns them; they
// are closed at cleanup.
func ranks(t testing.TB, p *plan.Plan, timeout time.Duration) []*cpuexec.Executor {
	t.Helper()
	n := p.NumRanks()
	id := newID(t)
	xs := make([]*cpuexec.Executor, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			xs[r], errs[r] = cpuexec.Join(context.Background(), ccl.Config{ID: id, Rank: r, Size: n, Timeout: timeout}, p)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, x := range xs {
			x.Close()
		}
	})
	return xs
}

// each runs fn on every rank concurrently and returns the errors by rank.
func each(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	return errs
}

// input is rank r's random input of count elements.
func input(t testing.TB, dt tensor.DType, count int64, seed uint64, r int) *tensor.Tensor {
	x := tensor.MustNew(dt, tensor.Shape{count})
	if err := tensor.Random(x, seed+uint64(r)*7919); err != nil {
		t.Fatal(err)
	}
	return x
}

func fold(op reduce.Op, acc, v float64, first bool) float64 {
	switch {
	case first:
		return v
	case op == reduce.Min:
		return math.Min(acc, v)
	case op == reduce.Max:
		return math.Max(acc, v)
	case op == reduce.Prod:
		return acc * v
	}
	return acc + v
}

// reference computes rank r's expected output in float64.
func reference(t testing.TB, coll plan.Collective, op reduce.Op, ins []*tensor.Tensor, r int) []float64 {
	n := len(ins)
	vals := make([][]float64, n)
	for q, in := range ins {
		v, err := tensor.ToFloat64(in)
		if err != nil {
			t.Fatal(err)
		}
		vals[q] = v
	}
	count := len(vals[0])
	switch coll {
	case plan.AllGather:
		var out []float64
		for q := range n {
			out = append(out, vals[q]...)
		}
		return out
	case plan.ReduceScatter:
		blk := count / n
		out := make([]float64, blk)
		for i := range out {
			for q := range n {
				out[i] = fold(op, out[i], vals[q][r*blk+i], q == 0)
			}
		}
		return out
	}
	out := make([]float64, count)
	for i := range out {
		for q := range n {
			out[i] = fold(op, out[i], vals[q][i], q == 0)
		}
	}
	return out
}

func outCount(coll plan.Collective, n int, count int64) int64 {
	switch coll {
	case plan.AllGather:
		return count * int64(n)
	case plan.ReduceScatter:
		return count / int64(n)
	}
	return count
}

// runAndCheck runs p once on every rank with count elements per input and
// checks every output against the float64 reference and for poison.
func runAndCheck(t *testing.T, xs []*cpuexec.Executor, dt tensor.DType, op reduce.Op, count int64, seed uint64) {
	t.Helper()
	p := xs[0].Plan()
	n := len(xs)
	ins := make([]*tensor.Tensor, n)
	outs := make([]*tensor.Tensor, n)
	for r := range n {
		ins[r] = input(t, dt, count, seed, r)
		outs[r] = tensor.MustNew(dt, tensor.Shape{outCount(p.Collective, n, count)})
		tensor.Poison(outs[r])
	}
	errs := each(n, func(r int) error { return xs[r].Run(context.Background(), ins[r], outs[r], op) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	rtol, atol := tensor.DefaultTolerance(dt)
	atol *= float64(n)
	for r := range n {
		if pc, _ := tensor.PoisonCount(outs[r]); pc != 0 {
			t.Errorf("rank %d: %d output elements never written", r, pc)
		}
		if err := tensor.CloseTo(outs[r], reference(t, p.Collective, op, ins, r), rtol, atol); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

var dtypes = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Int32}

func TestAllReduceAllPairs(t *testing.T) {
	leaktest.Check(t)
	cases := []struct {
		n   int
		o   handplan.Options
		cnt []int64 // element counts (must fit the plan's layout)
	}{
		{1, handplan.Options{}, []int64{4, 64}},
		{2, handplan.Options{}, []int64{8, 24, 1 << 12}},
		{3, handplan.Options{TBs: 2}, []int64{24, 96}},
		{4, handplan.Options{Alignment: 4}, []int64{4, 12, 1028}},
		{5, handplan.Options{TBs: 3, Alignment: 8}, []int64{30, 1000}},
		{8, handplan.Options{}, []int64{32, 256}},
		{3, handplan.Options{LL: true}, []int64{12, 48}},
		{4, handplan.Options{LL: true, TBs: 2}, []int64{32, 800}},
	}
	for _, c := range cases {
		p, err := handplan.AllPairsAllReduce(c.n, c.o)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("%s/tbs%d/al%d", p.Name, c.o.TBs, c.o.Alignment), func(t *testing.T) {
			xs := ranks(t, p, 20*time.Second)
			seed := uint64(1)
			for _, dt := range dtypes {
				for _, op := range []reduce.Op{reduce.Sum, reduce.Min, reduce.Max} {
					for _, cnt := range c.cnt {
						if cnt*int64(dt.Size())%int64(p.BufferAlignment*c.n) != 0 {
							continue
						}
						seed++
						t.Run(fmt.Sprintf("%s/%s/%d", dt, op, cnt), func(t *testing.T) { runAndCheck(t, xs, dt, op, cnt, seed) })
					}
				}
			}
		})
	}
}

func TestAllGatherAndReduceScatter(t *testing.T) {
	leaktest.Check(t)
	for _, n := range []int{1, 2, 3, 6} {
		for _, tbs := range []int{1, 2} {
			ag, err := handplan.AllPairsAllGather(n, handplan.Options{TBs: tbs, Alignment: 2})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := handplan.AllPairsReduceScatter(n, handplan.Options{TBs: tbs, Alignment: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Run(fmt.Sprintf("%s/tbs%d", ag.Name, tbs), func(t *testing.T) {
				xs := ranks(t, ag, 20*time.Second)
				for i, cnt := range []int64{1, 7, 33, 1001} { // odd counts: alignment 2 allows them for 16-bit types
					runAndCheck(t, xs, tensor.Float16, reduce.Sum, cnt, uint64(i))
					if cnt%2 == 0 {
						runAndCheck(t, xs, tensor.Int32, reduce.Sum, cnt, uint64(i))
					}
				}
			})
			t.Run(fmt.Sprintf("%s/tbs%d", rs.Name, tbs), func(t *testing.T) {
				xs := ranks(t, rs, 20*time.Second)
				for i, per := range []int64{1, 5, 257} {
					for _, op := range []reduce.Op{reduce.Sum, reduce.Max} {
						runAndCheck(t, xs, tensor.Float32, op, per*int64(n), uint64(i))
						runAndCheck(t, xs, tensor.Int32, op, per*int64(n), uint64(i))
					}
				}
			})
		}
	}
}

// The MSCCL++-format golden plan, and every reduce_op it may carry.
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
	xs := ranks(t, p, 20*time.Second)
	for _, cnt := range []int64{16, 48, 4096, 100000} {
		runAndCheck(t, xs, tensor.Float32, reduce.Sum, cnt, uint64(cnt))
		runAndCheck(t, xs, tensor.BFloat16, reduce.Sum, cnt, uint64(cnt))
	}
	// The plan says sum: max is refused (on every rank, no hang).
	in := tensor.MustNew(tensor.Float32, tensor.Shape{8})
	errs := each(2, func(r int) error { return xs[r].Run(context.Background(), in, in, reduce.Max) })
	for r, err := range errs {
		if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), "WithReduceOp") {
			t.Errorf("rank %d: max with a sum plan: %v", r, err)
		}
	}
	for _, op := range []reduce.Op{reduce.Min, reduce.Max} {
		q, err := cpuexec.WithReduceOp(p, op)
		if err != nil {
			t.Fatal(err)
		}
		xs := ranks(t, q, 20*time.Second)
		runAndCheck(t, xs, tensor.Int32, op, 1024, 7)
		runAndCheck(t, xs, tensor.Float16, op, 1024, 8)
	}
}

// Sizes the plan does not allow, and ranks that disagree, fail every rank
// with an error, and the executor stays usable.
func TestBadSizes(t *testing.T) {
	leaktest.Check(t)
	p, err := handplan.AllPairsAllReduce(3, handplan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.MaxMessageSize = 1 << 20
	xs := ranks(t, p, 20*time.Second)
	run := func(counts [3]int64) []error {
		return each(3, func(r int) error {
			in := tensor.MustNew(tensor.Float32, tensor.Shape{counts[r]})
			return xs[r].Run(context.Background(), in, in, reduce.Sum)
		})
	}
	cases := []struct {
		counts [3]int64
		want   error
		msg    string
	}{
		{[3]int64{10, 10, 10}, ccl.ErrBadArgs, "multiples of the alignment"},
		{[3]int64{16, 16, 16}, ccl.ErrBadArgs, "chunks"},
		{[3]int64{12 << 15, 12 << 15, 12 << 15}, ccl.ErrBadArgs, "outside"},
		{[3]int64{12, 12, 24}, ccl.ErrMismatch, "rank"},
		{[3]int64{12, 7, 12}, ccl.ErrMismatch, "bad arguments"},
	}
	for _, c := range cases {
		errs := run(c.counts)
		for r, err := range errs {
			if c.counts[r] == 7 && errors.Is(err, ccl.ErrBadArgs) {
				continue // the rank with bad arguments says what is bad
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("counts %v rank %d: got %v, want %v containing %q", c.counts, r, err, c.want, c.msg)
			}
		}
	}
	runAndCheck(t, xs, tensor.Float32, reduce.Sum, 48, 3)
}

// A rank that never calls Run: the others time out naming it, and the
// executor is failed on every rank afterwards.
func TestTimeoutNamesMissingRank(t *testing.T) {
	leaktest.Check(t)
	p, err := handplan.AllPairsAllReduce(3, handplan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	xs := ranks(t, p, 300*time.Millisecond)
	errs := each(2, func(r int) error {
		in := tensor.MustNew(tensor.Float32, tensor.Shape{12})
		return xs[r].Run(context.Background(), in, in, reduce.Sum)
	})
	for r, err := range errs {
		var we *cpuexec.WaitError
		if !errors.As(err, &we) && !errors.Is(err, ccl.ErrFailed) {
			t.Fatalf("rank %d: %v, want a WaitError", r, err)
		}
		if errors.As(err, &we) && (!strings.Contains(err.Error(), "[2]") || !errors.Is(err, ccl.ErrTimeout)) {
			t.Errorf("rank %d: %v: does not name rank 2", r, err)
		}
	}
	in := tensor.MustNew(tensor.Float32, tensor.Shape{12})
	if err := xs[2].Run(context.Background(), in, in, reduce.Sum); !errors.Is(err, ccl.ErrFailed) {
		t.Errorf("late rank: %v, want ErrFailed", err)
	}
}

// A plan whose wait is never signalled times out with rank, tb and op.
func TestUnmatchedWaitTimesOut(t *testing.T) {
	leaktest.Check(t)
	p, err := handplan.AllPairsAllGather(2, handplan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1 waits twice.
	tb := &p.GPUs[1].ThreadBlocks[0]
	tb.Ops = append(tb.Ops, plan.Op{Name: plan.OpWait, ChannelType: plan.ChannelMemory, ChannelIDs: []int{0}})
	xs := ranks(t, p, 300*time.Millisecond)
	errs := each(2, func(r int) error {
		in := tensor.MustNew(tensor.Float32, tensor.Shape{4})
		out := tensor.MustNew(tensor.Float32, tensor.Shape{8})
		return xs[r].Run(context.Background(), in, out, reduce.Sum)
	})
	var we *cpuexec.WaitError
	where := fmt.Sprintf("op %d (wait)", len(tb.Ops)-1)
	if !errors.As(errs[1], &we) || we.TB != 0 || !strings.Contains(we.Where, where) || we.Peers[0] != 0 {
		t.Errorf("rank 1: %v", errs[1])
	}
	if !errors.Is(errs[0], ccl.ErrFailed) {
		t.Errorf("rank 0: %v, want ErrFailed", errs[0])
	}
}

func TestJoinErrors(t *testing.T) {
	leaktest.Check(t)
	p2, _ := handplan.AllPairsAllReduce(2, handplan.Options{})
	q2, _ := handplan.AllPairsAllGather(2, handplan.Options{})
	ctx := context.Background()
	if _, err := cpuexec.Join(ctx, ccl.Config{ID: newID(t), Rank: 0, Size: 3}, p2); !errors.Is(err, ccl.ErrBadArgs) {
		t.Errorf("size mismatch: %v", err)
	}
	// Ranks with different plans.
	id := newID(t)
	errs := each(2, func(r int) error {
		p := p2
		if r == 1 {
			p = q2
		}
		x, err := cpuexec.Join(ctx, ccl.Config{ID: id, Rank: r, Size: 2, Timeout: 300 * time.Millisecond}, p)
		if err == nil {
			x.Close()
		}
		return err
	})
	if !errors.Is(errs[1], ccl.ErrMismatch) {
		t.Errorf("rank 1 with another plan: %v", errs[1])
	}
	if errs[0] == nil {
		t.Errorf("rank 0 joined alone")
	}
	// A missing rank.
	_, err := cpuexec.Join(ctx, ccl.Config{ID: newID(t), Rank: 0, Size: 2, Timeout: 200 * time.Millisecond}, p2)
	if !errors.Is(err, ccl.ErrTimeout) || !strings.Contains(err.Error(), "[1]") {
		t.Errorf("missing rank: %v", err)
	}
}

// Many calls with changing sizes (the data segment grows) and in == out.
func TestRepeatedCalls(t *testing.T) {
	leaktest.Check(t)
	p, _ := handplan.AllPairsAllReduce(4, handplan.Options{TBs: 2})
	xs := ranks(t, p, 20*time.Second)
	for i, cnt := range []int64{32, 1 << 16, 64, 1 << 18, 32, 1 << 10} {
		runAndCheck(t, xs, tensor.Float32, reduce.Sum, cnt, uint64(i))
	}
	ins := make([]*tensor.Tensor, 4)
	want := make([][]float64, 4)
	for r := range 4 {
		ins[r] = input(t, tensor.Int32, 64, 9, r)
	}
	for r := range 4 {
		want[r] = reference(t, plan.AllReduce, reduce.Sum, ins, r)
	}
	errs := each(4, func(r int) error { return xs[r].Run(context.Background(), ins[r], ins[r], reduce.Sum) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range 4 {
		if err := tensor.CloseTo(ins[r], want[r], 0, 0); err != nil {
			t.Errorf("in place, rank %d: %v", r, err)
		}
	}
}

// The switch ops in chorus's reading (plan/testdata/switch_ops.json): the
// packet multicast gstorepkt and signal/wait on switch channels (a
// barrier, and a relaxed one), over repeated calls (the barrier counters
// carry over from call to call) and sizes.
func TestSwitchOpsPlan(t *testing.T) {
	leaktest.Check(t)
	data, err := os.ReadFile(filepath.Join("..", "plan", "testdata", "switch_ops.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	xs := ranks(t, p, 20*time.Second)
	for _, cnt := range []int64{4, 256, 4096, 4096, 100000} {
		runAndCheck(t, xs, tensor.Float32, reduce.Sum, cnt, uint64(cnt))
	}
}

// A switch barrier that one rank skips: the other rank's wait times out
// naming the rank it waits for.
func TestSwitchBarrierWaitsForEveryRank(t *testing.T) {
	leaktest.Check(t)
	data, err := os.ReadFile(filepath.Join("..", "plan", "testdata", "switch_ops.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1 leaves out its first switch signal.
	tb := &p.GPUs[1].ThreadBlocks[0]
	tb.Ops = tb.Ops[1:]
	xs := ranks(t, p, 300*time.Millisecond)
	errs := each(2, func(r int) error {
		in := tensor.MustNew(tensor.Float32, tensor.Shape{4})
		out := tensor.MustNew(tensor.Float32, tensor.Shape{8})
		return xs[r].Run(context.Background(), in, out, reduce.Sum)
	})
	// Both ranks block (rank 1 waits for its own arrival too); the first to
	// time out reports the wait and the missing rank, the other fails.
	timedOut := 0
	for r, err := range errs {
		var we *cpuexec.WaitError
		if err == nil {
			t.Errorf("rank %d finished", r)
		} else if errors.As(err, &we) {
			timedOut++
			if we.TB != 0 || !strings.Contains(we.Where, "(wait)") || !slices.Contains(we.Peers, 1) {
				t.Errorf("rank %d: %v (peers %v)", r, err, we.Peers)
			}
		}
	}
	if timedOut == 0 {
		t.Errorf("no wait timed out: %v", errs)
	}
}
