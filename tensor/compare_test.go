package tensor_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

func f64s(vals ...float64) *tensor.Tensor { return tensor.FromSlice(vals) }

func TestAllCloseTolerance(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		got, want  float64
		rtol, atol float64
		ok         bool
	}{
		{1, 1, 0, 0, true},
		{5, 4, 0.25, 0, true}, // 1 <= 0.25×4
		{3, 4, 0.25, 0, true},
		{5.000001, 4, 0.25, 0, false},
		{5, 4, 0.24, 0, false},
		{4, 8, 0.5, 0, true},  // 4 <= 0.5×8: the bound is relative to want,
		{8, 4, 0.5, 0, false}, // not to got
		{5, 4, 0, 1, true},
		{5, 4, 0, 0.999, false},
		{5, 4, 0.125, 0.5, true}, // 1 <= 0.5 + 0.5
		{5, 4, 0.125, 0.49, false},
		{0, 1e-9, 0, 1e-8, true},
		{math.Copysign(0, -1), 0, 0, 0, true},
		{nan, nan, 0, 0, true},
		{nan, 1, 1e9, 1e9, false},
		{1, nan, 1e9, 1e9, false},
		{inf, inf, 0, 0, true},
		{-inf, -inf, 0, 0, true},
		{inf, -inf, inf, inf, false},
		{inf, math.MaxFloat64, inf, inf, false}, // Inf matches only the same Inf
		{math.MaxFloat64, inf, inf, inf, false},
		{1, 2, inf, 0, true},
		{0, 0, inf, 0, true}, // inf × 0 must not turn into NaN
		{math.MaxFloat64, -math.MaxFloat64, 0, 1e308, false},
	}
	for _, tc := range tests {
		err := tensor.AllClose(f64s(0, tc.got), f64s(0, tc.want), tc.rtol, tc.atol)
		if (err == nil) != tc.ok {
			t.Errorf("AllClose(%v, %v, rtol=%v, atol=%v) = %v, want ok=%v", tc.got, tc.want, tc.rtol, tc.atol, err, tc.ok)
		}
		err = tensor.CloseTo(f64s(0, tc.got), []float64{0, tc.want}, tc.rtol, tc.atol)
		if (err == nil) != tc.ok {
			t.Errorf("CloseTo(%v, %v, rtol=%v, atol=%v) = %v, want ok=%v", tc.got, tc.want, tc.rtol, tc.atol, err, tc.ok)
		}
	}
}

func TestAllCloseReport(t *testing.T) {
	want := tensor.MustNew(tensor.Float32, tensor.Shape{4, 5})
	if err := tensor.Random(want, 1); err != nil {
		t.Fatal(err)
	}
	got, err := want.Clone()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := tensor.Data[float32](got)
	for _, i := range []int{2, 7, 11, 12, 13, 14, 15, 16, 17, 19} {
		d[i] += 0.5
	}
	err = tensor.AllClose(got, want, 1e-5, 1e-5)
	var me *tensor.MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("AllClose = %v, want a *MismatchError", err)
	}
	if me.Count != 10 || me.Total != 20 || len(me.First) != 8 || me.First[0].Index != 2 || me.First[1].Index != 7 {
		t.Errorf("MismatchError %+v", me)
	}
	if math.Abs(me.MaxAbsDiff-0.5) > 1e-6 {
		t.Errorf("MaxAbsDiff = %v, want 0.5", me.MaxAbsDiff)
	}
	msg := err.Error()
	for _, s := range []string{"10 of 20 float32 elements", "(4, 5)", "[2][0 2] got", "[7][1 2]", "; ..."} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
	if len(msg) > 1000 {
		t.Errorf("message is %d bytes long", len(msg))
	}
}

func TestAllCloseLayout(t *testing.T) {
	a := tensor.MustNew(tensor.Float32, tensor.Shape{2, 3})
	cases := []struct {
		b    *tensor.Tensor
		want string
	}{
		{tensor.MustNew(tensor.Float64, tensor.Shape{2, 3}), "dtype mismatch"},
		{tensor.MustNew(tensor.Float32, tensor.Shape{3, 2}), "shape mismatch"},
		{tensor.MustNew(tensor.Float32, tensor.Shape{6}), "shape mismatch"},
	}
	for _, c := range cases {
		if err := tensor.AllClose(a, c.b, 0, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AllClose(%v, %v) = %v, want %q", a, c.b, err, c.want)
		}
		if err := tensor.Equal(a, c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Equal(%v, %v) = %v, want %q", a, c.b, err, c.want)
		}
	}
	for _, tol := range [][2]float64{{-1, 0}, {0, -1}, {math.NaN(), 0}, {0, math.NaN()}} {
		if err := tensor.AllClose(a, a, tol[0], tol[1]); err == nil {
			t.Errorf("AllClose with rtol=%v atol=%v succeeded", tol[0], tol[1])
		}
		if err := tensor.CloseTo(a, make([]float64, 6), tol[0], tol[1]); err == nil {
			t.Errorf("CloseTo with rtol=%v atol=%v succeeded", tol[0], tol[1])
		}
	}
	if err := tensor.CloseTo(a, make([]float64, 5), 0, 0); err == nil || !strings.Contains(err.Error(), "5 reference values for 6 elements") {
		t.Errorf("CloseTo with 5 values = %v", err)
	}
}

// TestCompareEveryDType compares a tensor with itself, with a perturbed copy
// and with its float64 values, for every dtype, through views.
func TestCompareEveryDType(t *testing.T) {
	for _, dt := range tensor.DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			a := newViewCase(t, dt, tensor.Shape{8, 8}, 0x33)
			b := newViewCase(t, dt, tensor.Shape{8, 8}, 0x44)
			for _, c := range []*viewCase{a, b} {
				if err := tensor.Random(c.view, 9); err != nil {
					t.Fatal(err)
				}
			}
			rtol, atol := tensor.DefaultTolerance(dt)
			if err := tensor.Equal(a.view, b.view); err != nil {
				t.Errorf("Equal: %v", err)
			}
			if err := tensor.AllClose(a.view, b.view, rtol, atol); err != nil {
				t.Errorf("AllClose: %v", err)
			}
			ref := values(t, a.view)
			if err := tensor.CloseTo(a.view, ref, rtol, atol); err != nil {
				t.Errorf("CloseTo: %v", err)
			}
			// Change element 10 of b: 0 ↔ 1 for bool, else +1 (or -1 at the top).
			vals := values(t, b.view)
			switch {
			case dt == tensor.Bool:
				vals[10] = 1 - vals[10]
			case vals[10] > 0:
				vals[10]--
			default:
				vals[10]++
			}
			if err := tensor.SetFromFloat64(b.view, vals); err != nil {
				t.Fatal(err)
			}
			for name, err := range map[string]error{
				"Equal":    tensor.Equal(a.view, b.view),
				"AllClose": tensor.AllClose(b.view, a.view, rtol, atol),
				"CloseTo":  tensor.CloseTo(b.view, ref, rtol, atol),
			} {
				var me *tensor.MismatchError
				if !errors.As(err, &me) || me.Count != 1 || me.First[0].Index != 10 {
					t.Errorf("%s after changing element 10: %v", name, err)
				}
			}
			a.checkOutside(t)
			b.checkOutside(t)
		})
	}
}

func TestIntegerComparisonIsExact(t *testing.T) {
	a := tensor.FromSlice([]int64{1<<62 + 1, math.MaxInt64, math.MinInt64})
	b := tensor.FromSlice([]int64{1 << 62, math.MaxInt64, math.MinInt64})
	// float64 cannot tell 2^62+1 from 2^62; the comparison must.
	if err := tensor.AllClose(a, b, 0, 0); err == nil {
		t.Error("AllClose(2^62+1, 2^62) passed")
	}
	if err := tensor.AllClose(a, b, 0, 1); err != nil {
		t.Errorf("AllClose(2^62+1, 2^62, atol=1): %v", err)
	}
	c := tensor.FromSlice([]int64{math.MinInt64, math.MaxInt64})
	d := tensor.FromSlice([]int64{math.MaxInt64, math.MinInt64})
	if err := tensor.AllClose(c, d, 0, 1e30); err != nil {
		t.Errorf("AllClose of extremes with a huge atol: %v", err)
	}
	if err := tensor.AllClose(c, d, 0, 1e18); err == nil {
		t.Error("AllClose(MinInt64, MaxInt64, atol=1e18) passed")
	}
	tests := []struct {
		got  int64
		want float64
		atol float64
		ok   bool
	}{
		{1<<53 + 1, 0x1p53, 0, false},
		{1<<53 + 1, 0x1p53, 1, true},
		{math.MaxInt64, 0x1p63, 0, false}, // 2^63 is one more than MaxInt64
		{math.MaxInt64, 0x1p63, 1, true},
		{math.MinInt64, -0x1p63, 0, true},
		{2, 2.5, 0, false},
		{2, 2.5, 0.5, true},
		{0, math.NaN(), 1e300, false},
		{0, math.Inf(1), 1e300, false},
		{-3, -3, 0, true},
	}
	for _, tc := range tests {
		err := tensor.CloseTo(tensor.FromSlice([]int64{tc.got}), []float64{tc.want}, 0, tc.atol)
		if (err == nil) != tc.ok {
			t.Errorf("CloseTo(int64 %d, %v, atol=%v) = %v, want ok=%v", tc.got, tc.want, tc.atol, err, tc.ok)
		}
	}
}

func TestEqualIsBitwise(t *testing.T) {
	pz, nz := tensor.FromSlice([]float32{0, 1}), tensor.FromSlice([]float32{float32(math.Copysign(0, -1)), 1})
	if err := tensor.AllClose(pz, nz, 0, 0); err != nil {
		t.Errorf("AllClose(+0, -0): %v", err)
	}
	err := tensor.Equal(pz, nz)
	var me *tensor.MismatchError
	if !errors.As(err, &me) || !me.Exact || me.Count != 1 || me.First[0].GotBits != 0 || me.First[0].WantBits != 0x80000000 {
		t.Fatalf("Equal(+0, -0) = %v", err)
	}
	if !strings.Contains(err.Error(), "got 0x00000000 (0), want 0x80000000 (-0)") {
		t.Errorf("message %q", err)
	}
	// NaNs with different payloads differ bitwise but are close.
	n1 := tensor.FromSlice([]tensor.F16{0x7e00})
	n2 := tensor.FromSlice([]tensor.F16{0x7e01})
	if err := tensor.Equal(n1, n2); err == nil || !strings.Contains(err.Error(), "0x7e00") {
		t.Errorf("Equal of different NaNs = %v", err)
	}
	if err := tensor.AllClose(n1, n2, 0, 0); err != nil {
		t.Errorf("AllClose of NaNs: %v", err)
	}
	// Same bytes through views at different offsets are equal; the same
	// bytes with another dtype are not.
	st, _ := tensor.NewHostStorage(16, "")
	v1, _ := tensor.View(st, 0, tensor.Int32, tensor.Shape{2})
	v2, _ := tensor.View(st, 8, tensor.Int32, tensor.Shape{2})
	if err := tensor.Equal(v1, v2); err != nil {
		t.Errorf("Equal of zero views: %v", err)
	}
	u, _ := tensor.View(st, 8, tensor.Float32, tensor.Shape{2})
	if err := tensor.Equal(v1, u); err == nil {
		t.Error("Equal(int32, float32) passed")
	}
	// Empty tensors.
	if err := tensor.Equal(tensor.MustNew(tensor.Int8, tensor.Shape{0}), tensor.MustNew(tensor.Int8, tensor.Shape{0})); err != nil {
		t.Errorf("Equal of empty tensors: %v", err)
	}
}

func TestDefaultTolerance(t *testing.T) {
	for _, dt := range tensor.DTypes {
		rtol, atol := tensor.DefaultTolerance(dt)
		if !dt.IsFloat() {
			if rtol != 0 || atol != 0 {
				t.Errorf("%s: rtol %v, atol %v; want exact", dt, rtol, atol)
			}
			continue
		}
		if rtol <= 0 || atol <= 0 {
			t.Errorf("%s: rtol %v, atol %v", dt, rtol, atol)
		}
		// A single rounding of a reference must pass, over a wide range of
		// magnitudes...
		ref := make([]float64, 4096)
		x := tensor.MustNew(tensor.Float64, tensor.Shape{4096})
		if err := tensor.RandomRange(x, 1, -1000, 1000); err != nil {
			t.Fatal(err)
		}
		copy(ref, values(t, x))
		for i := range ref[:1024] {
			ref[i] /= 1e6 // down to tiny values, where atol matters
		}
		got := tensor.MustNew(dt, tensor.Shape{4096})
		if err := tensor.SetFromFloat64(got, ref); err != nil {
			t.Fatal(err)
		}
		if err := tensor.CloseTo(got, ref, rtol, atol); err != nil {
			t.Errorf("%s: rounded reference fails DefaultTolerance: %v", dt, err)
		}
		// ...and an error of 10% must not.
		bad := append([]float64(nil), ref...)
		bad[2000] *= 1.1
		if err := tensor.CloseTo(got, bad, rtol, atol); err == nil {
			t.Errorf("%s: a 10%% error passes DefaultTolerance", dt)
		}
	}
	if r, a := tensor.DefaultTolerance(tensor.Invalid); r != 0 || a != 0 {
		t.Errorf("DefaultTolerance(invalid) = %v, %v", r, a)
	}
}
