package vdevice

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/chorus-rt/chorus/tensor"
)

// Sentinel errors that callers test with errors.Is.
var (
	// ErrTargetMismatch: a target compiles for another device type than the
	// one given.
	ErrTargetMismatch = errors.New("vdevice: target disagrees with device type")
	// ErrBadDeviceType: a device type that is neither known nor NoDeviceType.
	ErrBadDeviceType = errors.New("vdevice: bad device type")
	// ErrBadID: a virtual device id below -1.
	ErrBadID = errors.New("vdevice: bad virtual device id")
	// ErrUnknownTarget: a target kind chorus does not know.
	ErrUnknownTarget = errors.New("vdevice: unknown target kind")
	// ErrBadAttr: a target attribute that cannot be written in text form.
	ErrBadAttr = errors.New("vdevice: bad target attribute")
	// ErrNotConstrained: ToDevice on a VirtualDevice whose device type or id
	// is unconstrained.
	ErrNotConstrained = errors.New("vdevice: device type and id must both be constrained")
)

// DeviceType is the kind of device. The constrained values equal
// tensor.DeviceKind's (and DLPack's): CPU 1, CUDA 2.
type DeviceType int

const (
	// NoDeviceType is the unconstrained device type.
	NoDeviceType DeviceType = -1
	CPU          DeviceType = DeviceType(tensor.CPU)
	CUDA         DeviceType = DeviceType(tensor.CUDA)
)

// Valid reports whether d is a known, constrained device type.
func (d DeviceType) Valid() bool { return d == CPU || d == CUDA }

func (d DeviceType) String() string {
	switch d {
	case CPU:
		return "cpu"
	case CUDA:
		return "cuda"
	case NoDeviceType:
		return "?"
	}
	return "devtype(" + strconv.Itoa(int(d)) + ")"
}

// ParseDeviceType accepts "cpu", "cuda" and "?" (unconstrained).
func ParseDeviceType(s string) (DeviceType, error) {
	switch s {
	case "cpu":
		return CPU, nil
	case "cuda":
		return CUDA, nil
	case "?":
		return NoDeviceType, nil
	}
	return NoDeviceType, fmt.Errorf("%w: %q", ErrBadDeviceType, s)
}

// VirtualDevice is where a value lives: device type, virtual device id,
// target and memory scope, each possibly unconstrained. The zero value is
// fully unconstrained. Compare with Equal (targets are pointers).
type VirtualDevice struct {
	// devType is DeviceType+1 and id is the id+1, so that the zero value
	// means "unconstrained" for both.
	devType int8
	id      int
	target  *Target
	scope   string
}

// Unconstrained is the fully unconstrained VirtualDevice (the zero value).
var Unconstrained = VirtualDevice{}

// New builds a VirtualDevice. dt may be NoDeviceType, id -1, target nil and
// scope "" to leave a field unconstrained. When dt is unconstrained and a
// target is given, the device type is taken from the target; when both are
// given they must agree (ErrTargetMismatch).
func New(dt DeviceType, id int, target *Target, scope string) (VirtualDevice, error) {
	if dt != NoDeviceType && !dt.Valid() {
		return VirtualDevice{}, fmt.Errorf("%w: %d", ErrBadDeviceType, int(dt))
	}
	if id < -1 {
		return VirtualDevice{}, fmt.Errorf("%w: %d (use -1 for unconstrained)", ErrBadID, id)
	}
	if target != nil {
		tdt := target.DeviceType()
		if dt == NoDeviceType {
			dt = tdt
		} else if dt != tdt {
			return VirtualDevice{}, fmt.Errorf("%w: target %s compiles for %s, device type is %s", ErrTargetMismatch, target, tdt, dt)
		}
	}
	return VirtualDevice{devType: int8(dt + 1), id: id + 1, target: target, scope: scope}, nil
}

// ForDevice returns the VirtualDevice of a concrete device (type and id
// constrained, no target, no scope).
func ForDevice(d tensor.Device) (VirtualDevice, error) {
	if !d.Valid() {
		return VirtualDevice{}, fmt.Errorf("%w: device %v", ErrBadDeviceType, d)
	}
	return New(DeviceType(d.Kind), d.ID, nil, "")
}

// ForTarget returns a VirtualDevice constrained only by a target (and so
// by its device type).
func ForTarget(t *Target) VirtualDevice {
	v, _ := New(NoDeviceType, -1, t, "") // cannot fail: dt is taken from t
	return v
}

// ForScope returns a VirtualDevice constrained only by a memory scope.
func ForScope(scope string) VirtualDevice { return VirtualDevice{scope: scope} }

// DeviceType is the device type, or NoDeviceType.
func (v VirtualDevice) DeviceType() DeviceType { return DeviceType(v.devType) - 1 }

// VirtualDeviceID is the virtual device id, or -1.
func (v VirtualDevice) VirtualDeviceID() int { return v.id - 1 }

// Target is the target, or nil.
func (v VirtualDevice) Target() *Target { return v.target }

// MemoryScope is the memory scope, or "".
func (v VirtualDevice) MemoryScope() string { return v.scope }

// WithScope returns v with its memory scope replaced ("" clears it).
func (v VirtualDevice) WithScope(scope string) VirtualDevice {
	v.scope = scope
	return v
}

// DevicePart is v without its memory scope: the part that says where code
// runs, which is what operands of one kernel must agree on.
func (v VirtualDevice) DevicePart() VirtualDevice { return v.WithScope("") }

// IsFullyUnconstrained reports whether no field is constrained.
func (v VirtualDevice) IsFullyUnconstrained() bool {
	return v.devType == 0 && v.id == 0 && v.target == nil && v.scope == ""
}

// IsFullyConstrained reports whether all four fields are constrained.
func (v VirtualDevice) IsFullyConstrained() bool {
	return v.devType != 0 && v.id != 0 && v.target != nil && v.scope != ""
}

// ToDevice returns the (virtual) device: device type and id, which must
// both be constrained. The id is virtual: a CPU id other than 0 gives a
// tensor.Device that is not Valid for allocation, and mapping virtual ids
// to physical devices is the runtime's job.
func (v VirtualDevice) ToDevice() (tensor.Device, error) {
	if v.devType == 0 || v.id == 0 {
		return tensor.Device{}, fmt.Errorf("%w: %v", ErrNotConstrained, v)
	}
	return tensor.Device{Kind: tensor.DeviceKind(v.DeviceType()), ID: v.VirtualDeviceID()}, nil
}

// Equal reports whether all four fields agree (targets structurally).
func (v VirtualDevice) Equal(o VirtualDevice) bool {
	return v.devType == o.devType && v.id == o.id && v.scope == o.scope && v.target.Equal(o.target)
}

// String is the text form used by the IR: braces around, in order, the
// device ("cuda:0", "cuda", or "?:3" for an id without a type), then
// target=T and scope="S" when constrained. The fully unconstrained device
// is "{}".
func (v VirtualDevice) String() string {
	var parts []string
	switch {
	case v.devType != 0 && v.id != 0:
		parts = append(parts, v.DeviceType().String()+":"+strconv.Itoa(v.VirtualDeviceID()))
	case v.devType != 0:
		parts = append(parts, v.DeviceType().String())
	case v.id != 0:
		parts = append(parts, "?:"+strconv.Itoa(v.VirtualDeviceID()))
	}
	if v.target != nil {
		parts = append(parts, "target="+v.target.String())
	}
	if v.scope != "" {
		parts = append(parts, "scope="+strconv.Quote(v.scope))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Join returns the most constrained VirtualDevice that agrees with both a
// and b, field by field: a's value where a constrains the field, else b's.
// ok is false when a and b constrain some field differently (targets are
// compared structurally); the returned value is then the zero value.
func Join(a, b VirtualDevice) (VirtualDevice, bool) {
	var r VirtualDevice
	var ok bool
	if r.devType, ok = joinField(a.devType, b.devType); !ok {
		return VirtualDevice{}, false
	}
	if r.id, ok = joinField(a.id, b.id); !ok {
		return VirtualDevice{}, false
	}
	if r.scope, ok = joinField(a.scope, b.scope); !ok {
		return VirtualDevice{}, false
	}
	switch {
	case a.target == nil:
		r.target = b.target
	case b.target == nil || a.target.Equal(b.target):
		r.target = a.target
	default:
		return VirtualDevice{}, false
	}
	// A target implies its device type in both inputs, and the device types
	// agreed, so r keeps the invariant without a further check.
	return r, true
}

func joinField[T comparable](a, b T) (T, bool) {
	var zero T
	switch {
	case a == zero:
		return b, true
	case b == zero || a == b:
		return a, true
	}
	return zero, false
}

// Default returns a's fields where a constrains them and b's elsewhere, but
// takes b's target only when b's device type equals the result's device
// type (so a CPU default never inherits a CUDA target). It never fails.
func Default(a, b VirtualDevice) VirtualDevice {
	r := a
	if r.devType == 0 {
		r.devType = b.devType
	}
	if r.id == 0 {
		r.id = b.id
	}
	if r.scope == "" {
		r.scope = b.scope
	}
	if r.target == nil && b.target != nil && b.devType == r.devType {
		r.target = b.target
	}
	return r
}
