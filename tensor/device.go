package tensor

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceKind says what kind of memory a device has. Values are part of the
// wire format.
type DeviceKind uint8

const (
	CPU  DeviceKind = 1
	CUDA DeviceKind = 2
)

// Device names a place where tensor storage lives: cpu, or cuda:N.
// The zero Device is invalid, so a forgotten field is caught rather than
// silently meaning "cpu".
type Device struct {
	Kind DeviceKind
	ID   int
}

// CPUDevice is the host.
var CPUDevice = Device{Kind: CPU}

// CUDADevice returns cuda:id.
func CUDADevice(id int) Device { return Device{Kind: CUDA, ID: id} }

// Valid reports whether d names a known device kind with a non-negative id.
func (d Device) Valid() bool {
	switch d.Kind {
	case CPU:
		return d.ID == 0
	case CUDA:
		return d.ID >= 0
	}
	return false
}

func (d Device) String() string {
	switch d.Kind {
	case CPU:
		return "cpu"
	case CUDA:
		return "cuda:" + strconv.Itoa(d.ID)
	}
	return fmt.Sprintf("device(%d:%d)", d.Kind, d.ID)
}

// ParseDevice parses "cpu", "cuda", "cuda:N" (also "gpu:N").
func ParseDevice(s string) (Device, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "cpu" {
		return CPUDevice, nil
	}
	kind, id, hasID := strings.Cut(s, ":")
	if kind != "cuda" && kind != "gpu" {
		return Device{}, fmt.Errorf("tensor: unknown device %q (want cpu or cuda:N)", s)
	}
	if !hasID {
		return CUDADevice(0), nil
	}
	n, err := strconv.Atoi(id)
	if err != nil || n < 0 {
		return Device{}, fmt.Errorf("tensor: bad device id in %q", s)
	}
	return CUDADevice(n), nil
}
