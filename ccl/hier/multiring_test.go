package hier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// multiRingFrom sets multiRingMin (read at Join) for the rest of the test.
func multiRingFrom(t *testing.T, n int) {
	old := multiRingMin
	multiRingMin = n
	t.Cleanup(func() { multiRingMin = old })
}

// pipeFrom sets pipeBytes (read at Join) for the rest of the test.
func pipeFrom(t *testing.T, n int) {
	old := pipeBytes
	pipeBytes = n
	t.Cleanup(func() { pipeBytes = old })
}

// TestPath: which path a communicator takes for large allreduces, by
// rank layout, and what PathFor says by size.
func TestPath(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b int) { smallMax, rhdMax = a, b }(smallMax, rhdMax)
	smallMax, rhdMax = 64<<10, 128<<10
	stripesFrom(t, 256<<10)
	for _, tc := range []struct {
		lay  []int
		want string
	}{
		{[]int{2}, "local: one host (ccl/cpu)"},
		{[]int{1, 1}, "leader: one rank per host; leader ring in 4 stripes from 256 KiB, 8 from 8 MiB"},
		{[]int{2, 2}, "multi-ring: 2 rings; rings in 2 stripes from 64 MiB"},
		{[]int{3, 3, 3}, "multi-ring: 3 rings; rings in 2 stripes from 64 MiB"},
		{[]int{2, 1}, "leader: hosts have unequal rank counts (2, 1); leader ring in 4 stripes from 256 KiB, 8 from 8 MiB"},
		{[]int{1, 2, 2, 2}, "leader: hosts have unequal rank counts (1, 2, 2, 2); leader ring in 4 stripes from 256 KiB, 8 from 8 MiB"},
	} {
		for r, c := range world(t, tc.lay, 10*time.Second) {
			if got := c.Path(); got != tc.want {
				t.Errorf("%v rank %d: Path() = %q, want %q", tc.lay, r, got, tc.want)
			}
		}
	}
	multiRingFrom(t, 1<<20)
	c := world(t, []int{2, 2, 2, 2}, 10*time.Second)[0]
	multiRingFrom(t, 0)
	c0 := world(t, []int{2, 2, 2, 2}, 10*time.Second)[0]
	// Groups of 256 KiB (parts of 128 KiB: RHD), and one group.
	pipeFrom(t, 256<<10)
	cp := world(t, []int{2, 2, 2, 2}, 10*time.Second)[0]
	pipeFrom(t, 0)
	c1 := world(t, []int{2, 2, 2, 2}, 10*time.Second)[0]
	for _, tc := range []struct {
		c     *Comm
		kind  ccl.Kind
		bytes int
		want  string
	}{
		{c, ccl.KindAllReduce, 100, "inline"},
		{c, ccl.KindReduceScatter, 100, "gathered"},
		{c, ccl.KindAllReduce, 64 << 10, "gathered"},
		{c, ccl.KindAllReduce, 128 << 10, "leader rhd"},
		{c, ccl.KindAllReduce, 1<<20 - 4, "leader ring"},
		{c, ccl.KindAllReduce, 1 << 20, "multi-ring ring"},
		{c, ccl.KindAllReduce, 4 << 20, "multi-ring ring"}, // two 2 MiB edges: one group
		{c, ccl.KindAllReduce, 4<<20 + 4, "multi-ring ring, 3 groups"},
		{c, ccl.KindAllReduce, 8 << 20, "multi-ring ring, 3 groups"},
		{c, ccl.KindAllReduce, 64<<20 - 4, "multi-ring ring, 10 groups"},
		{c, ccl.KindAllReduce, 64 << 20, "multi-ring ring, 2 stripes, 10 groups"},
		{c, ccl.KindReduceScatter, 64 << 20, "multi-ring ring, 2 stripes, 10 groups"},
		{cp, ccl.KindAllReduce, 1 << 20, "multi-ring rhd, 6 groups"},
		{cp, ccl.KindAllReduce, 64 << 20, "multi-ring rhd, 258 groups"},
		{c1, ccl.KindAllReduce, 64 << 20, "multi-ring ring, 2 stripes"},
		{c, ccl.KindAllGather, 64 << 20, "leader"},
		{c0, ccl.KindAllReduce, 256 << 10, "multi-ring rhd"},
		{c0, ccl.KindAllReduce, 256<<10 + 4, "multi-ring ring"},
	} {
		if got := tc.c.PathFor(tc.kind, tc.bytes); got != tc.want {
			t.Errorf("4x2 from %d: PathFor(%s, %d) = %q, want %q", tc.c.multiMin, tc.kind, tc.bytes, got, tc.want)
		}
	}
	c = world(t, []int{1, 1, 1, 1}, 10*time.Second)[0]
	for _, tc := range []struct {
		bytes int
		want  string
	}{
		{128 << 10, "leader rhd"},
		{256<<10 - 4, "leader ring"},
		{256 << 10, "leader ring, 4 stripes"},
		{8<<20 - 4, "leader ring, 4 stripes"},
		{8 << 20, "leader ring, 8 stripes"},
		{256 << 20, "leader ring, 8 stripes"},
	} {
		if got := c.PathFor(ccl.KindAllReduce, tc.bytes); got != tc.want {
			t.Errorf("4x1: PathFor(allreduce, %d) = %q, want %q", tc.bytes, got, tc.want)
		}
	}
	noMultiRingFor(t)
	c = world(t, []int{2, 2}, 10*time.Second)[0]
	if got := c.Path(); !strings.HasPrefix(got, "leader: multi-ring disabled") {
		t.Errorf("multi-ring off: Path() = %q", got)
	}
}

// noMultiRingFor makes communicators joined until the test ends take the
// leader path.
func noMultiRingFor(t *testing.T) {
	noMultiRing = true
	t.Cleanup(func() { noMultiRing = false })
}

// TestAllReduceMultiRingProperty: random sizes (including counts that do
// not divide by the ranks per host, and fewer elements than ranks per
// host), dtypes (float16 and bfloat16 too), ops, chunk sizes, RHD or
// ring, the host's split allreduce or its staged fallback, in-place choices, on layouts that take the multi-ring path and
// on uneven ones that fall back to the leader path, against the float64
// reference into poisoned outputs, with every rank's bits identical.
func TestAllReduceMultiRingProperty(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b, ch, in, rp, ri, fl int) {
		smallMax, rhdMax, chunkBytes, agreeInlineMax, reducePieceBytes, ringInlineMax, flushBytes = a, b, ch, in, rp, ri, fl
	}(smallMax, rhdMax, chunkBytes, agreeInlineMax, reducePieceBytes, ringInlineMax, flushBytes)
	defer func() { testNoSplit = false }()
	agreeInlineMax = 0 // nothing rides with the agreement: every size moves
	multiRingFrom(t, 0)
	rng := rand.New(rand.NewPCG(16, 3))
	dts := []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.BFloat16, tensor.Float16}
	ops := []reduce.Op{reduce.Sum, reduce.Max, reduce.Min, reduce.Avg}
	for _, tc := range []struct {
		lay   []int
		multi bool
	}{
		{[]int{2, 2}, true}, {[]int{2, 2, 2}, true}, {[]int{3, 3}, true}, {[]int{2, 2, 2, 2}, true},
		{[]int{2, 1}, false}, {[]int{1, 2, 1}, false}, {[]int{3, 2}, false},
	} {
		comms := world(t, tc.lay, 10*time.Second)
		if got := comms[0].path == pathMulti; got != tc.multi {
			t.Fatalf("%v: multi-ring %v, want %v (%s)", tc.lay, got, tc.multi, comms[0].Path())
		}
		for it := range 8 {
			dt, op := dts[rng.IntN(len(dts))], ops[rng.IntN(len(ops))]
			if op == reduce.Avg && !dt.IsFloat() {
				op = reduce.Sum
			}
			count := int64(1 + rng.IntN(5000))
			if it == 0 {
				count = int64(1 + rng.IntN(tc.lay[0])) // maybe fewer elements than local ranks
			}
			smallMax = []int{0, 64}[rng.IntN(2)]
			chunkBytes = []int{1, 7, 100, 1000, 4096, 1 << 20}[rng.IntN(6)]
			rhdMax = []int{0, 1 << 30}[rng.IntN(2)]
			reducePieceBytes = []int{1, 24, 100, 4096, 128 << 10}[rng.IntN(5)]
			ringInlineMax = []int{0, 100, inlineMax}[rng.IntN(3)] // pipelined or one-goroutine rings
			flushBytes = []int{1000, LinkBuffer}[rng.IntN(2)]
			testNoSplit = rng.IntN(3) == 0
			pipe := []int{0, 4, 256, 4096, 8 << 20}[rng.IntN(5)] // groups of a few elements to one group
			for _, c := range comms {
				c.pipe = pipe
			}
			mask := rng.Uint64()
			name := fmt.Sprintf("%v/%s/%s/%d/small %d/chunk %d/rhd %d/piece %d/ring inline %d/flush %d/staged %v/pipe %d", tc.lay, dt, op, count, smallMax, chunkBytes, rhdMax, reducePieceBytes, ringInlineMax, flushBytes, testNoSplit, pipe)
			checkAllReduce(t, name, comms, dt, op, count, rng.Uint64(), func(r int) bool { return mask>>r&1 == 1 })
		}
		// reduce-scatter goes through the same allreduce.
		n := len(comms)
		smallMax, chunkBytes = 0, 100
		const blk = 37
		ins := make([]*tensor.Tensor, n)
		outs := make([]*tensor.Tensor, n)
		for r := range n {
			ins[r] = tensor.MustNew(tensor.Int64, tensor.Shape{blk * int64(n)})
			fill(ins[r], r, 5)
			outs[r] = tensor.MustNew(tensor.Int64, tensor.Shape{blk})
			tensor.Poison(outs[r])
		}
		must(t, each(comms, func(r int, c *Comm) error {
			return c.ReduceScatter(context.Background(), ins[r], outs[r], reduce.Sum)
		}))
		for r := range n {
			got, _ := tensor.ToFloat64(outs[r])
			for i := range blk {
				want := 0.0
				for q := range n {
					v, _ := tensor.ToFloat64(ins[q])
					want += v[r*blk+i]
				}
				if got[i] != want {
					t.Fatalf("%v: reduce_scatter rank %d elem %d = %v, want %v", tc.lay, r, i, got[i], want)
				}
			}
		}
	}
}

// TestMultiRingMatchesLeader: exact (integer) results are the same on
// both paths, and the leader path (noMultiRing) still works on
// layouts that could take the multi-ring path.
func TestMultiRingMatchesLeader(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch int) { smallMax, chunkBytes = a, ch }(smallMax, chunkBytes)
	smallMax, chunkBytes = 64, 512
	multiRingFrom(t, 0)
	multi := world(t, []int{2, 2, 2}, 10*time.Second)
	noMultiRingFor(t)
	leader := world(t, []int{2, 2, 2}, 10*time.Second)
	if leader[0].path != pathLeader || multi[0].path != pathMulti {
		t.Fatalf("paths %q and %q", multi[0].Path(), leader[0].Path())
	}
	const count = 3001
	a, b := intResults(t, multi, tensor.Int32, count, 11), intResults(t, leader, tensor.Int32, count, 11)
	for r := range a {
		if string(a[r]) != string(b[r]) {
			t.Fatalf("rank %d: multi-ring and leader results differ", r)
		}
	}
	checkAllReduce(t, "leader path on 3x2", leader, tensor.Float32, reduce.Avg, count, 3, func(r int) bool { return r == 1 })
}

// TestPathMismatch: ranks that disagree on the path (the multi-ring
// path off in some processes only) or on the tuning they must share fail every
// collective together with
// ccl.ErrMismatch before any data moves; the communicator stays usable.
func TestPathMismatch(t *testing.T) {
	leaktest.Check(t)
	multiRingFrom(t, 0)
	comms := world(t, []int{2, 2}, 10*time.Second)
	for _, tc := range []struct {
		set, reset func()
		want       string
	}{
		{func() { comms[3].path = pathLeader }, func() { comms[3].path = pathMulti }, "the paths differ"},
		{func() { comms[1].multiMin = 5 }, func() { comms[1].multiMin = 0 }, "the multi-ring minimum differs"},
		{func() { comms[2].testSmallMax = 5 }, func() { comms[2].testSmallMax = 0 }, "the gathered maximum differs"},
		{func() { comms[1].pipe = 1 << 10 }, func() { comms[1].pipe = pipeBytes }, "the pipeline group size differs"},
		{func() { comms[2].pipe = 0 }, func() { comms[2].pipe = pipeBytes }, "of the whole message (0)"},
		{func() { comms[0].testTuning = &[4]int{rhdMax + 1, chunkBytes, ringMinChunk, ringInlineMax} }, func() { comms[0].testTuning = nil }, "an RHD maximum of"},
		{func() { comms[3].testTuning = &[4]int{rhdMax, 4096, ringMinChunk, ringInlineMax} }, func() { comms[3].testTuning = nil }, "a ring chunk of"},
		{func() { comms[1].testTuning = &[4]int{rhdMax, chunkBytes, 0, ringInlineMax} }, func() { comms[1].testTuning = nil }, "a least ring chunk of"},
		{func() { comms[2].testTuning = &[4]int{rhdMax, chunkBytes, ringMinChunk, 0} }, func() { comms[2].testTuning = nil }, "a ring inline maximum of"},
	} {
		tc.set()
		errs := each(comms, func(r int, c *Comm) error {
			x := tensor.MustNew(tensor.Float32, tensor.Shape{1 << 16})
			return c.AllReduce(context.Background(), x, x, reduce.Sum)
		})
		for r, err := range errs {
			if !errors.Is(err, ccl.ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rank %d: %v, want a mismatch saying %q", r, err, tc.want)
			}
		}
		tc.reset()
	}
	must(t, each(comms, func(r int, c *Comm) error { return c.Barrier(context.Background()) }))
}

// TestLinkClosedMidRing: a link closed while the rings run (rank 0's
// link to its ring successor, after the first chunk arrived) fails every
// rank through the links and shared memory, not through the timeout;
// later calls fail with ccl.ErrFailed.
func TestLinkClosedMidRing(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch int) { smallMax, chunkBytes = a, ch }(smallMax, chunkBytes)
	smallMax, chunkBytes = 64, 1024
	multiRingFrom(t, 0)
	defer func() { testNoSplit = false }()
	for i, lay := range [][]int{{2, 2}, {2, 2, 2}, {2, 1}, {2, 2}, {2, 2, 2}} {
		testNoSplit = i == 3
		// A timeout far longer than the test: a rank that only stopped
		// through it would fail the TimeoutError check below.
		comms := world(t, lay, time.Minute)
		if i == 4 {
			for _, c := range comms {
				c.pipe = 16 << 10 // the rings of 16 groups, the failure in the first
			}
		}
		var once sync.Once
		testRingHook = func(c *Comm, s, step, chunk int) {
			if c == comms[0] {
				once.Do(func() { closeLink(c.mate(1).c) })
			}
		}
		errs := each(comms, func(r int, c *Comm) error {
			x := tensor.MustNew(tensor.Float32, tensor.Shape{64 << 10})
			for range 3 {
				if err := c.AllReduce(context.Background(), x, x, reduce.Sum); err != nil {
					return err
				}
			}
			return nil
		})
		testRingHook = nil
		for r, err := range errs {
			// ccl/cpu names the ranks a rank still waited for when another
			// failed the host's communicator (a TimeoutError with the time
			// it waited); only a wait that ran out reports After = timeout.
			var te *ccl.TimeoutError
			if !errors.Is(err, ccl.ErrFailed) || errors.As(err, &te) && te.After == time.Minute {
				t.Fatalf("%v: rank %d: %v, want ErrFailed (not the timeout)", lay, r, err)
			}
		}
		for r, c := range comms {
			if err := c.Barrier(context.Background()); !errors.Is(err, ccl.ErrFailed) {
				t.Fatalf("%v: rank %d after the failure: %v", lay, r, err)
			}
		}
	}
}

// TestScratchAligned: a ring's scratch first sized for a few 2-byte
// elements, then reused for 4- and 8-byte ones, stays aligned for them
// (a tiny scratch once came from Go's tiny allocator, 2-byte aligned).
func TestScratchAligned(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch, in int) { smallMax, chunkBytes, agreeInlineMax = a, ch, in }(smallMax, chunkBytes, agreeInlineMax)
	smallMax, chunkBytes, agreeInlineMax = 0, 7, 0
	comms := world(t, []int{1, 1}, 10*time.Second)
	for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Int32, tensor.Float64, tensor.BFloat16, tensor.Int64} {
		checkAllReduce(t, "scratch "+dt.String(), comms, dt, reduce.Sum, 100, 1, func(int) bool { return false })
	}
	keep := make([][]byte, 0, 70) // live, so that tiny allocations pack
	for i := range 70 {
		b := (&Comm{}).scratch(1 + i%7)
		if p := uintptr(unsafe.Pointer(&b[0])); p%8 != 0 {
			t.Fatalf("scratch(%d) at %#x", 1+i%7, p)
		}
		keep = append(keep, b)
	}
	runtime.KeepAlive(keep)
}
