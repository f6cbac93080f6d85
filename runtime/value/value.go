package value

import (
	"fmt"
	"math"

	"github.com/chorus-rt/chorus/tensor"
)

// Ref names a register. As an argument of a call it means "the object in
// this register on the worker that runs the call". Register 0 is reserved
// and means "no register" (a discarded result).
type Ref int64

// Kind is the wire tag of a value. The numbers are part of the wire format.
type Kind uint8

const (
	KindNil    Kind = 0
	KindInt    Kind = 1
	KindFloat  Kind = 2
	KindBool   Kind = 3
	KindString Kind = 4
	KindBytes  Kind = 5
	KindDType  Kind = 6
	KindDevice Kind = 7
	KindShape  Kind = 8
	KindTensor Kind = 9
	KindRef    Kind = 10
)

var kindNames = [...]string{"nil", "int", "float", "bool", "string", "bytes", "dtype", "device", "shape", "tensor", "ref"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// KindOf returns the kind of a normalized value, or false if v is not one.
func KindOf(v any) (Kind, bool) {
	switch v.(type) {
	case nil:
		return KindNil, true
	case int64:
		return KindInt, true
	case float64:
		return KindFloat, true
	case bool:
		return KindBool, true
	case string:
		return KindString, true
	case []byte:
		return KindBytes, true
	case tensor.DType:
		return KindDType, true
	case tensor.Device:
		return KindDevice, true
	case tensor.Shape:
		return KindShape, true
	case *tensor.Tensor:
		return KindTensor, true
	case Ref:
		return KindRef, true
	}
	return 0, false
}

// Normalize converts v to the canonical representation of its kind:
// every integer type becomes int64, float32 becomes float64, []int and
// []int64 become tensor.Shape. A nil *tensor.Tensor becomes nil.
// Unsigned values that do not fit int64 and unsupported types are errors.
func Normalize(v any) (any, error) {
	switch x := v.(type) {
	case nil, int64, float64, bool, string, []byte, tensor.DType, tensor.Shape, Ref:
		return v, nil
	case tensor.Device:
		if !x.Valid() {
			return nil, fmt.Errorf("value: invalid device %v", x)
		}
		return x, nil
	case *tensor.Tensor:
		if x == nil {
			return nil, nil
		}
		return x, nil
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint:
		if uint64(x) > math.MaxInt64 {
			return nil, fmt.Errorf("value: uint %d overflows int64", x)
		}
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("value: uint64 %d overflows int64", x)
		}
		return int64(x), nil
	case float32:
		return float64(x), nil
	case []int64:
		return tensor.Shape(x), nil
	case []int:
		s := make(tensor.Shape, len(x))
		for i, d := range x {
			s[i] = int64(d)
		}
		return s, nil
	}
	return nil, fmt.Errorf("value: unsupported argument type %T (want int, float, bool, string, []byte, dtype, device, shape, *tensor.Tensor, a register reference or nil)", v)
}

// NormalizeAll normalizes a list of arguments, naming the bad one.
func NormalizeAll(args []any) ([]any, error) {
	out := make([]any, len(args))
	for i, a := range args {
		v, err := Normalize(a)
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// Describe names a value's kind for error messages; unlike KindOf it never
// fails, so it also names non-wire values that live in registers.
func Describe(v any) string {
	if k, ok := KindOf(v); ok {
		return k.String()
	}
	return fmt.Sprintf("%T", v)
}
