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
