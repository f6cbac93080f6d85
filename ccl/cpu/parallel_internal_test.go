package cpu

import (
	"errors"
	"sync"
	"testing"
)

func TestThreadsFor(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name                                                  string
		bytes, minBytes, ranks, ranksHere, cpus, procs, fixed int
		want                                                  int
	}{
		{"2 processes on 2 cores", 64 * mb, 256 << 10, 2, 1, 2, 2, 0, 1},
		{"2 processes on 16 cores", 64 * mb, 256 << 10, 2, 1, 16, 16, 0, 8},
		{"8 processes on 16 cores", 64 * mb, 256 << 10, 8, 1, 16, 16, 0, 2},
		{"16 processes on 16 cores", 64 * mb, 256 << 10, 16, 1, 16, 16, 0, 1},
		{"more ranks than cores", 64 * mb, 256 << 10, 32, 1, 16, 16, 0, 1},
		{"2 processes, 200 cores", 64 * mb, 256 << 10, 2, 1, 200, 200, 0, 100},
		{"small work: one block per thread", 1 * mb, 256 << 10, 2, 1, 16, 16, 0, 4},
		{"less than a block", 100 << 10, 256 << 10, 2, 1, 16, 16, 0, 1},
		{"threaded session: Ps shared by the ranks", 64 * mb, 256 << 10, 4, 4, 16, 16, 0, 4},
		{"GOMAXPROCS below the cores", 64 * mb, 256 << 10, 2, 1, 16, 4, 0, 4},
		{"fixed", 64 * mb, 256 << 10, 8, 1, 2, 2, 3, 3},
		{"fixed, still bounded by work", 300 << 10, 256 << 10, 8, 1, 2, 2, 3, 1},
		{"zero bytes", 0, 256 << 10, 2, 1, 16, 16, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := threadsFor(tc.bytes, tc.minBytes, tc.ranks, tc.ranksHere, tc.cpus, tc.procs, tc.fixed); got != tc.want {
				t.Fatalf("threadsFor = %d, want %d", got, tc.want)
			}
		})
	}
}

// parallel covers [0, size) exactly once with element-aligned ranges and
// returns the first error by range order.
func TestParallel(t *testing.T) {
	for _, tc := range []struct{ t, size, es int }{
		{1, 100, 4}, {3, 100, 4}, {4, 8, 4}, {8, 4096, 2}, {5, 0, 8}, {7, 1001 * 8, 8},
	} {
		var mu sync.Mutex
		hits := make([]int, tc.size)
		err := parallel(tc.t, tc.size, tc.es, func(_, lo, hi int) error {
			if lo%tc.es != 0 || hi%tc.es != 0 || lo > hi {
				return errors.New("misaligned range")
			}
			mu.Lock()
			defer mu.Unlock()
			for i := lo; i < hi; i++ {
				hits[i]++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range hits {
			if h != 1 {
				t.Fatalf("t=%d size=%d: byte %d covered %d times", tc.t, tc.size, i, h)
			}
		}
	}
	e1, e2 := errors.New("one"), errors.New("two")
	err := parallel(3, 300, 1, func(i, _, _ int) error {
		switch i {
		case 1:
			return e1
		case 2:
			return e2
		}
		return nil
	})
	if !errors.Is(err, e1) {
		t.Fatalf("got %v, want the first range's error", err)
	}
}

func TestOneShotMaxFor(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{1, 256 << 10}, {2, 256 << 10}, {3, (256 << 10) * 4 / 9}, {4, 64 << 10}, {8, 16 << 10}, {16, 16 << 10},
	} {
		if got := oneShotMaxFor(tc.n); got != tc.want {
			t.Errorf("oneShotMaxFor(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}
