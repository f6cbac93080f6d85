package decoder

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// TestNarrowMatchesTensor: RandomFill's inlined roundings, with their
// fallback, give tensor's conversions bit for bit: random values over
// every magnitude the types hold and around them, halfway cases, the
// ends of the normal ranges, zeros, infinities and NaN.
func TestNarrowMatchesTensor(t *testing.T) {
	bf := func(v float64) uint16 {
		h, ok := narrowBF16(v)
		if !ok {
			h = uint16(tensor.BF16FromFloat64(v))
		}
		return h
	}
	f16 := func(v float64) uint16 {
		h, ok := narrowF16(v)
		if !ok {
			h = uint16(tensor.F16FromFloat64(v))
		}
		return h
	}
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 65504, 65520, -65520, 6.103515625e-05, 5.96e-08, 3.3895313892515355e+38, 3.4e38,
		1.1754943508222875e-38, 1e-45, math.Inf(1), math.Inf(-1), math.NaN(),
		1 + 0x1p-8, 1 + 0x1p-8 + 0x1p-40, 1 + 3*0x1p-8, 1 + 0x1p-11, 1 + 3*0x1p-11, 1 + 0x1p-11 - 0x1p-50}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		vals = append(vals, math.Ldexp(r.Float64()*2-1, r.IntN(300)-150))
	}
	for _, v := range vals {
		if got, want := bf(v), uint16(tensor.BF16FromFloat64(v)); got != want {
			t.Fatalf("bfloat16 of %v (%#x): %#04x, tensor gives %#04x", v, math.Float64bits(v), got, want)
		}
		if got, want := f16(v), uint16(tensor.F16FromFloat64(v)); got != want {
			t.Fatalf("float16 of %v (%#x): %#04x, tensor gives %#04x", v, math.Float64bits(v), got, want)
		}
	}
}
