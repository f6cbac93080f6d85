package cpuexec_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/leaktest"
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
		synced              bool
		procIn, procOut     bool
		threadIn, threadOut bool
	}{
		{build("allreduce_oneshot"), true, false, true, true, true},
		{build("allreduce_twoshot"), true, true, false, true, true},
		{build("allreduce_packet"), false, true, true, true, true},
		{allpairs, true, false, false, false, false}, // in place
		{unmatched, false, true, false, true, true},
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
		}
	}
}
