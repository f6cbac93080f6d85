package run_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// Every algorithm of the library, run on real sessions: threaded with 2..8
// workers, process with 2..4; plans with reduce ops are retargeted to each
// of sum, min and max.
func TestLibrary(t *testing.T) {
	leaktest.Check(t)
	for _, kind := range []string{"threaded", "process"} {
		maxN := 8
		if kind == "process" {
			maxN = 4
		}
		for n := library.MinRanks; n <= min(maxN, library.MaxRanks); n++ {
			// Under the race detector (CI's second pass, slow for process
			// sessions) the smallest and the largest threaded sessions and
			// the smallest process session run: they exercise the same
			// executor code as every other count, which the first pass runs.
			if raceEnabled && n != library.MinRanks && (kind == "process" || n != maxN) {
				continue
			}
			t.Run(fmt.Sprintf("%s/n%d", kind, n), func(t *testing.T) {
				s := newSession(t, kind, n)
				for _, name := range library.Names() {
					for _, inst := range []int{1, 2} {
						if inst > 1 && (kind == "process" || n > 4) {
							continue
						}
						p, err := library.Build(name, n, library.Options{Instances: inst})
						if err != nil {
							t.Errorf("%s x%d: %v", name, inst, err)
							continue
						}
						ops := []reduce.Op{reduce.Sum}
						if reduces(p) {
							ops = allOps
						}
						for i, op := range ops {
							q := p
							if reduces(p) {
								if q, err = cpuexec.WithReduceOp(p, op); err != nil {
									t.Fatal(err)
								}
							}
							c, err := run.Load(bg(t), s, q, 30*time.Second)
							if err != nil {
								t.Errorf("%s x%d: %v", name, inst, err)
								continue
							}
							dts := []tensor.DType{allDTypes[i%4], allDTypes[(i+1)%4]}
							if kind == "threaded" && n <= 4 {
								dts = allDTypes
							}
							if raceEnabled {
								dts = dts[:1]
							}
							check(t, s, c, cases(q, dts, []reduce.Op{op}, []int64{1, 7, 1000, 1 << 15}))
							if err := c.Close(); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			})
		}
	}
}
