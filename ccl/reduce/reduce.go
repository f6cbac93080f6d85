package reduce

import (
	"fmt"
	"unsafe"

	"github.com/chorus-rt/chorus/tensor"
)

// Reduce sets dst[i] = op(srcs[0][i], ..., srcs[len(srcs)-1][i]) for every
// element i of dtype dt, following the numeric rules of the package
// comment. For Avg the result is the finished average of the len(srcs)
// inputs (do not call Divide afterwards).
//
// It returns an error, having written nothing, if op is not supported on
// dt (see Supported), there is no source, a length differs from len(dst)
// or is not a multiple of dt.Size(), a slice is not aligned for the
// element type, or dst partly overlaps a source. dst may be identical to
// any of the sources.
func Reduce(op Op, dt tensor.DType, dst []byte, srcs ...[]byte) error {
	if err := check(op, dt, dst, srcs); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	if len(srcs) == 1 && dt != tensor.Bool {
		// A single input is its own sum, product, min, max and average.
		if !same(dst, srcs[0]) {
			copy(dst, srcs[0])
		}
		return nil
	}
	switch dt {
	case tensor.Bool:
		reduceBool(op, dst, srcs)
	case tensor.Int8:
		reduceInt[int8](op, dst, srcs)
	case tensor.Int16:
		reduceInt[int16](op, dst, srcs)
	case tensor.Int32:
		reduceInt[int32](op, dst, srcs)
	case tensor.Int64:
		reduceInt[int64](op, dst, srcs)
	case tensor.Uint8:
		reduceInt[uint8](op, dst, srcs)
	case tensor.Float32:
		reduceF32(op, dst, srcs)
	case tensor.Float64:
		reduceF64(op, dst, srcs)
	case tensor.Float16:
		reduceHalf(op, f16, dst, srcs)
	case tensor.BFloat16:
		reduceHalf(op, bf16, dst, srcs)
	}
	return nil
}

// Divide divides every element of dst (dtype dt) by n in place, with the
// division of Avg: truncation toward zero for integers, float32 division
// for float32, float16 and bfloat16 (rounded once to the half type),
// float64 division for float64. It is for algorithms that build a sum over
// several Reduce(Sum) calls; Reduce(Avg) already divides. n must be >= 1;
// bool is not supported.
func Divide(dt tensor.DType, dst []byte, n int) error {
	if err := Supported(Avg, dt); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("reduce: Divide by %d (want n >= 1)", n)
	}
	if err := checkSlice(dt, -1, dst); err != nil {
		return err
	}
	if n == 1 || len(dst) == 0 {
		return nil
	}
	switch dt {
	case tensor.Int8:
		scaleInt(view[int8](dst), n)
	case tensor.Int16:
		scaleInt(view[int16](dst), n)
	case tensor.Int32:
		scaleInt(view[int32](dst), n)
	case tensor.Int64:
		scaleInt(view[int64](dst), n)
	case tensor.Uint8:
		scaleInt(view[uint8](dst), n)
	case tensor.Float32:
		divF32(view[float32](dst), float32(n))
	case tensor.Float64:
		divide(view[float64](dst), float64(n))
	case tensor.Float16, tensor.BFloat16:
		k := f16
		if dt == tensor.BFloat16 {
			k = bf16
		}
		d := view[uint16](dst)
		var buf [block]float32
		for lo := 0; lo < len(d); lo += block {
			hi := min(lo+block, len(d))
			acc := buf[:hi-lo]
			k.decode(acc, d[lo:hi])
			divF32(acc, float32(n))
			k.encode(d[lo:hi], acc)
		}
	}
	return nil
}

// block is the number of elements processed per step when a reduction
// needs an accumulator: 4 KiB of float32, small enough that the
// accumulator and a block of every source stay in L1.
const block = 1024

// elemAlign is the alignment Reduce requires of each slice, per dtype.
var elemAlign = [...]uintptr{
	tensor.Bool: 1, tensor.Int8: 1, tensor.Uint8: 1,
	tensor.Int16: unsafe.Alignof(int16(0)), tensor.Float16: unsafe.Alignof(uint16(0)),
	tensor.BFloat16: unsafe.Alignof(uint16(0)), tensor.Int32: unsafe.Alignof(int32(0)),
	tensor.Float32: unsafe.Alignof(float32(0)), tensor.Int64: unsafe.Alignof(int64(0)),
	tensor.Float64: unsafe.Alignof(float64(0)),
}

// checkSlice checks the length and alignment of one slice of dtype dt:
// srcs[k], or dst for k < 0.
func checkSlice(dt tensor.DType, k int, b []byte) error {
	name := func() string {
		if k < 0 {
			return "dst"
		}
		return fmt.Sprintf("srcs[%d]", k)
	}
	if len(b)%dt.Size() != 0 {
		return fmt.Errorf("reduce: %s holds %d bytes, not a multiple of the %s size %d", name(), len(b), dt, dt.Size())
	}
	if len(b) > 0 {
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%elemAlign[dt] != 0 {
			return fmt.Errorf("reduce: %s at %#x is not aligned for %s (%d bytes)", name(), p, dt, elemAlign[dt])
		}
	}
	return nil
}

// check validates the arguments of Reduce.
func check(op Op, dt tensor.DType, dst []byte, srcs [][]byte) error {
	if err := Supported(op, dt); err != nil {
		return err
	}
	if len(srcs) == 0 {
		return fmt.Errorf("reduce: %v of no sources (want at least one)", op)
	}
	if err := checkSlice(dt, -1, dst); err != nil {
		return err
	}
	for k, s := range srcs {
		if len(s) != len(dst) {
			return fmt.Errorf("reduce: srcs[%d] holds %d bytes, dst %d", k, len(s), len(dst))
		}
		if len(s) == 0 {
			continue
		}
		if err := checkSlice(dt, k, s); err != nil {
			return err
		}
		if overlap(dst, s) && !same(dst, s) {
			return fmt.Errorf("reduce: dst partly overlaps srcs[%d] (it may only be the very same memory)", k)
		}
	}
	return nil
}

// same reports whether a and b (of equal, non-zero length) start at the
// same address.
func same(a, b []byte) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

// overlap reports whether the memory of a and b (non-empty) intersects.
func overlap(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// view reinterprets b as a slice of T. The caller has checked length and
// alignment.
func view[T any](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))/unsafe.Sizeof(z))
}
