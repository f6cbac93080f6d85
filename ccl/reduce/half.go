package reduce

import "math"

// Half types accumulate in float32: each block of up to `block` elements
// is decoded (exactly) into a float32 accumulator on the stack, the other
// sources are decoded and combined into it in rank order, and the block is
// rounded to the half type once, when it is stored into dst. Sum of two
// sources, the commonest case, is a single fused pass where the loops
// allow it.

// halfFmt selects a half format. Its methods are the block loops: each
// runs the assembly loop (simd_amd64.s) over the multiple-of-8 prefix when
// the CPU has it, then a Go loop over the rest with the (inlined)
// conversions of the format. They are plain methods, not function values,
// so escape analysis keeps the stack buffers passed to them on the stack.
type halfFmt uint8

const (
	f16  halfFmt = iota // IEEE binary16
	bf16                // bfloat16
)

// simd returns how many leading elements of n the assembly loops of f
// handle: n rounded down to a multiple of 8, or 0 without them.
func (f halfFmt) simd(n int) int {
	if (f == bf16 && useAVX2) || (f == f16 && useF16C) {
		return n &^ 7
	}
	return 0
}

// decode sets acc = dec(s).
func (f halfFmt) decode(acc []float32, s []uint16) {
	s = s[:len(acc)]
	i := f.simd(len(acc))
	if i > 0 {
		if f == bf16 {
			bf16DecodeAVX2(&acc[0], &s[0], i)
		} else {
			f16DecodeF16C(&acc[0], &s[0], i)
		}
	}
	if f == bf16 {
		for ; i < len(acc); i++ {
			acc[i] = bf16ToF32(s[i])
		}
		return
	}
	for ; i < len(acc); i++ {
		acc[i] = f16ToF32(s[i])
	}
}

// encode sets d = enc(acc).
func (f halfFmt) encode(d []uint16, acc []float32) {
	acc = acc[:len(d)]
	i := f.simd(len(d))
	if i > 0 {
		if f == bf16 {
			bf16EncodeAVX2(&d[0], &acc[0], i)
		} else {
			f16EncodeF16C(&d[0], &acc[0], i)
		}
	}
	if f == bf16 {
		for ; i < len(d); i++ {
			d[i] = f32ToBF16(acc[i])
		}
		return
	}
	for ; i < len(d); i++ {
		// f32ToF16, inlined by hand (it is over the inlining budget).
		b := math.Float32bits(acc[i])
		a := b & 0x7fffffff
		h := b >> 16 & 0x8000
		if a-0x38800000 < 0x47800000-0x38800000 {
			h |= (a - (127-15)<<23 + 0x0fff + a>>13&1) >> 13
		} else {
			h = uint32(f32ToF16(acc[i]))
		}
		d[i] = uint16(h)
	}
}

// fusedSum2 reports whether sum2 is a single pass (for float16 without
// F16C it is not: its encoding is not inlined, so the block loops of
// reduceHalf, whose encode is, are faster).
func (f halfFmt) fusedSum2() bool { return f == bf16 || useF16C }

// sum2 sets d = enc(dec(a) + dec(b)).
func (f halfFmt) sum2(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	i := f.simd(len(d))
	if i > 0 {
		if f == bf16 {
			bf16Sum2AVX2(&d[0], &a[0], &b[0], i)
		} else {
			f16Sum2F16C(&d[0], &a[0], &b[0], i)
		}
	}
	if f == bf16 {
		for ; i < len(d); i++ {
			d[i] = f32ToBF16(bf16ToF32(a[i]) + bf16ToF32(b[i]))
		}
		return
	}
	for ; i < len(d); i++ {
		d[i] = f32ToF16(f16ToF32(a[i]) + f16ToF32(b[i]))
	}
}

// add2 sets acc = dec(a) + dec(b).
func (f halfFmt) add2(acc []float32, a, b []uint16) {
	a, b = a[:len(acc)], b[:len(acc)]
	i := f.simd(len(acc))
	if i > 0 {
		if f == bf16 {
			bf16Add2AVX2(&acc[0], &a[0], &b[0], i)
		} else {
			f16Add2F16C(&acc[0], &a[0], &b[0], i)
		}
	}
	if f == bf16 {
		for ; i < len(acc); i++ {
			acc[i] = bf16ToF32(a[i]) + bf16ToF32(b[i])
		}
		return
	}
	for ; i < len(acc); i++ {
		acc[i] = f16ToF32(a[i]) + f16ToF32(b[i])
	}
}

// add sets acc += dec(s).
func (f halfFmt) add(acc []float32, s []uint16) {
	s = s[:len(acc)]
	i := f.simd(len(acc))
	if i > 0 {
		if f == bf16 {
			bf16AddAVX2(&acc[0], &s[0], i)
		} else {
			f16AddF16C(&acc[0], &s[0], i)
		}
	}
	if f == bf16 {
		for ; i < len(acc); i++ {
			acc[i] += bf16ToF32(s[i])
		}
		return
	}
	for ; i < len(acc); i++ {
		acc[i] += f16ToF32(s[i])
	}
}

// addEnc sets d = enc(acc + dec(s)).
func (f halfFmt) addEnc(d []uint16, acc []float32, s []uint16) {
	acc, s = acc[:len(d)], s[:len(d)]
	i := f.simd(len(d))
	if i > 0 {
		if f == bf16 {
			bf16AddEncAVX2(&d[0], &acc[0], &s[0], i)
		} else {
			f16AddEncF16C(&d[0], &acc[0], &s[0], i)
		}
	}
	if f == bf16 {
		for ; i < len(d); i++ {
			d[i] = f32ToBF16(acc[i] + bf16ToF32(s[i]))
		}
		return
	}
	if i < len(d) {
		// Go float16: add, then the inlined encoding.
		a := acc[i:]
		for j := range a {
			a[j] += f16ToF32(s[i+j])
		}
		f.encode(d[i:], a)
	}
}

// reduceHalf reduces len(srcs) >= 2 half-precision sources into dst.
func reduceHalf(op Op, k halfFmt, dst []byte, srcs [][]byte) {
	d := view[uint16](dst)
	n := len(srcs)
	if op != Sum && op != Avg {
		reduceHalfExact(op, k, d, srcs)
		return
	}
	if op == Sum && n == 2 && k.fusedSum2() {
		k.sum2(d, view[uint16](srcs[0]), view[uint16](srcs[1]))
		return
	}
	var buf [block]float32
	for lo := 0; lo < len(d); lo += block {
		hi := min(lo+block, len(d))
		acc := buf[:hi-lo]
		k.add2(acc, part[uint16](srcs[0], lo, hi), part[uint16](srcs[1], lo, hi))
		if op == Avg || n == 2 {
			for _, s := range srcs[2:] {
				k.add(acc, part[uint16](s, lo, hi))
			}
			if op == Avg {
				divF32(acc, float32(n))
			}
			k.encode(d[lo:hi], acc)
			continue
		}
		for _, s := range srcs[2 : n-1] {
			k.add(acc, part[uint16](s, lo, hi))
		}
		k.addEnc(d[lo:hi], acc, part[uint16](srcs[n-1], lo, hi))
	}
}

// reduceHalfExact handles Prod, Min and Max: decode every source block to
// float32 and combine with the float32 kernels.
func reduceHalfExact(op Op, k halfFmt, d []uint16, srcs [][]byte) {
	var buf, tmp [block]float32
	for lo := 0; lo < len(d); lo += block {
		hi := min(lo+block, len(d))
		acc, t := buf[:hi-lo], tmp[:hi-lo]
		k.decode(acc, part[uint16](srcs[0], lo, hi))
		for _, s := range srcs[1:] {
			k.decode(t, part[uint16](s, lo, hi))
			apply2(op, acc, acc, t)
		}
		k.encode(d[lo:hi], acc)
	}
}

// bf16ToF32 decodes bfloat16 bits (exact: they are the top half of a
// float32).
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds f to bfloat16 bits, to nearest even, exactly as
// tensor.BF16FromFloat32: a NaN stays NaN (quieted, top payload bits kept),
// overflow becomes ±Inf.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	// Add just under half an ulp, plus one if the kept part is odd, and
	// truncate; a carry into the exponent is the right answer.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// f16ToF32 decodes binary16 bits exactly, as tensor.F16.Float32 does (a
// NaN comes back quiet with its sign and payload). The exponent and
// fraction bits, put in place for float32 and scaled by 2^(127-15), are
// the value for normal and subnormal halves alike (the product is exact);
// an all-ones half exponent (Inf, NaN) lands at 2^16 or above and gets the
// all-ones float32 exponent.
func f16ToF32(h uint16) float32 {
	v := math.Float32frombits(uint32(h&0x7fff)<<13) * 0x1p112
	b := math.Float32bits(v)
	if v >= 0x1p16 {
		b |= 0x7f800000
		if b&0x007fffff != 0 {
			b |= 0x00400000 // quiet the NaN
		}
	}
	return math.Float32frombits(b | uint32(h&0x8000)<<16)
}

// f32ToF16 rounds f to binary16 bits, to nearest even, exactly as
// tensor.F16FromFloat32: values from 65520 up become ±Inf, values below
// 2^-25 become ±0, NaN stays NaN (quiet, sign and top payload bits kept).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	h := b >> 16 & 0x8000
	if a < 0x38800000 {
		// |f| < 2^-14: a subnormal half or zero. Adding 0.5, whose float32
		// ulp is 2^-24 (the half subnormal quantum), rounds |f| to that
		// quantum, to nearest even; the low bits are the result (0x400 for
		// a round up to the smallest normal).
		h |= math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	} else if a < 0x47800000 {
		// |f| in [2^-14, 2^16): a normal half or a rounding overflow. Rebias
		// the exponent from 127 to 15 and round the 13 dropped bits to
		// nearest even (bit 13 is the same before and after the rebias); a
		// carry into the exponent (up to Inf) is right.
		h |= (a - (127-15)<<23 + 0x0fff + a>>13&1) >> 13
	} else if a <= 0x7f800000 {
		h |= 0x7c00 // |f| >= 2^16 or Inf: Inf
	} else {
		h |= 0x7e00 | a>>13&0x3ff // NaN: quiet, top payload bits
	}
	return uint16(h)
}
