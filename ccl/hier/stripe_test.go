package hier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// stripesFrom sets stripeMinBytes (read at Join) for the rest of the test.
func stripesFrom(t *testing.T, n int) {
	old := stripeMinBytes
	stripeMinBytes = n
	t.Cleanup(func() { stripeMinBytes = old })
}

// stripesByRank makes rank r join with EnvStripes = s[r] ("" unset) for
// the rest of the test.
func stripesByRank(t *testing.T, s ...string) {
	testStripes = func(r int) string { return s[r%len(s)] }
	t.Cleanup(func() { testStripes = nil })
}

// checkStripeLinks: every leader (on the multi-ring path every rank)
// holds links of every stripe to its counterparts on the neighbouring
// hosts (one pair when there are two hosts) and none else; other ranks
// hold only stripe 0.
func checkStripeLinks(t *testing.T, name string, comms []*Comm) {
	t.Helper()
	for r, c := range comms {
		for s := 1; s < max(c.stripes, 1+len(c.extra)); s++ {
			for q := range c.n {
				want := c.k > 1 && c.stripeLinks() && c.hostOf[q] != c.me && q-c.hostLo[c.hostOf[q]] == c.lrank &&
					(c.hostOf[q] == (c.me+1)%c.k || c.hostOf[q] == (c.me+c.k-1)%c.k)
				if got := c.link(s, q) != nil; got != want {
					t.Fatalf("%s: rank %d: stripe %d link to rank %d: %v, want %v", name, r, s, q, got, want)
				}
			}
		}
	}
}

// TestStripedAllReduceProperty: 1 to 4 stripes (EnvStripes) on layouts
// that run the leader ring (one rank per host, unequal hosts, and a
// multi-ring layout below its multi-ring minimum), random sizes
// (including fewer elements than stripes, and counts that split
// unevenly), dtypes (float16 and bfloat16 too), ops, chunk and piece
// sizes, in-place choices, against the float64 reference into poisoned
// outputs, with every rank's bits identical; every stripe's ring ran;
// balanced rings ran too.
func TestStripedAllReduceProperty(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b, ch, in, rp, ri, fl, mc int) {
		smallMax, rhdMax, chunkBytes, agreeInlineMax, reducePieceBytes, ringInlineMax, flushBytes, ringMinChunk = a, b, ch, in, rp, ri, fl, mc
	}(smallMax, rhdMax, chunkBytes, agreeInlineMax, reducePieceBytes, ringInlineMax, flushBytes, ringMinChunk)
	agreeInlineMax, smallMax = 0, 0 // every size takes the leader ring
	stripesFrom(t, 0)
	var balancedRuns atomic.Int64
	testChunkNumber = func(c *Comm, n uint64) uint64 { balancedRuns.Add(1); return n }
	defer func() { testChunkNumber = nil }()
	multiRingFrom(t, 1<<30)
	var seen [MaxStripes]atomic.Int64 // chunks received per stripe
	testRingHook = func(c *Comm, s, step, chunk int) { seen[s].Add(1) }
	defer func() { testRingHook = nil }()
	rng := rand.New(rand.NewPCG(16, 5))
	dts := []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.BFloat16, tensor.Float16}
	ops := []reduce.Op{reduce.Sum, reduce.Max, reduce.Min, reduce.Avg}
	for _, lay := range [][]int{{1, 1}, {1, 1, 1}, {1, 1, 1, 1}, {2, 1}, {1, 2, 1}, {2, 2}, {1, 1, 1, 1, 1}} {
		for S := 1; S <= 4; S++ {
			stripesByRank(t, strconv.Itoa(S))
			comms := world(t, lay, 10*time.Second)
			name := fmt.Sprintf("%v/%d stripes", lay, S)
			if comms[0].stripes != S {
				t.Fatalf("%s: %d stripes", name, comms[0].stripes)
			}
			checkStripeLinks(t, name, comms)
			for i := range seen {
				seen[i].Store(0)
			}
			for it := range 4 {
				dt, op := dts[rng.IntN(len(dts))], ops[rng.IntN(len(ops))]
				if op == reduce.Avg && !dt.IsFloat() {
					op = reduce.Sum
				}
				count := int64(S + rng.IntN(5000))
				if it == 0 {
					count = int64(1 + rng.IntN(S)) // maybe fewer elements than stripes
				}
				chunkBytes = []int{1, 7, 100, 1000, 4096, 1 << 20}[rng.IntN(6)]
				rhdMax = []int{0, 0, 1 << 30}[rng.IntN(3)]
				reducePieceBytes = []int{1, 24, 100, 4096, 128 << 10}[rng.IntN(5)]
				ringInlineMax = []int{0, 100, inlineMax}[rng.IntN(3)] // pipelined or one-goroutine rings
				flushBytes = []int{1000, LinkBuffer}[rng.IntN(2)]
				ringMinChunk = []int{4, 100, 32 << 10}[rng.IntN(3)] // balanced or fixed stripes
				mask := rng.Uint64()
				name := fmt.Sprintf("%s/%s/%s/%d/chunk %d/rhd %d/piece %d/ring inline %d/flush %d/min chunk %d", name, dt, op, count, chunkBytes, rhdMax, reducePieceBytes, ringInlineMax, flushBytes, ringMinChunk)
				checkAllReduce(t, name, comms, dt, op, count, rng.Uint64(), func(r int) bool { return mask>>r&1 == 1 })
			}
			// One more that certainly splits into every stripe (a ring,
			// not RHD, of stripes with one-goroutine rings: a balanced
			// ring may leave a link without a chunk).
			rhdMax, ringInlineMax, ringMinChunk = 0, inlineMax, 32<<10
			for i := range seen {
				seen[i].Store(0)
			}
			checkAllReduce(t, name+"/last", comms, tensor.Float32, reduce.Sum, int64(S*1000+3), 7, func(int) bool { return false })
			for s := range MaxStripes {
				if got := seen[s].Load(); (got > 0) != (s < S) {
					t.Fatalf("%s: stripe %d received %d chunks", name, s, got)
				}
			}
		}
	}
	if balancedRuns.Load() == 0 {
		t.Fatal("no balanced ring ran")
	}
}

// TestStripedMultiRing: every local rank's ring of the multi-ring path
// from multiStripeMin runs in stripes (EnvStripes) on its own links to
// its counterparts: results against the float64 reference with
// identical bits on every rank, every stripe of every local rank's ring
// carried chunks, and PathFor says so. Unset, the multi-ring has
// DefaultMultiStripes, used from multiStripeMin only.
func TestStripedMultiRing(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b, in, ri, mc int) {
		smallMax, rhdMax, agreeInlineMax, ringInlineMax, ringMinChunk = a, b, in, ri, mc
	}(smallMax, rhdMax, agreeInlineMax, ringInlineMax, ringMinChunk)
	// The multi-ring for every size, rings in fixed stripes (each stripe
	// then certainly gets a part) from 64 bytes.
	agreeInlineMax, smallMax, rhdMax, ringInlineMax, ringMinChunk = 0, 0, 0, inlineMax, 32<<10
	stripesFrom(t, 64)
	multiRingFrom(t, 0)
	pipeFrom(t, 0)
	var mu sync.Mutex
	seen := map[[2]int]int{} // chunks received by (local rank, stripe)
	testRingHook = func(c *Comm, s, step, chunk int) {
		mu.Lock()
		seen[[2]int{c.lrank, s}]++
		mu.Unlock()
	}
	defer func() { testRingHook = nil }()
	rng := rand.New(rand.NewPCG(14, 2))
	for _, lay := range [][]int{{2, 2}, {2, 2, 2}, {3, 3}, {2, 2, 2, 2}} {
		for _, S := range []int{2, 3} {
			stripesByRank(t, strconv.Itoa(S))
			comms := world(t, lay, 10*time.Second)
			name := fmt.Sprintf("%v/%d stripes", lay, S)
			if comms[0].path != pathMulti {
				t.Fatalf("%s: path %q", name, comms[0].Path())
			}
			checkStripeLinks(t, name, comms)
			for it := range 3 {
				dt := []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.BFloat16}[rng.IntN(4)]
				op := []reduce.Op{reduce.Sum, reduce.Max, reduce.Avg}[rng.IntN(3)]
				if op == reduce.Avg && !dt.IsFloat() {
					op = reduce.Sum
				}
				// Messages from multiStripeMin (16 KiB here).
				count := int64(multiFactor*64/2 + rng.IntN(4000))
				mu.Lock()
				clear(seen)
				mu.Unlock()
				mask := rng.Uint64()
				checkAllReduce(t, fmt.Sprintf("%s/%d/%s/%s/%d", name, it, dt, op, count), comms, dt, op, count, rng.Uint64(), func(r int) bool { return mask>>r&1 == 1 })
				mu.Lock()
				for j := range lay[0] {
					for s := range MaxStripes {
						if got := seen[[2]int{j, s}]; (got > 0) != (s < S) {
							t.Fatalf("%s: local rank %d's ring: stripe %d received %d chunks", name, j, s, got)
						}
					}
				}
				mu.Unlock()
			}
			want := fmt.Sprintf("multi-ring ring, %d stripes", S)
			if got := comms[0].PathFor(ccl.KindAllReduce, 1<<20); got != want {
				t.Errorf("%s: PathFor = %q, want %q", name, got, want)
			}
			for _, c := range comms {
				c.Close()
			}
		}
	}
	testStripes = nil
	comms := world(t, []int{2, 2}, 10*time.Second)
	c := comms[1]
	if c.stripes != DefaultMultiStripes || len(c.extra) != DefaultMultiStripes-1 {
		t.Fatalf("unset: %d stripes, %d extra", c.stripes, len(c.extra))
	}
	// Messages of multiStripeMin - 4 and multiStripeMin bytes.
	for _, tc := range []struct {
		bytes int
		want  string
	}{
		{multiFactor*64 - 4, "multi-ring ring"},
		{multiFactor * 64, fmt.Sprintf("multi-ring ring, %d stripes", DefaultMultiStripes)},
	} {
		if got := c.PathFor(ccl.KindAllReduce, tc.bytes); got != tc.want {
			t.Fatalf("unset: PathFor(%d) = %q, want %q", tc.bytes, got, tc.want)
		}
		mu.Lock()
		clear(seen)
		mu.Unlock()
		checkAllReduce(t, fmt.Sprintf("unset %d bytes", tc.bytes), comms, tensor.Float32, reduce.Sum, int64(tc.bytes/4), 5, func(r int) bool { return r == 2 })
		mu.Lock()
		for j := range 2 {
			if got := seen[[2]int{j, 1}]; (got > 0) != strings.Contains(tc.want, "stripes") {
				t.Fatalf("unset, %d bytes: local rank %d's ring: stripe 1 received %d chunks", tc.bytes, j, got)
			}
		}
		mu.Unlock()
	}
}

// TestRingStripesBySize: a striped leader ring runs on at most
// narrowStripes links below wideMin (wideFactor x stripeMinBytes) and on all
// of them from there, every leader alike, with results against the
// reference; PathFor says the same.
func TestRingStripesBySize(t *testing.T) {
	for _, tc := range []struct{ stripes, min, bytes, want int }{
		{8, 256 << 10, 256 << 10, 4},
		{8, 256 << 10, 8<<20 - 1, 4},
		{8, 256 << 10, 8 << 20, 8},
		{16, 256 << 10, 1 << 30, 16},
		{2, 256 << 10, 1 << 30, 2},
		{2, 256 << 10, 1 << 10, 2},
		{6, 100, 3199, 4},
		{6, 100, 3200, 6},
	} {
		c := &Comm{stripes: tc.stripes, stripeMin: tc.min}
		if got := c.ringStripes(tc.bytes); got != tc.want {
			t.Errorf("%d stripes from %d: ringStripes(%d) = %d, want %d", tc.stripes, tc.min, tc.bytes, got, tc.want)
		}
	}
	leaktest.Check(t)
	defer func(a, b, in, ri, mc int) {
		smallMax, rhdMax, agreeInlineMax, ringInlineMax, ringMinChunk = a, b, in, ri, mc
	}(smallMax, rhdMax, agreeInlineMax, ringInlineMax, ringMinChunk)
	// Every size takes the leader ring, in fixed stripes (each stripe
	// then certainly gets a part).
	agreeInlineMax, smallMax, rhdMax, ringInlineMax, ringMinChunk = 0, 0, 0, inlineMax, 32<<10
	stripesFrom(t, 256) // wide from 8 KiB
	multiRingFrom(t, 1<<30)
	stripesByRank(t, "6")
	var seen [MaxStripes]atomic.Int64 // chunks received per stripe
	testRingHook = func(c *Comm, s, step, chunk int) { seen[s].Add(1) }
	defer func() { testRingHook = nil }()
	for _, lay := range [][]int{{1, 1}, {1, 1, 1}, {2, 1, 1}} {
		comms := world(t, lay, 10*time.Second)
		for _, tc := range []struct {
			count int64 // float32 elements
			want  int
		}{{100, 4}, {2047, 4}, {2048, 6}, {5001, 6}} {
			name := fmt.Sprintf("%v/%d elements", lay, tc.count)
			for i := range seen {
				seen[i].Store(0)
			}
			checkAllReduce(t, name, comms, tensor.Float32, reduce.Sum, tc.count, uint64(tc.count), func(r int) bool { return r == 1 })
			for s := range MaxStripes {
				if got := seen[s].Load(); (got > 0) != (s < tc.want) {
					t.Fatalf("%s: stripe %d received %d chunks, want stripes 0-%d only", name, s, got, tc.want-1)
				}
			}
			if got, want := comms[0].PathFor(ccl.KindAllReduce, int(tc.count)*4), fmt.Sprintf("leader ring, %d stripes", tc.want); got != want {
				t.Errorf("%s: PathFor = %q, want %q", name, got, want)
			}
		}
	}
}

// TestStripedMatchesUnstriped: integer results are the same with and
// without stripes (and float ones agree with the reference on both).
func TestStripedMatchesUnstriped(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch, in int) { smallMax, chunkBytes, agreeInlineMax = a, ch, in }(smallMax, chunkBytes, agreeInlineMax)
	smallMax, chunkBytes, agreeInlineMax = 64, 512, 0
	stripesFrom(t, 1024)
	stripesByRank(t, "1")
	one := world(t, []int{1, 1, 1}, 10*time.Second)
	stripesByRank(t, "3")
	three := world(t, []int{1, 1, 1}, 10*time.Second)
	const count = 3001
	a, b := intResults(t, one, tensor.Int64, count, 13), intResults(t, three, tensor.Int64, count, 13)
	for r := range a {
		if string(a[r]) != string(b[r]) {
			t.Fatalf("rank %d: striped and unstriped results differ", r)
		}
	}
	if got := three[0].PathFor(ccl.KindAllReduce, count*8); got != "leader ring, 3 stripes" {
		t.Fatalf("PathFor = %q", got)
	}
}

// TestStripeMismatch: ranks whose stripe settings differ (testStripes
// differing in their processes, so that they even made different
// numbers of links, or stripeMinBytes) fail every collective together with
// ccl.ErrMismatch naming the variable before any output is written (and
// the communicator is not failed: every collective gets that verdict);
// no link is left parked.
func TestStripeMismatch(t *testing.T) {
	leaktest.Check(t)
	defer func(a, in int) { smallMax, agreeInlineMax = a, in }(smallMax, agreeInlineMax)
	smallMax, agreeInlineMax = 64, 0
	stripesFrom(t, 0)
	for _, tc := range []struct {
		lay     []int
		stripes []string
		set     func(comms []*Comm)
		want    string
	}{
		{[]int{1, 1, 1}, []string{"4", "2", "4"}, nil, "the stripes differ"},
		{[]int{1, 1, 1}, []string{"2", "4", "2"}, nil, "the stripes differ"},
		{[]int{1, 1}, []string{"", "1"}, nil, "the stripes differ"},
		{[]int{2, 1, 1}, []string{"3", "3", "3", "1"}, nil, "the stripes differ"},
		{[]int{1, 1}, []string{"4"}, func(comms []*Comm) { comms[1].stripeMin = 5 }, "the stripe minimum differs"},
	} {
		stripesByRank(t, tc.stripes...)
		comms := world(t, tc.lay, 10*time.Second)
		if tc.set != nil {
			tc.set(comms)
		}
		name := fmt.Sprintf("%v %q", tc.lay, tc.stripes)
		xs := make([]*tensor.Tensor, len(comms))
		ys := make([]*tensor.Tensor, len(comms))
		errs := each(comms, func(r int, c *Comm) error {
			xs[r] = tensor.MustNew(tensor.Float32, tensor.Shape{1 << 14})
			fill(xs[r], r, 3)
			ys[r] = tensor.MustNew(tensor.Float32, tensor.Shape{1 << 14})
			tensor.Poison(ys[r])
			return c.AllReduce(context.Background(), xs[r], ys[r], reduce.Sum)
		})
		poison := tensor.MustNew(tensor.Float32, tensor.Shape{1 << 14})
		tensor.Poison(poison)
		for r, err := range errs {
			if !errors.Is(err, ccl.ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: rank %d: %v, want a mismatch saying %q", name, r, err, tc.want)
			}
			if string(ys[r].Bytes()) != string(poison.Bytes()) {
				t.Fatalf("%s: rank %d's output changed", name, r)
			}
		}
		// Not failed: every later collective gets the same verdict.
		for r, err := range each(comms, func(r int, c *Comm) error { return c.Barrier(context.Background()) }) {
			if !errors.Is(err, ccl.ErrMismatch) || errors.Is(err, ccl.ErrFailed) {
				t.Fatalf("%s: rank %d: barrier after the mismatch: %v", name, r, err)
			}
		}
		ep.mu.Lock()
		parked := len(ep.parked)
		ep.mu.Unlock()
		if parked != 0 {
			t.Fatalf("%s: %d links left parked", name, parked)
		}
	}
	// A bad setting fails Join with ErrBadArgs naming it.
	t.Cleanup(func() { testStripes = nil })
	for _, v := range []string{"0", "17", "four"} {
		testStripes = func(int) string { return v }
		nonce, _ := (&Backend{}).NewID()
		id, err := MakeID(nonce, []int{0, 1}, []string{"127.0.0.1:1", "127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = (&Backend{}).Join(context.Background(), ccl.Config{ID: id, Rank: 0, Size: 2, Timeout: time.Second})
		if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), "stripes") {
			t.Fatalf("stripes %s: Join: %v", v, err)
		}
	}
}

// TestStripeLinkClosed: one stripe's link closed while the striped ring
// runs (rank 0's link of the last stripe, after that stripe's first
// chunk arrived) fails every rank through the links and shared memory,
// not through the timeout; later calls fail with ccl.ErrFailed.
func TestStripeLinkClosed(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch int) { smallMax, chunkBytes = a, ch }(smallMax, chunkBytes)
	smallMax, chunkBytes = 64, 1024
	stripesFrom(t, 0)
	for _, tc := range []struct {
		lay []int
		S   int
	}{{[]int{1, 1}, 4}, {[]int{1, 1, 1}, 3}, {[]int{2, 1}, 2}, {[]int{1, 1, 1, 1}, 4}, {[]int{1, 2, 1}, 4}} {
		stripesByRank(t, strconv.Itoa(tc.S))
		// A timeout far longer than the test: a rank that only stopped
		// through it would fail the TimeoutError check below.
		comms := world(t, tc.lay, time.Minute)
		var once sync.Once
		testRingHook = func(c *Comm, s, step, chunk int) {
			if c == comms[0] && s == tc.S-1 {
				once.Do(func() { closeLink(c.link(s, c.hostLo[1]).c) })
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
			var te *ccl.TimeoutError
			if !errors.Is(err, ccl.ErrFailed) || errors.As(err, &te) && te.After == time.Minute {
				t.Fatalf("%v: rank %d: %v, want ErrFailed (not the timeout)", tc.lay, r, err)
			}
		}
		// The first failure is on the closed link, at one of its ends;
		// errors after it carry its text.
		named := false
		for _, err := range errs {
			named = named || strings.Contains(err.Error(), fmt.Sprintf("(stripe %d)", tc.S-1))
		}
		if !named {
			t.Fatalf("%v: no rank's error names stripe %d: %v", tc.lay, tc.S-1, errs)
		}
		for r, c := range comms {
			if err := c.Barrier(context.Background()); !errors.Is(err, ccl.ErrFailed) {
				t.Fatalf("%v: rank %d after the failure: %v", tc.lay, r, err)
			}
		}
	}
}

// TestStripedAbort: Abort on one rank while its striped ring runs ends
// every rank's allreduce with ccl.ErrFailed.
func TestStripedAbort(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch int) { smallMax, chunkBytes = a, ch }(smallMax, chunkBytes)
	smallMax, chunkBytes = 64, 1024
	stripesFrom(t, 0)
	stripesByRank(t, "4")
	comms := world(t, []int{1, 1, 1}, time.Minute)
	var once sync.Once
	testRingHook = func(c *Comm, s, step, chunk int) {
		if c == comms[1] && s == 2 {
			once.Do(func() { c.Abort(errors.New("test abort")) })
		}
	}
	defer func() { testRingHook = nil }()
	errs := each(comms, func(r int, c *Comm) error {
		x := tensor.MustNew(tensor.Float32, tensor.Shape{64 << 10})
		return c.AllReduce(context.Background(), x, x, reduce.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ccl.ErrFailed) {
			t.Fatalf("rank %d: %v, want ErrFailed", r, err)
		}
	}
	if !strings.Contains(errs[1].Error(), "test abort") {
		t.Fatalf("rank 1: %v, want the abort's reason", errs[1])
	}
}

// TestInlineMaxMismatch: ranks on different hosts that differ in
// agreeInlineMax (which sizes every agreement message) fail the join with
// ccl.ErrMismatch naming the agreement inline maximum; ranks that share a non-default
// one join and reduce.
func TestInlineMaxMismatch(t *testing.T) {
	leaktest.Check(t)
	join := func(perHost []int) ([]*Comm, []error) { return joinWorld(t, perHost, 10*time.Second) }
	defer func() { testInlineMax = nil }()
	for _, lay := range [][]int{{1, 1}, {2, 1}, {1, 1, 1}} {
		// The last rank (alone on the last host) differs.
		testInlineMax = func(r int) int {
			if r == ranksOf(lay)-1 {
				return 1024
			}
			return 4096
		}
		comms, errs := join(lay)
		var mismatch int
		for r, err := range errs {
			switch {
			case err == nil:
			case errors.Is(err, ccl.ErrMismatch) && strings.Contains(err.Error(), "agreement inline maximum"):
				mismatch++
			default:
				t.Errorf("%v rank %d: %v", lay, r, err)
			}
		}
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
		if mismatch == 0 {
			t.Fatalf("%v: every rank joined although the last differs in its agreement inline maximum: %v", lay, errs)
		}
		// The same non-default value everywhere: joined, and an
		// allreduce that rides inline with it (and not with the default)
		// is right.
		testInlineMax = func(int) int { return 8192 }
		comms, errs = join(lay)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%v rank %d: %v", lay, r, err)
			}
		}
		checkAllReduce(t, fmt.Sprint(lay), comms, tensor.Float32, reduce.Sum, 1500, 3, func(int) bool { return false })
		for _, c := range comms {
			c.Close()
		}
	}
}

func ranksOf(perHost []int) (s int) {
	for _, x := range perHost {
		s += x
	}
	return s
}

// TestHelloStripeRefused: an authenticated peer whose hello names a
// stripe outside its count (or a count of 0 or above MaxStripes, or an
// agreeInlineMax above MaxInline) is refused and logged, and nothing is
// parked.
func TestHelloStripeRefused(t *testing.T) {
	leaktest.Check(t)
	te, logs := testEndpoint(t, modeTLS)
	defer te.ln.Close()
	k := connKey{from: 1, to: 0}
	copy(k.comm[:], "stripe test")
	for _, tc := range []struct {
		stripe, stripes, inline int
		why                     string
	}{
		{2, 2, 0, "stripe 2 of 2"},
		{0, 0, 0, "stripe 0 of 0"},
		{3, MaxStripes + 1, 0, fmt.Sprintf("stripe 3 of %d", MaxStripes+1)},
		{0xffff, 0xffff, 0, "stripe 65535 of 65535"},
		{0, 1, MaxInline + 1, fmt.Sprintf("an inline maximum of %d bytes", MaxInline+1)},
		{0, 1, -1, "an inline maximum of 4294967295 bytes"},
	} {
		tc0 := k
		tc0.stripe = uint16(tc.stripe)
		c, err := te.cfg.Dial(context.Background(), te.addr, "data")
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFlush(c, encodeHello(dataMagic, tc0, tc.stripes, tc.inline)); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, te, logs, c, tc.why)
	}
	// A good one is parked and claimed with its count.
	k.stripe = 1
	c, err := dialPeer(context.Background(), te.cfg, te.addr, k, 3, 4096, modeTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, n, inline, err := te.claim(ctx, k)
	if err != nil || n != 3 || inline != 4096 {
		t.Fatalf("claim: %d stripes, inline %d, %v", n, inline, err)
	}
	s.Close()
}

func FuzzHello(f *testing.F) {
	k := connKey{from: 7, to: 3, stripe: 2}
	copy(k.comm[:], "fuzz")
	f.Add(encodeHello(dataMagic, k, 4, 4096))
	f.Add(encodeHello(plainMagic, k, 3, 0))
	f.Add(encodeHello(sealMagic, k, 8, 1024))
	f.Add(encodeHello(dataMagic, k, 2, MaxInline))
	f.Add(encodeHello(dataMagic, k, 4, MaxInline+1))
	f.Add(encodeHello(dataMagic, connKey{}, 0, 0))
	f.Add(encodeHello("XXXX", k, 4, 0))
	f.Add(encodeHello(dataMagic, k, 4, 0)[:20])
	f.Fuzz(func(t *testing.T, h []byte) {
		m, k, n, inline, err := parseHello(h)
		if err != nil {
			return
		}
		if n < 1 || n > MaxStripes || int(k.stripe) >= n || (m != dataMagic && m != plainMagic && m != sealMagic) || inline < 0 || inline > MaxInline {
			t.Fatalf("accepted %q stripe %d of %d, inline %d", m, k.stripe, n, inline)
		}
		if string(encodeHello(m, k, n, inline)) != string(h) {
			t.Fatalf("hello %x does not round-trip", h)
		}
	})
}

// TestStripeStalled: a leader whose one stripe stops reading (stuck
// after that stripe's first chunk) makes its neighbours' waits on that
// stripe run out at the communicator's timeout, as an unstriped ring's
// do: a ccl.TimeoutError on a rank that waited, and every rank's
// allreduce fails (none hangs), the stuck rank's once it is released.
func TestStripeStalled(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch int) { smallMax, chunkBytes = a, ch }(smallMax, chunkBytes)
	smallMax, chunkBytes = 64, 1024
	stripesFrom(t, 0)
	stripesByRank(t, "3")
	// Joined with a long timeout (a loaded machine may take longer than
	// 300 ms for the handshakes of every stripe), then short.
	comms := world(t, []int{1, 1, 1}, 10*time.Second)
	for _, c := range comms {
		c.timeout = 300 * time.Millisecond
	}
	release := make(chan struct{})
	var once sync.Once
	testRingHook = func(c *Comm, s, step, chunk int) {
		if c == comms[0] && s == 1 {
			once.Do(func() { <-release })
		}
	}
	defer func() { testRingHook = nil }()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := tensor.MustNew(tensor.Float32, tensor.Shape{256 << 10})
			errs[r] = c.AllReduce(context.Background(), x, x, reduce.Sum)
		}()
	}
	// Ranks 1 and 2 end on their own (the timeout, or the links their
	// neighbour closed then); then rank 0 is released.
	done := make(chan struct{})
	go func() {
		for _, c := range comms[1:] {
			for !c.failed.Load() {
				time.Sleep(5 * time.Millisecond)
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang guard, not a measurement
		close(release)
		wg.Wait()
		t.Fatalf("ranks 1 and 2 still running: %v", errs)
	}
	close(release)
	wg.Wait()
	timedOut := false
	for r, err := range errs {
		var te *ccl.TimeoutError
		timedOut = timedOut || errors.As(err, &te)
		if err == nil {
			t.Fatalf("rank %d: no error", r)
		}
	}
	if !timedOut {
		t.Fatalf("no rank reports a timeout: %v", errs)
	}
}

// TestStripedPlaintext: with plaintext data links every stripe's link is
// switched to plain TCP after its own authentication, and the striped
// ring gives the same results.
func TestStripedPlaintext(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch int) { smallMax, chunkBytes = a, ch }(smallMax, chunkBytes)
	smallMax, chunkBytes = 64, 1000
	stripesFrom(t, 0)
	stripesByRank(t, "3")
	usePlainEndpoint(t)
	comms := world(t, []int{1, 1, 1}, 10*time.Second)
	checkStripeLinks(t, "plaintext", comms)
	links := 0
	for _, c := range comms {
		c.eachLink(func(p *peer) {
			links++
			if _, ok := p.c.(*net.TCPConn); !ok || !p.bare {
				t.Fatalf("rank %d's stripe-%d link to rank %d is a %T (bare %v)", c.rank, p.stripe, p.rank, p.c, p.bare)
			}
		})
	}
	if links != 3*2*3 {
		t.Fatalf("%d links, want 18 (3 ranks, 2 neighbours, 3 stripes)", links)
	}
	checkAllReduce(t, "plaintext striped f32", comms, tensor.Float32, reduce.Sum, 20000, 1, func(r int) bool { return r == 0 })
	checkAllReduce(t, "plaintext striped bf16", comms, tensor.BFloat16, reduce.Avg, 777, 2, func(int) bool { return false })
}
