package value_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/tensor"
)

func TestNormalizeAccepted(t *testing.T) {
	tt := tensor.MustNew(tensor.Float32, tensor.Shape{2, 3})
	var nilTensor *tensor.Tensor
	tests := []struct {
		name string
		in   any
		want any
		kind value.Kind
	}{
		{"nil", nil, nil, value.KindNil},
		{"int", int(-7), int64(-7), value.KindInt},
		{"int max", int(math.MaxInt), int64(math.MaxInt), value.KindInt},
		{"int8", int8(math.MinInt8), int64(math.MinInt8), value.KindInt},
		{"int16", int16(math.MaxInt16), int64(math.MaxInt16), value.KindInt},
		{"int32", int32(math.MinInt32), int64(math.MinInt32), value.KindInt},
		{"int64", int64(math.MinInt64), int64(math.MinInt64), value.KindInt},
		{"uint", uint(42), int64(42), value.KindInt},
		{"uint max int64", uint(math.MaxInt64), int64(math.MaxInt64), value.KindInt},
		{"uint8", uint8(math.MaxUint8), int64(math.MaxUint8), value.KindInt},
		{"uint16", uint16(math.MaxUint16), int64(math.MaxUint16), value.KindInt},
		{"uint32", uint32(math.MaxUint32), int64(math.MaxUint32), value.KindInt},
		{"uint64", uint64(5), int64(5), value.KindInt},
		{"uint64 max int64", uint64(math.MaxInt64), int64(math.MaxInt64), value.KindInt},
		{"float32", float32(1.5), float64(1.5), value.KindFloat},
		{"float64", float64(-2.25), float64(-2.25), value.KindFloat},
		{"bool true", true, true, value.KindBool},
		{"bool false", false, false, value.KindBool},
		{"string", "hello", "hello", value.KindString},
		{"empty string", "", "", value.KindString},
		{"bytes", []byte{1, 2, 3}, []byte{1, 2, 3}, value.KindBytes},
		{"dtype", tensor.BFloat16, tensor.BFloat16, value.KindDType},
		{"device cpu", tensor.CPUDevice, tensor.CPUDevice, value.KindDevice},
		{"device cuda", tensor.CUDADevice(3), tensor.CUDADevice(3), value.KindDevice},
		{"shape", tensor.Shape{4, 5}, tensor.Shape{4, 5}, value.KindShape},
		{"[]int", []int{1, 2, 3}, tensor.Shape{1, 2, 3}, value.KindShape},
		{"[]int empty", []int{}, tensor.Shape{}, value.KindShape},
		{"[]int64", []int64{7, 8}, tensor.Shape{7, 8}, value.KindShape},
		{"tensor", tt, tt, value.KindTensor},
		{"nil tensor", nilTensor, nil, value.KindNil},
		{"ref", value.Ref(12), value.Ref(12), value.KindRef},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := value.Normalize(tc.in)
			if err != nil {
				t.Fatalf("Normalize(%#v): unexpected error %v", tc.in, err)
			}
			if reflect.TypeOf(got) != reflect.TypeOf(tc.want) {
				t.Fatalf("Normalize(%#v) = %T, want %T", tc.in, got, tc.want)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Normalize(%#v) = %#v, want %#v", tc.in, got, tc.want)
			}
			k, ok := value.KindOf(got)
			if !ok || k != tc.kind {
				t.Fatalf("KindOf(Normalize(%#v)) = %v, %v; want %v, true", tc.in, k, ok, tc.kind)
			}
			// Normalizing is idempotent.
			again, err := value.Normalize(got)
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("Normalize not idempotent: %#v -> %#v, %v", got, again, err)
			}
		})
	}
}

func TestNormalizeTensorIdentity(t *testing.T) {
	tt := tensor.MustNew(tensor.Int32, tensor.Shape{4})
	got, err := value.Normalize(tt)
	if err != nil {
		t.Fatal(err)
	}
	if got.(*tensor.Tensor) != tt {
		t.Fatalf("Normalize returned a different tensor pointer")
	}
}

func TestNormalizeIntSliceCopies(t *testing.T) {
	in := []int{1, 2}
	got, err := value.Normalize(in)
	if err != nil {
		t.Fatal(err)
	}
	in[0] = 99
	if s := got.(tensor.Shape); s[0] != 1 {
		t.Fatalf("[]int shape aliases its input: %v", s)
	}
}

type myStruct struct{ A int }
type myInt int

func TestNormalizeRejected(t *testing.T) {
	x := 3
	tests := []struct {
		name string
		in   any
		want []string // substrings of the error message
	}{
		{"uint64 overflow", uint64(math.MaxInt64) + 1, []string{"uint64", "9223372036854775808", "overflows int64"}},
		{"uint64 max", uint64(math.MaxUint64), []string{"uint64", "overflows int64"}},
		{"uint overflow", uint(math.MaxUint64), []string{"uint ", "overflows int64"}},
		{"invalid device zero", tensor.Device{}, []string{"invalid device"}},
		{"invalid device cpu id", tensor.Device{Kind: tensor.CPU, ID: 1}, []string{"invalid device"}},
		{"invalid device negative cuda", tensor.Device{Kind: tensor.CUDA, ID: -1}, []string{"invalid device"}},
		{"struct", myStruct{1}, []string{"unsupported argument type", "value_test.myStruct"}},
		{"named int", myInt(1), []string{"unsupported argument type", "value_test.myInt"}},
		{"map", map[string]int{"a": 1}, []string{"unsupported argument type", "map[string]int"}},
		{"func", func() {}, []string{"unsupported argument type", "func()"}},
		{"chan", make(chan int), []string{"unsupported argument type", "chan int"}},
		{"pointer to int", &x, []string{"unsupported argument type", "*int"}},
		{"[]string", []string{"a"}, []string{"unsupported argument type", "[]string"}},
		{"[]float64", []float64{1}, []string{"unsupported argument type", "[]float64"}},
		{"[]int32", []int32{1}, []string{"unsupported argument type", "[]int32"}},
		{"complex", complex(1, 2), []string{"unsupported argument type", "complex128"}},
		{"uintptr", uintptr(1), []string{"unsupported argument type", "uintptr"}},
		{"storage pointer", &tensor.Storage{}, []string{"unsupported argument type", "*tensor.Storage"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := value.Normalize(tc.in)
			if err == nil {
				t.Fatalf("Normalize(%T) = %#v, want an error", tc.in, got)
			}
			if got != nil {
				t.Errorf("Normalize(%T) returned %#v alongside an error, want nil", tc.in, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "value: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	var nilTensor *tensor.Tensor
	tests := []struct {
		name string
		in   any
		kind value.Kind
		ok   bool
	}{
		{"nil", nil, value.KindNil, true},
		{"int64", int64(1), value.KindInt, true},
		{"float64", 1.0, value.KindFloat, true},
		{"bool", true, value.KindBool, true},
		{"string", "s", value.KindString, true},
		{"bytes", []byte("x"), value.KindBytes, true},
		{"nil bytes", []byte(nil), value.KindBytes, true},
		{"dtype", tensor.Int8, value.KindDType, true},
		{"device", tensor.CPUDevice, value.KindDevice, true},
		{"shape", tensor.Shape{1}, value.KindShape, true},
		{"tensor", tensor.MustNew(tensor.Uint8, tensor.Shape{1}), value.KindTensor, true},
		// KindOf classifies by dynamic type only.
		{"typed nil tensor", nilTensor, value.KindTensor, true},
		{"ref", value.Ref(3), value.KindRef, true},
		// Non-normalized Go types are not values.
		{"int", 1, 0, false},
		{"int32", int32(1), 0, false},
		{"uint64", uint64(1), 0, false},
		{"float32", float32(1), 0, false},
		{"[]int", []int{1}, 0, false},
		{"[]int64", []int64{1}, 0, false},
		{"map", map[int]int{}, 0, false},
		{"struct", myStruct{}, 0, false},
		{"func", func() {}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := value.KindOf(tc.in)
			if k != tc.kind || ok != tc.ok {
				t.Fatalf("KindOf(%T) = %v, %v; want %v, %v", tc.in, k, ok, tc.kind, tc.ok)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	tests := []struct {
		k    value.Kind
		want string
	}{
		{value.KindNil, "nil"},
		{value.KindInt, "int"},
		{value.KindFloat, "float"},
		{value.KindBool, "bool"},
		{value.KindString, "string"},
		{value.KindBytes, "bytes"},
		{value.KindDType, "dtype"},
		{value.KindDevice, "device"},
		{value.KindShape, "shape"},
		{value.KindTensor, "tensor"},
		{value.KindRef, "ref"},
		{value.Kind(11), "kind(11)"},
		{value.Kind(255), "kind(255)"},
	}
	for _, tc := range tests {
		if got := tc.k.String(); got != tc.want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(tc.k), got, tc.want)
		}
	}
}

// The kind numbers are part of the wire format and must never change.
func TestKindWireNumbers(t *testing.T) {
	want := []value.Kind{
		value.KindNil, value.KindInt, value.KindFloat, value.KindBool, value.KindString,
		value.KindBytes, value.KindDType, value.KindDevice, value.KindShape, value.KindTensor, value.KindRef,
	}
	for i, k := range want {
		if int(k) != i {
			t.Errorf("%v = %d, want %d", k, k, i)
		}
	}
}

func TestNormalizeAll(t *testing.T) {
	t.Run("ok", func(t *testing.T) {
		in := []any{1, float32(2), "s", nil, []int{3}, value.Ref(4)}
		got, err := value.NormalizeAll(in)
		if err != nil {
			t.Fatal(err)
		}
		want := []any{int64(1), float64(2), "s", nil, tensor.Shape{3}, value.Ref(4)}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("NormalizeAll = %#v, want %#v", got, want)
		}
		if _, ok := in[0].(int); !ok {
			t.Fatalf("NormalizeAll modified its input: %#v", in)
		}
	})
	t.Run("empty", func(t *testing.T) {
		got, err := value.NormalizeAll(nil)
		if err != nil || len(got) != 0 {
			t.Fatalf("NormalizeAll(nil) = %#v, %v", got, err)
		}
	})
	tests := []struct {
		name string
		in   []any
		want string
	}{
		{"first", []any{map[int]int{}, 1}, "argument 0: value: unsupported argument type map[int]int"},
		{"third", []any{1, "x", uint64(math.MaxUint64)}, "argument 2: value: uint64 18446744073709551615 overflows int64"},
		{"device", []any{1, tensor.Device{}}, "argument 1: value: invalid device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := value.NormalizeAll(tc.in)
			if err == nil {
				t.Fatalf("NormalizeAll = %#v, want error", got)
			}
			if got != nil {
				t.Errorf("NormalizeAll returned %#v alongside an error", got)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %q, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{nil, "nil"},
		{int64(1), "int"},
		{2.0, "float"},
		{false, "bool"},
		{"s", "string"},
		{[]byte{}, "bytes"},
		{tensor.Float16, "dtype"},
		{tensor.CUDADevice(0), "device"},
		{tensor.Shape{}, "shape"},
		{tensor.MustNew(tensor.Bool, tensor.Shape{1}), "tensor"},
		{value.Ref(1), "ref"},
		{1, "int"}, // non-wire int: named by %T, which is also "int"
		{int32(1), "int32"},
		{float32(1), "float32"},
		{map[string]int{}, "map[string]int"},
		{myStruct{}, "value_test.myStruct"},
		{&myStruct{}, "*value_test.myStruct"},
		{func(int) error { return nil }, "func(int) error"},
	}
	for _, tc := range tests {
		if got := value.Describe(tc.in); got != tc.want {
			t.Errorf("Describe(%#v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
