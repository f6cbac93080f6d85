package mscclpptests

import "testing"

// findPairs gives n-1 perfect matchings that together pair every two
// ranks exactly once, where MSCCL++'s greedy choice succeeds, and an error
// where it leaves a rank out (any odd n).
func TestFindPairs(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{2, true}, {4, true}, {8, true}, {3, false}, {5, false}} {
		steps, err := findPairs(tc.n)
		if (err == nil) != tc.ok {
			t.Fatalf("n=%d: err %v, want ok=%v", tc.n, err, tc.ok)
		}
		if !tc.ok {
			continue
		}
		if len(steps) != tc.n-1 {
			t.Fatalf("n=%d: %d steps, want %d", tc.n, len(steps), tc.n-1)
		}
		met := map[[2]int]int{}
		for s, pair := range steps {
			for x, y := range pair {
				if y == x || pair[y] != x {
					t.Fatalf("n=%d step %d: %d -> %d -> %d is not a matching", tc.n, s, x, y, pair[y])
				}
				met[[2]int{x, y}]++
			}
		}
		for x := range tc.n {
			for y := range tc.n {
				if x != y && met[[2]int{x, y}] != 1 {
					t.Errorf("n=%d: %d and %d meet %d times", tc.n, x, y, met[[2]int{x, y}])
				}
			}
		}
	}
}
