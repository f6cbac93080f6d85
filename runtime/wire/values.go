package wire

import (
	"fmt"
	"math"
	"slices"

	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/tensor"
)

// AppendValue appends the encoding of one normalized value (a value.Kind
// byte, then the kind's data; see docs/protocol.md) to dst. Values that are
// not normalized (an int rather than an int64, a nil *tensor.Tensor),
// invalid dtypes and devices, and tensors whose storage is not in host
// memory are errors; dst is then returned unchanged.
func AppendValue(dst []byte, v any) ([]byte, error) {
	n, err := valueSize(v)
	if err != nil {
		return dst, fmt.Errorf("wire: encode value: %w", err)
	}
	dst = slices.Grow(dst, n)
	return appendValue(dst, v), nil
}

// valueSize validates v and returns its encoded size.
func valueSize(v any) (int, error) {
	switch x := v.(type) {
	case nil:
		return 1, nil
	case int64, float64, value.Ref:
		return 9, nil
	case bool:
		return 2, nil
	case string:
		if uint64(len(x)) > math.MaxUint32 {
			return 0, fmt.Errorf("string of %d bytes is too long", len(x))
		}
		return 5 + len(x), nil
	case []byte:
		if uint64(len(x)) > math.MaxUint32 {
			return 0, fmt.Errorf("bytes of length %d are too long", len(x))
		}
		return 5 + len(x), nil
	case tensor.DType:
		if !x.Valid() {
			return 0, fmt.Errorf("invalid dtype %v", x)
		}
		return 2, nil
	case tensor.Device:
		if err := checkDevice(x); err != nil {
			return 0, err
		}
		return 6, nil
	case tensor.Shape:
		if uint64(len(x)) > math.MaxUint32/8 {
			return 0, fmt.Errorf("shape of %d dims is too long", len(x))
		}
		return 5 + 8*len(x), nil
	case *tensor.Tensor:
		return tensorSize(x)
	}
	return 0, fmt.Errorf("%T is not a wire value (normalize it with value.Normalize)", v)
}

func checkDevice(d tensor.Device) error {
	if !d.Valid() || d.ID > math.MaxInt32 {
		return fmt.Errorf("invalid device %v", d)
	}
	return nil
}

// tensorHead is the size of a tensor value before its scope, dims and
// data: kind, dtype, device kind, device id, scope length, (scope), ndim,
// (dims), byte length.
const tensorHead = 1 + 1 + 1 + 4 + 1 + 1 + 8

func tensorSize(t *tensor.Tensor) (int, error) {
	if t == nil {
		return 0, fmt.Errorf("nil *tensor.Tensor (normalize it to nil)")
	}
	if !t.DType().Valid() {
		return 0, fmt.Errorf("tensor has invalid dtype %v", t.DType())
	}
	if t.Storage() == nil {
		return 0, fmt.Errorf("tensor has no storage")
	}
	if !t.IsHost() || t.Device() != tensor.CPUDevice {
		return 0, fmt.Errorf("%w (device %v): copy the tensor to the host first", tensor.ErrNotHost, t.Device())
	}
	if len(t.Shape()) > tensor.MaxDims {
		return 0, fmt.Errorf("tensor has %d dims, at most %d allowed", len(t.Shape()), tensor.MaxDims)
	}
	if int64(len(t.Bytes())) != t.NumBytes() {
		return 0, fmt.Errorf("tensor view of %d bytes has %d host bytes", t.NumBytes(), len(t.Bytes()))
	}
	scope := t.Scope()
	if len(scope) > MaxScopeLen {
		return 0, fmt.Errorf("tensor scope name of %d bytes exceeds %d", len(scope), MaxScopeLen)
	}
	if scope == "" {
		scope = tensor.ScopeGlobal
	}
	return tensorHead + len(scope) + 8*len(t.Shape()) + len(t.Bytes()), nil
}

// appendValue writes a value already validated by valueSize.
func appendValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, byte(value.KindNil))
	case int64:
		return le.AppendUint64(append(dst, byte(value.KindInt)), uint64(x))
	case float64:
		return le.AppendUint64(append(dst, byte(value.KindFloat)), math.Float64bits(x))
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		return append(dst, byte(value.KindBool), b)
	case string:
		return appendString(append(dst, byte(value.KindString)), x)
	case []byte:
		dst = le.AppendUint32(append(dst, byte(value.KindBytes)), uint32(len(x)))
		return append(dst, x...)
	case tensor.DType:
		return append(dst, byte(value.KindDType), byte(x))
	case tensor.Device:
		return le.AppendUint32(append(dst, byte(value.KindDevice), byte(x.Kind)), uint32(int32(x.ID)))
	case tensor.Shape:
		dst = le.AppendUint32(append(dst, byte(value.KindShape)), uint32(len(x)))
		for _, d := range x {
			dst = le.AppendUint64(dst, uint64(d))
		}
		return dst
	case *tensor.Tensor:
		return appendTensor(dst, x)
	case value.Ref:
		return le.AppendUint64(append(dst, byte(value.KindRef)), uint64(x))
	}
	panic(fmt.Sprintf("wire: appendValue of unvalidated %T", v)) // unreachable: valueSize rejects it
}

func appendTensor(dst []byte, t *tensor.Tensor) []byte {
	dev := t.Device()
	scope := t.Scope()
	if scope == "" {
		scope = tensor.ScopeGlobal
	}
	dst = append(dst, byte(value.KindTensor), byte(t.DType()), byte(dev.Kind))
	dst = le.AppendUint32(dst, uint32(int32(dev.ID)))
	dst = append(dst, byte(len(scope)))
	dst = append(dst, scope...)
	shape := t.Shape()
	dst = append(dst, byte(len(shape)))
	for _, d := range shape {
		dst = le.AppendUint64(dst, uint64(d))
	}
	data := t.Bytes()
	dst = le.AppendUint64(dst, uint64(len(data)))
	return append(dst, data...)
}

func appendString(dst []byte, s string) []byte {
	return append(le.AppendUint32(dst, uint32(len(s))), s...)
}

// value decodes one value. Nothing it returns aliases the frame.
func (r *reader) value() (any, error) {
	at := r.off
	k, err := r.u8("kind")
	if err != nil {
		return nil, err
	}
	switch value.Kind(k) {
	case value.KindNil:
		return nil, nil
	case value.KindInt:
		v, err := r.u64("int")
		if err != nil {
			return nil, err
		}
		return int64(v), nil
	case value.KindFloat:
		v, err := r.u64("float")
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(v), nil
	case value.KindBool:
		at := r.off
		v, err := r.u8("bool")
		if err != nil {
			return nil, err
		}
		if v > 1 {
			return nil, r.fail(at, "bool", "byte %d is neither 0 nor 1", v)
		}
		return v == 1, nil
	case value.KindString:
		return r.str("string")
	case value.KindBytes:
		b, err := r.lenPrefixed("bytes")
		if err != nil {
			return nil, err
		}
		return append(make([]byte, 0, len(b)), b...), nil
	case value.KindDType:
		return r.dtype("dtype")
	case value.KindDevice:
		return r.device("device")
	case value.KindShape:
		at := r.off
		n, err := r.u32("shape length")
		if err != nil {
			return nil, err
		}
		if uint64(n) > uint64(r.remaining()/8) {
			return nil, r.fail(at, "shape length", "%d dims cannot fit in the %d bytes left", n, r.remaining())
		}
		s := make(tensor.Shape, n)
		for i := range s {
			s[i] = int64(le.Uint64(r.b[r.off:]))
			r.off += 8
		}
		return s, nil
	case value.KindTensor:
		return r.tensor()
	case value.KindRef:
		v, err := r.u64("ref")
		if err != nil {
			return nil, err
		}
		return value.Ref(v), nil
	}
	return nil, r.fail(at, "kind", "unknown value kind %d", k)
}

func (r *reader) dtype(field string) (tensor.DType, error) {
	at := r.off
	v, err := r.u8(field)
	if err != nil {
		return 0, err
	}
	if d := tensor.DType(v); d.Valid() {
		return d, nil
	}
	return 0, r.fail(at, field, "unknown dtype %d", v)
}

func (r *reader) device(field string) (tensor.Device, error) {
	at := r.off
	if r.remaining() < 5 {
		return tensor.Device{}, r.short(field, 5)
	}
	d := tensor.Device{Kind: tensor.DeviceKind(r.b[r.off]), ID: int(int32(le.Uint32(r.b[r.off+1:])))}
	r.off += 5
	if !d.Valid() {
		return tensor.Device{}, r.fail(at, field, "unknown device %v", d)
	}
	return d, nil
}

// tensor decodes a tensor value into fresh host storage. Every length is
// checked against the bytes left before anything is allocated.
func (r *reader) tensor() (*tensor.Tensor, error) {
	dt, err := r.dtype("tensor dtype")
	if err != nil {
		return nil, err
	}
	at := r.off
	dev, err := r.device("tensor device")
	if err != nil {
		return nil, err
	}
	if dev != tensor.CPUDevice {
		return nil, r.fail(at, "tensor device", "%v: only host tensors travel in frames", dev)
	}
	at = r.off
	sl, err := r.u8("tensor scope length")
	if err != nil {
		return nil, err
	}
	if sl == 0 {
		return nil, r.fail(at, "tensor scope length", "scope name is empty")
	}
	if int(sl) > r.remaining() {
		return nil, r.fail(at, "tensor scope length", "%d bytes claimed, %d left", sl, r.remaining())
	}
	scope := string(r.b[r.off : r.off+int(sl)])
	r.off += int(sl)
	at = r.off
	ndim, err := r.u8("tensor ndim")
	if err != nil {
		return nil, err
	}
	if ndim > tensor.MaxDims {
		return nil, r.fail(at, "tensor ndim", "%d dims, at most %d allowed", ndim, tensor.MaxDims)
	}
	if int(ndim)*8 > r.remaining() {
		return nil, r.short("tensor dims", int(ndim)*8)
	}
	var shape tensor.Shape
	var dims [tensor.MaxDims]int64
	if ndim > 0 {
		shape = dims[:ndim:ndim]
	}
	elems := int64(1)
	for i := range shape {
		d := int64(le.Uint64(r.b[r.off:]))
		if d < 0 {
			return nil, r.fail(r.off, "tensor dims", "dim %d is negative (%d)", i, d)
		}
		if d != 0 && elems > math.MaxInt64/d {
			return nil, r.fail(r.off, "tensor dims", "element count overflows")
		}
		elems *= d
		shape[i] = d
		r.off += 8
	}
	at = r.off
	nb, err := r.u64("tensor byte length")
	if err != nil {
		return nil, err
	}
	size := int64(dt.Size())
	if elems > math.MaxInt64/size || uint64(elems*size) != nb {
		return nil, r.fail(at, "tensor byte length", "%d bytes for %d elements of %v", nb, elems, dt)
	}
	if nb > uint64(r.remaining()) {
		return nil, r.fail(at, "tensor byte length", "%d bytes claimed, %d left", nb, r.remaining())
	}
	t, err := tensor.NewScoped(dt, shape, scope) // clones shape
	if err != nil {
		return nil, r.fail(at, "tensor", "%v", err)
	}
	r.off += copy(t.Bytes(), r.b[r.off:r.off+int(nb)])
	return t, nil
}
