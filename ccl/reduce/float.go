package reduce

// float32 and float64 Sum and Avg with the assembly add loop: blocks of
// `block` elements, accumulated pairwise in rank order in an L1-resident
// stack buffer (acc = s0 + s1, acc += s2, ..., dst = acc + s[n-1]), so each
// source is read from memory once and dst written once. Without the
// assembly, reduceNative's fused Go loops are faster and are used instead.

// reduceF32 reduces float32 sources (len >= 2).
func reduceF32(op Op, dst []byte, srcs [][]byte) {
	if !useAVX2 || (op != Sum && op != Avg) {
		reduceNative[float32](op, dst, srcs)
		return
	}
	d := view[float32](dst)
	n := len(srcs)
	if n == 2 && op == Sum {
		addF32(d, view[float32](srcs[0]), view[float32](srcs[1]))
		return
	}
	var buf [block]float32
	for lo := 0; lo < len(d); lo += block {
		hi := min(lo+block, len(d))
		dd := d[lo:hi]
		if n == 2 {
			addF32(dd, part[float32](srcs[0], lo, hi), part[float32](srcs[1], lo, hi))
		} else {
			acc := buf[:hi-lo]
			addF32(acc, part[float32](srcs[0], lo, hi), part[float32](srcs[1], lo, hi))
			for _, s := range srcs[2 : n-1] {
				addF32(acc, acc, part[float32](s, lo, hi))
			}
			addF32(dd, acc, part[float32](srcs[n-1], lo, hi))
		}
		if op == Avg {
			divF32(dd, float32(n))
		}
	}
}

// reduceF64 reduces float64 sources (len >= 2).
func reduceF64(op Op, dst []byte, srcs [][]byte) {
	if !useAVX2 || (op != Sum && op != Avg) {
		reduceNative[float64](op, dst, srcs)
		return
	}
	d := view[float64](dst)
	n := len(srcs)
	if n == 2 && op == Sum {
		addF64(d, view[float64](srcs[0]), view[float64](srcs[1]))
		return
	}
	var buf [block]float64
	for lo := 0; lo < len(d); lo += block {
		hi := min(lo+block, len(d))
		dd := d[lo:hi]
		if n == 2 {
			addF64(dd, part[float64](srcs[0], lo, hi), part[float64](srcs[1], lo, hi))
		} else {
			acc := buf[:hi-lo]
			addF64(acc, part[float64](srcs[0], lo, hi), part[float64](srcs[1], lo, hi))
			for _, s := range srcs[2 : n-1] {
				addF64(acc, acc, part[float64](s, lo, hi))
			}
			addF64(dd, acc, part[float64](srcs[n-1], lo, hi))
		}
		if op == Avg {
			divide(dd, float64(n))
		}
	}
}

// addF32 sets d = a + b.
func addF32(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	if useAVX2 {
		if i = len(d) &^ 7; i > 0 {
			addF32AVX2(&d[0], &a[0], &b[0], i)
		}
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

// addF64 sets d = a + b.
func addF64(d, a, b []float64) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	if useAVX2 {
		if i = len(d) &^ 3; i > 0 {
			addF64AVX2(&d[0], &a[0], &b[0], i)
		}
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}
