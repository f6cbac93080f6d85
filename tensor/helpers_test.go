package tensor_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// fakeBuffer is a DeviceBuffer that is never dereferenced.
type fakeBuffer struct{ size int64 }

func (b fakeBuffer) Ptr() uintptr { return 0xdead0000 }
func (b fakeBuffer) Size() int64  { return b.size }

// deviceTensor returns a cuda:0 tensor of the given layout.
func deviceTensor(t *testing.T, dt tensor.DType, shape tensor.Shape) *tensor.Tensor {
	t.Helper()
	st := tensor.NewDeviceStorage(tensor.CUDADevice(0), "", fakeBuffer{1 << 20})
	d, err := tensor.View(st, 0, dt, shape)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// viewCase is a tensor viewed at an offset inside a larger host storage
// whose bytes are all guard (so changes outside the view can be seen).
type viewCase struct {
	storage *tensor.Storage
	view    *tensor.Tensor
	guard   byte
}

// newViewCase makes a storage of 3×n elements of dt and a view of the n
// elements in the middle, shaped as shape (which must hold n elements).
func newViewCase(t *testing.T, dt tensor.DType, shape tensor.Shape, guard byte) *viewCase {
	t.Helper()
	n, err := shape.NumElements()
	if err != nil {
		t.Fatal(err)
	}
	size := int64(dt.Size())
	st, err := tensor.NewHostStorage(3*n*size+2*size, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range st.Host() {
		st.Host()[i] = guard
	}
	v, err := tensor.View(st, n*size+size, dt, shape)
	if err != nil {
		t.Fatal(err)
	}
	return &viewCase{storage: st, view: v, guard: guard}
}

// checkOutside fails if a byte outside the view differs from the guard.
func (c *viewCase) checkOutside(t *testing.T) {
	t.Helper()
	h := c.storage.Host()
	lo, hi := c.view.Offset(), c.view.Offset()+c.view.NumBytes()
	for i, b := range h {
		if (int64(i) < lo || int64(i) >= hi) && b != c.guard {
			t.Fatalf("byte %d outside the view [%d, %d) changed to %#02x", i, lo, hi, b)
		}
	}
}

// unchanged reports whether the view still holds only guard bytes.
func (c *viewCase) unchanged() bool {
	return bytes.Count(c.view.Bytes(), []byte{c.guard}) == len(c.view.Bytes())
}

// values returns ToFloat64(t) or fails.
func values(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	v, err := tensor.ToFloat64(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sameValues reports whether a and b are equal element by element (NaN
// equal to NaN, -0 different from +0).
func sameValues(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !same(a[i], b[i]) {
			return false
		}
	}
	return true
}

// dtypeLimits returns the range of an integer dtype.
func dtypeLimits(dt tensor.DType) (lo, hi float64) {
	switch dt {
	case tensor.Int8:
		return math.MinInt8, math.MaxInt8
	case tensor.Int16:
		return math.MinInt16, math.MaxInt16
	case tensor.Int32:
		return math.MinInt32, math.MaxInt32
	case tensor.Int64:
		return math.MinInt64, math.MaxInt64
	case tensor.Uint8:
		return 0, math.MaxUint8
	case tensor.Bool:
		return 0, 1
	}
	return math.Inf(-1), math.Inf(1)
}

// roundTo returns v as stored in a float dtype.
func roundTo(dt tensor.DType, v float64) float64 {
	switch dt {
	case tensor.Float16:
		return tensor.F16FromFloat64(v).Float64()
	case tensor.BFloat16:
		return tensor.BF16FromFloat64(v).Float64()
	case tensor.Float32:
		return float64(float32(v))
	}
	return v
}
