package cpuexec_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// Thread blocks spread over several workers (goroutines owned by the
// executor) and all on one: the same results, no goroutine left behind.
func TestWorkers(t *testing.T) {
	leaktest.Check(t)
	t.Cleanup(func() { cpuexec.SetDirect(true) })
	for _, w := range []int{1, 2, 3} {
		old := cpuexec.SetWorkers(w)
		t.Cleanup(func() { cpuexec.SetWorkers(old) })
		cpuexec.SetDirect(w != 2) // staged through the data segment with 2 workers
		for _, name := range []string{"allreduce_oneshot", "allreduce_twoshot", "allreduce_packet", "allreduce_ring"} {
			for _, n := range []int{2, 3} {
				p, err := library.Build(name, n, library.Options{Instances: 2})
				if err != nil {
					t.Fatal(err)
				}
				t.Run(fmt.Sprintf("w%d/%s/%d", w, name, n), func(t *testing.T) {
					xs := ranks(t, p, 20*time.Second)
					for i, cnt := range []int64{int64(16 * n), int64(1024 * n), int64(16 * n)} {
						runAndCheck(t, xs, tensor.Float32, reduce.Sum, cnt, uint64(i))
					}
					// in == out on a plan that is not in place.
					ins := make([]*tensor.Tensor, n)
					for r := range n {
						ins[r] = input(t, tensor.Int32, int64(64*n), 5, r)
					}
					want := make([][]float64, n)
					for r := range n {
						want[r] = reference(t, plan.AllReduce, reduce.Sum, ins, r)
					}
					errs := each(n, func(r int) error { return xs[r].Run(context.Background(), ins[r], ins[r], reduce.Sum) })
					if err := errors.Join(errs...); err != nil {
						t.Fatal(err)
					}
					for r := range n {
						if err := tensor.CloseTo(ins[r], want[r], 0, 0); err != nil {
							t.Errorf("in == out, rank %d: %v", r, err)
						}
					}
				})
			}
		}
	}
}

// A rank with spare cores splits its large copies and reduces over them
// (one block a rank, as the library's one-shot plan; staged through the
// data segment and on the callers' tensors): the same results, no
// goroutine left behind. Each input is a little over SpareMin bytes a
// chunk, so every copy and reduce of a chunk splits and ends in a piece
// shorter than the others.
func TestSpares(t *testing.T) {
	leaktest.Check(t)
	oldW := cpuexec.SetWorkers(1)
	oldS := cpuexec.SetSpares(3)
	t.Cleanup(func() {
		cpuexec.SetWorkers(oldW)
		cpuexec.SetSpares(oldS)
		cpuexec.SetDirect(true)
	})
	for _, direct := range []bool{true, false} {
		cpuexec.SetDirect(direct)
		for _, name := range []string{"allreduce_oneshot", "allreduce_twoshot", "allreduce_ring", "allgather_ring", "allreduce_packet"} {
			for _, n := range []int{2, 3} {
				p, err := library.Build(name, n, library.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Run(fmt.Sprintf("direct=%v/%s/%d", direct, name, n), func(t *testing.T) {
					xs := ranks(t, p, 30*time.Second)
					if got := xs[0].Spares(); got != 3 {
						t.Fatalf("%d spare goroutines, want 3", got)
					}
					for i, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
						per := int64(cpuexec.SpareMin/dt.Size() + 40) // elements a chunk
						runAndCheck(t, xs, dt, reduce.Sum, per*int64(n), uint64(i))
					}
				})
			}
		}
	}
}

// Which plans end calls without the executor's barrier, and which run on
// the caller's tensors.
func TestSyncedAndAliases(t *testing.T) {
	leaktest.Check(t)
	build := func(name string) *plan.Plan {
		p, err := library.Build(name, 2, library.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	allpairs, _ := handplan.AllPairsAllReduce(2, handplan.Options{})
	unmatched, _ := handplan.AllPairsAllGather(2, handplan.Options{})
	tb := &unmatched.GPUs[1].ThreadBlocks[0]
	tb.Ops = append(tb.Ops, plan.Op{Name: plan.OpWait, ChannelType: plan.ChannelMemory, ChannelIDs: []int{0}})
	// Aliases as processes (only buffers no peer touches) and as
	// goroutine ranks (peers use the tensors directly).
	cases := []struct {
		p                   *plan.Plan
		synced, inPrologue  bool
		procIn, procOut     bool
		threadIn, threadOut bool
	}{
		{build("allreduce_oneshot"), true, true, false, true, true, true},
		{build("allreduce_twoshot"), true, true, true, false, true, true},
		{build("allreduce_packet"), false, false, true, true, true, true},
		{allpairs, true, false, false, false, false, false}, // in place; puts before its first wait
		{unmatched, false, false, true, false, true, true},
	}
	t.Cleanup(func() { cpuexec.SetDirect(true) })
	for _, c := range cases {
		for _, direct := range []bool{false, true} {
			cpuexec.SetDirect(direct)
			xs := ranks(t, c.p, 20*time.Second)
			in, out := xs[0].Aliases()
			wantIn, wantOut := c.procIn, c.procOut
			if direct {
				wantIn, wantOut = c.threadIn, c.threadOut
			}
			if xs[0].Synced() != c.synced || in != wantIn || out != wantOut {
				t.Errorf("%s direct %v: synced %v, aliases in %v out %v; want %v, %v, %v", c.p.Name, direct, xs[0].Synced(), in, out, c.synced, wantIn, wantOut)
			}
			if xs[0].InPrologue() != c.inPrologue {
				t.Errorf("%s: descriptors checked in the prologue: %v, want %v", c.p.Name, xs[0].InPrologue(), c.inPrologue)
			}
		}
	}
}

// Plans whose calls check descriptors in their prologues (no start
// barrier): ranks that disagree, or pass bad arguments, fail every rank
// with nothing written, also when only some of them would have grown the
// data segment, and the executor stays usable; a missing rank is named.
func TestPrologueCheck(t *testing.T) {
	leaktest.Check(t)
	t.Cleanup(func() { cpuexec.SetDirect(true) })
	for _, name := range []string{"allreduce_oneshot", "allreduce_twoshot"} {
		for _, n := range []int{2, 3} {
			for _, direct := range []bool{true, false} {
				cpuexec.SetDirect(direct)
				p, err := library.Build(name, n, library.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Run(fmt.Sprintf("%s/%d/direct=%v", name, n, direct), func(t *testing.T) {
					xs := ranks(t, p, 20*time.Second)
					if !xs[0].InPrologue() {
						t.Fatalf("%s: descriptors not checked in the prologue", name)
					}
					unit := int64(16 * n) // elements the layout accepts
					cases := []struct {
						counts []int64
						dts    []tensor.DType
						want   error
						msg    string
					}{
						{[]int64{unit, 2 * unit, unit}[:n], nil, ccl.ErrMismatch, "called with"},
						{[]int64{unit, unit << 14, unit}[:n], nil, ccl.ErrMismatch, "called with"}, // one rank would grow
						{[]int64{unit, 7, unit}[:n], nil, ccl.ErrMismatch, "bad arguments"},
						{[]int64{unit, unit, unit}[:n], []tensor.DType{tensor.Float32, tensor.Int32, tensor.Float32}, ccl.ErrMismatch, "called with"},
					}
					for ci, c := range cases {
						outs := make([]*tensor.Tensor, n)
						errs := each(n, func(r int) error {
							dt := tensor.Float32
							if c.dts != nil {
								dt = c.dts[r]
							}
							in := input(t, dt, c.counts[r], uint64(ci), r)
							outs[r] = tensor.MustNew(dt, tensor.Shape{c.counts[r]})
							tensor.Poison(outs[r])
							return xs[r].Run(context.Background(), in, outs[r], reduce.Sum)
						})
						for r, err := range errs {
							if c.counts[r] == 7 && errors.Is(err, ccl.ErrBadArgs) {
								continue
							}
							if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
								t.Errorf("case %d rank %d: got %v, want %v containing %q", ci, r, err, c.want, c.msg)
							}
							if pc, _ := tensor.PoisonCount(outs[r]); pc != outs[r].NumElements() {
								t.Errorf("case %d rank %d: %d output elements written", ci, r, outs[r].NumElements()-pc)
							}
						}
						runAndCheck(t, xs, tensor.Float32, reduce.Sum, unit, uint64(ci))
					}
					runAndCheck(t, xs, tensor.Float32, reduce.Sum, 1<<16*int64(n), 11) // grows
					runAndCheck(t, xs, tensor.Int32, reduce.Sum, unit, 12)
				})
			}
		}
	}
	// A rank that never calls: the others name it, and the executor is
	// failed everywhere.
	p, err := library.Build("allreduce_oneshot", 3, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	xs := ranks(t, p, 300*time.Millisecond)
	errs := each(2, func(r int) error {
		in := tensor.MustNew(tensor.Float32, tensor.Shape{48})
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
	in := tensor.MustNew(tensor.Float32, tensor.Shape{48})
	if err := xs[2].Run(context.Background(), in, in, reduce.Sum); !errors.Is(err, ccl.ErrFailed) {
		t.Errorf("late rank: %v, want ErrFailed", err)
	}
}
