package handplan_test

import (
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/verify"
)

// Every hand-built plan is valid and, by the verifier, computes its
// collective without races or deadlocks.
func TestPlansVerify(t *testing.T) {
	for _, name := range handplan.Names() {
		for n := 1; n <= 8; n++ {
			for _, o := range []handplan.Options{{}, {TBs: 3, Alignment: 4}, {Reduce: plan.ReduceMax}} {
				t.Run(fmt.Sprintf("%s/n%d/%+v", name, n, o), func(t *testing.T) {
					p, err := handplan.Build(name, n, o)
					if err != nil {
						t.Fatal(err)
					}
					if n < 2 {
						return // the verifier needs peers
					}
					if _, err := verify.Verify(p); err != nil {
						t.Error(err)
					}
				})
			}
		}
	}
	if _, err := handplan.Build("nope", 2, handplan.Options{}); err == nil {
		t.Error("unknown plan built")
	}
}

// CopyOps(k) is a valid 1-rank allreduce (a copy) for the verifier, with
// k copy ops per thread block.
func TestCopyOps(t *testing.T) {
	for _, k := range []int{1, 8, 64} {
		for _, o := range []handplan.Options{{}, {TBs: 4, Alignment: 4}} {
			p, err := handplan.CopyOps(k, o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := verify.Verify(p); err != nil {
				t.Errorf("k %d %+v: %v", k, o, err)
			}
			for _, tb := range p.GPUs[0].ThreadBlocks {
				copies := 0
				for _, op := range tb.Ops {
					if op.Name == plan.OpCopy {
						copies++
					}
				}
				if copies != k {
					t.Errorf("k %d %+v: a thread block has %d copies", k, o, copies)
				}
			}
		}
	}
	if _, err := handplan.CopyOps(0, handplan.Options{}); err == nil {
		t.Error("0 ops built")
	}
}
