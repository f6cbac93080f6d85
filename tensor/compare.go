package tensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// DefaultTolerance returns relative and absolute tolerances (the same value
// for both) for AllClose and CloseTo that suit dtype dt holding values of
// magnitude about 1, as Random makes: float16 1e-3 and bfloat16 1e-2, about
// one unit in the last place, which a correctly rounded result meets;
// float32 1e-5 and float64 1e-12, which leave room for accumulated rounding.
// Integer and bool dtypes compare exactly (0, 0). Half-precision reductions
// over many ranks may need looser bounds.
func DefaultTolerance(dt DType) (rtol, atol float64) {
	switch dt {
	case Float16:
		return 1e-3, 1e-3
	case BFloat16:
		return 1e-2, 1e-2
	case Float32:
		return 1e-5, 1e-5
	case Float64:
		return 1e-12, 1e-12
	}
	return 0, 0
}

// Mismatch is one element that failed a comparison.
type Mismatch struct {
	Index     int64   // row-major element index
	Got, Want float64 // the element values
	// GotBits and WantBits are the raw element bits; Equal sets them.
	GotBits, WantBits uint64
}

// maxMismatches is how many mismatches a MismatchError keeps.
const maxMismatches = 8

// MismatchError is the error AllClose, CloseTo and Equal return when
// elements differ.
type MismatchError struct {
	DType      DType
	Shape      Shape
	Total      int64      // elements compared
	Count      int64      // elements that differ
	First      []Mismatch // the first few that differ, in index order
	RTol, ATol float64    // tolerances used (zero for Equal)
	// MaxAbsDiff is the largest |got - want| over elements where both are
	// finite (whether they differ or not).
	MaxAbsDiff float64
	Exact      bool // a bitwise comparison (Equal)
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	kind := "differ"
	if !e.Exact {
		kind = fmt.Sprintf("differ (rtol=%g, atol=%g, max |got-want|=%g)", e.RTol, e.ATol, e.MaxAbsDiff)
	}
	fmt.Fprintf(&b, "tensor: %d of %d %s elements of shape %v %s", e.Count, e.Total, e.DType, e.Shape, kind)
	for i, m := range e.First {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "[%d]", m.Index)
		if len(e.Shape) > 1 {
			fmt.Fprintf(&b, "%v", unravel(e.Shape, m.Index))
		}
		if e.Exact {
			w := 2 * e.DType.Size() // hex digits per element
			fmt.Fprintf(&b, " got 0x%0*x (%g), want 0x%0*x (%g)", w, m.GotBits, m.Got, w, m.WantBits, m.Want)
		} else {
			fmt.Fprintf(&b, " got %g, want %g", m.Got, m.Want)
		}
	}
	if e.Count > int64(len(e.First)) {
		b.WriteString("; ...")
	}
	return b.String()
}

// unravel turns a row-major index into coordinates.
func unravel(s Shape, i int64) []int64 {
	c := make([]int64, len(s))
	for k := len(s) - 1; k >= 0; k-- {
		if s[k] > 0 {
			c[k] = i % s[k]
			i /= s[k]
		}
	}
	return c
}

// mismatches accumulates a MismatchError.
type mismatches struct{ e MismatchError }

func (m *mismatches) add(mm Mismatch) {
	m.e.Count++
	if len(m.e.First) < maxMismatches {
		m.e.First = append(m.e.First, mm)
	}
}

func (m *mismatches) diff(d float64) {
	if d > m.e.MaxAbsDiff {
		m.e.MaxAbsDiff = d
	}
}

func (m *mismatches) err() error {
	if m.e.Count == 0 {
		return nil
	}
	e := m.e
	return &e
}

func checkTolerance(op string, rtol, atol float64) error {
	if !(rtol >= 0) || !(atol >= 0) {
		return fmt.Errorf("tensor: %s: invalid tolerance rtol=%v atol=%v (want >= 0)", op, rtol, atol)
	}
	return nil
}

// checkPair validates got and want for a tensor-tensor comparison.
func checkPair(op string, got, want *Tensor) error {
	if _, err := hostBytes(got, op+" (got)"); err != nil {
		return err
	}
	if _, err := hostBytes(want, op+" (want)"); err != nil {
		return err
	}
	if got.dtype != want.dtype {
		return fmt.Errorf("tensor: %s: dtype mismatch: got %s, want %s", op, got.dtype, want.dtype)
	}
	if !got.shape.Equal(want.shape) {
		return fmt.Errorf("tensor: %s: shape mismatch: got %v, want %v", op, got.shape, want.shape)
	}
	return nil
}

// closeFloat reports whether got is within tolerance of want: equal values
// (including equal infinities) and NaN against NaN match; otherwise
// |got-want| <= atol + rtol*|want|, with NaN and Inf matching nothing else.
func closeFloat(got, want, rtol, atol float64) bool {
	if got == want {
		return true
	}
	if math.IsNaN(got) || math.IsNaN(want) {
		return math.IsNaN(got) && math.IsNaN(want)
	}
	if math.IsInf(got, 0) || math.IsInf(want, 0) {
		return false
	}
	return math.Abs(got-want) <= atol+rtol*math.Abs(want)
}

// absDiffInt is |a - b|, exactly.
func absDiffInt(a, b int64) uint64 {
	if a >= b {
		return uint64(a) - uint64(b)
	}
	return uint64(b) - uint64(a)
}

// intDiff is |got - want| for an integer got and a float64 want: exact (up
// to the final rounding) and never zero unless they are equal. NaN for a
// NaN want.
func intDiff(got int64, want float64) float64 {
	if math.IsNaN(want) {
		return want
	}
	const two63 = 1 << 63
	if want >= -two63 && want < two63 && want == math.Trunc(want) {
		return float64(absDiffInt(got, int64(want)))
	}
	// want is not an integer (so |want| < 2^52 and the subtraction, of two
	// different values, is not zero) or is beyond int64 (then the true
	// difference is at least 1, whatever float64(got) rounds to).
	d := math.Abs(float64(got) - want)
	if d < 1 && math.Abs(want) >= two63 {
		d = 1
	}
	return d
}

// AllClose returns nil if got and want (host tensors of the same dtype and
// shape) agree elementwise within |got-want| <= atol + rtol*|want|, where
// NaN matches only NaN and ±Inf only the same infinity. Integer elements are
// compared exactly as integers. Otherwise it returns a *MismatchError saying
// how many elements differ and showing the first few.
func AllClose(got, want *Tensor, rtol, atol float64) error {
	const op = "AllClose"
	if err := checkPair(op, got, want); err != nil {
		return err
	}
	if err := checkTolerance(op, rtol, atol); err != nil {
		return err
	}
	m := mismatches{e: MismatchError{DType: got.dtype, Shape: got.shape.Clone(), Total: got.NumElements(), RTol: rtol, ATol: atol}}
	if got.dtype.IsInt() {
		g, w := int64s(got), int64s(want)
		for i := range g {
			d := absDiffInt(g[i], w[i])
			m.diff(float64(d))
			if d != 0 && !(float64(d) <= atol+rtol*math.Abs(float64(w[i]))) {
				m.add(Mismatch{Index: int64(i), Got: float64(g[i]), Want: float64(w[i])})
			}
		}
		return m.err()
	}
	g, _ := ToFloat64(got)
	w, _ := ToFloat64(want)
	for i := range g {
		if d := math.Abs(g[i] - w[i]); !math.IsNaN(d) && !math.IsInf(d, 0) {
			m.diff(d)
		}
		if !closeFloat(g[i], w[i], rtol, atol) {
			m.add(Mismatch{Index: int64(i), Got: g[i], Want: w[i]})
		}
	}
	return m.err()
}

// CloseTo is AllClose against a float64 reference: want[i] is the expected
// value of element i (row-major), and len(want) must equal
// got.NumElements(). Integer elements are compared exactly against want.
func CloseTo(got *Tensor, want []float64, rtol, atol float64) error {
	const op = "CloseTo"
	if _, err := hostBytes(got, op); err != nil {
		return err
	}
	if n := got.NumElements(); int64(len(want)) != n {
		return fmt.Errorf("tensor: %s: %d reference values for %d elements", op, len(want), n)
	}
	if err := checkTolerance(op, rtol, atol); err != nil {
		return err
	}
	m := mismatches{e: MismatchError{DType: got.dtype, Shape: got.shape.Clone(), Total: got.NumElements(), RTol: rtol, ATol: atol}}
	if got.dtype.IsInt() {
		for i, g := range int64s(got) {
			d := intDiff(g, want[i])
			if !math.IsNaN(d) && !math.IsInf(d, 0) {
				m.diff(d)
			}
			if d != 0 && !(d <= atol+rtol*math.Abs(want[i])) {
				m.add(Mismatch{Index: int64(i), Got: float64(g), Want: want[i]})
			}
		}
		return m.err()
	}
	g, _ := ToFloat64(got)
	for i := range g {
		if d := math.Abs(g[i] - want[i]); !math.IsNaN(d) && !math.IsInf(d, 0) {
			m.diff(d)
		}
		if !closeFloat(g[i], want[i], rtol, atol) {
			m.add(Mismatch{Index: int64(i), Got: g[i], Want: want[i]})
		}
	}
	return m.err()
}

// Equal returns nil if a and b have the same dtype, shape and bytes (so +0
// and -0 differ, and NaNs must have the same bits). Otherwise it returns an
// error; for differing bytes a *MismatchError showing element bits.
func Equal(a, b *Tensor) error {
	const op = "Equal"
	if err := checkPair(op, a, b); err != nil {
		return err
	}
	ab, bb := a.Bytes(), b.Bytes()
	if bytes.Equal(ab, bb) {
		return nil
	}
	m := mismatches{e: MismatchError{DType: a.dtype, Shape: a.shape.Clone(), Total: a.NumElements(), Exact: true}}
	av, _ := ToFloat64(a)
	bv, _ := ToFloat64(b)
	size := a.dtype.Size()
	for i := range av {
		x, y := ab[i*size:(i+1)*size], bb[i*size:(i+1)*size]
		if d := math.Abs(av[i] - bv[i]); !math.IsNaN(d) && !math.IsInf(d, 0) {
			m.diff(d)
		}
		if !bytes.Equal(x, y) {
			m.add(Mismatch{Index: int64(i), Got: av[i], Want: bv[i], GotBits: elemBits(x), WantBits: elemBits(y)})
		}
	}
	return m.err()
}

// elemBits reads one element (1, 2, 4 or 8 bytes, native order) as an
// unsigned integer.
func elemBits(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.NativeEndian.Uint16(b))
	case 4:
		return uint64(binary.NativeEndian.Uint32(b))
	}
	return binary.NativeEndian.Uint64(b)
}
