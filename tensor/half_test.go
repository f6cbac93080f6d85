package tensor_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// f16Value decodes binary16 bits by the textbook formula, independently of
// the package: (-1)^s × 2^(e-15) × 1.f, or 2^-14 × 0.f for e == 0.
func f16Value(h uint16) float64 {
	s, e, f := h>>15, int(h>>10)&0x1f, float64(h&0x3ff)
	var v float64
	switch e {
	case 0x1f:
		if f != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	case 0:
		v = math.Ldexp(f, -24)
	default:
		v = math.Ldexp(1024+f, e-25)
	}
	if s == 1 {
		v = -v
	}
	return v
}

// bf16Value decodes bfloat16 bits by formula: bias 127, 7 fraction bits.
func bf16Value(b uint16) float64 {
	s, e, f := b>>15, int(b>>7)&0xff, float64(b&0x7f)
	var v float64
	switch e {
	case 0xff:
		if f != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	case 0:
		v = math.Ldexp(f, -133)
	default:
		v = math.Ldexp(128+f, e-134)
	}
	if s == 1 {
		v = -v
	}
	return v
}

// same reports whether a and b are the same float64, telling -0 from +0 and
// treating all NaNs alike.
func same(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b && math.Signbit(a) == math.Signbit(b)
}

func TestF16Exhaustive(t *testing.T) {
	prev := math.Inf(-1)
	for i := 0; i < 1<<16; i++ {
		h := tensor.F16(i)
		want := f16Value(uint16(i))
		f32, f64 := h.Float32(), h.Float64()
		if !same(float64(f32), want) || !same(f64, want) {
			t.Fatalf("F16(%#04x): Float32 %v, Float64 %v, want %v", i, f32, f64, want)
		}
		if h.IsNaN() != math.IsNaN(want) {
			t.Fatalf("F16(%#04x).IsNaN() = %v", i, h.IsNaN())
		}
		if math.IsNaN(want) {
			// NaN: quiet, same sign, payload kept; signalling NaNs come back
			// with the quiet bit set.
			q := h | 0x0200
			if b := math.Float32bits(f32); b>>31 != uint32(i>>15) || b&0x00400000 == 0 || (b>>13)&0x3ff != uint32(q&0x3ff) {
				t.Fatalf("F16(%#04x).Float32() bits %#08x", i, b)
			}
			if b := math.Float64bits(f64); b>>63 != uint64(i>>15) || b&(1<<51) == 0 || (b>>42)&0x3ff != uint64(q&0x3ff) {
				t.Fatalf("F16(%#04x).Float64() bits %#016x", i, b)
			}
			if got := tensor.F16FromFloat32(f32); got != q {
				t.Fatalf("F16FromFloat32(F16(%#04x).Float32()) = %#04x, want %#04x", i, got, q)
			}
			if got := tensor.F16FromFloat64(f64); got != q {
				t.Fatalf("F16FromFloat64(F16(%#04x).Float64()) = %#04x, want %#04x", i, got, q)
			}
			continue
		}
		if got := tensor.F16FromFloat32(f32); got != h {
			t.Fatalf("F16FromFloat32(%v) = %#04x, want %#04x", f32, got, i)
		}
		if got := tensor.F16FromFloat64(f64); got != h {
			t.Fatalf("F16FromFloat64(%v) = %#04x, want %#04x", f64, got, i)
		}
		// Positive values 0x0000..0x7c00 are increasing in their bits.
		if i <= 0x7c00 {
			if !(want > prev) && i > 0 {
				t.Fatalf("F16(%#04x) = %v not above %v", i, want, prev)
			}
			prev = want
		}
	}
}

func TestBF16Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		b := tensor.BF16(i)
		want := bf16Value(uint16(i))
		f32, f64 := b.Float32(), b.Float64()
		if !same(float64(f32), want) || !same(f64, want) {
			t.Fatalf("BF16(%#04x): Float32 %v, Float64 %v, want %v", i, f32, f64, want)
		}
		if math.Float32bits(f32) != uint32(i)<<16 {
			t.Fatalf("BF16(%#04x).Float32() bits %#08x, want the top half", i, math.Float32bits(f32))
		}
		if b.IsNaN() != math.IsNaN(want) {
			t.Fatalf("BF16(%#04x).IsNaN() = %v", i, b.IsNaN())
		}
		if math.IsNaN(want) {
			q := b | 0x0040
			if bits := math.Float64bits(f64); bits>>63 != uint64(i>>15) || bits&(1<<51) == 0 || (bits>>45)&0x7f != uint64(q&0x7f) {
				t.Fatalf("BF16(%#04x).Float64() bits %#016x", i, bits)
			}
			if got := tensor.BF16FromFloat32(f32); got != q {
				t.Fatalf("BF16FromFloat32(BF16(%#04x).Float32()) = %#04x, want %#04x", i, got, q)
			}
			if got := tensor.BF16FromFloat64(f64); got != q {
				t.Fatalf("BF16FromFloat64(BF16(%#04x).Float64()) = %#04x, want %#04x", i, got, q)
			}
			continue
		}
		if got := tensor.BF16FromFloat32(f32); got != b {
			t.Fatalf("BF16FromFloat32(%v) = %#04x, want %#04x", f32, got, i)
		}
		if got := tensor.BF16FromFloat64(f64); got != b {
			t.Fatalf("BF16FromFloat64(%v) = %#04x, want %#04x", f64, got, i)
		}
	}
}

// TestHalfwayExhaustive checks every rounding boundary between neighbouring
// finite values (and the overflow boundary): the exact midpoint rounds to
// the even neighbour, the float64 (and float32) values next to it to the
// nearer one.
func TestHalfwayExhaustive(t *testing.T) {
	type format struct {
		name    string
		maxBits uint16 // largest finite, positive
		value   func(uint16) float64
		from64  func(float64) uint16
		from32  func(float32) uint16
	}
	formats := []format{
		{"float16", 0x7bff, f16Value,
			func(x float64) uint16 { return uint16(tensor.F16FromFloat64(x)) },
			func(x float32) uint16 { return uint16(tensor.F16FromFloat32(x)) }},
		{"bfloat16", 0x7f7f, bf16Value,
			func(x float64) uint16 { return uint16(tensor.BF16FromFloat64(x)) },
			func(x float32) uint16 { return uint16(tensor.BF16FromFloat32(x)) }},
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			for i := uint16(0); i <= f.maxBits; i++ {
				lo := f.value(i)
				hi := f.value(i + 1) // for maxBits: Inf; use 2^(emax+1) instead
				if i == f.maxBits {
					hi = lo + (lo - f.value(i-1)) // the next value if the exponent went on
				}
				mid := (lo + hi) / 2 // exact: a few significant bits
				even := i
				if i&1 == 1 {
					even = i + 1
				}
				below, above := math.Nextafter(mid, 0), math.Nextafter(mid, math.Inf(1))
				for _, s := range []uint16{0, 0x8000} {
					sg := 1.0
					if s != 0 {
						sg = -1
					}
					check := func(x float64, want uint16) {
						if got := f.from64(sg * x); got != want|s {
							t.Fatalf("%s from float64 %v (%#x): %#04x, want %#04x", f.name, sg*x, math.Float64bits(sg*x), got, want|s)
						}
					}
					check(mid, even)
					check(below, i)
					check(above, i+1)
					// float32: the midpoint is exact; its neighbours are float32 ones.
					m32 := float32(mid)
					if float64(m32) != mid {
						t.Fatalf("midpoint %v not a float32", mid)
					}
					check32 := func(x float32, want uint16) {
						if got := f.from32(float32(sg) * x); got != want|s {
							t.Fatalf("%s from float32 %v: %#04x, want %#04x", f.name, float32(sg)*x, got, want|s)
						}
					}
					check32(m32, even)
					check32(math.Nextafter32(m32, 0), i)
					check32(math.Nextafter32(m32, float32(math.Inf(1))), i+1)
				}
			}
		})
	}
}

func TestF16Known(t *testing.T) {
	tests := []struct {
		in   float64
		want tensor.F16
	}{
		{0, 0x0000},
		{math.Copysign(0, -1), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{0.1, 0x2e66},
		{1.0 / 3, 0x3555},
		{math.Pi, 0x4248},
		{65504, 0x7bff},             // largest finite
		{65519.99, 0x7bff},          // just below the overflow boundary
		{65520, 0x7c00},             // halfway to 2^16: ties to even, which is Inf
		{-65520, 0xfc00},            //
		{1e6, 0x7c00},               // overflow
		{math.MaxFloat64, 0x7c00},   //
		{math.Inf(1), 0x7c00},       //
		{math.Inf(-1), 0xfc00},      //
		{0x1p-14, 0x0400},           // smallest normal
		{0x1p-14 - 0x1p-24, 0x03ff}, // largest subnormal
		{0x1p-24, 0x0001},           // smallest subnormal
		{-0x1p-24, 0x8001},          //
		{0x1p-25, 0x0000},           // half the smallest subnormal: ties to even (0)
		{-0x1p-25, 0x8000},          // underflow keeps the sign
		{0x1p-25 + 0x1p-77, 0x0001}, // just above half: rounds up
		{3 * 0x1p-25, 0x0002},       // 1.5 × 2^-24: tie between 1 and 2 → 2
		{5 * 0x1p-25, 0x0002},       // 2.5 × 2^-24: tie between 2 and 3 → 2
		{0x1p-26, 0x0000},           //
		{math.SmallestNonzeroFloat64, 0x0000},
		{-math.SmallestNonzeroFloat64, 0x8000},
		{1 + 0x1p-11, 0x3c00},           // tie → even (1.0)
		{1 + 3*0x1p-11, 0x3c02},         // tie → even (1 + 2^-9)
		{1 + 0x1p-11 + 0x1p-40, 0x3c01}, // just above the tie: from float32 this would round twice
		{1 + 0x1p-11 - 0x1p-40, 0x3c00}, // just below
		{2049, 0x6800},                  // tie between 2048 and 2050 → 2048
		{2051, 0x6802},                  // tie between 2050 and 2052 → 2052
		{0x1p-14 - 0x1p-25, 0x0400},     // tie between largest subnormal (odd) and smallest normal
		{0x1p-14 - 0x1p-25 - 0x1p-60, 0x03ff},
	}
	for _, tc := range tests {
		if got := tensor.F16FromFloat64(tc.in); got != tc.want {
			t.Errorf("F16FromFloat64(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
		if f := float32(tc.in); float64(f) == tc.in {
			if got := tensor.F16FromFloat32(f); got != tc.want {
				t.Errorf("F16FromFloat32(%v) = %#04x, want %#04x", f, got, tc.want)
			}
		}
	}
	// Double rounding through float32 gets this case wrong; the direct
	// conversion must not.
	x := 1 + 0x1p-11 + 0x1p-40
	if viaF32 := tensor.F16FromFloat32(float32(x)); viaF32 != 0x3c00 {
		t.Errorf("F16FromFloat32(float32(%v)) = %#04x, want 0x3c00 (the double-rounded answer)", x, viaF32)
	}
	for _, tc := range []struct {
		h    tensor.F16
		want float64
	}{{0x3c00, 1}, {0x7bff, 65504}, {0x0001, 0x1p-24}, {0x8001, -0x1p-24}, {0x03ff, 0x1p-14 - 0x1p-24}, {0xfc00, math.Inf(-1)}} {
		if got := tc.h.Float64(); got != tc.want {
			t.Errorf("F16(%#04x).Float64() = %v, want %v", tc.h, got, tc.want)
		}
		if got := tc.h.Float32(); float64(got) != tc.want {
			t.Errorf("F16(%#04x).Float32() = %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestF16NaN(t *testing.T) {
	tests := []struct {
		bits uint32 // float32
		want tensor.F16
	}{
		{0x7fc00000, 0x7e00}, // canonical quiet NaN
		{0xffc00000, 0xfe00}, // negative
		{0x7f800001, 0x7e00}, // signalling, payload only in low bits: stays NaN, becomes quiet
		{0x7fa00000, 0x7f00}, // signalling with a high payload bit: kept, quiet set
		{0x7fffe000, 0x7fff}, // all payload bits that fit
		{0xff802000, 0xfe01}, //
	}
	for _, tc := range tests {
		f := math.Float32frombits(tc.bits)
		if got := tensor.F16FromFloat32(f); got != tc.want {
			t.Errorf("F16FromFloat32(%#08x) = %#04x, want %#04x", tc.bits, got, tc.want)
		}
		d := math.Float64frombits(uint64(tc.bits>>31)<<63 | 0x7ff<<52 | uint64(tc.bits&0x7fffff)<<29)
		if got := tensor.F16FromFloat64(d); got != tc.want {
			t.Errorf("F16FromFloat64(%#016x) = %#04x, want %#04x", math.Float64bits(d), got, tc.want)
		}
	}
	if got := tensor.F16FromFloat64(math.NaN()); !got.IsNaN() || got&0x0200 == 0 {
		t.Errorf("F16FromFloat64(NaN) = %#04x, want a quiet NaN", got)
	}
}

func TestBF16Known(t *testing.T) {
	maxBF16 := 0x1p128 - 0x1p120
	tests := []struct {
		in   float64
		want tensor.BF16
	}{
		{0, 0x0000},
		{math.Copysign(0, -1), 0x8000},
		{1, 0x3f80},
		{-2, 0xc000},
		{3, 0x4040},
		{math.Pi, 0x4049},
		{0.1, 0x3dcd},
		{1 + 0x1p-8, 0x3f80},           // tie → even
		{1 + 3*0x1p-8, 0x3f82},         // tie → even
		{1 + 0x1p-8 + 0x1p-30, 0x3f81}, // above the tie; through float32 it rounds twice
		{maxBF16, 0x7f7f},
		{math.MaxFloat32, 0x7f80},            // above the overflow boundary
		{0x1p128 - 0x1p119, 0x7f80},          // the boundary: tie → Inf (even)
		{0x1p128 - 0x1p119 - 0x1p90, 0x7f7f}, //
		{1e39, 0x7f80},                       // beyond float32, too
		{-1e39, 0xff80},
		{0x1p-126, 0x0080},          // smallest normal
		{0x1p-133, 0x0001},          // smallest subnormal
		{0x1p-134, 0x0000},          // half of it: tie → 0
		{-0x1p-134, 0x8000},         //
		{0x1p-134 + 0x1p-180, 0x01}, //
		{3 * 0x1p-134, 0x0002},      // tie between 1 and 2 → 2
		{1e-300, 0x0000},
		{-1e-300, 0x8000},
		{math.Inf(1), 0x7f80},
		{math.Inf(-1), 0xff80},
	}
	for _, tc := range tests {
		if got := tensor.BF16FromFloat64(tc.in); got != tc.want {
			t.Errorf("BF16FromFloat64(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
		if f := float32(tc.in); float64(f) == tc.in {
			if got := tensor.BF16FromFloat32(f); got != tc.want {
				t.Errorf("BF16FromFloat32(%v) = %#04x, want %#04x", f, got, tc.want)
			}
		}
	}
	x := 1 + 0x1p-8 + 0x1p-30
	if viaF32 := tensor.BF16FromFloat32(float32(x)); viaF32 != 0x3f80 {
		t.Errorf("BF16FromFloat32(float32(%v)) = %#04x, want 0x3f80 (the double-rounded answer)", x, viaF32)
	}
	// NaNs never round into Inf, whatever their payload.
	for _, bits := range []uint32{0x7f800001, 0x7f80ffff, 0x7fffffff, 0xff800001, 0x7fc00000, 0xffffffff} {
		got := tensor.BF16FromFloat32(math.Float32frombits(bits))
		want := tensor.BF16(bits>>16) | 0x40
		if got != want || !got.IsNaN() {
			t.Errorf("BF16FromFloat32(%#08x) = %#04x, want NaN %#04x", bits, got, want)
		}
	}
	if got := tensor.BF16FromFloat64(math.NaN()); !got.IsNaN() {
		t.Errorf("BF16FromFloat64(NaN) = %#04x", got)
	}
	if got := tensor.BF16FromFloat64(math.Float64frombits(0xfff0000000000001)); got != 0xffc0 {
		t.Errorf("BF16FromFloat64(-sNaN) = %#04x, want 0xffc0", got)
	}
}

// refRounder rounds by exact arbitrary-precision arithmetic to the nearest value of a
// 16-bit format, ties to the even bit pattern: an independent reference for
// F16FromFloat64 and BF16FromFloat64.
type refRounder struct {
	vals []float64 // vals[i] is the value of bits i, for all finite positive bits
	next float64   // the value the next pattern (Inf) would have if finite
	inf  uint16
}

func newRefRounder(maxBits uint16, value func(uint16) float64) *refRounder {
	r := &refRounder{inf: maxBits + 1}
	for i := uint16(0); i <= maxBits; i++ {
		r.vals = append(r.vals, value(i))
	}
	r.next = 2*r.vals[maxBits] - r.vals[maxBits-1]
	return r
}

func (r *refRounder) round(x float64) uint16 {
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
	}
	a := math.Abs(x)
	if a >= r.next {
		return sign | r.inf
	}
	// i: the largest pattern with vals[i] <= a.
	i := sort.Search(len(r.vals), func(k int) bool { return r.vals[k] > a }) - 1
	if r.vals[i] == a {
		return sign | uint16(i)
	}
	hi := r.next
	if i+1 < len(r.vals) {
		hi = r.vals[i+1]
	}
	// Exact differences: 2200 bits cover any two float64s' binary expansions.
	const prec = 2200
	dlo := new(big.Float).SetPrec(prec).Sub(big.NewFloat(a), big.NewFloat(r.vals[i]))
	dhi := new(big.Float).SetPrec(prec).Sub(big.NewFloat(hi), big.NewFloat(a))
	if dlo.Acc() != big.Exact || dhi.Acc() != big.Exact {
		panic("inexact reference arithmetic")
	}
	switch c := dlo.Cmp(dhi); {
	case c < 0:
		return sign | uint16(i)
	case c > 0:
		return sign | uint16(i+1)
	}
	if i&1 == 0 {
		return sign | uint16(i)
	}
	return sign | uint16(i+1)
}

var (
	refF16  = newRefRounder(0x7bff, f16Value)
	refBF16 = newRefRounder(0x7f7f, bf16Value)
)

// testFloats returns float64s that stress rounding into a format with the
// given finite values: random bits, random values across the format's
// exponent range, and values at and near the midpoints between neighbours.
func testFloats(rng *rand.Rand, r *refRounder, n int) []float64 {
	out := make([]float64, 0, n)
	minExp, maxExp := math.Ilogb(r.vals[1])-3, math.Ilogb(r.next)+2
	for len(out) < n {
		var x float64
		switch rng.IntN(4) {
		case 0:
			x = math.Float64frombits(rng.Uint64())
			if math.IsNaN(x) {
				continue
			}
		case 1:
			e := minExp + rng.IntN(maxExp-minExp+1)
			x = math.Ldexp(1+float64(rng.Uint64()>>12)*0x1p-52, e)
		default:
			i := rng.IntN(len(r.vals))
			hi := r.next
			if i+1 < len(r.vals) {
				hi = r.vals[i+1]
			}
			x = (r.vals[i] + hi) / 2
			switch rng.IntN(4) {
			case 0: // the midpoint itself
			case 1:
				x = math.Nextafter(x, math.Inf(1-2*rng.IntN(2)))
			case 2: // a few float64 ulps off
				x += float64(rng.IntN(2001)-1000) * (math.Nextafter(x, math.Inf(1)) - x)
			case 3: // a tiny relative offset, below float32 resolution
				x *= 1 + float64(rng.IntN(2001)-1000)*0x1p-40
			}
		}
		if rng.IntN(2) == 0 {
			x = -x
		}
		out = append(out, x)
	}
	return out
}

func TestF16FromFloat64Reference(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 10000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, x := range testFloats(rng, refF16, n) {
		want := tensor.F16(refF16.round(x))
		if got := tensor.F16FromFloat64(x); got != want {
			t.Fatalf("F16FromFloat64(%v = %#016x) = %#04x, want %#04x", x, math.Float64bits(x), got, want)
		}
		// float32 inputs: exact in float64, so the reference applies as is.
		f := float32(x)
		if !math.IsInf(float64(f), 0) || math.IsInf(x, 0) {
			want := tensor.F16(refF16.round(float64(f)))
			if got := tensor.F16FromFloat32(f); got != want {
				t.Fatalf("F16FromFloat32(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
			}
		}
	}
}

func TestBF16FromFloat64Reference(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 10000
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, x := range testFloats(rng, refBF16, n) {
		want := tensor.BF16(refBF16.round(x))
		if got := tensor.BF16FromFloat64(x); got != want {
			t.Fatalf("BF16FromFloat64(%v = %#016x) = %#04x, want %#04x", x, math.Float64bits(x), got, want)
		}
		f := float32(x)
		if math.IsInf(float64(f), 0) && !math.IsInf(x, 0) {
			continue // x overflows float32; the float32 path cannot see it
		}
		want = tensor.BF16(refBF16.round(float64(f)))
		if got := tensor.BF16FromFloat32(f); got != want {
			t.Fatalf("BF16FromFloat32(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
}

// TestBF16FromFloat32Random compares the bit-trick float32 path with the
// float64 path (exact for float32 inputs) over random float32 bit patterns.
func TestBF16FromFloat32Random(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		bits := rng.Uint32()
		f := math.Float32frombits(bits)
		got, want := tensor.BF16FromFloat32(f), tensor.BF16FromFloat64(float64(f))
		if math.IsNaN(float64(f)) {
			want = tensor.BF16(bits>>16) | 0x40
		}
		if got != want {
			t.Fatalf("BF16FromFloat32(%#08x) = %#04x, via float64 %#04x", bits, got, want)
		}
		h, h64 := tensor.F16FromFloat32(f), tensor.F16FromFloat64(float64(f))
		if math.IsNaN(float64(f)) {
			h64 = tensor.F16(bits>>16)&0x8000 | 0x7e00 | tensor.F16(bits>>13)&0x3ff
		}
		if h != h64 {
			t.Fatalf("F16FromFloat32(%#08x) = %#04x, via float64 %#04x", bits, h, h64)
		}
	}
}

func FuzzF16RoundTrip(f *testing.F) {
	f.Add(uint16(0x3c00), 1.0)
	f.Add(uint16(0x7bff), 65520.0)
	f.Add(uint16(0x0001), 0x1p-25)
	f.Add(uint16(0x7c01), math.Inf(-1))
	f.Add(uint16(0xfe00), 1+0x1p-11+0x1p-40)
	f.Add(uint16(0x8000), -0x1p-14+0x1p-25)
	f.Fuzz(func(t *testing.T, bits uint16, x float64) {
		h := tensor.F16(bits)
		want := h
		if h.IsNaN() {
			want |= 0x0200
		}
		if got := tensor.F16FromFloat32(h.Float32()); got != want {
			t.Fatalf("F16 %#04x → float32 → %#04x, want %#04x", bits, got, want)
		}
		if got := tensor.F16FromFloat64(h.Float64()); got != want {
			t.Fatalf("F16 %#04x → float64 → %#04x, want %#04x", bits, got, want)
		}
		b := tensor.BF16(bits)
		wantB := b
		if b.IsNaN() {
			wantB |= 0x40
		}
		if got := tensor.BF16FromFloat64(b.Float64()); got != wantB {
			t.Fatalf("BF16 %#04x → float64 → %#04x, want %#04x", bits, got, wantB)
		}
		if math.IsNaN(x) {
			if !tensor.F16FromFloat64(x).IsNaN() || !tensor.BF16FromFloat64(x).IsNaN() {
				t.Fatalf("NaN %#016x did not stay NaN", math.Float64bits(x))
			}
			return
		}
		if got, want := tensor.F16FromFloat64(x), tensor.F16(refF16.round(x)); got != want {
			t.Fatalf("F16FromFloat64(%v = %#016x) = %#04x, want %#04x", x, math.Float64bits(x), got, want)
		}
		if got, want := tensor.BF16FromFloat64(x), tensor.BF16(refBF16.round(x)); got != want {
			t.Fatalf("BF16FromFloat64(%v = %#016x) = %#04x, want %#04x", x, math.Float64bits(x), got, want)
		}
	})
}
