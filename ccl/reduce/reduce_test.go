package reduce_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// ---------------------------------------------------------------------
// An independent reference: decode every input, accumulate by the rules
// of the package comment one element at a time, encode.

// refReduce computes the expected bytes of Reduce(op, dt, ·, ins...).
func refReduce(op reduce.Op, dt tensor.DType, ins [][]byte) []byte {
	n := len(ins)
	size := dt.Size()
	elems := len(ins[0]) / size
	out := make([]byte, len(ins[0]))
	for i := 0; i < elems; i++ {
		el := func(k int) []byte { return ins[k][i*size : (i+1)*size] }
		o := out[i*size : (i+1)*size]
		switch {
		case dt == tensor.Bool:
			v := el(0)[0] != 0
			for k := 1; k < n; k++ {
				if op == reduce.Prod || op == reduce.Min {
					v = v && el(k)[0] != 0
				} else {
					v = v || el(k)[0] != 0
				}
			}
			if v {
				o[0] = 1
			} else {
				o[0] = 0
			}
		case dt.IsInt():
			acc := getInt(dt, el(0))
			for k := 1; k < n; k++ {
				x := getInt(dt, el(k))
				switch op {
				case reduce.Sum, reduce.Avg:
					acc += x // int64 arithmetic wraps like every narrower type
				case reduce.Prod:
					acc *= x
				case reduce.Min:
					acc = min(acc, x)
				case reduce.Max:
					acc = max(acc, x)
				}
			}
			if op == reduce.Avg {
				acc /= int64(n)
			}
			putInt(dt, o, acc) // truncating to the dtype = wrap-around
		case dt == tensor.Float64:
			acc := getF64(el(0))
			for k := 1; k < n; k++ {
				acc = refOp(op, acc, getF64(el(k)))
			}
			if op == reduce.Avg {
				acc /= float64(n)
			}
			putF64(o, acc)
		default: // float32, float16, bfloat16: float32 accumulation
			acc := getF32(dt, el(0))
			for k := 1; k < n; k++ {
				acc = refOp(op, acc, getF32(dt, el(k)))
			}
			if op == reduce.Avg {
				acc /= float32(n)
			}
			if n == 1 {
				copy(o, el(0)) // a single input is copied, NaN bits and all
			} else {
				putF32(dt, o, acc)
			}
		}
	}
	return out
}

// refOp is one accumulation step in the accumulator type F. The explicit
// conversions keep each operation rounded on its own.
func refOp[F float32 | float64](op reduce.Op, acc, x F) F {
	switch op {
	case reduce.Sum, reduce.Avg:
		return F(acc + x)
	case reduce.Prod:
		return F(acc * x)
	}
	if acc != acc || x != x {
		return F(math.NaN())
	}
	less := x < acc || (x == acc && math.Signbit(float64(x)))
	if op == reduce.Max {
		less = x > acc || (x == acc && !math.Signbit(float64(x)))
	}
	if less {
		return x
	}
	return acc
}

func getInt(dt tensor.DType, b []byte) int64 {
	switch dt {
	case tensor.Int8:
		return int64(int8(b[0]))
	case tensor.Uint8:
		return int64(b[0])
	case tensor.Int16:
		return int64(*(*int16)(unsafe.Pointer(&b[0])))
	case tensor.Int32:
		return int64(*(*int32)(unsafe.Pointer(&b[0])))
	}
	return *(*int64)(unsafe.Pointer(&b[0]))
}

func putInt(dt tensor.DType, b []byte, v int64) {
	switch dt {
	case tensor.Int8, tensor.Uint8:
		b[0] = byte(v)
	case tensor.Int16:
		*(*int16)(unsafe.Pointer(&b[0])) = int16(v)
	case tensor.Int32:
		*(*int32)(unsafe.Pointer(&b[0])) = int32(v)
	default:
		*(*int64)(unsafe.Pointer(&b[0])) = v
	}
}

func getF32(dt tensor.DType, b []byte) float32 {
	switch dt {
	case tensor.Float16:
		return (*(*tensor.F16)(unsafe.Pointer(&b[0]))).Float32()
	case tensor.BFloat16:
		return (*(*tensor.BF16)(unsafe.Pointer(&b[0]))).Float32()
	}
	return *(*float32)(unsafe.Pointer(&b[0]))
}

func putF32(dt tensor.DType, b []byte, v float32) {
	switch dt {
	case tensor.Float16:
		*(*tensor.F16)(unsafe.Pointer(&b[0])) = tensor.F16FromFloat32(v)
	case tensor.BFloat16:
		*(*tensor.BF16)(unsafe.Pointer(&b[0])) = tensor.BF16FromFloat32(v)
	default:
		*(*float32)(unsafe.Pointer(&b[0])) = v
	}
}

func getF64(b []byte) float64    { return *(*float64)(unsafe.Pointer(&b[0])) }
func putF64(b []byte, v float64) { *(*float64)(unsafe.Pointer(&b[0])) = v }

// ---------------------------------------------------------------------
// Inputs.

// inputs returns n rank-dependent random tensors of dt with size elements;
// ints are drawn over the full range when wide is set (to make sums and
// products wrap); floats get special values (NaN, ±Inf, ±0) sprinkled in
// when special is set.
func inputs(t testing.TB, dt tensor.DType, size, n int, wide, special bool) []*tensor.Tensor {
	t.Helper()
	out := make([]*tensor.Tensor, n)
	for k := range out {
		x := tensor.MustNew(dt, tensor.Shape{int64(size)})
		seed := uint64(dt)<<40 | uint64(size)<<8 | uint64(k)
		var err error
		if wide && dt.IsInt() {
			err = tensor.RandomRange(x, seed, math.Inf(-1), math.Inf(1))
		} else {
			err = tensor.Random(x, seed)
		}
		if err != nil {
			t.Fatal(err)
		}
		if special && dt.IsFloat() {
			vals, _ := tensor.ToFloat64(x)
			sp := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e-30, -70000}
			for i := k; i < size; i += 13 + k {
				vals[i] = sp[(i+k)%len(sp)]
			}
			if err := tensor.SetFromFloat64(x, vals); err != nil {
				t.Fatal(err)
			}
		}
		out[k] = x
	}
	return out
}

func byteSlices(ts []*tensor.Tensor) [][]byte {
	out := make([][]byte, len(ts))
	for k, x := range ts {
		out[k] = x.Bytes()
	}
	return out
}

// sameResult compares got and want bytewise, except that for float dtypes
// any NaN matches any NaN (payloads are unspecified).
func sameResult(dt tensor.DType, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d bytes, want %d", len(got), len(want))
	}
	size := dt.Size()
	bad, first := 0, -1
	for i := 0; i+size <= len(got); i += size {
		g, w := got[i:i+size], want[i:i+size]
		if bytes.Equal(g, w) || (dt.IsFloat() && isNaN(dt, g) && isNaN(dt, w)) {
			continue
		}
		if first < 0 {
			first = i / size
		}
		bad++
	}
	if bad == 0 {
		return nil
	}
	fs, fe := first*size, (first+1)*size
	return fmt.Errorf("%d of %d elements differ, first [%d]: got %x want %x", bad, len(got)/size, first, got[fs:fe], want[fs:fe])
}

func isNaN(dt tensor.DType, b []byte) bool {
	if dt == tensor.Float64 {
		return math.IsNaN(getF64(b))
	}
	return math.IsNaN(float64(getF32(dt, b)))
}

func poisoned(dt tensor.DType, size int) *tensor.Tensor {
	x := tensor.MustNew(dt, tensor.Shape{int64(size)})
	if err := tensor.Poison(x); err != nil {
		panic(err)
	}
	return x
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// ---------------------------------------------------------------------
// The main property test.

func testSizes() []int {
	if raceEnabled || testing.Short() {
		return []int{0, 1, 7, 15, 16, 17, 1023, 4097}
	}
	return []int{0, 1, 7, 15, 16, 17, 1023, 4097, 100003}
}

// eachMode runs f with the assembly loops on (where this machine has them)
// and off, as subtests "simd" and "go".
func eachMode(t *testing.T, f func(t *testing.T)) {
	for _, on := range []bool{true, false} {
		name := "go"
		if on {
			if !reduce.HaveSIMD() {
				continue
			}
			name = "simd"
		}
		t.Run(name, func(t *testing.T) {
			t.Cleanup(reduce.SetSIMD(on)) // after the parallel subtests too
			f(t)
		})
	}
}

// TestReduceMatchesReference checks every (op, dtype) pair, many sizes and
// 1 to 8 sources, against the reference bit for bit, out of place and in
// place (dst being srcs[0], or a later source).
func TestReduceMatchesReference(t *testing.T) { eachMode(t, testReduceMatchesReference) }

func testReduceMatchesReference(t *testing.T) {
	for _, dt := range tensor.DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			t.Parallel()
			for _, size := range testSizes() {
				for _, variant := range []struct{ wide, special bool }{{false, false}, {true, true}} {
					if variant.wide && !dt.IsInt() && !dt.IsFloat() {
						continue
					}
					all := inputs(t, dt, size, 8, variant.wide, variant.special)
					for _, op := range reduce.Ops {
						if reduce.Supported(op, dt) != nil {
							continue
						}
						for n := 1; n <= 8; n++ {
							if size > 5000 && n != 1 && n != 2 && n != 5 && n != 8 {
								continue
							}
							checkCase(t, op, dt, byteSlices(all[:n]))
						}
					}
				}
			}
		})
	}
}

func checkCase(t *testing.T, op reduce.Op, dt tensor.DType, srcs [][]byte) {
	t.Helper()
	n, size := len(srcs), len(srcs[0])/dt.Size()
	name := fmt.Sprintf("%v %v size %d n %d", op, dt, size, n)
	orig := make([][]byte, n)
	for k := range srcs {
		orig[k] = clone(srcs[k])
	}
	want := refReduce(op, dt, srcs)

	dst := poisoned(dt, size).Bytes()
	if err := reduce.Reduce(op, dt, dst, srcs...); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := sameResult(dt, dst, want); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for k := range srcs {
		if !bytes.Equal(srcs[k], orig[k]) {
			t.Fatalf("%s: srcs[%d] modified", name, k)
		}
	}
	// In place: dst is srcs[j] for j = 0 and j = n-1 (and, for n >= 3, a
	// middle one), in a copy of the inputs. Identical bytes, NaNs too.
	for _, j := range []int{0, n - 1, n / 2} {
		in := make([][]byte, n)
		for k := range srcs {
			in[k] = clone(srcs[k])
		}
		if err := reduce.Reduce(op, dt, in[j], in...); err != nil {
			t.Fatalf("%s in place at %d: %v", name, j, err)
		}
		if !bytes.Equal(in[j], dst) {
			t.Fatalf("%s in place at %d: %v", name, j, sameResult(dt, in[j], dst))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestReduceSumNearExact checks the float rules against a float64 sum: the
// reference above shares its accumulation order with the kernels, so this
// guards against a reference that is wrong in the same way.
func TestReduceSumNearExact(t *testing.T) { eachMode(t, testReduceSumNearExact) }

func testReduceSumNearExact(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16, tensor.Float32, tensor.Float64} {
		for _, op := range []reduce.Op{reduce.Sum, reduce.Avg} {
			for _, n := range []int{2, 3, 8} {
				ins := inputs(t, dt, 4097, n, false, false)
				exact := make([]float64, 4097)
				for _, x := range ins {
					v, _ := tensor.ToFloat64(x)
					for i := range exact {
						exact[i] += v[i]
					}
				}
				if op == reduce.Avg {
					for i := range exact {
						exact[i] /= float64(n)
					}
				}
				got := tensor.MustNew(dt, tensor.Shape{4097})
				if err := reduce.Reduce(op, dt, got.Bytes(), byteSlices(ins)...); err != nil {
					t.Fatal(err)
				}
				rtol, atol := tensor.DefaultTolerance(dt)
				if err := tensor.CloseTo(got, exact, rtol, float64(n)*atol); err != nil {
					t.Errorf("%v %v n=%d: %v", op, dt, n, err)
				}
			}
		}
	}
}

// TestChunkedEqualsOneShot splits the element range at odd places (as a
// reduce-scatter would) and compares with one call.
func TestChunkedEqualsOneShot(t *testing.T) { eachMode(t, testChunkedEqualsOneShot) }

func testChunkedEqualsOneShot(t *testing.T) {
	for _, dt := range tensor.DTypes {
		for _, op := range reduce.Ops {
			if reduce.Supported(op, dt) != nil {
				continue
			}
			const size = 5003
			srcs := byteSlices(inputs(t, dt, size, 6, true, true))
			one := make([]byte, len(srcs[0]))
			if err := reduce.Reduce(op, dt, one, srcs...); err != nil {
				t.Fatal(err)
			}
			chunked := make([]byte, len(one))
			es := dt.Size()
			for lo := 0; lo < size; {
				hi := min(size, lo+1+lo%1500)
				parts := make([][]byte, len(srcs))
				for k := range srcs {
					parts[k] = srcs[k][lo*es : hi*es]
				}
				if err := reduce.Reduce(op, dt, chunked[lo*es:hi*es], parts...); err != nil {
					t.Fatal(err)
				}
				lo = hi
			}
			// NaN payloads may differ between the assembly and Go loops,
			// whose split moves with the chunk boundaries.
			if err := sameResult(dt, chunked, one); err != nil {
				t.Errorf("%v %v: chunked result differs: %v", op, dt, err)
			}
		}
	}
}

// TestAliasEverywhere passes the dst buffer as several sources at once.
func TestAliasEverywhere(t *testing.T) { eachMode(t, testAliasEverywhere) }

func testAliasEverywhere(t *testing.T) {
	for _, dt := range tensor.DTypes {
		for _, op := range reduce.Ops {
			if reduce.Supported(op, dt) != nil {
				continue
			}
			for _, n := range []int{2, 3, 4, 5, 7, 8} {
				ins := byteSlices(inputs(t, dt, 2053, n, false, false))
				shared := clone(ins[1])
				// srcs = [x0, S, x2, S, x4, ...] with S also the dst.
				srcs := make([][]byte, n)
				ref := make([][]byte, n)
				for k := range srcs {
					if k%2 == 1 {
						srcs[k], ref[k] = shared, ins[1]
					} else {
						srcs[k], ref[k] = ins[k], ins[k]
					}
				}
				want := make([]byte, len(shared))
				if err := reduce.Reduce(op, dt, want, ref...); err != nil {
					t.Fatal(err)
				}
				if err := reduce.Reduce(op, dt, shared, srcs...); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(shared, want) {
					t.Errorf("%v %v n=%d: %v", op, dt, n, sameResult(dt, shared, want))
				}
			}
		}
	}
}

// ---------------------------------------------------------------------
// Specific numeric rules.

func i8s(v ...int8) []byte { return tensor.FromSlice(v).Bytes() }

func TestIntegerRules(t *testing.T) { eachMode(t, testIntegerRules) }

func testIntegerRules(t *testing.T) {
	type tc struct {
		name string
		op   reduce.Op
		dt   tensor.DType
		srcs [][]byte
		want []byte
	}
	tests := []tc{
		{"int8 sum wraps", reduce.Sum, tensor.Int8, [][]byte{i8s(127, -128, 100), i8s(1, -1, 100)}, i8s(-128, 127, -56)},
		{"int8 prod wraps", reduce.Prod, tensor.Int8, [][]byte{i8s(16, -128, 3), i8s(16, -1, 3), i8s(1, 1, 3)}, i8s(0, -128, 27)},
		{"int8 avg in int64", reduce.Avg, tensor.Int8, [][]byte{i8s(100, 127, -128, -3), i8s(100, 127, -128, 0)}, i8s(100, 127, -128, -1)},
		{"int8 avg truncates", reduce.Avg, tensor.Int8, [][]byte{i8s(-3, 3, -5), i8s(0, 0, 0), i8s(0, 1, 0)}, i8s(-1, 1, -1)},
		{"uint8 sum wraps", reduce.Sum, tensor.Uint8, [][]byte{{255, 200}, {1, 100}}, []byte{0, 44}},
		{"uint8 avg in int64", reduce.Avg, tensor.Uint8, [][]byte{{255, 255}, {255, 0}, {1, 0}}, []byte{170, 85}},
		{"uint8 min max", reduce.Max, tensor.Uint8, [][]byte{{255, 0}, {1, 0}}, []byte{255, 0}},
		{"int16 min", reduce.Min, tensor.Int16, [][]byte{tensor.FromSlice([]int16{-32768, 5}).Bytes(), tensor.FromSlice([]int16{32767, -5}).Bytes()}, tensor.FromSlice([]int16{-32768, -5}).Bytes()},
		{"int32 sum wraps", reduce.Sum, tensor.Int32, [][]byte{tensor.FromSlice([]int32{math.MaxInt32, math.MinInt32}).Bytes(), tensor.FromSlice([]int32{1, -1}).Bytes()}, tensor.FromSlice([]int32{math.MinInt32, math.MaxInt32}).Bytes()},
		{"int32 prod wraps", reduce.Prod, tensor.Int32, [][]byte{tensor.FromSlice([]int32{math.MaxInt32, 65536}).Bytes(), tensor.FromSlice([]int32{2, 65536}).Bytes()}, tensor.FromSlice([]int32{-2, 0}).Bytes()},
		{"int32 avg no overflow", reduce.Avg, tensor.Int32, [][]byte{tensor.FromSlice([]int32{math.MaxInt32, math.MinInt32}).Bytes(), tensor.FromSlice([]int32{math.MaxInt32, math.MinInt32}).Bytes()}, tensor.FromSlice([]int32{math.MaxInt32, math.MinInt32}).Bytes()},
		{"int64 sum wraps", reduce.Sum, tensor.Int64, [][]byte{tensor.FromSlice([]int64{math.MaxInt64}).Bytes(), tensor.FromSlice([]int64{1}).Bytes()}, tensor.FromSlice([]int64{math.MinInt64}).Bytes()},
		{"int64 avg accumulator wraps", reduce.Avg, tensor.Int64, [][]byte{tensor.FromSlice([]int64{math.MaxInt64, -7}).Bytes(), tensor.FromSlice([]int64{1, 0}).Bytes()}, tensor.FromSlice([]int64{math.MinInt64 / 2, -3}).Bytes()},
		{"bool or", reduce.Sum, tensor.Bool, [][]byte{{0, 1, 0, 1, 0x80, 0}, {0, 0, 1, 1, 0, 7}}, []byte{0, 1, 1, 1, 1, 1}},
		{"bool max", reduce.Max, tensor.Bool, [][]byte{{0, 1, 0, 1}, {0, 0, 1, 1}}, []byte{0, 1, 1, 1}},
		{"bool and", reduce.Prod, tensor.Bool, [][]byte{{0, 1, 0, 1, 0x80, 0x10}, {0, 0, 1, 1, 2, 0x80}}, []byte{0, 0, 0, 1, 1, 1}},
		{"bool min", reduce.Min, tensor.Bool, [][]byte{{0, 1, 0, 1}, {0, 0, 1, 1}}, []byte{0, 0, 0, 1}},
		{"bool n=1 normalises", reduce.Sum, tensor.Bool, [][]byte{{0, 2, 0xff, 0x80, 1, 0, 0, 3, 9}}, []byte{0, 1, 1, 1, 1, 0, 0, 1, 1}},
	}
	for _, tc := range tests {
		dst := make([]byte, len(tc.want))
		if err := reduce.Reduce(tc.op, tc.dt, dst, tc.srcs...); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !bytes.Equal(dst, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, dst, tc.want)
		}
	}
}

// floatBytes encodes float64 values in dt.
func floatBytes(dt tensor.DType, vals ...float64) []byte {
	x := tensor.MustNew(dt, tensor.Shape{int64(len(vals))})
	if err := tensor.SetFromFloat64(x, vals); err != nil {
		panic(err)
	}
	return x.Bytes()
}

func decode(dt tensor.DType, b []byte) []float64 {
	x, err := tensor.View(mustStorage(b), 0, dt, tensor.Shape{int64(len(b) / dt.Size())})
	if err != nil {
		panic(err)
	}
	v, _ := tensor.ToFloat64(x)
	return v
}

func mustStorage(b []byte) *tensor.Storage {
	s, err := tensor.NewHostStorage(int64(len(b)), "")
	if err != nil {
		panic(err)
	}
	copy(s.Host(), b)
	return s
}

func TestFloatRules(t *testing.T) { eachMode(t, testFloatRules) }

func testFloatRules(t *testing.T) {
	nan, inf, negz := math.NaN(), math.Inf(1), math.Copysign(0, -1)
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16, tensor.Float32, tensor.Float64} {
		// NaN anywhere wins min and max; -0 < +0.
		a := floatBytes(dt, nan, 1, 1, 0, negz, -inf, 1)
		b := floatBytes(dt, 1, nan, 1, negz, 0, 5, -inf)
		c := floatBytes(dt, 2, 2, nan, 0, 0, 4, 3)
		for _, tc := range []struct {
			op   reduce.Op
			want []float64
		}{
			{reduce.Min, []float64{nan, nan, nan, negz, negz, -inf, -inf}},
			{reduce.Max, []float64{nan, nan, nan, 0, 0, 5, 3}},
			{reduce.Sum, []float64{nan, nan, nan, 0, 0, -inf, -inf}},
		} {
			dst := make([]byte, len(a))
			if err := reduce.Reduce(tc.op, dt, dst, a, b, c); err != nil {
				t.Fatal(err)
			}
			got := decode(dt, dst)
			for i, w := range tc.want {
				g := got[i]
				if !(math.IsNaN(g) && math.IsNaN(w)) && (g != w || math.Signbit(g) != math.Signbit(w)) {
					t.Errorf("%v %v [%d] = %v, want %v", tc.op, dt, i, g, w)
				}
			}
		}
		// Inf - Inf is NaN; +Inf survives.
		dst := make([]byte, floatBytesLen(dt, 2))
		if err := reduce.Reduce(reduce.Sum, dt, dst, floatBytes(dt, inf, inf), floatBytes(dt, -inf, 1)); err != nil {
			t.Fatal(err)
		}
		if g := decode(dt, dst); !math.IsNaN(g[0]) || g[1] != inf {
			t.Errorf("%v inf sums: %v", dt, g)
		}
	}
	// Half types round once: 1 + 2^-8 + 2^-8 in bfloat16 (8 significant
	// bits) is 1 + 2^-7 exactly, where rounding after each step would
	// leave 1 (1 + 2^-8 is a tie, which rounds to even).
	x, y := floatBytes(tensor.BFloat16, 1), floatBytes(tensor.BFloat16, 0x1p-8)
	dst := make([]byte, 2)
	if err := reduce.Reduce(reduce.Sum, tensor.BFloat16, dst, x, y, y); err != nil {
		t.Fatal(err)
	}
	if g := decode(tensor.BFloat16, dst)[0]; g != 1+0x1p-7 {
		t.Errorf("bf16 1 + 2^-8 + 2^-8 = %v, want %v", g, 1+0x1p-7)
	}
	// float16 overflow in the middle of a sum is absorbed by float32.
	big := floatBytes(tensor.Float16, 60000)
	neg := floatBytes(tensor.Float16, -60000)
	if err := reduce.Reduce(reduce.Sum, tensor.Float16, dst, big, big, neg); err != nil {
		t.Fatal(err)
	}
	if g := decode(tensor.Float16, dst)[0]; g != 60000 {
		t.Errorf("f16 60000+60000-60000 = %v", g)
	}
	if err := reduce.Reduce(reduce.Avg, tensor.Float16, dst, big, big, big); err != nil {
		t.Fatal(err)
	}
	if g := decode(tensor.Float16, dst)[0]; g != 60000 {
		t.Errorf("f16 avg(60000 x3) = %v", g)
	}
}

func floatBytesLen(dt tensor.DType, n int) int { return n * dt.Size() }

// TestDivide checks Sum + Divide against Avg where they must agree.
func TestDivide(t *testing.T) { eachMode(t, testDivide) }

func testDivide(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Float32, tensor.Float64} {
		for _, n := range []int{2, 3, 7} {
			srcs := byteSlices(inputs(t, dt, 1500, n, false, false))
			avg := make([]byte, len(srcs[0]))
			sum := make([]byte, len(srcs[0]))
			if err := reduce.Reduce(reduce.Avg, dt, avg, srcs...); err != nil {
				t.Fatal(err)
			}
			// Chained in rank order, as a multi-step algorithm would.
			if err := reduce.Reduce(reduce.Sum, dt, sum, srcs[0], srcs[1]); err != nil {
				t.Fatal(err)
			}
			for _, s := range srcs[2:] {
				if err := reduce.Reduce(reduce.Sum, dt, sum, sum, s); err != nil {
					t.Fatal(err)
				}
			}
			if err := reduce.Divide(dt, sum, n); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(avg, sum) {
				t.Errorf("%v n=%d: Sum+Divide differs from Avg: %v", dt, n, sameResult(dt, sum, avg))
			}
		}
	}
	// Half types: Divide divides in float32 and rounds once.
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		src := inputs(t, dt, 3000, 1, false, true)[0].Bytes()
		got := clone(src)
		if err := reduce.Divide(dt, got, 3); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, len(src))
		for i := 0; i < len(src); i += 2 {
			putF32(dt, want[i:], getF32(dt, src[i:])/3)
		}
		if err := sameResult(dt, got, want); err != nil {
			t.Errorf("Divide %v: %v", dt, err)
		}
	}
	if err := reduce.Divide(tensor.Int8, i8s(-7, 7), 1); err != nil {
		t.Error(err)
	}
	for _, bad := range []struct {
		dt tensor.DType
		n  int
	}{{tensor.Bool, 2}, {tensor.Float32, 0}, {tensor.Float32, -1}, {tensor.Invalid, 2}} {
		if err := reduce.Divide(bad.dt, make([]byte, 8), bad.n); err == nil {
			t.Errorf("Divide(%v, n=%d) succeeded", bad.dt, bad.n)
		}
	}
	if err := reduce.Divide(tensor.Float32, make([]byte, 6), 2); err == nil {
		t.Error("Divide of 6 float32 bytes succeeded")
	}
	got := i8s(-128, 127, -7)
	if err := reduce.Divide(tensor.Int8, got, 200); err != nil || !bytes.Equal(got, i8s(0, 0, 0)) {
		t.Errorf("Divide int8 by 200 = %v, %v", got, err)
	}
}

// ---------------------------------------------------------------------
// Errors.

func TestReduceErrors(t *testing.T) {
	f32 := func(n int) []byte { return make([]byte, 4*n) }
	var words [16]uint64
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	cases := []struct {
		name string
		op   reduce.Op
		dt   tensor.DType
		dst  []byte
		srcs [][]byte
		want string
	}{
		{"bool avg", reduce.Avg, tensor.Bool, make([]byte, 4), [][]byte{make([]byte, 4)}, "avg of bool"},
		{"bad op", reduce.Op(5), tensor.Float32, f32(2), [][]byte{f32(2)}, "invalid op"},
		{"bad dtype", reduce.Sum, tensor.Invalid, f32(2), [][]byte{f32(2)}, "invalid dtype"},
		{"bad dtype 11", reduce.Sum, tensor.DType(11), f32(2), [][]byte{f32(2)}, "invalid dtype"},
		{"no sources", reduce.Sum, tensor.Float32, f32(2), nil, "no sources"},
		{"length mismatch", reduce.Sum, tensor.Float32, f32(2), [][]byte{f32(2), f32(3)}, "srcs[1] holds 12 bytes, dst 8"},
		{"dst not multiple", reduce.Sum, tensor.Float32, make([]byte, 6), [][]byte{make([]byte, 6)}, "dst holds 6 bytes, not a multiple"},
		{"misaligned dst", reduce.Sum, tensor.Float32, raw[1:9], [][]byte{f32(2)}, "dst at"},
		{"misaligned src", reduce.Sum, tensor.Float64, raw[0:16], [][]byte{raw[16:32], raw[34:50]}, "srcs[1] at"},
		{"partial overlap", reduce.Sum, tensor.Float32, raw[4:20], [][]byte{f32(4), raw[0:16]}, "partly overlaps srcs[1]"},
		{"partial overlap end", reduce.Sum, tensor.Int8, raw[0:8], [][]byte{raw[7:15]}, "partly overlaps srcs[0]"},
	}
	for _, tc := range cases {
		before := clone(tc.dst)
		err := reduce.Reduce(tc.op, tc.dt, tc.dst, tc.srcs...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if !bytes.Equal(before, tc.dst) {
			t.Errorf("%s: dst written despite the error", tc.name)
		}
	}
	if err := reduce.Reduce(reduce.Avg, tensor.Bool, nil, nil); !errors.Is(err, reduce.ErrUnsupported) {
		t.Errorf("bool avg error %v does not wrap ErrUnsupported", err)
	}
	// Empty slices are fine, also misaligned or nil ones.
	if err := reduce.Reduce(reduce.Sum, tensor.Float64, raw[3:3], nil, raw[5:5]); err != nil {
		t.Errorf("empty reduction: %v", err)
	}
	// Adjacent (touching, not overlapping) slices are fine.
	if err := reduce.Reduce(reduce.Sum, tensor.Float32, raw[16:32], raw[0:16], raw[32:48]); err != nil {
		t.Errorf("adjacent slices: %v", err)
	}
}

// ---------------------------------------------------------------------
// Op.

func TestOp(t *testing.T) {
	names := []string{"sum", "prod", "min", "max", "avg"}
	if len(reduce.Ops) != len(names) {
		t.Fatalf("Ops = %v", reduce.Ops)
	}
	for i, op := range reduce.Ops {
		if uint8(op) != uint8(i) || op.String() != names[i] || !op.Valid() {
			t.Errorf("Ops[%d] = %d %q valid %v", i, uint8(op), op.String(), op.Valid())
		}
		for _, s := range []string{names[i], strings.ToUpper(names[i]), " " + names[i] + "\n"} {
			if got, err := reduce.ParseOp(s); err != nil || got != op {
				t.Errorf("ParseOp(%q) = %v, %v", s, got, err)
			}
		}
	}
	if reduce.Sum != 0 || reduce.Prod != 1 || reduce.Min != 2 || reduce.Max != 3 || reduce.Avg != 4 {
		t.Error("op numbers changed")
	}
	for _, s := range []string{"", "mean", "product", "su m", "4"} {
		if _, err := reduce.ParseOp(s); err == nil {
			t.Errorf("ParseOp(%q) succeeded", s)
		}
	}
	if s := reduce.Op(9).String(); s != "op(9)" || reduce.Op(9).Valid() {
		t.Errorf("Op(9): %q", s)
	}
	for _, dt := range tensor.DTypes {
		for _, op := range reduce.Ops {
			err := reduce.Supported(op, dt)
			if want := !(op == reduce.Avg && dt == tensor.Bool); (err == nil) != want {
				t.Errorf("Supported(%v, %v) = %v", op, dt, err)
			}
		}
	}
}

// ---------------------------------------------------------------------
// Allocation.

func TestNoAllocation(t *testing.T) { eachMode(t, testNoAllocation) }

func testNoAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, dt := range tensor.DTypes {
		for _, op := range reduce.Ops {
			if reduce.Supported(op, dt) != nil {
				continue
			}
			for _, n := range []int{1, 2, 3, 6} {
				srcs := byteSlices(inputs(t, dt, 3000, n, false, false))
				dst := make([]byte, len(srcs[0]))
				allocs := testing.AllocsPerRun(5, func() {
					if err := reduce.Reduce(op, dt, dst, srcs...); err != nil {
						t.Fatal(err)
					}
				})
				if allocs != 0 {
					t.Errorf("%v %v n=%d: %v allocations per call", op, dt, n, allocs)
				}
			}
		}
	}
}
