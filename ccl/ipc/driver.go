package ipc

import (
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
)

// setupDriver is what NewAllReducer and Close ask of the CUDA driver:
// everything the all-reducer takes (a module, mapped host words, device
// words, a context reference, a stream) and gives back. *cuda.Driver
// implements it; the tests put a fake behind it that fails at each step
// in turn and counts what is left.
type setupDriver interface {
	DeviceGet(ordinal int) (cuda.Device, error)
	DeviceAttribute(dev cuda.Device, attr int) (int, error)
	ModuleLoadData(image []byte) (cuda.Module, error)
	ModuleGetFunction(m cuda.Module, name string) (cuda.Function, error)
	ModuleUnload(m cuda.Module) error
	MemHostAlloc(bytes int64, flags uint) (unsafe.Pointer, error)
	MemHostGetDevicePointer(p unsafe.Pointer) (cuda.DevicePtr, error)
	MemFreeHost(p unsafe.Pointer) error
	MemAlloc(bytes int64) (cuda.DevicePtr, error)
	MemsetD8(dst cuda.DevicePtr, v byte, n int64) error
	MemFree(p cuda.DevicePtr) error
	PrimaryCtxRetain(dev cuda.Device) (cuda.Context, error)
	PrimaryCtxRelease(dev cuda.Device) error
	StreamCreate(flags uint) (cuda.Stream, error)
	StreamSynchronize(s cuda.Stream) error
	StreamDestroy(s cuda.Stream) error
	shareDriver
}

var _ setupDriver = (*cuda.Driver)(nil)
