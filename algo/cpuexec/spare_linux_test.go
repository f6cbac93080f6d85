package cpuexec

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// Every byte of [0, n) lands in exactly one piece, pieces start on cache
// lines, small ranges run whole on the caller, and every piece's failure
// (an error or a panic) comes back.
func TestSparesEach(t *testing.T) {
	leaktest.Check(t)
	for _, spares := range []int{0, 1, 3, 7} {
		sp := startSpares(spares)
		for _, n := range []int{0, 1, 4095, spareMin - 1, spareMin, spareMin + 17, 3*spareMin + 100, 8 * spareMin} {
			t.Run(fmt.Sprintf("spares%d/n%d", spares, n), func(t *testing.T) {
				hits := make([]uint8, n)
				var mu sync.Mutex
				var pieces [][2]int
				err := sp.each(0, n, func(lo, hi int) error {
					for i := lo; i < hi; i++ {
						hits[i]++
					}
					mu.Lock()
					pieces = append(pieces, [2]int{lo, hi})
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for i, h := range hits {
					if h != 1 {
						t.Fatalf("byte %d done %d times", i, h)
					}
				}
				want := 1
				if sp != nil && n >= spareMin {
					want = min(spares+1, (n+spareAlign-1)/spareAlign)
				}
				if len(pieces) != want {
					t.Errorf("%d pieces, want %d: %v", len(pieces), want, pieces)
				}
				for _, p := range pieces {
					if p[0]%spareAlign != 0 {
						t.Errorf("piece %v starts off a cache line", p)
					}
				}
			})
		}
		if sp != nil {
			boom := errors.New("boom")
			err := sp.each(3, 4*spareMin, func(lo, hi int) error {
				if lo > 0 {
					return boom
				}
				return nil
			})
			if !errors.Is(err, boom) {
				t.Errorf("a piece's error: got %v", err)
			}
			err = sp.each(3, 4*spareMin, func(lo, hi int) error {
				if hi == 4*spareMin {
					panic("the last piece")
				}
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), "rank 3: panic in a piece") || !strings.Contains(err.Error(), "the last piece") {
				t.Errorf("a piece's panic: got %v", err)
			}
		}
		sp.close()
	}
}

func TestSpareCount(t *testing.T) {
	old := sparesOverride.Swap(0)
	defer sparesOverride.Store(old)
	if got := spareCount(1<<20, 1); got != 0 {
		t.Errorf("more ranks than cores: %d spares", got)
	}
	sparesOverride.Store(5)
	if got := spareCount(2, 1); got != 5 {
		t.Errorf("override 5: %d", got)
	}
	sparesOverride.Store(-1)
	if got := spareCount(1, 1); got != 0 {
		t.Errorf("override -1: %d", got)
	}
}
