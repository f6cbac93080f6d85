package reduce

// Kernels for the dtypes whose Go type is also the accumulator: integers
// (except for Avg) and float32/float64. The element type is a type
// parameter: each of these types has its own GC shape, so every
// instantiation is compiled separately with the arithmetic inlined. Each
// loop reslices its operands to len(d) first so the compiler drops the
// bounds checks.

type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~float32 | ~float64
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8
}

// reduceNative reduces srcs (len >= 2) into dst with op; for Avg it divides
// the sum by len(srcs) in T, which is right for floats only.
func reduceNative[T number](op Op, dst []byte, srcs [][]byte) {
	d := view[T](dst)
	n := len(srcs)
	if n <= 4 && op != Avg {
		// One pass over the whole range, no accumulator.
		fold(op, d, nil, srcs, 0, len(d))
		return
	}
	var buf [block]T
	for lo := 0; lo < len(d); lo += block {
		hi := min(lo+block, len(d))
		fold(op, d[lo:hi], buf[:hi-lo], srcs, lo, hi)
		if op == Avg {
			divide(d[lo:hi], T(n))
		}
	}
}

// reduceInt is reduceNative, except that Avg accumulates in int64.
func reduceInt[T integer](op Op, dst []byte, srcs [][]byte) {
	if op != Avg {
		reduceNative[T](op, dst, srcs)
		return
	}
	d := view[T](dst)
	n := int64(len(srcs))
	var buf [block]int64
	for lo := 0; lo < len(d); lo += block {
		hi := min(lo+block, len(d))
		acc := buf[:hi-lo]
		widen2(acc, part[T](srcs[0], lo, hi), part[T](srcs[1], lo, hi))
		for _, s := range srcs[2:] {
			addWide(acc, part[T](s, lo, hi))
		}
		quotient(d[lo:hi], acc, n)
	}
}

// part returns elements [lo, hi) of b viewed as T.
func part[T any](b []byte, lo, hi int) []T { return view[T](b)[lo:hi] }

// fold sets d = op(srcs[0][lo:hi], ..., srcs[n-1][lo:hi]) (Avg meaning
// Sum), accumulating in rank order. For more than four sources it needs
// acc, a scratch slice of len(d) elements. d may be the memory of any
// source: each step reads all its operands of an element before it
// writes that element, and d is written only by the last step.
func fold[T number](op Op, d, acc []T, srcs [][]byte, lo, hi int) {
	n := len(srcs)
	s := func(k int) []T { return part[T](srcs[k], lo, hi) }
	switch n {
	case 2:
		apply2(op, d, s(0), s(1))
		return
	case 3:
		apply3(op, d, s(0), s(1), s(2))
		return
	case 4:
		apply4(op, d, s(0), s(1), s(2), s(3))
		return
	}
	apply4(op, acc, s(0), s(1), s(2), s(3))
	k := 4
	for ; n-k > 3; k += 3 {
		apply4(op, acc, acc, s(k), s(k+1), s(k+2))
	}
	switch n - k {
	case 1:
		apply2(op, d, acc, s(k))
	case 2:
		apply3(op, d, acc, s(k), s(k+1))
	case 3:
		apply4(op, d, acc, s(k), s(k+1), s(k+2))
	}
}

// apply2 sets d = a op b.
func apply2[T number](op Op, d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = a[i] + b[i]
		}
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case Min:
		for i := range d {
			d[i] = min(a[i], b[i])
		}
	case Max:
		for i := range d {
			d[i] = max(a[i], b[i])
		}
	}
}

// apply3 sets d = (a op b) op c.
func apply3[T number](op Op, d, a, b, c []T) {
	a, b, c = a[:len(d)], b[:len(d)], c[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = a[i] + b[i] + c[i]
		}
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i] * c[i]
		}
	case Min:
		for i := range d {
			d[i] = min(a[i], b[i], c[i])
		}
	case Max:
		for i := range d {
			d[i] = max(a[i], b[i], c[i])
		}
	}
}

// apply4 sets d = ((a op b) op c) op e.
func apply4[T number](op Op, d, a, b, c, e []T) {
	a, b, c, e = a[:len(d)], b[:len(d)], c[:len(d)], e[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = a[i] + b[i] + c[i] + e[i]
		}
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i] * c[i] * e[i]
		}
	case Min:
		for i := range d {
			d[i] = min(a[i], b[i], c[i], e[i])
		}
	case Max:
		for i := range d {
			d[i] = max(a[i], b[i], c[i], e[i])
		}
	}
}

// divF32 sets d[i] /= n (IEEE division, whatever the loop).
func divF32(d []float32, n float32) {
	i := 0
	if useAVX2 {
		if i = len(d) &^ 7; i > 0 {
			divF32AVX2(&d[0], i, n)
		}
	}
	for ; i < len(d); i++ {
		d[i] /= n
	}
}

// divide sets d[i] /= n.
func divide[T number](d []T, n T) {
	for i := range d {
		d[i] /= n
	}
}

// widen2 sets acc = int64(a) + int64(b).
func widen2[T integer](acc []int64, a, b []T) {
	a, b = a[:len(acc)], b[:len(acc)]
	for i := range acc {
		acc[i] = int64(a[i]) + int64(b[i])
	}
}

// addWide sets acc += int64(s).
func addWide[T integer](acc []int64, s []T) {
	s = s[:len(acc)]
	for i := range acc {
		acc[i] += int64(s[i])
	}
}

// quotient sets d = T(acc / n), truncating toward zero.
func quotient[T integer](d []T, acc []int64, n int64) {
	acc = acc[:len(d)]
	for i := range d {
		d[i] = T(acc[i] / n)
	}
}

// scaleInt sets d[i] = d[i] / n, truncating toward zero.
func scaleInt[T integer](d []T, n int) {
	m := int64(n)
	for i := range d {
		d[i] = T(int64(d[i]) / m)
	}
}
