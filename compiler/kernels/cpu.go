package kernels

import (
	"fmt"
	"math"

	"github.com/chorus-rt/chorus/tensor"
)

// CPU kernels. float32, float16 and bfloat16 compute in float32 (half
// types are widened once, accumulated in float32 and rounded once per
// output element); float64 computes in float64.

// hostFloats returns a host tensor's elements as float32 (a view for
// float32 tensors, a converted copy for the half types).
func hostFloats(t *tensor.Tensor) ([]float32, error) {
	switch t.DType() {
	case tensor.Float32:
		return tensor.Data[float32](t)
	case tensor.Float16:
		d, err := tensor.Data[tensor.F16](t)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(d))
		for i, v := range d {
			out[i] = v.Float32()
		}
		return out, nil
	case tensor.BFloat16:
		d, err := tensor.Data[tensor.BF16](t)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(d))
		for i, v := range d {
			out[i] = v.Float32()
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %s on the CPU (want float32, float16, bfloat16 or float64)", ErrUnsupported, t.DType())
}

// storeFloats writes vals into t, rounding for the half types. For
// float32 tensors whose data vals already is, nothing is copied.
func storeFloats(t *tensor.Tensor, vals []float32) error {
	switch t.DType() {
	case tensor.Float32:
		d, err := tensor.Data[float32](t)
		if err != nil {
			return err
		}
		if len(d) > 0 && len(vals) > 0 && &d[0] != &vals[0] {
			copy(d, vals)
		}
		return nil
	case tensor.Float16:
		d, err := tensor.Data[tensor.F16](t)
		if err != nil {
			return err
		}
		for i, v := range vals {
			d[i] = tensor.F16FromFloat32(v)
		}
		return nil
	case tensor.BFloat16:
		d, err := tensor.Data[tensor.BF16](t)
		if err != nil {
			return err
		}
		for i, v := range vals {
			d[i] = tensor.BF16FromFloat32(v)
		}
		return nil
	}
	return fmt.Errorf("%w: %s on the CPU", ErrUnsupported, t.DType())
}

// outFloats returns a float32 buffer to compute t's elements into: t's
// own data for float32, scratch otherwise (then storeFloats).
func outFloats(t *tensor.Tensor) ([]float32, error) {
	if t.DType() == tensor.Float32 {
		return tensor.Data[float32](t)
	}
	if t.DType() != tensor.Float16 && t.DType() != tensor.BFloat16 {
		return nil, fmt.Errorf("%w: %s on the CPU", ErrUnsupported, t.DType())
	}
	return make([]float32, t.NumElements()), nil
}

// matmulDims checks a [..., m, k] x b [k, n] -> out [..., m, n] and
// returns m (leading dims folded in), k and n.
func matmulDims(a, b, out *tensor.Tensor) (m, k, n int, err error) {
	return matmulDimsT(a, b, out, false)
}

// matmulDimsT is matmulDims with b transposed when bT is set: b is
// [n, k] (matmul_nt).
func matmulDimsT(a, b, out *tensor.Tensor, bT bool) (m, k, n int, err error) {
	op := "matmul"
	if bT {
		op = "matmul_nt"
	}
	as, bs, os := a.Shape(), b.Shape(), out.Shape()
	if a.DType() != b.DType() || a.DType() != out.DType() {
		return 0, 0, 0, fmt.Errorf("%w: %s dtypes %s, %s -> %s", ErrShape, op, a.DType(), b.DType(), out.DType())
	}
	if len(bs) != 2 {
		return 0, 0, 0, fmt.Errorf("%w: %s %v x %v -> %v", ErrShape, op, as, bs, os)
	}
	bk, bn := bs[0], bs[1]
	if bT {
		bk, bn = bn, bk
	}
	if len(as) < 2 || len(os) != len(as) || as[len(as)-1] != bk || os[len(os)-1] != bn {
		return 0, 0, 0, fmt.Errorf("%w: %s %v x %v -> %v", ErrShape, op, as, bs, os)
	}
	for i := 0; i < len(as)-1; i++ {
		if as[i] != os[i] {
			return 0, 0, 0, fmt.Errorf("%w: %s %v x %v -> %v", ErrShape, op, as, bs, os)
		}
	}
	k, n = int(bk), int(bn)
	if k > 0 {
		m = int(a.NumElements()) / k
	} else {
		m = int(out.NumElements()) / max(n, 1)
	}
	return m, k, n, nil
}

// CPUMatmul computes out = a·b on host tensors.
func CPUMatmul(a, b, out *tensor.Tensor) error { return cpuGemm(a, b, out, false) }

// CPUMatmulNT computes out = a·bᵀ on host tensors, b [n, k].
func CPUMatmulNT(a, b, out *tensor.Tensor) error { return cpuGemm(a, b, out, true) }

// cpuGemm computes out = a·b, or a·bᵀ when bT is set, in float64 for
// float64 tensors and in float32 (stored back in out's type) otherwise.
func cpuGemm(a, b, out *tensor.Tensor, bT bool) error {
	m, k, n, err := matmulDimsT(a, b, out, bT)
	if err != nil {
		return err
	}
	if a.DType() == tensor.Float64 {
		ad, _ := tensor.Data[float64](a)
		bd, _ := tensor.Data[float64](b)
		cd, err := tensor.Data[float64](out)
		if err != nil {
			return err
		}
		if bT {
			gemmNT(ad, bd, cd, m, k, n)
		} else {
			gemm(ad, bd, cd, m, k, n)
		}
		return nil
	}
	ad, err := hostFloats(a)
	if err != nil {
		return err
	}
	bd, err := hostFloats(b)
	if err != nil {
		return err
	}
	cd, err := outFloats(out)
	if err != nil {
		return err
	}
	if bT {
		gemmNT(ad, bd, cd, m, k, n)
	} else {
		gemm(ad, bd, cd, m, k, n)
	}
	return storeFloats(out, cd)
}

// gemmNTRows is how many rows of b (columns of c) gemmNT keeps hot while
// every row of a passes: 32 rows of 2048 float32 are 256 KiB.
const gemmNTRows = 32

// gemmNT is c[m,n] = a[m,k]·b[n,k]ᵀ, row-major: every element a dot
// product of two contiguous rows, over blocks of b's rows so they stay
// in cache across the rows of a. c must not alias a or b.
func gemmNT[T float32 | float64](a, b, c []T, m, k, n int) {
	for j0 := 0; j0 < n; j0 += gemmNTRows {
		j1 := min(j0+gemmNTRows, n)
		for i := range m {
			arow := a[i*k : i*k+k]
			for j := j0; j < j1; j++ {
				brow := b[j*k : j*k+k]
				brow = brow[:len(arow)]
				// Four partial sums break the dependency chain.
				var s0, s1, s2, s3 T
				p := 0
				for ; p+4 <= len(arow); p += 4 {
					s0 += arow[p] * brow[p]
					s1 += arow[p+1] * brow[p+1]
					s2 += arow[p+2] * brow[p+2]
					s3 += arow[p+3] * brow[p+3]
				}
				for ; p < len(arow); p++ {
					s0 += arow[p] * brow[p]
				}
				c[i*n+j] = (s0 + s1) + (s2 + s3)
			}
		}
	}
}

// Block sizes of gemm: a kb×nb panel of b (64×256 float32 = 64 KiB)
// stays in L2 while every row of a streams past it.
const (
	gemmKB = 64
	gemmNB = 256
)

// gemm is c[m,n] = a[m,k]·b[k,n], row-major, blocked over k and n, with
// the accumulation in T. c must not alias a or b.
func gemm[T float32 | float64](a, b, c []T, m, k, n int) {
	clear(c[:m*n])
	for j0 := 0; j0 < n; j0 += gemmNB {
		j1 := min(j0+gemmNB, n)
		for p0 := 0; p0 < k; p0 += gemmKB {
			p1 := min(p0+gemmKB, k)
			for i := range m {
				crow := c[i*n+j0 : i*n+j1]
				arow := a[i*k : i*k+k]
				p := p0
				// Four rows of b at a time: one pass over crow per four
				// multiply-adds per element.
				for ; p+4 <= p1; p += 4 {
					a0, a1, a2, a3 := arow[p], arow[p+1], arow[p+2], arow[p+3]
					b0 := b[p*n+j0 : p*n+j1]
					b1 := b[(p+1)*n+j0 : (p+1)*n+j1]
					b2 := b[(p+2)*n+j0 : (p+2)*n+j1]
					b3 := b[(p+3)*n+j0 : (p+3)*n+j1]
					b0, b1, b2, b3 = b0[:len(crow)], b1[:len(crow)], b2[:len(crow)], b3[:len(crow)]
					for j := range crow {
						crow[j] += a0*b0[j] + a1*b1[j] + a2*b2[j] + a3*b3[j]
					}
				}
				for ; p < p1; p++ {
					ap := arow[p]
					bp := b[p*n+j0 : p*n+j1]
					bp = bp[:len(crow)]
					for j := range crow {
						crow[j] += ap * bp[j]
					}
				}
			}
		}
	}
}

// broadcast describes out[i] = f(x[ia], y[ib]) for numpy broadcasting:
// the dims of out, and x's and y's element strides per dim (0 where the
// operand is broadcast). Dims are merged where possible, so the common
// cases (equal shapes; a bias over the last dim) have rank 1 or 2.
type broadcast struct {
	shape, sx, sy []int64
}

func newBroadcast(xs, ys, os tensor.Shape) (broadcast, error) {
	r := len(os)
	if len(xs) > r || len(ys) > r {
		return broadcast{}, fmt.Errorf("%w: add of %v and %v into %v", ErrShape, xs, ys, os)
	}
	strides := func(s tensor.Shape) ([]int64, error) {
		st := make([]int64, r)
		acc := int64(1)
		for i := r - 1; i >= 0; i-- {
			j := i - (r - len(s))
			if j < 0 {
				continue // missing leading dim: broadcast
			}
			switch s[j] {
			case os[i]:
				if s[j] != 1 {
					st[i] = acc
				}
			case 1:
			default:
				return nil, fmt.Errorf("%w: %v does not broadcast to %v", ErrShape, s, os)
			}
			acc *= s[j]
		}
		return st, nil
	}
	sx, err := strides(xs)
	if err != nil {
		return broadcast{}, err
	}
	sy, err := strides(ys)
	if err != nil {
		return broadcast{}, err
	}
	// Merge dim i into dim i+1 where both operands are contiguous across
	// the boundary, and drop size-1 dims.
	var b broadcast
	for i := range r {
		if os[i] == 1 {
			continue
		}
		if l := len(b.shape) - 1; l >= 0 && b.sx[l] == sx[i]*os[i] && b.sy[l] == sy[i]*os[i] {
			b.shape[l] *= os[i]
			b.sx[l], b.sy[l] = sx[i], sy[i]
			continue
		}
		b.shape = append(b.shape, os[i])
		b.sx = append(b.sx, sx[i])
		b.sy = append(b.sy, sy[i])
	}
	return b, nil
}

// apply calls f(i, ix, iy) for every output index i in order.
func (b broadcast) apply(f func(i, ix, iy int64)) {
	r := len(b.shape)
	switch r {
	case 0:
		f(0, 0, 0)
		return
	case 1:
		for i := range b.shape[0] {
			f(i, i*b.sx[0], i*b.sy[0])
		}
		return
	}
	idx := make([]int64, r)
	var i, ix, iy int64
	for {
		f(i, ix, iy)
		i++
		d := r - 1
		for ; d >= 0; d-- {
			idx[d]++
			ix += b.sx[d]
			iy += b.sy[d]
			if idx[d] < b.shape[d] {
				break
			}
			ix -= b.sx[d] * b.shape[d]
			iy -= b.sy[d] * b.shape[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

func checkAdd(x, y, out *tensor.Tensor) (broadcast, error) {
	if x.DType() != y.DType() || x.DType() != out.DType() {
		return broadcast{}, fmt.Errorf("%w: add dtypes %s, %s -> %s", ErrShape, x.DType(), y.DType(), out.DType())
	}
	return newBroadcast(x.Shape(), y.Shape(), out.Shape())
}

// CPUAdd computes out = x + y with broadcasting on host tensors.
func CPUAdd(x, y, out *tensor.Tensor) error {
	bc, err := checkAdd(x, y, out)
	if err != nil {
		return err
	}
	if out.NumElements() == 0 {
		return nil
	}
	if x.DType() == tensor.Float64 {
		xd, _ := tensor.Data[float64](x)
		yd, _ := tensor.Data[float64](y)
		od, err := tensor.Data[float64](out)
		if err != nil {
			return err
		}
		bc.apply(func(i, ix, iy int64) { od[i] = xd[ix] + yd[iy] })
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	yd, err := hostFloats(y)
	if err != nil {
		return err
	}
	od, err := outFloats(out)
	if err != nil {
		return err
	}
	if len(bc.shape) == 2 && bc.sx[1] == 1 && bc.sy[1] == 1 {
		// Rows of x plus a row of y (a bias), or any 2-D merge.
		n := bc.shape[1]
		for r := range bc.shape[0] {
			o := od[r*n : r*n+n]
			xr := xd[r*bc.sx[0] : r*bc.sx[0]+n]
			yr := yd[r*bc.sy[0] : r*bc.sy[0]+n]
			for j := range o {
				o[j] = xr[j] + yr[j]
			}
		}
	} else {
		bc.apply(func(i, ix, iy int64) { od[i] = xd[ix] + yd[iy] })
	}
	return storeFloats(out, od)
}

// geluC is sqrt(2/pi), of the tanh approximation
// gelu(x) = x/2 · (1 + tanh(sqrt(2/pi) · (x + 0.044715 x³))).
var geluC = math.Sqrt(2 / math.Pi)

// Gelu is the tanh approximation of GELU in float64 (the VM's kernels
// compute it in float32 for the 32- and 16-bit types).
func Gelu(x float64) float64 { return 0.5 * x * (1 + math.Tanh(geluC*(x+0.044715*x*x*x))) }

func gelu32(x float32) float32 {
	return float32(0.5 * float64(x) * (1 + math.Tanh(geluC*(float64(x)+0.044715*float64(x)*float64(x)*float64(x)))))
}

// CPUGelu computes out = gelu(x) on host tensors.
func CPUGelu(x, out *tensor.Tensor) error {
	if !tensor.SameLayout(x, out) {
		return fmt.Errorf("%w: gelu of %s%v into %s%v", ErrShape, x.DType(), x.Shape(), out.DType(), out.Shape())
	}
	if x.DType() == tensor.Float64 {
		xd, _ := tensor.Data[float64](x)
		od, err := tensor.Data[float64](out)
		if err != nil {
			return err
		}
		for i, v := range xd {
			od[i] = Gelu(v)
		}
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	od, err := outFloats(out)
	if err != nil {
		return err
	}
	for i, v := range xd {
		od[i] = gelu32(v)
	}
	return storeFloats(out, od)
}
