package tensor

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
)

// randomStream selects the PCG stream used by Random; changing it changes
// every generated tensor.
const randomStream = 0x63686f7275732d31 // "chorus-1"

// Random fills t with deterministic pseudo-random data from seed: floats
// uniform in [-1, 1), integers uniform in [-16, 16) clamped to the dtype
// (so [0, 16) for uint8, and sums of 8 int8 values do not overflow), bools
// true or false with equal probability. It is RandomRange(t, seed, -1, 1) for
// floats and RandomRange(t, seed, -16, 16) otherwise.
func Random(t *Tensor, seed uint64) error {
	if _, err := hostBytes(t, "Random"); err != nil {
		return err
	}
	if t.dtype.IsFloat() {
		return RandomRange(t, seed, -1, 1)
	}
	return RandomRange(t, seed, -16, 16)
}

// RandomRange fills t with deterministic pseudo-random data from seed:
//
//   - float dtypes: uniform in [lo, hi), which must be finite; each value is
//     drawn in float64 and rounded to the dtype, and draws that round outside
//     [lo, hi) are redrawn, so every element lies in [lo, hi);
//   - integer dtypes: uniform over the integers n with lo <= n < hi that the
//     dtype can hold (infinite bounds allowed: -Inf, +Inf is the full range);
//   - bool: true or false with equal probability (the range only has to be
//     valid).
//
// It is an error if lo < hi does not hold or no value of the dtype lies in
// [lo, hi); then t is unchanged. The values depend only on seed, dtype, lo,
// hi and the element count, and are the same on every machine: they come
// from the math/rand/v2 PCG generator (seeded with seed and a fixed stream),
// one 64-bit output per element (more for a redraw), turned into values by
// code in this package with no platform-dependent step (the golden test in
// random_test.go pins them).
func RandomRange(t *Tensor, seed uint64, lo, hi float64) error {
	b, err := hostBytes(t, "RandomRange")
	if err != nil {
		return err
	}
	dt := t.dtype
	if math.IsNaN(lo) || math.IsNaN(hi) || !(lo < hi) {
		return fmt.Errorf("tensor: RandomRange %s: invalid range [%v, %v)", dt, lo, hi)
	}
	if dt.IsFloat() && (math.IsInf(lo, 0) || math.IsInf(hi, 0)) {
		return fmt.Errorf("tensor: RandomRange %s: range [%v, %v) must be finite", dt, lo, hi)
	}
	src := rand.NewPCG(seed, randomStream)
	switch dt {
	case Bool:
		for i := range b {
			b[i] = byte(src.Uint64() >> 63)
		}
		return nil
	case Int8, Int16, Int32, Int64, Uint8:
		a, z, err := intBounds(dt, lo, hi)
		if err != nil {
			return err
		}
		switch dt {
		case Int8:
			randomInts(data[int8](t), src, a, z)
		case Int16:
			randomInts(data[int16](t), src, a, z)
		case Int32:
			randomInts(data[int32](t), src, a, z)
		case Int64:
			randomInts(data[int64](t), src, a, z)
		case Uint8:
			randomInts(b, src, a, z)
		}
		return nil
	}
	switch dt {
	case Float16:
		err = randomFloats(data[F16](t), src, lo, hi, f16Overflow, F16FromFloat64, F16.Float64)
	case BFloat16:
		err = randomFloats(data[BF16](t), src, lo, hi, bf16Overflow, BF16FromFloat64, BF16.Float64)
	case Float32:
		err = randomFloats(data[float32](t), src, lo, hi, f32Overflow,
			func(x float64) float32 { return float32(x) },
			func(x float32) float64 { return float64(x) })
	case Float64:
		err = randomFloats(data[float64](t), src, lo, hi, math.Inf(1),
			func(x float64) float64 { return x },
			func(x float64) float64 { return x })
	}
	if err != nil {
		return fmt.Errorf("tensor: RandomRange: no %s value in [%v, %v)", dt, lo, hi)
	}
	return nil
}

// Overflow thresholds: the smallest magnitudes that round to Inf (halfway
// between the largest finite value and the next power of two).
const (
	f16Overflow  = 65520             // (65504 + 65536) / 2
	bf16Overflow = 0x1p128 - 0x1p119 // (2^128 - 2^120 + 2^128) / 2
	f32Overflow  = 0x1p128 - 0x1p103 // (2^128 - 2^104 + 2^128) / 2
)

var errEmptyRange = errors.New("empty range")

// randomFloats fills d with values uniform in [lo, hi) (finite, lo < hi):
// each draw is uniform in float64 over [lo, hi) ∩ (-overflow, overflow),
// the part whose values round to finite values of T, and is rounded to T by
// to (back widens exactly); a draw that rounds outside [lo, hi) is redrawn,
// so the result is the rounded uniform distribution conditioned on landing
// in [lo, hi). It returns errEmptyRange, having written nothing, if no
// value of T lies in [lo, hi).
func randomFloats[T F16 | BF16 | float32 | float64](d []T, src *rand.PCG, lo, hi, overflow float64, to func(float64) T, back func(T) float64) error {
	// The smallest value of T at or above lo: it must lie below hi, and it
	// is the answer of last resort if redraws keep missing a narrow range.
	first := to(lo)
	if back(first) < lo {
		first = nextUp(first)
	}
	if !(back(first) < hi) {
		return errEmptyRange
	}
	slo, shi := max(lo, -overflow), min(hi, overflow)
	width, scale := shi-slo, 1.0
	if math.IsInf(width, 0) {
		// shi - slo overflows float64: work with halves, which cannot.
		width, scale = shi/2-slo/2, 2
	}
	base := slo / scale
	const maxTries = 64
	for i := range d {
		x, ok := first, false
		for try := 0; try < maxTries && !ok; try++ {
			u := float64(src.Uint64()>>11) * 0x1p-53 // uniform in [0, 1)
			// The explicit float64 conversion forbids fusing the multiply
			// and add into an FMA, which some platforms would do and others
			// not, changing the rounding.
			x = to(scale * (base + float64(width*u)))
			w := back(x)
			ok = w >= lo && w < hi
		}
		if !ok {
			// Practically unreachable: once [lo, hi) holds a value of T and
			// draws avoid the overflow region, a draw is accepted with
			// probability at least about 1/2.
			x = first
		}
		d[i] = x
	}
	return nil
}

// nextUp16 returns the next 16-bit float (F16 or BF16 bits, sign-magnitude)
// towards +Inf from the non-NaN value b.
func nextUp16(b uint16) uint16 {
	switch {
	case b&0x8000 == 0:
		return b + 1
	case b == 0x8000:
		return 1
	}
	return b - 1
}

// intBounds returns the inclusive integer range [a, z] of the integers n
// with lo <= n < hi that dtype dt can hold.
func intBounds(dt DType, lo, hi float64) (a, z int64, err error) {
	dmin, dmax := intLimits(dt)
	empty := fmt.Errorf("tensor: RandomRange: no %s value in [%v, %v)", dt, lo, hi)
	const two63 = 1 << 63
	// a = ceil(lo), clamped below to min.
	switch cl := math.Ceil(lo); {
	case cl <= float64(dmin):
		a = dmin
	case cl >= two63:
		return 0, 0, empty
	default:
		a = int64(cl)
	}
	// z = ceil(hi) - 1 (the largest integer < hi), clamped above to max.
	switch ch := math.Ceil(hi); {
	case ch >= two63:
		z = dmax
	case ch <= float64(dmin):
		return 0, 0, empty
	default:
		z = int64(ch) - 1
	}
	z = min(z, dmax)
	if a > z {
		return 0, 0, empty
	}
	return a, z, nil
}

// uniformUint64 returns a uniform integer in [0, span] (inclusive).
func uniformUint64(src *rand.PCG, span uint64) uint64 {
	if span == math.MaxUint64 {
		return src.Uint64()
	}
	// Lemire's multiply-shift with rejection of the biased low range.
	n := span + 1
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}

func randomInts[T int8 | int16 | int32 | int64 | uint8](d []T, src *rand.PCG, a, z int64) {
	span := uint64(z) - uint64(a)
	for i := range d {
		d[i] = T(a + int64(uniformUint64(src, span)))
	}
}

// nextUp returns the next value of T above x (x finite or -Inf).
func nextUp[T F16 | BF16 | float32 | float64](x T) T {
	switch v := any(x).(type) {
	case F16:
		return any(F16(nextUp16(uint16(v)))).(T)
	case BF16:
		return any(BF16(nextUp16(uint16(v)))).(T)
	case float32:
		return any(math.Nextafter32(v, float32(math.Inf(1)))).(T)
	case float64:
		return any(math.Nextafter(v, math.Inf(1))).(T)
	}
	return x
}
