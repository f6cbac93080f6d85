package reduce

import "encoding/binary"

// Bools are reduced eight at a time in uint64 words (SWAR). Any non-zero
// byte is true; results are normalised to 0 or 1.

const (
	lows  = 0x0101010101010101
	low7s = 0x7f7f7f7f7f7f7f7f
)

// truth maps each byte of x to 1 if it is non-zero, else 0.
func truth(x uint64) uint64 {
	// Bit 7 of a byte of (x&0x7f)+0x7f is set iff its low seven bits are
	// not all zero (no carry leaves the byte); or-ing x adds bit 7 itself.
	return (((x & low7s) + low7s) | x) >> 7 & lows
}

// reduceBool reduces bools: Sum and Max are OR, Prod and Min AND.
func reduceBool(op Op, dst []byte, srcs [][]byte) {
	and := op == Prod || op == Min
	var buf [block / 8]uint64
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		words := (hi - lo) / 8
		acc := buf[:words]
		s0 := srcs[0][lo:hi]
		for i := range acc {
			acc[i] = truth(binary.LittleEndian.Uint64(s0[8*i:]))
		}
		for _, s := range srcs[1:] {
			s := s[lo:hi]
			if and {
				for i := range acc {
					acc[i] &= truth(binary.LittleEndian.Uint64(s[8*i:]))
				}
			} else {
				for i := range acc {
					acc[i] |= truth(binary.LittleEndian.Uint64(s[8*i:]))
				}
			}
		}
		// The tail (fewer than eight bytes) one byte at a time.
		for i := lo + 8*words; i < hi; i++ {
			v := srcs[0][i] != 0
			for _, s := range srcs[1:] {
				if and {
					v = v && s[i] != 0
				} else {
					v = v || s[i] != 0
				}
			}
			dst[i] = b2u(v)
		}
		d := dst[lo:hi]
		for i, w := range acc {
			binary.LittleEndian.PutUint64(d[8*i:], w)
		}
	}
}

func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}
