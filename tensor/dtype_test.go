package tensor_test

import (
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

func TestDTypeProperties(t *testing.T) {
	tests := []struct {
		dt           tensor.DType
		name         string
		size         int
		isFloat, int bool
	}{
		{tensor.Bool, "bool", 1, false, false},
		{tensor.Int8, "int8", 1, false, true},
		{tensor.Int16, "int16", 2, false, true},
		{tensor.Int32, "int32", 4, false, true},
		{tensor.Int64, "int64", 8, false, true},
		{tensor.Uint8, "uint8", 1, false, true},
		{tensor.Float16, "float16", 2, true, false},
		{tensor.BFloat16, "bfloat16", 2, true, false},
		{tensor.Float32, "float32", 4, true, false},
		{tensor.Float64, "float64", 8, true, false},
	}
	if len(tests) != len(tensor.DTypes) {
		t.Fatalf("DTypes has %d entries, test knows %d", len(tensor.DTypes), len(tests))
	}
	for i, tc := range tests {
		if tensor.DTypes[i] != tc.dt {
			t.Errorf("DTypes[%d] = %v, want %v (wire order)", i, tensor.DTypes[i], tc.dt)
		}
		if uint8(tc.dt) != uint8(i+1) {
			t.Errorf("%s has wire value %d, want %d", tc.name, uint8(tc.dt), i+1)
		}
		if got := tc.dt.String(); got != tc.name {
			t.Errorf("String() = %q, want %q", got, tc.name)
		}
		if !tc.dt.Valid() || tc.dt.Size() != tc.size || tc.dt.IsFloat() != tc.isFloat || tc.dt.IsInt() != tc.int {
			t.Errorf("%s: Valid %v Size %d IsFloat %v IsInt %v", tc.name, tc.dt.Valid(), tc.dt.Size(), tc.dt.IsFloat(), tc.dt.IsInt())
		}
	}
	for _, bad := range []tensor.DType{tensor.Invalid, 11, 200, 255} {
		if bad.Valid() || bad.Size() != 0 || bad.IsFloat() || bad.IsInt() {
			t.Errorf("dtype(%d) claims to be valid", uint8(bad))
		}
	}
	if got := tensor.Invalid.String(); got != "invalid" {
		t.Errorf("Invalid.String() = %q", got)
	}
	if got := tensor.DType(42).String(); got != "dtype(42)" {
		t.Errorf("DType(42).String() = %q", got)
	}
}

func TestParseDType(t *testing.T) {
	for _, dt := range tensor.DTypes {
		got, err := tensor.ParseDType(dt.String())
		if err != nil || got != dt {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), got, err)
		}
	}
	aliases := map[string]tensor.DType{
		"i8": tensor.Int8, "i16": tensor.Int16, "i32": tensor.Int32, "int": tensor.Int32,
		"i64": tensor.Int64, "long": tensor.Int64, "u8": tensor.Uint8, "byte": tensor.Uint8,
		"f16": tensor.Float16, "half": tensor.Float16, "fp16": tensor.Float16,
		"bf16": tensor.BFloat16, "f32": tensor.Float32, "float": tensor.Float32,
		"fp32": tensor.Float32, "f64": tensor.Float64, "double": tensor.Float64,
		"fp64":      tensor.Float64,
		" Float32 ": tensor.Float32, "BF16": tensor.BFloat16, "\tHALF\n": tensor.Float16,
	}
	for s, want := range aliases {
		got, err := tensor.ParseDType(s)
		if err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "invalid", "float8", "int128", "uint16", "f 32", "dtype(9)", "9"} {
		if got, err := tensor.ParseDType(s); err == nil || got != tensor.Invalid {
			t.Errorf("ParseDType(%q) = %v, %v; want an error", s, got, err)
		}
	}
}
