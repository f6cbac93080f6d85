package cuda

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// TestLaunchConfigLayout checks the Go mirrors against cuda.h's
// CUlaunchConfig and CUlaunchAttribute on a 64-bit target: a wrong
// offset would hand the driver a garbage stream or attribute array.
func TestLaunchConfigLayout(t *testing.T) {
	var c LaunchConfig
	var a LaunchAttribute
	for _, tc := range []struct {
		what      string
		got, want uintptr
	}{
		{"sizeof(CUlaunchConfig)", unsafe.Sizeof(c), 56},
		{"CUlaunchConfig.gridDimX", unsafe.Offsetof(c.GridDimX), 0},
		{"CUlaunchConfig.blockDimX", unsafe.Offsetof(c.BlockDimX), 12},
		{"CUlaunchConfig.sharedMemBytes", unsafe.Offsetof(c.SharedMemBytes), 24},
		{"CUlaunchConfig.hStream", unsafe.Offsetof(c.Stream), 32},
		{"CUlaunchConfig.attrs", unsafe.Offsetof(c.Attrs), 40},
		{"CUlaunchConfig.numAttrs", unsafe.Offsetof(c.NumAttrs), 48},
		{"sizeof(CUlaunchAttribute)", unsafe.Sizeof(a), 72},
		{"CUlaunchAttribute.id", unsafe.Offsetof(a.ID), 0},
		{"CUlaunchAttribute.value", unsafe.Offsetof(a.Value), 8},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.what, tc.got, tc.want)
		}
	}
}

// TestNewLaunchEx checks the bytes the driver reads: the grid, block,
// stream, one attribute of id 6 with value 1, pointing into the same
// object.
func TestNewLaunchEx(t *testing.T) {
	x := newLaunchEx([3]uint32{7, 2, 1}, [3]uint32{256, 1, 1}, 48, Stream(0xabc0))
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&x.cfg)), unsafe.Sizeof(x.cfg))
	le := binary.LittleEndian
	for _, tc := range []struct {
		what      string
		off       int
		got, want uint64
	}{
		{"gridDimX", 0, uint64(le.Uint32(raw[0:])), 7},
		{"gridDimY", 4, uint64(le.Uint32(raw[4:])), 2},
		{"blockDimX", 12, uint64(le.Uint32(raw[12:])), 256},
		{"sharedMemBytes", 24, uint64(le.Uint32(raw[24:])), 48},
		{"hStream", 32, le.Uint64(raw[32:]), 0xabc0},
		{"attrs", 40, le.Uint64(raw[40:]), uint64(uintptr(unsafe.Pointer(&x.attr)))},
		{"numAttrs", 48, uint64(le.Uint32(raw[48:])), 1},
	} {
		if tc.got != tc.want {
			t.Errorf("config byte %d (%s) = %#x, want %#x", tc.off, tc.what, tc.got, tc.want)
		}
	}
	ab := unsafe.Slice((*byte)(unsafe.Pointer(&x.attr)), unsafe.Sizeof(x.attr))
	if id := le.Uint32(ab[0:]); id != 6 {
		t.Errorf("attribute id = %d, want 6 (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)", id)
	}
	if v := le.Uint32(ab[8:]); v != 1 {
		t.Errorf("programmaticStreamSerializationAllowed = %d, want 1", v)
	}
	for i, b := range ab[12:] {
		if b != 0 {
			t.Fatalf("attribute value byte %d = %d, want 0 (the rest of the union)", 12+i, b)
		}
	}
}
