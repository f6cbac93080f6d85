package ir

import (
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

// Type is the type of a value: TensorType, StorageType or ObjectType.
type Type interface {
	// String is the type's text form.
	String() string
	isType()
}

// TensorType is a tensor of a static shape and dtype on a virtual device
// (whose memory scope is the scope of the tensor's memory).
type TensorType struct {
	Shape  tensor.Shape
	DType  tensor.DType
	Device vdevice.VirtualDevice
}

// StorageType is a raw allocation on a virtual device; tensors are views
// of it (alloc_tensor with a storage operand).
type StorageType struct {
	Device vdevice.VirtualDevice
}

// ObjectType is an opaque runtime object, for packed calls whose results
// the compiler does not look into.
type ObjectType struct{}

func (TensorType) isType()  {}
func (StorageType) isType() {}
func (ObjectType) isType()  {}

// String prints tensor<[4, 8], float16, {cuda:0}>; the device is left out
// when fully unconstrained.
func (t TensorType) String() string {
	s := "tensor<" + shapeString(t.Shape) + ", " + t.DType.String()
	if !t.Device.IsFullyUnconstrained() {
		s += ", " + t.Device.String()
	}
	return s + ">"
}

// String prints storage<{cuda:0 scope="global"}>, or storage.
func (t StorageType) String() string {
	if t.Device.IsFullyUnconstrained() {
		return "storage"
	}
	return "storage<" + t.Device.String() + ">"
}

func (ObjectType) String() string { return "object" }

// Bytes is the tensor's size in bytes (elements times dtype size).
func (t TensorType) Bytes() (int64, error) {
	n, err := t.Shape.NumElements()
	if err != nil {
		return 0, err
	}
	return n * int64(t.DType.Size()), nil
}

// TypeEqual reports whether two types are the same (devices compared with
// vdevice's structural Equal). Two nil types are equal.
func TypeEqual(a, b Type) bool {
	switch x := a.(type) {
	case TensorType:
		y, ok := b.(TensorType)
		return ok && x.DType == y.DType && x.Shape.Equal(y.Shape) && x.Device.Equal(y.Device)
	case StorageType:
		y, ok := b.(StorageType)
		return ok && x.Device.Equal(y.Device)
	case ObjectType:
		_, ok := b.(ObjectType)
		return ok
	case nil:
		return b == nil
	}
	return false
}

// DeviceOf returns the virtual device of a tensor or storage type.
func DeviceOf(t Type) (vdevice.VirtualDevice, bool) {
	switch x := t.(type) {
	case TensorType:
		return x.Device, true
	case StorageType:
		return x.Device, true
	}
	return vdevice.VirtualDevice{}, false
}

// WithDevice returns t with its virtual device replaced (t itself for
// types without one).
func WithDevice(t Type, vd vdevice.VirtualDevice) Type {
	switch x := t.(type) {
	case TensorType:
		x.Shape = x.Shape.Clone()
		x.Device = vd
		return x
	case StorageType:
		x.Device = vd
		return x
	}
	return t
}

// CloneType returns a copy of t that shares no slices with it.
func CloneType(t Type) Type {
	if x, ok := t.(TensorType); ok {
		x.Shape = x.Shape.Clone()
		return x
	}
	return t
}
