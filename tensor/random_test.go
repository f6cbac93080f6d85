package tensor_test

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// valueHash hashes the element values (as little-endian float64 bits), so
// it is the same on machines of either byte order.
func valueHash(t *testing.T, x *tensor.Tensor) uint64 {
	t.Helper()
	h := fnv.New64a()
	var b [8]byte
	for _, v := range values(t, x) {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		h.Write(b[:])
	}
	return h.Sum64()
}

// TestRandomGolden pins the generated values: a change here changes the
// data every test and benchmark sees, on every machine.
func TestRandomGolden(t *testing.T) {
	// Signed integer dtypes share values: same range, same draws.
	golden := map[tensor.DType]uint64{
		tensor.Bool:     0x4244d4b5515f43e5,
		tensor.Int8:     0x247a9ba1089075ca,
		tensor.Int16:    0x247a9ba1089075ca,
		tensor.Int32:    0x247a9ba1089075ca,
		tensor.Int64:    0x247a9ba1089075ca,
		tensor.Uint8:    0x6005d57c120d904f,
		tensor.Float16:  0x3483a0677b8c0254,
		tensor.BFloat16: 0xdfd82e92bb544867,
		tensor.Float32:  0xc51a9594064fa2af,
		tensor.Float64:  0xd102f8eb747ea336,
	}
	for _, dt := range tensor.DTypes {
		x := tensor.MustNew(dt, tensor.Shape{10, 100})
		if err := tensor.Random(x, 42); err != nil {
			t.Fatal(err)
		}
		if got := valueHash(t, x); got != golden[dt] {
			t.Errorf("Random(%s, seed 42) hash = %#016x, want %#016x", dt, got, golden[dt])
		}
	}
	// A wide range, exercising the overflow-safe path, and a narrow one.
	wide := tensor.MustNew(tensor.Float64, tensor.Shape{64})
	if err := tensor.RandomRange(wide, 7, -math.MaxFloat64, math.MaxFloat64); err != nil {
		t.Fatal(err)
	}
	narrow := tensor.MustNew(tensor.Float16, tensor.Shape{64})
	if err := tensor.RandomRange(narrow, 7, 1000, 1001); err != nil {
		t.Fatal(err)
	}
	full := tensor.MustNew(tensor.Int64, tensor.Shape{64})
	if err := tensor.RandomRange(full, 7, math.Inf(-1), math.Inf(1)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		x    *tensor.Tensor
		want uint64
	}{{"wide float64", wide, 0x8cff32309de0c449}, {"narrow float16", narrow, 0x9dbaceef3fb11cad}, {"full int64", full, 0x08f514a885b6f8be}} {
		if got := valueHash(t, c.x); got != c.want {
			t.Errorf("%s hash = %#016x, want %#016x", c.name, got, c.want)
		}
	}
	// The first values, readable.
	f := tensor.MustNew(tensor.Float32, tensor.Shape{4})
	if err := tensor.Random(f, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("Random(float32[4], seed 1) = %v", values(t, f))
}

func TestRandomDeterministic(t *testing.T) {
	for _, dt := range tensor.DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			shape := tensor.Shape{4, 64}
			a, b, c := tensor.MustNew(dt, shape), tensor.MustNew(dt, shape), tensor.MustNew(dt, shape)
			for _, x := range []*tensor.Tensor{a, b} {
				if err := tensor.Random(x, 1234); err != nil {
					t.Fatal(err)
				}
			}
			if err := tensor.Random(c, 1235); err != nil {
				t.Fatal(err)
			}
			if err := tensor.Equal(a, b); err != nil {
				t.Errorf("same seed, different data: %v", err)
			}
			if err := tensor.Equal(a, c); err == nil {
				t.Errorf("seeds 1234 and 1235 gave the same data")
			}
			// A view gets the same values, and nothing outside it changes.
			v := newViewCase(t, dt, shape, 0x77)
			if err := tensor.Random(v.view, 1234); err != nil {
				t.Fatal(err)
			}
			v.checkOutside(t)
			if err := tensor.Equal(v.view, a); err != nil {
				t.Errorf("view: %v", err)
			}
			// RandomRange likewise.
			if err := tensor.RandomRange(v.view, 99, 3, 9); err != nil {
				t.Fatal(err)
			}
			v.checkOutside(t)
			if err := tensor.RandomRange(b, 99, 3, 9); err != nil {
				t.Fatal(err)
			}
			if err := tensor.Equal(v.view, b); err != nil {
				t.Errorf("view: %v", err)
			}
		})
	}
}

// TestRandomDefaults checks Random's ranges and that the values spread over
// them.
func TestRandomDefaults(t *testing.T) {
	for _, dt := range tensor.DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			x := tensor.MustNew(dt, tensor.Shape{4096})
			if err := tensor.Random(x, 5); err != nil {
				t.Fatal(err)
			}
			vals := values(t, x)
			lo, hi := -16.0, 16.0
			switch {
			case dt == tensor.Bool:
				lo, hi = 0, 2
			case dt == tensor.Uint8:
				lo = 0
			case dt.IsFloat():
				lo, hi = -1, 1
			}
			counts := map[float64]int{}
			sum, vmin, vmax := 0.0, math.Inf(1), math.Inf(-1)
			for i, v := range vals {
				if !(v >= lo && v < hi) {
					t.Fatalf("element %d = %v outside [%v, %v)", i, v, lo, hi)
				}
				if !dt.IsFloat() && v != math.Trunc(v) {
					t.Fatalf("element %d = %v not an integer", i, v)
				}
				counts[v]++
				sum += v
				vmin, vmax = min(vmin, v), max(vmax, v)
			}
			if dt.IsFloat() {
				if mean := sum / float64(len(vals)); math.Abs(mean) > 0.05 || vmin > -0.99 || vmax < 0.99 {
					t.Errorf("mean %v, min %v, max %v: not uniform over [-1, 1)", mean, vmin, vmax)
				}
				if len(counts) < 1000 && dt != tensor.BFloat16 {
					t.Errorf("only %d distinct values", len(counts))
				}
				return
			}
			// Integers and bools: every value appears, about equally often.
			n := int(hi - lo)
			if len(counts) != n {
				t.Errorf("%d distinct values, want %d", len(counts), n)
			}
			for v, c := range counts {
				if want := len(vals) / n; c < want/2 || c > want*2 {
					t.Errorf("value %v appears %d times, want about %d", v, c, want)
				}
			}
		})
	}
}

func TestRandomRange(t *testing.T) {
	type tc struct {
		dt      tensor.DType
		lo, hi  float64
		fail    bool
		wantMin float64 // every value in [wantMin, wantMax]
		wantMax float64
		// spread: the observed min and max must reach these
		reachLo, reachHi float64
		distinct         int // the exact number of distinct values, if not 0
	}
	inf := math.Inf(1)
	tests := []tc{
		{dt: tensor.Float16, lo: 1000, hi: 1001, wantMin: 1000, wantMax: 1000.5, distinct: 2},
		{dt: tensor.Float16, lo: 1, hi: 1.0001, wantMin: 1, wantMax: 1, distinct: 1},
		{dt: tensor.Float16, lo: 0.9999, hi: 1, fail: true}, // 1-2^-11 < 0.9999, and 1 is excluded
		{dt: tensor.Float16, lo: 7e4, hi: 8e4, fail: true},  // only Inf there
		{dt: tensor.Float16, lo: -1e6, hi: 1e6, wantMin: -65504, wantMax: 65504, reachLo: -60000, reachHi: 60000},
		{dt: tensor.Float16, lo: -1, hi: -0.5, wantMin: -1, wantMax: -0.5 - 0x1p-11, reachLo: -0.999, reachHi: -0.501},
		{dt: tensor.BFloat16, lo: 1e5, hi: 1e5 + 1, fail: true},
		{dt: tensor.BFloat16, lo: 0, hi: 1e-3, wantMin: 0, wantMax: 1e-3, reachLo: 1e-5, reachHi: 0.99e-3},
		{dt: tensor.Float32, lo: -math.MaxFloat64, hi: math.MaxFloat64, wantMin: -math.MaxFloat32, wantMax: math.MaxFloat32, reachLo: -3e38, reachHi: 3e38},
		{dt: tensor.Float32, lo: 0, hi: 1e-45, wantMin: 0, wantMax: 0, distinct: 1},
		{dt: tensor.Float32, lo: 2e-45, hi: 2.5e-45, fail: true},
		{dt: tensor.Float64, lo: -math.MaxFloat64, hi: math.MaxFloat64, wantMin: -math.MaxFloat64, wantMax: math.MaxFloat64, reachLo: -1.7e308, reachHi: 1.7e308},
		{dt: tensor.Float64, lo: 1, hi: math.Nextafter(1, 2), wantMin: 1, wantMax: 1, distinct: 1},
		{dt: tensor.Float64, lo: 1, hi: inf, fail: true},
		{dt: tensor.Float32, lo: -inf, hi: 0, fail: true},
		{dt: tensor.Int8, lo: -1e9, hi: 1e9, wantMin: -128, wantMax: 127, distinct: 256},
		{dt: tensor.Int8, lo: -inf, hi: inf, wantMin: -128, wantMax: 127, distinct: 256},
		{dt: tensor.Int64, lo: -inf, hi: inf, wantMin: -0x1p63, wantMax: 0x1p63, reachLo: -0x1p62, reachHi: 0x1p62},
		{dt: tensor.Int64, lo: 0x1p62, hi: 0x1p63, wantMin: 0x1p62, wantMax: 0x1p63, reachLo: 0x1p62 + 0x1p59, reachHi: 0x1p63 - 0x1p59},
		{dt: tensor.Int8, lo: -200, hi: -125, wantMin: -128, wantMax: -126, distinct: 3},
		{dt: tensor.Uint8, lo: -5, hi: 3, wantMin: 0, wantMax: 2, distinct: 3},
		{dt: tensor.Uint8, lo: 250, hi: 1e6, wantMin: 250, wantMax: 255, distinct: 6},
		{dt: tensor.Uint8, lo: -10, hi: 0, fail: true},
		{dt: tensor.Uint8, lo: 256, hi: 300, fail: true},
		{dt: tensor.Int32, lo: 0.2, hi: 0.8, fail: true},
		{dt: tensor.Int32, lo: 0.2, hi: 1.2, wantMin: 1, wantMax: 1, distinct: 1},
		{dt: tensor.Int32, lo: -2.5, hi: -0.5, wantMin: -2, wantMax: -1, distinct: 2},
		{dt: tensor.Int32, lo: 5, hi: 6, wantMin: 5, wantMax: 5, distinct: 1}, // hi excluded
		{dt: tensor.Int16, lo: -inf, hi: -40000, fail: true},
		{dt: tensor.Int16, lo: 1e300, hi: inf, fail: true},
		{dt: tensor.Int16, lo: 3, hi: 3, fail: true},
		{dt: tensor.Int16, lo: 4, hi: 3, fail: true},
		{dt: tensor.Int16, lo: math.NaN(), hi: 3, fail: true},
		{dt: tensor.Bool, lo: 0, hi: 1, wantMin: 0, wantMax: 1, distinct: 2},
		{dt: tensor.Bool, lo: 1, hi: 0, fail: true},
		{dt: tensor.Float32, lo: 2, hi: 1, fail: true},
		{dt: tensor.Float32, lo: 0, hi: math.NaN(), fail: true},
	}
	for _, c := range tests {
		x := tensor.MustNew(c.dt, tensor.Shape{2000})
		if err := tensor.Poison(x); err != nil {
			t.Fatal(err)
		}
		err := tensor.RandomRange(x, 11, c.lo, c.hi)
		if c.fail {
			if err == nil {
				t.Errorf("%s RandomRange [%v, %v) succeeded", c.dt, c.lo, c.hi)
			} else if n, _ := tensor.PoisonCount(x); n != 2000 {
				t.Errorf("%s RandomRange [%v, %v) failed (%v) but wrote the tensor", c.dt, c.lo, c.hi, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s RandomRange [%v, %v): %v", c.dt, c.lo, c.hi, err)
			continue
		}
		counts := map[float64]int{}
		vmin, vmax := math.Inf(1), math.Inf(-1)
		for i, v := range values(t, x) {
			if !(v >= c.wantMin && v <= c.wantMax) {
				t.Errorf("%s RandomRange [%v, %v): element %d = %v outside [%v, %v]", c.dt, c.lo, c.hi, i, v, c.wantMin, c.wantMax)
				break
			}
			counts[v]++
			vmin, vmax = min(vmin, v), max(vmax, v)
		}
		if c.distinct != 0 && len(counts) != c.distinct {
			t.Errorf("%s RandomRange [%v, %v): %d distinct values, want %d", c.dt, c.lo, c.hi, len(counts), c.distinct)
		}
		if (c.reachLo != 0 || c.reachHi != 0) && (vmin > c.reachLo || vmax < c.reachHi) {
			t.Errorf("%s RandomRange [%v, %v): values span [%v, %v], want at least [%v, %v]", c.dt, c.lo, c.hi, vmin, vmax, c.reachLo, c.reachHi)
		}
	}
}

// TestRandomRangeUniform checks that a narrow float16 range is filled in
// proportion to the rounding cells of its values: [1000, 1001) holds 1000
// (cell [1000, 1000.25]) and 1000.5 (cell (1000.25, 1000.75)).
func TestRandomRangeUniform(t *testing.T) {
	x := tensor.MustNew(tensor.Float16, tensor.Shape{20000})
	if err := tensor.RandomRange(x, 3, 1000, 1001); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range values(t, x) {
		if v == 1000 {
			n++
		}
	}
	// Draws in (1000.75, 1001) round to 1001 and are redrawn: accepted
	// draws are uniform on [1000, 1000.75), 1/3 of which round to 1000.
	if frac := float64(n) / 20000; math.Abs(frac-1.0/3) > 0.02 {
		t.Errorf("fraction of 1000s = %v, want about 1/3", frac)
	}
}
