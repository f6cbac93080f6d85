package library

import (
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/algo/verify"
)

// Every library plan provably computes its collective, without deadlock or
// race, for 2..8 ranks and one or two instances.
func TestVerifyEveryAlgorithm(t *testing.T) {
	for _, name := range Names() {
		for n := MinRanks; n <= MaxRanks; n++ {
			for _, inst := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/n=%d/i=%d", name, n, inst), func(t *testing.T) {
					pl, err := Build(name, n, Options{Instances: inst})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := verify.Verify(pl); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}
