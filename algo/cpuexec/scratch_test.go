package cpuexec_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// filled is an int32 tensor of count elements, element i = f(i).
func filled(t *testing.T, count int64, f func(i int64) int32) *tensor.Tensor {
	t.Helper()
	v := make([]int32, count)
	for i := range v {
		v[i] = f(int64(i))
	}
	return tensor.FromSlice(v)
}

func clone(t *testing.T, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	c, err := x.Clone()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sumCall runs one int32 sum of the inputs on every rank (in place:
// into the inputs, which the executor then stages) and checks every
// output exactly.
func sumCall(t *testing.T, xs []*cpuexec.Executor, ins []*tensor.Tensor, inPlace bool, what string) {
	t.Helper()
	n := len(xs)
	want := make([][]float64, n)
	for r := range n {
		want[r] = reference(t, xs[0].Plan().Collective, reduce.Sum, ins, r)
	}
	outs := make([]*tensor.Tensor, n)
	for r := range n {
		outs[r] = ins[r]
		if !inPlace {
			outs[r] = tensor.MustNew(tensor.Int32, ins[r].Shape())
			tensor.Poison(outs[r])
		}
	}
	if err := errors.Join(each(n, func(r int) error { return xs[r].Run(context.Background(), ins[r], outs[r], reduce.Sum) })...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for r := range n {
		if err := tensor.CloseTo(outs[r], want[r], 0, 0); err != nil {
			t.Errorf("%s, rank %d: %v", what, r, err)
		}
	}
}

// TestStaleScratch: the packet plan's scratch holds nothing that passes
// for a later call's packets. (1) A large call in place (so its input is
// staged into the shared segment) leaves elements 3 where a smaller
// call's scratch lies (the regions follow the sizes), so an LL word
// there reads as a packet of flag 3 (the third call) carrying 3: without
// the scratch zeroed at the change of sizes a reader takes it before the
// peer's packet lands. (2) Calls across the
// flag's cycle (2^32-1 calls) stay exact.
func TestStaleScratch(t *testing.T) {
	leaktest.Check(t)
	cpuexec.SetDirect(false) // stage the inputs into the shared segment
	t.Cleanup(func() { cpuexec.SetDirect(true) })
	p, err := library.Build("allreduce_packet", 2, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	small := func(call int64) []*tensor.Tensor {
		return []*tensor.Tensor{
			filled(t, 1024, func(i int64) int32 { return int32(1000 + 10*call + i) }),
			filled(t, 1024, func(i int64) int32 { return int32(5000 - i) }),
		}
	}
	t.Run("sizes", func(t *testing.T) {
		for round := range 5 {
			xs := ranks(t, p, 20*time.Second)
			big := filled(t, 1<<18, func(int64) int32 { return 3 })
			sumCall(t, xs, []*tensor.Tensor{big, clone(t, big)}, true, "large call (flag 1)")
			for call := int64(2); call <= 8; call++ {
				sumCall(t, xs, small(call), false, "small call")
			}
			if t.Failed() {
				t.Fatalf("round %d", round)
			}
		}
	})
	t.Run("flag cycle", func(t *testing.T) {
		xs := ranks(t, p, 20*time.Second)
		big := filled(t, 1<<16, func(i int64) int32 { return int32(i) })
		sumCall(t, xs, []*tensor.Tensor{big, clone(t, big)}, true, "first call (flag 1)")
		// The next calls have flags 0xFFFFFFFE, 0xFFFFFFFF, 1, 2, 3: the
		// cycle ends and starts again, with the halves of the double
		// scratch still alternating.
		for _, x := range xs {
			x.SetSeq(2*0xFFFFFFFF - 2)
		}
		for call := int64(0); call < 5; call++ {
			if call%2 == 0 {
				sumCall(t, xs, small(call), false, "small call")
			} else {
				sumCall(t, xs, []*tensor.Tensor{big, clone(t, big)}, true, "large call")
			}
		}
	})
}
