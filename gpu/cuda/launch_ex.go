package cuda

import (
	"runtime"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/dl"
)

// LaunchAttrProgrammaticStreamSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (cuda.h 12.0+):
// with a non-zero value the kernel may start while the previous kernel
// of its stream still runs (once that one executes
// griddepcontrol.launch_dependents, or exits), and must itself wait
// (griddepcontrol.wait) before it touches that kernel's results.
const LaunchAttrProgrammaticStreamSerialization = 6

// LaunchAttribute is CUlaunchAttribute: an id, 4 bytes of padding and a
// 64-byte value union (72 bytes). Only the attributes whose value is one
// int (the first 4 bytes of the union) are used here.
type LaunchAttribute struct {
	ID    int32
	_     int32
	Value [64]byte
}

// LaunchConfig is CUlaunchConfig (56 bytes: the stream at offset 32, the
// attribute array at 40, their count at 48).
type LaunchConfig struct {
	GridDimX, GridDimY, GridDimZ    uint32
	BlockDimX, BlockDimY, BlockDimZ uint32
	SharedMemBytes                  uint32
	Stream                          Stream
	Attrs                           *LaunchAttribute
	NumAttrs                        uint32
}

// launchEx is one cuLaunchKernelEx call's configuration and its one
// attribute, in one heap object so the attribute pointer stays valid
// for the call.
type launchEx struct {
	cfg  LaunchConfig
	attr LaunchAttribute
}

// launchExFn is cuLaunchKernelEx (driver API 12.0), which older drivers
// lack, so Load does not require it: resolved at the first use through
// a second Open of the driver (a reference to the library already
// loaded), 0 when missing.
func (d *Driver) launchExFn() uintptr {
	d.launchExOnce.Do(func() {
		if lib, err := dl.Open("CUDA driver", sonames, []string{"cuLaunchKernelEx"}); err == nil {
			d.launchEx = lib.Sym("cuLaunchKernelEx")
		}
	})
	return d.launchEx
}

// HasLaunchEx reports whether the driver has cuLaunchKernelEx (else
// LaunchKernelPDL launches the ordinary way).
func (d *Driver) HasLaunchEx() bool { return d.launchExFn() != 0 }

// LaunchKernelPDL launches f as LaunchKernel does, with programmatic
// stream serialization allowed (programmatic dependent launch, compute
// capability 9.0+): f may begin before the previous kernel of s ends,
// so f must execute griddepcontrol.wait before it reads or writes memory
// that kernel touches. On a driver without cuLaunchKernelEx it is
// LaunchKernel. CUDA graphs captured from s keep the programmatic edge
// (CUDA 12.3+).
func (d *Driver) LaunchKernelPDL(f Function, grid, block [3]uint32, shared uint32, s Stream, params []unsafe.Pointer) error {
	fn := d.launchExFn()
	if fn == 0 {
		return d.LaunchKernel(f, grid, block, shared, s, params)
	}
	x := newLaunchEx(grid, block, shared, s)
	err := d.c.Check("cuLaunchKernelEx", fn, uintptr(unsafe.Pointer(&x.cfg)), uintptr(f),
		uintptr(unsafe.Pointer(unsafe.SliceData(params))), 0)
	runtime.KeepAlive(x)
	return err
}

// newLaunchEx fills a configuration of one attribute, programmatic
// stream serialization allowed.
func newLaunchEx(grid, block [3]uint32, shared uint32, s Stream) *launchEx {
	x := &launchEx{}
	x.cfg = LaunchConfig{
		GridDimX: grid[0], GridDimY: grid[1], GridDimZ: grid[2],
		BlockDimX: block[0], BlockDimY: block[1], BlockDimZ: block[2],
		SharedMemBytes: shared, Stream: s, Attrs: &x.attr, NumAttrs: 1,
	}
	x.attr.ID = LaunchAttrProgrammaticStreamSerialization
	*(*int32)(unsafe.Pointer(&x.attr.Value[0])) = 1
	return x
}
