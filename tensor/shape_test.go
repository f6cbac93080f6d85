package tensor_test

import (
	"math"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

func TestShapeNumElements(t *testing.T) {
	tests := []struct {
		s    tensor.Shape
		want int64
		err  string
	}{
		{nil, 1, ""},
		{tensor.Shape{}, 1, ""},
		{tensor.Shape{7}, 7, ""},
		{tensor.Shape{2, 3, 4}, 24, ""},
		{tensor.Shape{0}, 0, ""},
		{tensor.Shape{0, math.MaxInt64}, 0, ""},
		{tensor.Shape{math.MaxInt64, 0}, 0, ""},
		{tensor.Shape{math.MaxInt64}, math.MaxInt64, ""},
		{tensor.Shape{math.MaxInt64, 1, 1}, math.MaxInt64, ""},
		{tensor.Shape{1 << 31, 1 << 31}, 1 << 62, ""},
		{tensor.Shape{1 << 32, 1 << 31}, 0, "overflows"},
		{tensor.Shape{1 << 32, 1 << 32}, 0, "overflows"}, // 2^64 wraps to 0 if unchecked
		{tensor.Shape{math.MaxInt64, 2}, 0, "overflows"},
		{tensor.Shape{3037000500, 3037000500}, 0, "overflows"}, // just over sqrt(MaxInt64)
		{tensor.Shape{3037000499, 3037000499}, 3037000499 * 3037000499, ""},
		{tensor.Shape{-1}, 0, "negative"},
		{tensor.Shape{2, -3}, 0, "dim 1 is negative"},
		{tensor.Shape{0, -1}, 0, "negative"},
	}
	for _, tc := range tests {
		n, err := tc.s.NumElements()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v.NumElements() = %d, %v; want error %q", tc.s, n, err, tc.err)
			}
			continue
		}
		if err != nil || n != tc.want {
			t.Errorf("%v.NumElements() = %d, %v; want %d", tc.s, n, err, tc.want)
		}
	}
}

func TestShapeValidateStringEqualClone(t *testing.T) {
	if err := make(tensor.Shape, tensor.MaxDims).Validate(); err != nil {
		t.Errorf("%d dims: %v", tensor.MaxDims, err)
	}
	if err := make(tensor.Shape, tensor.MaxDims+1).Validate(); err == nil {
		t.Errorf("%d dims validated", tensor.MaxDims+1)
	}
	if err := (tensor.Shape{-2}).Validate(); err == nil {
		t.Error("negative dim validated")
	}
	for s, want := range map[string]string{
		tensor.Shape(nil).String():        "()",
		tensor.Shape{5}.String():          "(5,)",
		tensor.Shape{2, 3}.String():       "(2, 3)",
		tensor.Shape{1, 0, 9, 4}.String(): "(1, 0, 9, 4)",
	} {
		if s != want {
			t.Errorf("String() = %q, want %q", s, want)
		}
	}
	a := tensor.Shape{2, 3}
	if !a.Equal(tensor.Shape{2, 3}) || a.Equal(tensor.Shape{3, 2}) || a.Equal(tensor.Shape{2}) || a.Equal(nil) {
		t.Error("Equal is wrong")
	}
	if !tensor.Shape(nil).Equal(tensor.Shape{}) {
		t.Error("nil and empty shapes differ")
	}
	c := a.Clone()
	c[0] = 99
	if a[0] != 2 {
		t.Error("Clone aliases the original")
	}
	if tensor.Shape(nil).Clone() != nil {
		t.Error("Clone(nil) is not nil")
	}
}
