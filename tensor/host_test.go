package tensor_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// fillValues covers integral, fractional, out-of-range, signed-zero and
// non-finite inputs.
var fillValues = []float64{
	0, math.Copysign(0, -1), 1, -1, 2.5, -2.5, 90, 127, 128, -128, -129, 255, 256,
	32767, 32768, -32769, 65504, 65520, 1e6, 0x1p31, -0x1p31, 0x1p53 + 2, 0x1p62,
	0x1p63, -0x1p63, 1e300, 1e-300, math.Inf(1), math.Inf(-1), math.NaN(),
}

// wantFill returns the value Fill(v) must store in dt, or ok == false if it
// must fail.
func wantFill(dt tensor.DType, v float64) (float64, bool) {
	switch {
	case dt == tensor.Bool:
		if math.IsNaN(v) {
			return 0, false
		}
		if v != 0 {
			return 1, true
		}
		return 0, true
	case dt.IsInt():
		lo, hi := dtypeLimits(dt)
		if math.IsNaN(v) || math.IsInf(v, 0) || v != math.Trunc(v) || v < lo || v > hi || (dt == tensor.Int64 && v >= 0x1p63) {
			return 0, false
		}
		return v + 0, true // +0: ints have no -0
	}
	return roundTo(dt, v), true
}

func TestFill(t *testing.T) {
	for _, dt := range tensor.DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			for _, v := range fillValues {
				c := newViewCase(t, dt, tensor.Shape{3, 5}, 0xEE)
				want, ok := wantFill(dt, v)
				err := tensor.Fill(c.view, v)
				c.checkOutside(t)
				if !ok {
					if err == nil {
						t.Fatalf("Fill(%v) succeeded, want an error", v)
					}
					if !c.unchanged() {
						t.Fatalf("Fill(%v) failed but wrote the tensor", v)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Fill(%v): %v", v, err)
				}
				for i, got := range values(t, c.view) {
					if !same(got, want) {
						t.Fatalf("Fill(%v): element %d = %v, want %v", v, i, got, want)
					}
				}
			}
		})
	}
}

func TestFillKnownValues(t *testing.T) {
	h := tensor.MustNew(tensor.Float16, tensor.Shape{2})
	if err := tensor.Fill(h, 65520); err != nil {
		t.Fatal(err)
	}
	if d, _ := tensor.Data[tensor.F16](h); d[0] != 0x7c00 || d[1] != 0x7c00 {
		t.Errorf("Fill(float16, 65520) = %#04x, want Inf", d)
	}
	b := tensor.MustNew(tensor.BFloat16, tensor.Shape{1})
	if err := tensor.Fill(b, 1+0x1p-8+0x1p-30); err != nil {
		t.Fatal(err)
	}
	if d, _ := tensor.Data[tensor.BF16](b); d[0] != 0x3f81 {
		t.Errorf("Fill(bfloat16, 1+2^-8+2^-30) = %#04x, want 0x3f81 (rounded once)", d[0])
	}
	i := tensor.MustNew(tensor.Int64, tensor.Shape{1})
	if err := tensor.Fill(i, -0x1p63); err != nil {
		t.Fatal(err)
	}
	if d, _ := tensor.Data[int64](i); d[0] != math.MinInt64 {
		t.Errorf("Fill(int64, -2^63) = %d", d[0])
	}
	// Empty and scalar tensors.
	for _, shape := range []tensor.Shape{{0}, {4, 0}, nil} {
		x := tensor.MustNew(tensor.Float32, shape)
		if err := tensor.Fill(x, 7); err != nil {
			t.Errorf("Fill of shape %v: %v", shape, err)
		}
	}
}

func TestSetFromFloat64(t *testing.T) {
	for _, dt := range tensor.DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			// Every value that Fill accepts must come back exactly.
			var vals []float64
			for _, v := range fillValues {
				if _, ok := wantFill(dt, v); ok {
					vals = append(vals, v)
				}
			}
			c := newViewCase(t, dt, tensor.Shape{int64(len(vals))}, 0xEE)
			if err := tensor.SetFromFloat64(c.view, vals); err != nil {
				t.Fatal(err)
			}
			c.checkOutside(t)
			got := values(t, c.view)
			for i, v := range vals {
				want, _ := wantFill(dt, v)
				if !same(got[i], want) {
					t.Errorf("SetFromFloat64 %v: got %v, want %v", v, got[i], want)
				}
			}
			// Length mismatch, leaving the tensor alone.
			if err := tensor.SetFromFloat64(c.view, vals[1:]); err == nil || !strings.Contains(err.Error(), "values for") {
				t.Errorf("SetFromFloat64 with %d values for %d elements: err = %v", len(vals)-1, len(vals), err)
			}
		})
	}
}

func TestSetFromFloat64Rounding(t *testing.T) {
	tests := []struct {
		dt   tensor.DType
		in   float64
		want float64 // NaN: must fail
	}{
		{tensor.Int32, 2.5, 2}, // ties to even
		{tensor.Int32, 3.5, 4},
		{tensor.Int32, -2.5, -2},
		{tensor.Int32, 2.4999, 2},
		{tensor.Int32, -0.6, -1},
		{tensor.Int8, 127.4, 127},
		{tensor.Int8, 127.5, math.NaN()}, // rounds to 128: out of range
		{tensor.Int8, -128.5, -128},      // rounds to even -128: in range
		{tensor.Int8, -128.6, math.NaN()},
		{tensor.Uint8, -0.4, 0},
		{tensor.Uint8, -0.5, 0},
		{tensor.Uint8, -0.6, math.NaN()},
		{tensor.Uint8, 255.5, math.NaN()},
		{tensor.Int16, 32767.49, 32767},
		{tensor.Int64, 0x1p62, 0x1p62},
		{tensor.Int64, 0x1p63, math.NaN()},
		{tensor.Int64, -0x1p63, -0x1p63},
		{tensor.Int64, math.Inf(1), math.NaN()},
		{tensor.Int32, math.NaN(), math.NaN()},
		{tensor.Bool, 0.25, 1},
		{tensor.Bool, -3, 1},
		{tensor.Bool, math.Copysign(0, -1), 0},
		{tensor.Bool, math.NaN(), math.NaN()},
		{tensor.Float16, 1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-10},
		{tensor.Float16, 1e5, math.Inf(1)},
		{tensor.Float16, math.NaN(), math.NaN()}, // stored as NaN: allowed
		{tensor.Float32, 0x1p-150, 0},
	}
	for _, tc := range tests {
		x := tensor.MustNew(tc.dt, tensor.Shape{3})
		if err := tensor.Fill(x, 1); err != nil {
			t.Fatal(err)
		}
		err := tensor.SetFromFloat64(x, []float64{0, tc.in, 0})
		mustFail := math.IsNaN(tc.want) && !tc.dt.IsFloat()
		got := values(t, x)
		if mustFail {
			if err == nil {
				t.Errorf("%s SetFromFloat64(%v) = %v, want an error", tc.dt, tc.in, got[1])
			} else if !strings.Contains(err.Error(), "element 1") {
				t.Errorf("%s SetFromFloat64(%v): error %q does not name the element", tc.dt, tc.in, err)
			}
			if !sameValues(got, []float64{1, 1, 1}) {
				t.Errorf("%s SetFromFloat64(%v) failed but changed the tensor to %v", tc.dt, tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s SetFromFloat64(%v): %v", tc.dt, tc.in, err)
			continue
		}
		if !same(got[1], tc.want) {
			t.Errorf("%s SetFromFloat64(%v) stored %v, want %v", tc.dt, tc.in, got[1], tc.want)
		}
	}
}

func TestToFloat64(t *testing.T) {
	i64 := tensor.FromSlice([]int64{math.MinInt64, -1, 0, 1 << 53, math.MaxInt64})
	got := values(t, i64)
	want := []float64{-0x1p63, -1, 0, 0x1p53, 0x1p63}
	if !sameValues(got, want) {
		t.Errorf("int64 ToFloat64 = %v, want %v", got, want)
	}
	u8 := tensor.FromSlice([]uint8{0, 200, 255})
	if got := values(t, u8); !sameValues(got, []float64{0, 200, 255}) {
		t.Errorf("uint8 ToFloat64 = %v", got)
	}
	h := tensor.FromSlice([]tensor.F16{0x3c00, 0x8001, 0x7c00, 0x7e00, 0x8000})
	if got := values(t, h); !sameValues(got, []float64{1, -0x1p-24, math.Inf(1), math.NaN(), math.Copysign(0, -1)}) {
		t.Errorf("float16 ToFloat64 = %v", got)
	}
	bf := tensor.FromSlice([]tensor.BF16{0x3f80, 0xc040, 0x0001})
	if got := values(t, bf); !sameValues(got, []float64{1, -3, 0x1p-133}) {
		t.Errorf("bfloat16 ToFloat64 = %v", got)
	}
	// Bool bytes other than 0 and 1 read as NaN.
	b := tensor.MustNew(tensor.Bool, tensor.Shape{4})
	copy(b.Bytes(), []byte{0, 1, 2, 0xA5})
	if got := values(t, b); !sameValues(got, []float64{0, 1, math.NaN(), math.NaN()}) {
		t.Errorf("bool ToFloat64 = %v", got)
	}
	// Scalars and empty tensors.
	s := tensor.MustNew(tensor.Float64, nil)
	if got := values(t, s); len(got) != 1 {
		t.Errorf("scalar ToFloat64 has %d values", len(got))
	}
	e := tensor.MustNew(tensor.Int16, tensor.Shape{2, 0})
	if got := values(t, e); len(got) != 0 {
		t.Errorf("empty ToFloat64 has %d values", len(got))
	}
}

func TestPoison(t *testing.T) {
	wantInt := map[tensor.DType]float64{
		tensor.Int8:  0x5A,
		tensor.Int16: 0x5A5A,
		tensor.Int32: 0x5A5A5A5A,
		tensor.Int64: 0x5A5A5A5A5A5A5A5A,
		tensor.Uint8: 0x5A,
	}
	for _, dt := range tensor.DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			c := newViewCase(t, dt, tensor.Shape{2, 4}, 0x11)
			if err := tensor.Poison(c.view); err != nil {
				t.Fatal(err)
			}
			c.checkOutside(t)
			for i, v := range values(t, c.view) {
				switch {
				case dt.IsInt():
					if v != wantInt[dt] {
						t.Fatalf("element %d = %v, want %v", i, v, wantInt[dt])
					}
				default: // floats and bool read as NaN
					if !math.IsNaN(v) {
						t.Fatalf("element %d = %v, want NaN", i, v)
					}
				}
			}
			if n, err := tensor.PoisonCount(c.view); err != nil || n != 8 {
				t.Fatalf("PoisonCount = %d, %v; want 8", n, err)
			}
			// Write half of it through a sub-view: PoisonCount sees the rest.
			half, err := c.view.View(0, dt, tensor.Shape{4})
			if err != nil {
				t.Fatal(err)
			}
			if err := tensor.Fill(half, 1); err != nil {
				t.Fatal(err)
			}
			if n, err := tensor.PoisonCount(c.view); err != nil || n != 4 {
				t.Fatalf("PoisonCount after writing 4 = %d, %v; want 4", n, err)
			}
			// A poisoned output fails comparison with any number.
			if err := tensor.CloseTo(c.view, []float64{1, 1, 1, 1, 1, 1, 1, 1}, 0.5, 0.5); err == nil {
				t.Fatal("CloseTo passed on poisoned elements")
			}
		})
	}
	// The exact bit patterns.
	f32 := tensor.MustNew(tensor.Float32, tensor.Shape{1})
	f64 := tensor.MustNew(tensor.Float64, tensor.Shape{1})
	h := tensor.MustNew(tensor.Float16, tensor.Shape{1})
	bf := tensor.MustNew(tensor.BFloat16, tensor.Shape{1})
	b := tensor.MustNew(tensor.Bool, tensor.Shape{1})
	for _, x := range []*tensor.Tensor{f32, f64, h, bf, b} {
		if err := tensor.Poison(x); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := tensor.Data[float32](f32); math.Float32bits(d[0]) != 0x7fda5a5a {
		t.Errorf("float32 poison %#08x", math.Float32bits(d[0]))
	}
	if d, _ := tensor.Data[float64](f64); math.Float64bits(d[0]) != 0x7ffa5a5a5a5a5a5a {
		t.Errorf("float64 poison %#016x", math.Float64bits(d[0]))
	}
	if d, _ := tensor.Data[tensor.F16](h); d[0] != 0x7e5a {
		t.Errorf("float16 poison %#04x", d[0])
	}
	if d, _ := tensor.Data[tensor.BF16](bf); d[0] != 0x7fda {
		t.Errorf("bfloat16 poison %#04x", d[0])
	}
	if b.Bytes()[0] != tensor.PoisonBoolByte {
		t.Errorf("bool poison %#02x", b.Bytes()[0])
	}
}

// TestHelpersRejectBadTensors checks every helper against nil, zero-valued
// and device tensors: an error (ErrNotHost for the device), never a panic.
func TestHelpersRejectBadTensors(t *testing.T) {
	host := tensor.MustNew(tensor.Float32, tensor.Shape{4})
	helpers := map[string]func(x *tensor.Tensor) error{
		"Fill":           func(x *tensor.Tensor) error { return tensor.Fill(x, 1) },
		"Random":         func(x *tensor.Tensor) error { return tensor.Random(x, 1) },
		"RandomRange":    func(x *tensor.Tensor) error { return tensor.RandomRange(x, 1, 0, 1) },
		"ToFloat64":      func(x *tensor.Tensor) error { _, err := tensor.ToFloat64(x); return err },
		"SetFromFloat64": func(x *tensor.Tensor) error { return tensor.SetFromFloat64(x, make([]float64, 4)) },
		"Poison":         tensor.Poison,
		"PoisonCount":    func(x *tensor.Tensor) error { _, err := tensor.PoisonCount(x); return err },
		"AllClose(got)":  func(x *tensor.Tensor) error { return tensor.AllClose(x, host, 0, 0) },
		"AllClose(want)": func(x *tensor.Tensor) error { return tensor.AllClose(host, x, 0, 0) },
		"CloseTo":        func(x *tensor.Tensor) error { return tensor.CloseTo(x, make([]float64, 4), 0, 0) },
		"Equal(a)":       func(x *tensor.Tensor) error { return tensor.Equal(x, host) },
		"Equal(b)":       func(x *tensor.Tensor) error { return tensor.Equal(host, x) },
	}
	for name, h := range helpers {
		for _, dt := range tensor.DTypes {
			if err := h(deviceTensor(t, dt, tensor.Shape{4})); !errors.Is(err, tensor.ErrNotHost) {
				t.Errorf("%s(%s device tensor) = %v, want ErrNotHost", name, dt, err)
			}
		}
		if err := h(nil); err == nil || !strings.Contains(err.Error(), "nil tensor") {
			t.Errorf("%s(nil) = %v", name, err)
		}
		if err := h(new(tensor.Tensor)); err == nil {
			t.Errorf("%s(zero Tensor) succeeded", name)
		}
		if err := tensor.Fill(host, 0); err != nil {
			t.Fatal(err)
		}
		if err := h(host); err != nil {
			t.Errorf("%s(host tensor): %v", name, err)
		}
	}
}

func benchTensor(b *testing.B, dt tensor.DType) *tensor.Tensor {
	x := tensor.MustNew(dt, tensor.Shape{1 << 20})
	b.SetBytes(x.NumBytes())
	return x
}

func BenchmarkFill(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.Float16, tensor.Float32} {
		b.Run(dt.String(), func(b *testing.B) {
			x := benchTensor(b, dt)
			for b.Loop() {
				if err := tensor.Fill(x, 1.5); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRandom(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.Int32, tensor.Float16, tensor.BFloat16, tensor.Float32} {
		b.Run(dt.String(), func(b *testing.B) {
			x := benchTensor(b, dt)
			for b.Loop() {
				if err := tensor.Random(x, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAllClose(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.Float16, tensor.Float32} {
		b.Run(dt.String(), func(b *testing.B) {
			x := benchTensor(b, dt)
			if err := tensor.Random(x, 1); err != nil {
				b.Fatal(err)
			}
			y, _ := x.Clone()
			rtol, atol := tensor.DefaultTolerance(dt)
			for b.Loop() {
				if err := tensor.AllClose(x, y, rtol, atol); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
