package kernels

import (
	"errors"
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

func randTensor(t *testing.T, dt tensor.DType, shape tensor.Shape, seed uint64) *tensor.Tensor {
	t.Helper()
	x := tensor.MustNew(dt, shape)
	if err := tensor.RandomRange(x, seed, -2, 2); err != nil {
		t.Fatal(err)
	}
	return x
}

func floats(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	v, err := tensor.ToFloat64(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// tol is the comparison tolerance against a float64 reference: one
// rounding of the output plus float32 accumulation over k terms.
func tol(dt tensor.DType, k int) (rtol, atol float64) {
	switch dt {
	case tensor.Float64:
		return 1e-12, 1e-12
	case tensor.Float32:
		return 1e-5, 1e-5 * float64(k+1)
	case tensor.Float16:
		return 2e-3, 2e-3
	}
	return 1e-2, 1e-2 // bfloat16
}

var floatTypes = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Float64}

func TestCPUMatmul(t *testing.T) {
	shapes := []struct {
		a, b tensor.Shape
	}{
		{tensor.Shape{1, 1}, tensor.Shape{1, 1}},
		{tensor.Shape{3, 5}, tensor.Shape{5, 7}},
		{tensor.Shape{2, 3, 70}, tensor.Shape{70, 300}}, // batch dims, crosses the k and n blocks
		{tensor.Shape{4, 0}, tensor.Shape{0, 3}},        // k = 0: zeros
		{tensor.Shape{0, 4}, tensor.Shape{4, 3}},
	}
	for _, dt := range floatTypes {
		for i, sh := range shapes {
			t.Run(fmt.Sprintf("%s/%d", dt, i), func(t *testing.T) {
				a, b := randTensor(t, dt, sh.a, 1), randTensor(t, dt, sh.b, 2)
				r := len(sh.a)
				outShape := append(sh.a[:r-1:r-1], sh.b[1])
				out := tensor.MustNew(dt, outShape)
				if err := tensor.Poison(out); err != nil {
					t.Fatal(err)
				}
				if err := CPUMatmul(a, b, out); err != nil {
					t.Fatal(err)
				}
				af, bf := floats(t, a), floats(t, b)
				k, n := int(sh.b[0]), int(sh.b[1])
				m := int(out.NumElements()) / max(n, 1)
				want := make([]float64, m*n)
				for i := range m {
					for j := range n {
						for p := range k {
							want[i*n+j] += af[i*k+p] * bf[p*n+j]
						}
					}
				}
				rtol, atol := tol(dt, k)
				if err := tensor.CloseTo(out, want, rtol, atol*2); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestCPUMatmulNT: a·bᵀ with b [n, k] against a float64 product, shapes
// crossing gemmNT's row blocks and its four-way unrolling.
func TestCPUMatmulNT(t *testing.T) {
	shapes := []struct {
		a, b tensor.Shape
	}{
		{tensor.Shape{1, 1}, tensor.Shape{1, 1}},
		{tensor.Shape{3, 5}, tensor.Shape{7, 5}},
		{tensor.Shape{2, 3, 70}, tensor.Shape{67, 70}}, // batch dims, three row blocks
		{tensor.Shape{4, 0}, tensor.Shape{3, 0}},       // k = 0: zeros
		{tensor.Shape{0, 4}, tensor.Shape{3, 4}},
	}
	for _, dt := range floatTypes {
		for i, sh := range shapes {
			t.Run(fmt.Sprintf("%s/%d", dt, i), func(t *testing.T) {
				a, b := randTensor(t, dt, sh.a, 1), randTensor(t, dt, sh.b, 2)
				r := len(sh.a)
				out := tensor.MustNew(dt, append(sh.a[:r-1:r-1], sh.b[0]))
				if err := tensor.Poison(out); err != nil {
					t.Fatal(err)
				}
				if err := CPUMatmulNT(a, b, out); err != nil {
					t.Fatal(err)
				}
				af, bf := floats(t, a), floats(t, b)
				n, k := int(sh.b[0]), int(sh.b[1])
				m := int(out.NumElements()) / max(n, 1)
				want := make([]float64, m*n)
				for i := range m {
					for j := range n {
						for p := range k {
							want[i*n+j] += af[i*k+p] * bf[j*k+p]
						}
					}
				}
				rtol, atol := tol(dt, k)
				if err := tensor.CloseTo(out, want, rtol, atol*2); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

func TestCPUAdd(t *testing.T) {
	cases := []struct {
		x, y, out tensor.Shape
	}{
		{tensor.Shape{4, 6}, tensor.Shape{4, 6}, tensor.Shape{4, 6}},
		{tensor.Shape{4, 6}, tensor.Shape{6}, tensor.Shape{4, 6}},          // bias
		{tensor.Shape{6}, tensor.Shape{4, 6}, tensor.Shape{4, 6}},          // bias first
		{tensor.Shape{4, 1}, tensor.Shape{1, 6}, tensor.Shape{4, 6}},       // outer sum
		{tensor.Shape{2, 3, 4}, tensor.Shape{3, 1}, tensor.Shape{2, 3, 4}}, // middle dim
		{tensor.Shape{}, tensor.Shape{}, tensor.Shape{}},                   // scalars
		{tensor.Shape{0, 3}, tensor.Shape{3}, tensor.Shape{0, 3}},
	}
	for _, dt := range floatTypes {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s/%d", dt, i), func(t *testing.T) {
				x, y := randTensor(t, dt, c.x, 3), randTensor(t, dt, c.y, 4)
				out := tensor.MustNew(dt, c.out)
				if err := CPUAdd(x, y, out); err != nil {
					t.Fatal(err)
				}
				xf, yf := floats(t, x), floats(t, y)
				n := int(out.NumElements())
				want := make([]float64, n)
				// Reference by explicit index arithmetic.
				r := len(c.out)
				idx := make([]int64, r)
				at := func(s tensor.Shape, v []float64) float64 {
					off, stride := int64(0), int64(1)
					for d := len(s) - 1; d >= 0; d-- {
						i := idx[d+r-len(s)]
						if s[d] == 1 {
							i = 0
						}
						off += i * stride
						stride *= s[d]
					}
					return v[off]
				}
				for e := range n {
					rem := int64(e)
					for d := r - 1; d >= 0; d-- {
						idx[d] = rem % c.out[d]
						rem /= c.out[d]
					}
					want[e] = at(c.x, xf) + at(c.y, yf)
				}
				rtol, atol := tol(dt, 1)
				if err := tensor.CloseTo(out, want, rtol, atol); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

func TestCPUGelu(t *testing.T) {
	for _, dt := range floatTypes {
		x := randTensor(t, dt, tensor.Shape{5, 9}, 5)
		out := tensor.MustNew(dt, tensor.Shape{5, 9})
		if err := CPUGelu(x, out); err != nil {
			t.Fatal(err)
		}
		xf := floats(t, x)
		want := make([]float64, len(xf))
		for i, v := range xf {
			want[i] = Gelu(v)
		}
		rtol, atol := tol(dt, 1)
		if err := tensor.CloseTo(out, want, rtol, atol); err != nil {
			t.Errorf("%s: %v", dt, err)
		}
	}
	// Known values of the tanh approximation.
	for _, c := range []struct{ x, want float64 }{{0, 0}, {1, 0.8411919906082768}, {-1, -0.15880800939172324}} {
		if got := Gelu(c.x); got-c.want > 1e-15 || c.want-got > 1e-15 {
			t.Errorf("Gelu(%v) = %v, want %v", c.x, got, c.want)
		}
	}
}

func TestCPUKernelErrors(t *testing.T) {
	f32 := func(s ...int64) *tensor.Tensor { return tensor.MustNew(tensor.Float32, s) }
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"matmul inner", func() error { return CPUMatmul(f32(2, 3), f32(4, 5), f32(2, 5)) }, ErrShape},
		{"matmul_nt inner", func() error { return CPUMatmulNT(f32(2, 3), f32(3, 5), f32(2, 3)) }, ErrShape},
		{"matmul_nt out", func() error { return CPUMatmulNT(f32(2, 3), f32(5, 3), f32(2, 3)) }, ErrShape},
		{"matmul_nt rank", func() error { return CPUMatmulNT(f32(2, 3), f32(5, 3, 1), f32(2, 5)) }, ErrShape},
		{"matmul out", func() error { return CPUMatmul(f32(2, 3), f32(3, 5), f32(2, 4)) }, ErrShape},
		{"matmul rank", func() error { return CPUMatmul(f32(3), f32(3, 5), f32(5)) }, ErrShape},
		{"matmul dtype", func() error {
			return CPUMatmul(f32(2, 3), tensor.MustNew(tensor.Float16, tensor.Shape{3, 5}), f32(2, 5))
		}, ErrShape},
		{"matmul int", func() error {
			i := func(s ...int64) *tensor.Tensor { return tensor.MustNew(tensor.Int32, s) }
			return CPUMatmul(i(2, 3), i(3, 5), i(2, 5))
		}, ErrUnsupported},
		{"add broadcast", func() error { return CPUAdd(f32(4, 6), f32(5), f32(4, 6)) }, ErrShape},
		{"add out", func() error { return CPUAdd(f32(4, 6), f32(6), f32(4, 7)) }, ErrShape},
		{"gelu layout", func() error { return CPUGelu(f32(4), f32(5)) }, ErrShape},
	}
	for _, c := range cases {
		if err := c.run(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestBroadcastMerge(t *testing.T) {
	cases := []struct {
		x, y, out tensor.Shape
		rank      int
	}{
		{tensor.Shape{2, 3, 4}, tensor.Shape{2, 3, 4}, tensor.Shape{2, 3, 4}, 1},
		{tensor.Shape{2, 3, 4}, tensor.Shape{4}, tensor.Shape{2, 3, 4}, 2},
		{tensor.Shape{2, 3, 4}, tensor.Shape{3, 1}, tensor.Shape{2, 3, 4}, 3},
		{tensor.Shape{1, 1, 4}, tensor.Shape{4}, tensor.Shape{1, 1, 4}, 1},
	}
	for _, c := range cases {
		b, err := newBroadcast(c.x, c.y, c.out)
		if err != nil || len(b.shape) != c.rank {
			t.Errorf("%v + %v -> %v: rank %d (%+v), %v; want rank %d", c.x, c.y, c.out, len(b.shape), b, err, c.rank)
		}
	}
}
