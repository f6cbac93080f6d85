package tensor

import "math"

// F16 is an IEEE 754 binary16 value, stored as its bits.
type F16 uint16

// BF16 is a bfloat16 value (the top 16 bits of a float32), stored as its bits.
type BF16 uint16

// Conversions to F16 and BF16 round to nearest, ties to even, straight from
// the source value, so converting a float64 never rounds twice. Values too
// large for the format become ±Inf, values too small become ±0 (keeping the
// sign), and NaNs stay NaN: quiet, with the sign and the leading payload bits
// kept. Conversions from F16 and BF16 are exact.

// Bit layouts of the 16-bit formats.
const (
	f16FracBits  = 10
	f16ExpBits   = 5
	bf16FracBits = 7
	bf16ExpBits  = 8
)

// narrowFloat64 rounds f to nearest even in a 16-bit binary format with a
// sign bit, expBits exponent bits and fracBits fraction bits (IEEE 754
// style: biased exponent, subnormals, all-ones exponent for Inf and NaN).
func narrowFloat64(f float64, expBits, fracBits uint) uint16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	exp := int(b>>52) & 0x7ff
	mant := b & (1<<52 - 1)
	inf := uint16(1<<expBits-1) << fracBits
	if exp == 0x7ff {
		if mant == 0 {
			return sign | inf
		}
		// NaN: set the quiet bit, keep the top payload bits.
		return sign | inf | 1<<(fracBits-1) | uint16(mant>>(52-fracBits))
	}
	if exp == 0 {
		// ±0 or a float64 subnormal, which is far below half the smallest
		// subnormal of either 16-bit format: rounds to ±0.
		return sign
	}
	bias := 1<<(expBits-1) - 1
	emin := 1 - bias
	e := exp - 1023 // f = 1.mant × 2^e
	if e > bias {
		// f ≥ 2^(emax+1), beyond the rounding boundary of the largest finite value.
		return sign | inf
	}
	m := mant | 1<<52
	// Keep fracBits+1 significant bits for a normal result; fewer (down to
	// none) for a subnormal one, whose quantum is 2^(emin-fracBits).
	shift := 52 - fracBits
	var base uint16 // exponent field minus one, for normal results
	if e < emin {
		shift += uint(emin - e)
		if shift > 53 {
			return sign // f < half the smallest subnormal
		}
	} else {
		base = uint16(e - emin)
	}
	q := m >> shift
	rem := m & (1<<shift - 1)
	half := uint64(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	// For a normal result q holds the implicit bit, so adding it to base
	// shifted gives the biased exponent; a carry out of the significand
	// (q == 2^(fracBits+1)) bumps the exponent, up to Inf. For a
	// subnormal result base is 0, and q == 2^fracBits is the smallest normal.
	return sign | (base<<fracBits + uint16(q))
}

// F16FromFloat64 rounds f to the nearest binary16 value, ties to even.
func F16FromFloat64(f float64) F16 {
	return F16(narrowFloat64(f, f16ExpBits, f16FracBits))
}

// F16FromFloat32 rounds f to the nearest binary16 value, ties to even.
func F16FromFloat32(f float32) F16 {
	b := math.Float32bits(f)
	if b&0x7f800000 == 0x7f800000 && b&0x007fffff != 0 {
		// NaN: quiet, same sign, top payload bits.
		return F16(uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff)
	}
	// float32 → float64 is exact, so this rounds once.
	return F16FromFloat64(float64(f))
}

// Float32 returns h as a float32 (exact). A signalling NaN comes back quiet,
// with its sign and payload.
func (h F16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		if frac == 0 {
			return math.Float32frombits(sign | 0x7f800000)
		}
		return math.Float32frombits(sign | 0x7fc00000 | frac<<13)
	case 0:
		// ±0 or subnormal: frac × 2^-24, exact in float32.
		v := float32(frac) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// Float64 returns h as a float64 (exact). A signalling NaN comes back quiet,
// with its sign and payload.
func (h F16) Float64() float64 {
	if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
		return math.Float64frombits(uint64(h&0x8000)<<48 | 0x7ff8<<48 | uint64(h&0x3ff)<<42)
	}
	return float64(h.Float32())
}

// IsNaN reports whether h is a NaN.
func (h F16) IsNaN() bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

// BF16FromFloat32 rounds f to the nearest bfloat16 value, ties to even. A NaN
// stays NaN (it is never rounded into Inf).
func BF16FromFloat32(f float32) BF16 {
	b := math.Float32bits(f)
	if b&0x7f800000 == 0x7f800000 && b&0x007fffff != 0 {
		return BF16(uint16(b>>16) | 0x0040)
	}
	// Add just under half an ulp, plus one when the kept part is odd, and
	// truncate: round to nearest even. A carry propagates into the exponent,
	// which is the right answer, including overflow to Inf.
	b += 0x7fff + (b>>16)&1
	return BF16(b >> 16)
}

// BF16FromFloat64 rounds f to the nearest bfloat16 value, ties to even,
// directly (not via float32, which could round twice).
func BF16FromFloat64(f float64) BF16 {
	return BF16(narrowFloat64(f, bf16ExpBits, bf16FracBits))
}

// Float32 returns b as a float32 (exact; the bits are the top half of the
// float32, NaN payloads included).
func (b BF16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// Float64 returns b as a float64 (exact). A signalling NaN comes back quiet,
// with its sign and payload.
func (b BF16) Float64() float64 {
	if b.IsNaN() {
		return math.Float64frombits(uint64(b&0x8000)<<48 | 0x7ff8<<48 | uint64(b&0x7f)<<45)
	}
	return float64(b.Float32())
}

// IsNaN reports whether b is a NaN.
func (b BF16) IsNaN() bool { return b&0x7f80 == 0x7f80 && b&0x7f != 0 }
