package tensor

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxDims bounds the rank of a tensor; decoders rely on it.
const MaxDims = 16

// Shape is a list of dimension sizes, outermost first. A nil or empty shape
// is a scalar (one element).
type Shape []int64

// NumElements returns the product of the dims, or an error if a dim is
// negative or the product overflows int64.
func (s Shape) NumElements() (int64, error) {
	n := int64(1)
	for i, d := range s {
		if d < 0 {
			return 0, fmt.Errorf("tensor: shape %v: dim %d is negative", s, i)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("tensor: shape %v: element count overflows", s)
		}
		n *= d
	}
	return n, nil
}

// Validate checks rank and dims.
func (s Shape) Validate() error {
	if len(s) > MaxDims {
		return fmt.Errorf("tensor: shape has %d dims, at most %d allowed", len(s), MaxDims)
	}
	_, err := s.NumElements()
	return err
}

// Equal reports whether two shapes have the same dims.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy that does not alias s.
func (s Shape) Clone() Shape {
	if s == nil {
		return nil
	}
	return append(Shape(make([]int64, 0, len(s))), s...)
}

func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('(')
	for i, d := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	if len(s) == 1 {
		b.WriteByte(',')
	}
	b.WriteByte(')')
	return b.String()
}
