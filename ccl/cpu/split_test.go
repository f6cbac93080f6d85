package cpu_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// TestPart: the parts tile the buffer in rank order, element-aligned.
func TestPart(t *testing.T) {
	for _, tc := range []struct{ bytes, es, n int }{{0, 4, 3}, {4, 4, 3}, {40, 4, 3}, {44, 4, 4}, {1 << 20, 2, 7}, {24, 8, 1}} {
		at := 0
		for r := range tc.n {
			lo, hi := cpu.Part(tc.bytes, tc.es, tc.n, r)
			if lo != at || hi < lo || lo%tc.es != 0 || hi%tc.es != 0 {
				t.Fatalf("%+v: rank %d part [%d, %d) after %d", tc, r, lo, hi, at)
			}
			at = hi
		}
		if at != tc.bytes {
			t.Fatalf("%+v: parts end at %d", tc, at)
		}
	}
}

// TestAllReduceSplitProperty: random sizes (fewer elements than ranks
// too), dtypes and rank counts on the direct and single-copy paths, with
// a mid that doubles each rank's part: every rank gets twice the
// allreduce, bit for bit the same, in place or not, into poisoned
// outputs; mid sees exactly its Part.
func TestAllReduceSplitProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	for i := range 6 {
		opts, oname := smallOpts, "direct"
		if i%2 == 1 {
			opts, oname = smallCMA, "cma"
		}
		splitCase(t, rng, opts, oname, 0, i >= 2)
	}
	// Every tensor in the arena: the shm path, which pushes the part mid
	// left into every peer's output.
	t.Run("shm", func(t *testing.T) {
		withArena(t, 1)
		for i := range 4 {
			splitCase(t, rng, smallShm, "shm", 40_000, i%2 == 1)
		}
	})
}

// splitCase runs one random AllReduceSplit (at least minCount elements),
// or with piped an AllReducePiped of random groups (down to one element,
// so that some parts are empty), and checks every rank's output and that
// mid saw exactly the rank's Part of each group, in group order.
func splitCase(t *testing.T, rng *rand.Rand, opts cpu.Options, oname string, minCount int, piped bool) {
	t.Helper()
	dts := []tensor.DType{tensor.Float32, tensor.Int64, tensor.BFloat16, tensor.Float64}
	n := 1 + rng.IntN(4)
	dt := dts[rng.IntN(len(dts))]
	count := []int{1 + rng.IntN(n), 1 + rng.IntN(5000)}[rng.IntN(2)] + minCount
	inPlace := rng.IntN(2) == 1
	size, es := count*dt.Size(), dt.Size()
	group := 0
	if piped {
		group = []int{1 + rng.IntN(size), size / (2 + rng.IntN(8)), es * (1 + rng.IntN(3))}[rng.IntN(3)]
	}
	// The parts mid must see on each rank: Part of each group (PipeCuts,
	// checked on its own by TestPipeCuts).
	cuts := cpu.PipeCuts(size, group, es)
	wantParts := make([][][2]int, n)
	for g := range len(cuts) - 1 {
		gl, gh := cuts[g], cuts[g+1]
		for r := range n {
			lo, hi := cpu.Part(gh-gl, es, n, r)
			wantParts[r] = append(wantParts[r], [2]int{gl + lo, gl + hi})
		}
	}
	name := fmt.Sprintf("%s/%d ranks/%s/%d/in place %v/group %d", oname, n, dt, count, inPlace, group)
	sends := make([]*tensor.Tensor, n)
	outs := make([]*tensor.Tensor, n)
	want := make([]float64, count)
	for r := range n {
		sends[r] = tensor.MustNew(dt, shape(count))
		vals := make([]float64, count)
		for j := range vals {
			vals[j] = float64(rng.IntN(64) - 32)
			want[j] += 2 * vals[j]
		}
		if err := tensor.SetFromFloat64(sends[r], vals); err != nil {
			t.Fatal(err)
		}
		outs[r] = tensor.MustNew(dt, shape(count))
		tensor.Poison(outs[r])
	}
	errs := runRanks(t, opts, n, 0, func(ctx context.Context, c ccl.Comm) error {
		cc := c.(*cpu.Comm)
		if !cc.Split() {
			return fmt.Errorf("Split() false on %s", cc.Path())
		}
		r := c.Rank()
		in := sends[r]
		if inPlace {
			copy(outs[r].Bytes(), sends[r].Bytes())
			in = outs[r]
		}
		calls := 0
		mid := func(part []byte) error {
			if calls >= len(wantParts[r]) {
				return fmt.Errorf("mid called %d times, want %d", calls+1, len(wantParts[r]))
			}
			lo, hi := wantParts[r][calls][0], wantParts[r][calls][1]
			calls++
			if len(part) != hi-lo || len(part) > 0 && &part[0] != &outs[r].Bytes()[lo] {
				return fmt.Errorf("mid call %d got %d bytes, want recv[%d:%d]", calls, len(part), lo, hi)
			}
			return reduce.Reduce(reduce.Sum, dt, part, part, part)
		}
		var err error
		if piped {
			err = cc.AllReducePiped(ctx, in, outs[r], reduce.Sum, group, mid)
		} else {
			err = cc.AllReduceSplit(ctx, in, outs[r], reduce.Sum, mid)
		}
		if err == nil && calls != len(wantParts[r]) {
			err = fmt.Errorf("mid called %d times, want %d", calls, len(wantParts[r]))
		}
		if p := cc.PathFor(ccl.KindAllReduce, 1<<30); err == nil && oname == "shm" && p != "shm" {
			return fmt.Errorf("path %q, want shm", p)
		}
		return err
	})
	if !noErrors(t, errs) {
		t.Fatal(name)
	}
	got, _ := tensor.ToFloat64(outs[0])
	for j := range want {
		if got[j] != want[j] {
			t.Fatalf("%s: element %d = %v, want %v", name, j, got[j], want[j])
		}
	}
	for r := 1; r < n; r++ {
		if !sameBytes(outs[r], outs[0]) {
			t.Fatalf("%s: rank %d's bits differ from rank 0's", name, r)
		}
	}
}

// TestAllReduceSplitErrors: a failing mid fails every rank (the others
// wait at the barrier after it) and the communicator; a staged
// communicator refuses AllReduceSplit on every rank alike.
func TestAllReduceSplitErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, opts := range []cpu.Options{smallOpts, smallCMA} {
		var after []error
		errs := runRanks(t, opts, 3, 0, func(ctx context.Context, c ccl.Comm) error {
			x := tensor.MustNew(tensor.Float32, shape(3000))
			err := c.(*cpu.Comm).AllReduceSplit(ctx, x, x, reduce.Sum, func([]byte) error {
				if c.Rank() == 1 {
					return boom
				}
				return nil
			})
			if e := c.Barrier(ctx); !errors.Is(e, ccl.ErrFailed) {
				after = append(after, fmt.Errorf("rank %d: barrier after: %v", c.Rank(), e))
			}
			return err
		})
		for r, err := range errs {
			if r == 1 && !errors.Is(err, boom) || r != 1 && !errors.Is(err, ccl.ErrFailed) {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if len(after) > 0 {
			t.Fatal(after)
		}
	}
	errs := runRanks(t, smallStaged, 2, 0, func(ctx context.Context, c ccl.Comm) error {
		x := tensor.MustNew(tensor.Float32, shape(10))
		return c.(*cpu.Comm).AllReduceSplit(ctx, x, x, reduce.Sum, func([]byte) error { return nil })
	})
	for r, err := range errs {
		if !errors.Is(err, ccl.ErrBadArgs) {
			t.Fatalf("staged rank %d: %v", r, err)
		}
	}
}

// TestAllReducePipedErrors: a mid that fails in a middle group fails
// every rank and the communicator, and no later group reaches mid; ranks
// that cut into different groups, or a negative group, fail with an
// error naming it and leave every output as it was.
func TestAllReducePipedErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, opts := range []cpu.Options{smallOpts, smallCMA} {
		calls := make([]int, 3)
		errs := runRanks(t, opts, 3, 0, func(ctx context.Context, c ccl.Comm) error {
			x := tensor.MustNew(tensor.Float32, shape(3000))
			r := c.Rank()
			err := c.(*cpu.Comm).AllReducePiped(ctx, x, x, reduce.Sum, 1000, func([]byte) error {
				calls[r]++
				if r == 1 && calls[r] == 2 {
					return boom
				}
				return nil
			})
			if e := c.Barrier(ctx); !errors.Is(e, ccl.ErrFailed) {
				return fmt.Errorf("barrier after: %v (call: %w)", e, err)
			}
			return err
		})
		for r, err := range errs {
			if r == 1 && !errors.Is(err, boom) || r != 1 && !errors.Is(err, ccl.ErrFailed) {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if calls[1] != 2 {
			t.Fatalf("rank 1's mid ran %d times after failing in group 2 of 14", calls[1])
		}
	}
	for _, tc := range []struct {
		name   string
		groups []int
		want   error
		says   string
	}{
		{"groups differ", []int{4000, 3000}, ccl.ErrMismatch, "groups"},
		{"piped and split", []int{4000, 0}, ccl.ErrMismatch, "groups"},
		{"negative", []int{-4, -4}, ccl.ErrBadArgs, "group of -4 bytes"},
	} {
		errs := runRanks(t, smallCMA, 2, 0, func(ctx context.Context, c ccl.Comm) error {
			send := tensor.MustNew(tensor.Float32, shape(3000))
			recv := tensor.MustNew(tensor.Float32, shape(3000))
			tensor.Poison(recv)
			before := string(recv.Bytes())
			err := c.(*cpu.Comm).AllReducePiped(ctx, send, recv, reduce.Sum, tc.groups[c.Rank()], func([]byte) error {
				return errors.New("mid ran")
			})
			if string(recv.Bytes()) != before {
				return fmt.Errorf("output changed (call: %w)", err)
			}
			// Still usable after an agreed failure.
			if e := c.AllReduce(ctx, send, recv, reduce.Sum); e != nil {
				return fmt.Errorf("allreduce after: %v (call: %w)", e, err)
			}
			return err
		})
		for r, err := range errs {
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Fatalf("%s: rank %d: %v, want %v saying %q", tc.name, r, err, tc.want, tc.says)
			}
		}
	}
}

// TestAllReducePipedOverlaps: mid on group 0 finishes only once its rank
// has reduced group 1, which a rank that ran mid before reducing further
// would never do (mid then fails after a bounded wait; no time is
// asserted). The result is still right on every rank.
func TestAllReducePipedOverlaps(t *testing.T) {
	for _, opts := range []cpu.Options{smallOpts, smallCMA} {
		const n, count, group = 2, 4096, 4096 // groups of 256, 4 x 896 and 256 floats
		reduced := make([]chan struct{}, n)
		for r := range reduced {
			reduced[r] = make(chan struct{})
		}
		restore := cpu.SetReduced(func(rank, g int) {
			if g == 1 {
				close(reduced[rank])
			}
		})
		outs := make([]*tensor.Tensor, n)
		errs := runRanks(t, opts, n, 0, func(ctx context.Context, c ccl.Comm) error {
			r := c.Rank()
			x := tensor.MustNew(tensor.Float32, shape(count))
			fill := make([]float64, count)
			for i := range fill {
				fill[i] = float64(r + i%7)
			}
			if err := tensor.SetFromFloat64(x, fill); err != nil {
				return err
			}
			outs[r] = tensor.MustNew(tensor.Float32, shape(count))
			g := 0
			return c.(*cpu.Comm).AllReducePiped(ctx, x, outs[r], reduce.Sum, group, func([]byte) error {
				if g++; g > 1 {
					return nil
				}
				select {
				case <-reduced[r]:
					return nil
				case <-time.After(5 * time.Second):
					return errors.New("group 1 was not reduced while mid ran on group 0")
				}
			})
		})
		restore()
		if !noErrors(t, errs) {
			t.FailNow()
		}
		for r := range n {
			got, _ := tensor.ToFloat64(outs[r])
			for i, v := range got {
				if want := float64(1 + 2*(i%7)); v != want {
					t.Fatalf("rank %d element %d = %v, want %v", r, i, v, want)
				}
			}
		}
	}
}

// TestPipeCuts: AllReducePiped's groups, by hand for the sizes that
// matter (PipeBytes 8 MiB), then as properties over random arguments:
// ascending non-empty groups of whole elements from 0 to size, at most
// group bytes each, the first and the last a quarter of group.
func TestPipeCuts(t *testing.T) {
	const M = 1 << 20
	for _, tc := range []struct {
		size, group, es int
		want            []int
	}{
		{64 * M, 0, 4, []int{0, 64 * M}},
		{4 * M, 8 * M, 4, []int{0, 4 * M}}, // two edges or less: one group
		{4*M + 4, 8 * M, 4, []int{0, 2 * M, 2*M + 4, 4*M + 4}},
		{8 * M, 8 * M, 4, []int{0, 2 * M, 6 * M, 8 * M}},
		{16 * M, 8 * M, 4, []int{0, 2 * M, 8 * M, 14 * M, 16 * M}},
		{12000, 1000, 4, []int{0, 248, 1208, 2168, 3128, 4088, 5048, 6008, 6968, 7928, 8888, 9848, 10808, 11752, 12000}},
		{10, 4, 2, []int{0, 2, 6, 8, 10}}, // edge: one element
		{0, 8 * M, 4, []int{0, 0}},
	} {
		if got := cpu.PipeCuts(tc.size, tc.group, tc.es); !slices.Equal(got, tc.want) {
			t.Errorf("PipeCuts(%d, %d, %d) = %v, want %v", tc.size, tc.group, tc.es, got, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(17, 1))
	for range 2000 {
		es := []int{1, 2, 4, 8}[rng.IntN(4)]
		size := es * rng.IntN(1+[]int{100, 10000, 1 << 22}[rng.IntN(3)])
		group := es * (1 + rng.IntN(1+size/es))
		cuts := cpu.PipeCuts(size, group, es)
		bad := func(why string) {
			t.Fatalf("PipeCuts(%d, %d, %d) = %v: %s", size, group, es, cuts, why)
		}
		if len(cuts) < 2 || cuts[0] != 0 || cuts[len(cuts)-1] != size {
			bad("not from 0 to size")
		}
		if len(cuts) == 2 {
			if size > 2*max(es, group/4/es*es) {
				bad("one group for more than two edges")
			}
			continue
		}
		edge := max(es, group/4/es*es)
		if cuts[1] != edge || size-cuts[len(cuts)-2] != edge {
			bad(fmt.Sprintf("edges are not %d bytes", edge))
		}
		for g := range len(cuts) - 1 {
			if l := cuts[g+1] - cuts[g]; l <= 0 || l > group || cuts[g]%es != 0 {
				bad(fmt.Sprintf("group %d has %d bytes from %d", g, l, cuts[g]))
			}
		}
	}
}
