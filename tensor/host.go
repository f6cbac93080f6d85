package tensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// Host helpers for tests and benchmarks. They all work on the bytes of the
// given view only (a tensor made with View or Reshape changes nothing outside
// its own [Offset, Offset+NumBytes) range), return an error wrapping
// ErrNotHost for device tensors, and never panic on bad input. A helper that
// returns an error has not modified the tensor.
//
// Element values cross these helpers as float64: integers are converted
// exactly (int64 beyond ±2^53 rounds to the nearest float64), float16 and
// bfloat16 with correct rounding (see F16FromFloat64 and BF16FromFloat64).
// Elements are stored in the machine's byte order, as Data sees them.

// hostBytes checks that t is a valid host tensor and returns its bytes.
func hostBytes(t *Tensor, op string) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("tensor: %s: nil tensor", op)
	}
	if t.storage == nil || !t.dtype.Valid() {
		return nil, fmt.Errorf("tensor: %s: uninitialised tensor (dtype %v)", op, t.dtype)
	}
	if !t.IsHost() {
		return nil, fmt.Errorf("tensor: %s: %w (device %v)", op, ErrNotHost, t.Device())
	}
	b := t.Bytes()
	if int64(len(b)) != t.nbytes {
		return nil, fmt.Errorf("tensor: %s: host storage holds %d bytes, view needs %d", op, len(b), t.nbytes)
	}
	return b, nil
}

// data is Data for a tensor that hostBytes accepted and whose dtype matches T.
func data[T Elem](t *Tensor) []T {
	d, err := Data[T](t)
	if err != nil {
		panic("tensor: internal error: " + err.Error())
	}
	return d
}

// intLimits returns the range of an integer dtype.
func intLimits(dt DType) (lo, hi int64) {
	switch dt {
	case Int8:
		return math.MinInt8, math.MaxInt8
	case Int16:
		return math.MinInt16, math.MaxInt16
	case Int32:
		return math.MinInt32, math.MaxInt32
	case Int64:
		return math.MinInt64, math.MaxInt64
	case Uint8:
		return 0, math.MaxUint8
	}
	return 0, 0
}

// inIntRange reports whether the integral value v fits dt. The bounds are
// powers of two, so the float64 comparisons are exact.
func inIntRange(dt DType, v float64) bool {
	lo, hi := intLimits(dt)
	return v >= float64(lo) && v < float64(hi/2+1)*2
}

// exactInt converts v to an integer of dtype dt, failing unless v is an
// integer in range.
func exactInt(dt DType, v float64) (int64, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v != math.Trunc(v) {
		return 0, fmt.Errorf("%v is not an integer", v)
	}
	if !inIntRange(dt, v) {
		return 0, fmt.Errorf("%v is out of range for %s", v, dt)
	}
	return int64(v), nil
}

// roundInt rounds v to the nearest integer (ties to even) and checks that it
// fits dtype dt.
func roundInt(dt DType, v float64) (int64, error) {
	if math.IsNaN(v) {
		return 0, fmt.Errorf("NaN cannot be stored in %s", dt)
	}
	r := math.RoundToEven(v)
	if !inIntRange(dt, r) {
		return 0, fmt.Errorf("%v is out of range for %s", v, dt)
	}
	return int64(r), nil
}

func boolByte(v float64) (byte, error) {
	if math.IsNaN(v) {
		return 0, fmt.Errorf("NaN cannot be stored in bool")
	}
	if v != 0 {
		return 1, nil
	}
	return 0, nil
}

// fillWith sets every element of d to x.
func fillWith[T any](d []T, x T) {
	if len(d) == 0 {
		return
	}
	d[0] = x
	for n := 1; n < len(d); n *= 2 {
		copy(d[n:], d[:n])
	}
}

// Fill sets every element of t to v. For bool, v != 0 is stored (NaN is an
// error); for integer dtypes v must be an integer within the dtype's range;
// for float dtypes v is rounded to nearest even (overflowing to ±Inf).
func Fill(t *Tensor, v float64) error {
	b, err := hostBytes(t, "Fill")
	if err != nil {
		return err
	}
	switch dt := t.dtype; dt {
	case Bool:
		x, err := boolByte(v)
		if err != nil {
			return fmt.Errorf("tensor: Fill: %v", err)
		}
		fillWith(b, x)
	case Int8, Int16, Int32, Int64, Uint8:
		x, err := exactInt(dt, v)
		if err != nil {
			return fmt.Errorf("tensor: Fill %s: %v", dt, err)
		}
		switch dt {
		case Int8:
			fillWith(data[int8](t), int8(x))
		case Int16:
			fillWith(data[int16](t), int16(x))
		case Int32:
			fillWith(data[int32](t), int32(x))
		case Int64:
			fillWith(data[int64](t), x)
		case Uint8:
			fillWith(b, uint8(x))
		}
	case Float16:
		fillWith(data[F16](t), F16FromFloat64(v))
	case BFloat16:
		fillWith(data[BF16](t), BF16FromFloat64(v))
	case Float32:
		fillWith(data[float32](t), float32(v))
	case Float64:
		fillWith(data[float64](t), v)
	}
	return nil
}

// ToFloat64 returns the elements of t as float64s, in row-major order.
// Bool elements are 0 or 1; a bool byte that is neither (as left by Poison)
// reads as NaN, so that comparisons flag it.
func ToFloat64(t *Tensor) ([]float64, error) {
	b, err := hostBytes(t, "ToFloat64")
	if err != nil {
		return nil, err
	}
	out := make([]float64, t.NumElements())
	switch t.dtype {
	case Bool:
		for i, x := range b {
			switch x {
			case 0:
			case 1:
				out[i] = 1
			default:
				out[i] = math.NaN()
			}
		}
	case Int8:
		widen(out, data[int8](t))
	case Int16:
		widen(out, data[int16](t))
	case Int32:
		widen(out, data[int32](t))
	case Int64:
		widen(out, data[int64](t))
	case Uint8:
		widen(out, b)
	case Float16:
		for i, x := range data[F16](t) {
			out[i] = x.Float64()
		}
	case BFloat16:
		for i, x := range data[BF16](t) {
			out[i] = x.Float64()
		}
	case Float32:
		widen(out, data[float32](t))
	case Float64:
		copy(out, data[float64](t))
	}
	return out, nil
}

func widen[T int8 | int16 | int32 | int64 | uint8 | float32](out []float64, d []T) {
	for i, x := range d {
		out[i] = float64(x)
	}
}

// int64s returns the elements of an integer tensor, exactly.
func int64s(t *Tensor) []int64 {
	out := make([]int64, t.NumElements())
	switch t.dtype {
	case Int8:
		convertInts(out, data[int8](t))
	case Int16:
		convertInts(out, data[int16](t))
	case Int32:
		convertInts(out, data[int32](t))
	case Int64:
		copy(out, data[int64](t))
	case Uint8:
		convertInts(out, data[uint8](t))
	}
	return out
}

func convertInts[T int8 | int16 | int32 | uint8](out []int64, d []T) {
	for i, x := range d {
		out[i] = int64(x)
	}
}

// SetFromFloat64 stores vals into t, element i of the row-major order from
// vals[i]; len(vals) must equal t.NumElements(). Bool stores v != 0 (NaN is
// an error); integer dtypes round to nearest (ties to even) and fail if the
// result is out of range or v is NaN; float dtypes round to nearest even.
// On error t is unchanged.
func SetFromFloat64(t *Tensor, vals []float64) error {
	b, err := hostBytes(t, "SetFromFloat64")
	if err != nil {
		return err
	}
	if n := t.NumElements(); int64(len(vals)) != n {
		return fmt.Errorf("tensor: SetFromFloat64: %d values for %d elements", len(vals), n)
	}
	dt := t.dtype
	// Validate everything first so that an error leaves t untouched.
	switch {
	case dt == Bool:
		for i, v := range vals {
			if _, err := boolByte(v); err != nil {
				return fmt.Errorf("tensor: SetFromFloat64: element %d: %v", i, err)
			}
		}
	case dt.IsInt():
		for i, v := range vals {
			if _, err := roundInt(dt, v); err != nil {
				return fmt.Errorf("tensor: SetFromFloat64: element %d: %v", i, err)
			}
		}
	}
	switch dt {
	case Bool:
		for i, v := range vals {
			b[i] = 0
			if v != 0 {
				b[i] = 1
			}
		}
	case Int8:
		narrowInts(data[int8](t), vals)
	case Int16:
		narrowInts(data[int16](t), vals)
	case Int32:
		narrowInts(data[int32](t), vals)
	case Int64:
		narrowInts(data[int64](t), vals)
	case Uint8:
		narrowInts(b, vals)
	case Float16:
		d := data[F16](t)
		for i, v := range vals {
			d[i] = F16FromFloat64(v)
		}
	case BFloat16:
		d := data[BF16](t)
		for i, v := range vals {
			d[i] = BF16FromFloat64(v)
		}
	case Float32:
		d := data[float32](t)
		for i, v := range vals {
			d[i] = float32(v)
		}
	case Float64:
		copy(data[float64](t), vals)
	}
	return nil
}

// narrowInts stores validated values.
func narrowInts[T int8 | int16 | int32 | int64 | uint8](d []T, vals []float64) {
	for i, v := range vals {
		d[i] = T(math.RoundToEven(v))
	}
}

// Poison values: recognisable patterns for elements that were never
// written. Integer elements get PoisonByte in every byte (int8 and uint8 90,
// int16 0x5A5A, ...); bool elements get PoisonBoolByte, which is neither false
// (0) nor true (1); float elements get a quiet NaN whose fraction bits end in
// 0x5A: float16 0x7E5A, bfloat16 0x7FDA, float32 0x7FDA5A5A, float64
// 0x7FFA5A5A5A5A5A5A.
const (
	PoisonByte     = 0x5A
	PoisonBoolByte = 0xA5
)

// poisonPattern returns the bytes of one poisoned element of dt, in the
// machine's byte order.
func poisonPattern(dt DType) []byte {
	p := make([]byte, dt.Size())
	switch dt {
	case Bool:
		p[0] = PoisonBoolByte
	case Int8, Int16, Int32, Int64, Uint8:
		for i := range p {
			p[i] = PoisonByte
		}
	case Float16:
		binary.NativeEndian.PutUint16(p, 0x7e5a)
	case BFloat16:
		binary.NativeEndian.PutUint16(p, 0x7fda)
	case Float32:
		binary.NativeEndian.PutUint32(p, 0x7fda5a5a)
	case Float64:
		binary.NativeEndian.PutUint64(p, 0x7ffa5a5a5a5a5a5a)
	}
	return p
}

// Poison fills t with the poison pattern of its dtype (see PoisonByte), so
// that a test can detect output elements that were never written: floats
// become NaN, which fails every comparison with a number, and poisoned bools
// read as NaN through ToFloat64. Read poisoned bools as bytes, not through
// Data[bool], which would see invalid bool values.
func Poison(t *Tensor) error {
	b, err := hostBytes(t, "Poison")
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	n := copy(b, poisonPattern(t.dtype))
	for n < len(b) {
		n += copy(b[n:], b[:n])
	}
	return nil
}

// PoisonCount returns how many elements of t still hold the exact poison
// pattern written by Poison.
func PoisonCount(t *Tensor) (int64, error) {
	b, err := hostBytes(t, "PoisonCount")
	if err != nil {
		return 0, err
	}
	pat := poisonPattern(t.dtype)
	size := len(pat)
	var n int64
	for i := 0; i+size <= len(b); i += size {
		if bytes.Equal(b[i:i+size], pat) {
			n++
		}
	}
	return n, nil
}
