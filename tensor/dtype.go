package tensor

import (
	"fmt"
	"strings"
)

// DType is an element type. The numeric values are part of the wire format
// (docs/protocol.md): never renumber them.
type DType uint8

const (
	Invalid  DType = 0
	Bool     DType = 1
	Int8     DType = 2
	Int16    DType = 3
	Int32    DType = 4
	Int64    DType = 5
	Uint8    DType = 6
	Float16  DType = 7
	BFloat16 DType = 8
	Float32  DType = 9
	Float64  DType = 10
)

// DTypes lists every valid dtype in wire order; tests iterate over it.
var DTypes = []DType{Bool, Int8, Int16, Int32, Int64, Uint8, Float16, BFloat16, Float32, Float64}

var dtypeNames = [...]string{
	Invalid: "invalid", Bool: "bool", Int8: "int8", Int16: "int16", Int32: "int32",
	Int64: "int64", Uint8: "uint8", Float16: "float16", BFloat16: "bfloat16",
	Float32: "float32", Float64: "float64",
}

var dtypeSizes = [...]int{
	Bool: 1, Int8: 1, Int16: 2, Int32: 4, Int64: 8, Uint8: 1,
	Float16: 2, BFloat16: 2, Float32: 4, Float64: 8,
}

// Valid reports whether d is one of the defined dtypes.
func (d DType) Valid() bool { return d >= Bool && d <= Float64 }

// Size is the element size in bytes (0 for an invalid dtype).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float16 || d == BFloat16 || d == Float32 || d == Float64
}

// IsInt reports whether d is a (signed or unsigned) integer type; bool is not.
func (d DType) IsInt() bool {
	return d == Int8 || d == Int16 || d == Int32 || d == Int64 || d == Uint8
}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType accepts the canonical names and the common aliases
// (f32, bf16, half, ...).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bool":
		return Bool, nil
	case "int8", "i8":
		return Int8, nil
	case "int16", "i16":
		return Int16, nil
	case "int32", "i32", "int":
		return Int32, nil
	case "int64", "i64", "long":
		return Int64, nil
	case "uint8", "u8", "byte":
		return Uint8, nil
	case "float16", "f16", "half", "fp16":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "float32", "f32", "float", "fp32":
		return Float32, nil
	case "float64", "f64", "double", "fp64":
		return Float64, nil
	}
	return Invalid, fmt.Errorf("tensor: unknown dtype %q", s)
}
