package cpu_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/sys/shmarena"
	"github.com/chorus-rt/chorus/tensor"
)

// withArena makes this process's host tensors of at least minBytes come
// from a fresh shared tensor arena for the rest of the test, as a worker
// process's do. Goroutine ranks of one process then all publish the same
// arena and map it read-only once per peer: the reads take exactly the
// path of ranks in different processes.
func withArena(t *testing.T, minBytes int64) *shmarena.Arena {
	t.Helper()
	a, err := shmarena.New(shmarena.Config{Capacity: 512 << 20, Name: "chorus-ccl-test"})
	if err != nil {
		t.Fatal(err)
	}
	prev := shmarena.SetProcess(a)
	restore := tensor.SetHostAllocator(minBytes, a.Alloc)
	t.Cleanup(func() {
		restore()
		shmarena.SetProcess(prev)
		a.Close()
	})
	return a
}

// Buffers of at least 1 KiB in the arena (the large path's limit with
// these options), so that every large allreduce reads peers through their
// mappings unless a case keeps a rank's buffers in the Go heap.
var (
	smallShm      = cpu.Options{SlotBytes: 4096, MailboxBytes: 1024, OneShotMax: 1024, NoDirect: true, Threads: 3, ThreadMinBytes: 1}
	smallShmNoCMA = cpu.Options{SlotBytes: 4096, MailboxBytes: 1024, OneShotMax: 1024, NoDirect: true, NoCMA: true, Threads: 2, ThreadMinBytes: 1}
)

func wantPath(prefix string) func(int, string) error {
	return func(_ int, p string) error {
		if !strings.HasPrefix(p, prefix) {
			return fmt.Errorf("path %q, want %s...", p, prefix)
		}
		return nil
	}
}

// wantMixed: the heap rank reads every peer through its mapping; the
// others read its two buffers (one, if in place, still counts two
// publications) with process_vm_readv.
func wantMixed(n, heapRank int) func(int, string) error {
	return func(r int, p string) error {
		want := fmt.Sprintf("mixed: 2 of %d peer buffers", 2*(n-1))
		switch {
		case r == heapRank:
			want = "shm"
		case n == 2:
			want = "cma"
		}
		if !strings.HasPrefix(p, want) {
			return fmt.Errorf("path %q, want %s...", p, want)
		}
		return nil
	}
}

// TestAllReduceShmProperties: random dtypes, ops, sizes, rank counts, in
// place or not, outputs poisoned, float64 references, through the shared
// arena path, with and without process_vm_readv for the buffers of a
// rank kept outside the arena.
func TestAllReduceShmProperties(t *testing.T) {
	a := withArena(t, 1)
	rng := rand.New(rand.NewPCG(17, 17))
	var cases []pcase
	i := 0
	for _, dt := range tensor.DTypes {
		for _, op := range reduce.Ops {
			for _, size := range sizes {
				if rng.IntN(3) != 0 {
					continue // sample
				}
				i++
				n := 2 + rng.IntN(4)
				opts, on := smallShm, "shm"
				if rng.IntN(3) == 0 {
					opts, on = smallShmNoCMA, "shm-nocma"
				}
				heapRank := -1
				if rng.IntN(3) == 0 {
					heapRank = rng.IntN(n)
				}
				var check func(int, string) error
				large := size*dt.Size() > opts.OneShotMax
				switch {
				case reduce.Supported(op, dt) != nil || !large:
				case heapRank < 0:
					check = wantPath("shm")
				case opts.NoCMA:
					check = wantPath(fmt.Sprintf("staged: rank %d's buffers are not all in its arena", heapRank))
				default:
					check = wantMixed(n, heapRank)
				}
				inPlace := rng.IntN(2) == 0
				viewInPlace := inPlace && rng.IntN(2) == 0
				cases = append(cases, allReduceCaseOn(dt, op, false, size, n, opts, on, inPlace, viewInPlace, uint64(i)*1000, heapRank, check))
			}
		}
	}
	// Larger ones: several threads, and chunks of the cma scratch.
	cases = append(cases,
		allReduceCaseOn(tensor.Float32, reduce.Sum, false, 300_001, 3, smallShm, "shm", false, false, 5, -1, wantPath("shm")),
		allReduceCaseOn(tensor.BFloat16, reduce.Avg, false, 200_000, 4, smallShm, "shm", true, false, 6, 2, wantMixed(4, 2)),
		allReduceCaseOn(tensor.Float64, reduce.Max, false, 100_003, 2, smallShmNoCMA, "shm-nocma", false, false, 7, -1, wantPath("shm")),
		allReduceCaseOn(tensor.Int32, reduce.Sum, false, 100_000, 3, cpu.Options{NoDirect: true}, "default", true, true, 8, -1, wantPath("shm")),
	)
	before := tensor.HostAllocatorStats()
	runCases(t, cases)
	if tensor.HostAllocatorStats().Allocs == before.Allocs || a.Stats().Allocs == 0 {
		t.Error("no tensor came from the arena")
	}
	if fb := tensor.HostAllocatorStats().Fallbacks - before.Fallbacks; fb != 0 {
		t.Errorf("%d tensors fell back to the Go heap", fb)
	}
}

// With an arena, Path says shm; without process_vm_readv too.
func TestPathShm(t *testing.T) {
	withArena(t, 1)
	for _, opts := range []cpu.Options{{NoDirect: true}, {NoDirect: true, NoCMA: true}} {
		errs := runRanks(t, opts, 3, 0, func(ctx context.Context, c ccl.Comm) error {
			cc := c.(*cpu.Comm)
			if got := cc.Path(); got != "shm" {
				return fmt.Errorf("%+v: Path() = %q, want shm", opts, got)
			}
			return nil
		})
		noErrors(t, errs)
	}
}

// Fresh arena tensors every round, dropped after it, with collections in
// between: blocks are freed by the collector and reused by other ranks'
// next buffers while the peers' mappings stay, and every round's result
// is still exact.
func TestShmBlocksReused(t *testing.T) {
	a := withArena(t, 1)
	const rounds, n, count = 24, 3, 20_000
	errs := runRanks(t, smallShm, n, 0, func(ctx context.Context, c ccl.Comm) error {
		r := c.Rank()
		for i := range rounds {
			x := tensor.MustNew(tensor.Int32, shape(count))
			d, _ := tensor.Data[int32](x)
			for j := range d {
				d[j] = int32(r*1000 + i + j)
			}
			if err := c.AllReduce(ctx, x, x, reduce.Sum); err != nil {
				return err
			}
			for j, v := range d {
				if want := int32(n*(n-1)/2*1000 + n*(i+j)); v != want {
					return fmt.Errorf("round %d element %d: %d, want %d", i, j, v, want)
				}
			}
			if p := c.(*cpu.Comm).PathFor(ccl.KindAllReduce, count*4); p != "shm" {
				return fmt.Errorf("round %d: path %q", i, p)
			}
			if i%4 == 3 {
				runtime.GC()
			}
		}
		return nil
	})
	noErrors(t, errs)
	if s := a.Stats(); s.Frees == 0 || s.Allocs < rounds*n {
		t.Errorf("arena %+v: want %d allocations and blocks freed by the collector", s, rounds*n)
	}
}

// A rank without an arena: the others read its buffers with cma and each
// other's through their mappings; it reads theirs through the mappings.
// Without cma the allreduce is staged. Path says why shm is not whole.
func TestShmRankWithoutArena(t *testing.T) {
	a := withArena(t, 1)
	defer cpu.SetArenaFor(func(rank int) *shmarena.Arena {
		if rank == 1 {
			return nil
		}
		return a
	})()
	const why = "shared tensors: rank 1 has no shared tensor arena"
	for _, tc := range []struct {
		opts  cpu.Options
		path  string
		paths []string // PathFor after a large allreduce, by rank
	}{
		{smallShm, "cma (" + why + ")", []string{"mixed: 2 of 4", "shm", "mixed: 2 of 4"}},
		{smallShmNoCMA, "staged: disabled (Options.NoCMA); " + why, []string{"staged: disabled", "staged: disabled", "staged: disabled"}},
	} {
		// Rank 1's tensors come from the process arena too, but it has
		// no arena to locate them in: it publishes no offsets.
		errs := runRanks(t, tc.opts, 3, 0, func(ctx context.Context, c ccl.Comm) error {
			cc := c.(*cpu.Comm)
			if got := cc.Path(); got != tc.path {
				return fmt.Errorf("Path() = %q, want %q", got, tc.path)
			}
			x := tensor.MustNew(tensor.Float32, shape(5000))
			if err := tensor.Fill(x, float64(c.Rank()+1)); err != nil {
				return err
			}
			if err := c.AllReduce(ctx, x, x, reduce.Sum); err != nil {
				return err
			}
			if d, _ := tensor.Data[float32](x); d[0] != 6 || d[4999] != 6 {
				return fmt.Errorf("result %v ... %v, want 6", d[0], d[4999])
			}
			if got := cc.PathFor(ccl.KindAllReduce, 20000); !strings.HasPrefix(got, tc.paths[c.Rank()]) {
				return fmt.Errorf("PathFor = %q, want %s...", got, tc.paths[c.Rank()])
			}
			return nil
		})
		noErrors(t, errs)
	}
}
