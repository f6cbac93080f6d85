package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/dl"
)

// Handles, as the driver defines them.
type (
	Device    int32
	Context   uintptr
	Stream    uintptr
	Event     uintptr
	Module    uintptr
	Function  uintptr
	DevicePtr uint64
	Graph     uintptr // CUgraph: a captured sequence of work
	GraphExec uintptr // CUgraphExec: an instantiated graph, launchable
)

// IpcMemHandle is CUipcMemHandle: 64 opaque bytes.
type IpcMemHandle [64]byte

// Device attributes used by chorus (CUdevice_attribute, cuda.h 13.0).
const (
	AttrMultiprocessorCount    = 16
	AttrComputeCapabilityMajor = 75
	AttrComputeCapabilityMinor = 76
	AttrUnifiedAddressing      = 41
	AttrClockRate              = 13 // kHz
	// AttrMaxSharedMemoryPerMultiprocessor is the most shared memory a
	// multiprocessor can give its blocks (228 KiB on Hopper, 164 on A100,
	// 100 on compute capability 8.6 and 8.9): what a carveout preference is
	// a percentage of.
	AttrMaxSharedMemoryPerMultiprocessor = 81
	// AttrMPSEnabled is 1 when contexts on the device are shared through
	// the MPS daemon (CU_DEVICE_ATTRIBUTE_MPS_ENABLED, CUDA 12.3+).
	AttrMPSEnabled = 133
)

// Flags.
const (
	StreamNonBlocking       = 1 // CU_STREAM_NON_BLOCKING
	EventDisableTiming      = 2 // CU_EVENT_DISABLE_TIMING
	IpcLazyEnablePeerAccess = 1 // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
	MemHostAllocPortable    = 1 // CU_MEMHOSTALLOC_PORTABLE
	MemHostAllocDeviceMap   = 2 // CU_MEMHOSTALLOC_DEVICEMAP
)

// Stream capture modes (CUstreamCaptureMode) and states
// (CUstreamCaptureStatus).
const (
	CaptureModeGlobal      = 0
	CaptureModeThreadLocal = 1
	// CaptureModeRelaxed lets begin and end run on different OS threads
	// and puts no limits on other threads' calls.
	CaptureModeRelaxed = 2

	CaptureNone        = 0
	CaptureActive      = 1
	CaptureInvalidated = 2
)

// ErrNotLoaded: the driver library could not be loaded.
var ErrNotLoaded = errors.New("cuda: driver not loaded")

// Error is a failed driver call.
type Error struct {
	Func string
	Code int
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Func, e.Name, e.Code, e.Msg)
}

// Driver holds the resolved entry points.
type Driver struct {
	c dl.Caller
	// hot paths, cached
	launch, memcpyHtoDAsync, memcpyDtoHAsync, streamSync, eventRecord uintptr
	// launchEx is cuLaunchKernelEx, 0 on a driver older than 12.0
	// (LaunchKernelPDL then launches the ordinary way), resolved once
	// (launchExFn).
	launchEx     uintptr
	launchExOnce sync.Once
}

// symbols is every entry point the binding uses.
var symbols = []string{
	"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString",
	"cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceGetAttribute", "cuDeviceTotalMem_v2",
	"cuDeviceCanAccessPeer",
	"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuCtxSynchronize",
	"cuCtxEnablePeerAccess",
	"cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize",
	"cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuEventElapsedTime", "cuEventDestroy_v2",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2",
	"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
	"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2",
	"cuMemcpyPeer", "cuMemcpyPeerAsync", "cuMemsetD8_v2", "cuMemsetD8Async",
	"cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload", "cuLaunchKernel", "cuFuncSetAttribute", "cuFuncGetAttribute",
	"cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle",
	"cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuStreamIsCapturing",
	"cuGraphInstantiateWithFlags", "cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy",
	"cuMemHostAlloc", "cuMemHostGetDevicePointer_v2", "cuMemFreeHost",
	"cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuDeviceGetUuid_v2", "cuCtxGetExecAffinity",
}

// Sonames tried in order.
var sonames = []string{"libcuda.so.1", "libcuda.so"}

// Load opens the driver and resolves every symbol; the error lists all
// that are missing. It does not call cuInit.
func Load() (*Driver, error) {
	lib, err := dl.Open("CUDA driver", sonames, symbols)
	if err != nil {
		if errors.Is(err, dl.ErrNotFound) {
			return nil, fmt.Errorf("%w: no CUDA driver found (%v)", ErrNotLoaded, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrNotLoaded, err)
	}
	d := &Driver{}
	d.c = dl.NewCaller(lib, d.errorOf)
	d.launch, d.memcpyHtoDAsync, d.memcpyDtoHAsync = d.c.Sym("cuLaunchKernel"), d.c.Sym("cuMemcpyHtoDAsync_v2"), d.c.Sym("cuMemcpyDtoHAsync_v2")
	d.streamSync, d.eventRecord = d.c.Sym("cuStreamSynchronize"), d.c.Sym("cuEventRecord")
	return d, nil
}

// errorOf describes a failed call with the driver's name and message
// for the status (cuGetErrorName, cuGetErrorString).
func (d *Driver) errorOf(fn string, status int32) error {
	code := int(status)
	e := &Error{Func: fn, Code: code, Name: "CUDA_ERROR_UNKNOWN", Msg: "unknown error"}
	var p uintptr
	if d.c.Raw("cuGetErrorName", uintptr(code), uintptr(unsafe.Pointer(&p))) == 0 && p != 0 {
		e.Name = dl.CString(p)
	}
	p = 0
	if d.c.Raw("cuGetErrorString", uintptr(code), uintptr(unsafe.Pointer(&p))) == 0 && p != 0 {
		e.Msg = dl.CString(p)
	}
	return e
}

func (d *Driver) Init() error { return d.c.Call("cuInit", 0) }

func (d *Driver) DriverVersion() (int, error) {
	var v int32
	err := d.c.Call("cuDriverGetVersion", uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

func (d *Driver) DeviceCount() (int, error) {
	var n int32
	err := d.c.Call("cuDeviceGetCount", uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

func (d *Driver) DeviceGet(ordinal int) (Device, error) {
	var dev int32
	err := d.c.Call("cuDeviceGet", uintptr(unsafe.Pointer(&dev)), uintptr(ordinal))
	return Device(dev), err
}

func (d *Driver) DeviceName(dev Device) (string, error) {
	buf := make([]byte, 256)
	if err := d.c.Call("cuDeviceGetName", uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev)); err != nil {
		return "", err
	}
	name, _, _ := strings.Cut(string(buf), "\x00")
	return name, nil
}

func (d *Driver) DeviceAttribute(dev Device, attr int) (int, error) {
	var v int32
	err := d.c.Call("cuDeviceGetAttribute", uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(dev))
	return int(v), err
}

func (d *Driver) DeviceTotalMem(dev Device) (int64, error) {
	var n uint64
	err := d.c.Call("cuDeviceTotalMem_v2", uintptr(unsafe.Pointer(&n)), uintptr(dev))
	return int64(n), err
}

func (d *Driver) CanAccessPeer(dev, peer Device) (bool, error) {
	var v int32
	err := d.c.Call("cuDeviceCanAccessPeer", uintptr(unsafe.Pointer(&v)), uintptr(dev), uintptr(peer))
	return v != 0, err
}

func (d *Driver) PrimaryCtxRetain(dev Device) (Context, error) {
	var c Context
	err := d.c.Call("cuDevicePrimaryCtxRetain", uintptr(unsafe.Pointer(&c)), uintptr(dev))
	return c, err
}

func (d *Driver) PrimaryCtxRelease(dev Device) error {
	return d.c.Call("cuDevicePrimaryCtxRelease_v2", uintptr(dev))
}

// SetCurrent binds ctx to the calling OS thread (lock the goroutine first).
func (d *Driver) SetCurrent(c Context) error { return d.c.Call("cuCtxSetCurrent", uintptr(c)) }

func (d *Driver) CtxSynchronize() error { return d.c.Call("cuCtxSynchronize") }

func (d *Driver) EnablePeerAccess(peer Context) error {
	return d.c.Call("cuCtxEnablePeerAccess", uintptr(peer), 0)
}

func (d *Driver) StreamCreate(flags uint) (Stream, error) {
	var s Stream
	err := d.c.Call("cuStreamCreate", uintptr(unsafe.Pointer(&s)), uintptr(flags))
	return s, err
}

func (d *Driver) StreamDestroy(s Stream) error { return d.c.Call("cuStreamDestroy_v2", uintptr(s)) }

func (d *Driver) StreamSynchronize(s Stream) error {
	return d.c.Check("cuStreamSynchronize", d.streamSync, uintptr(s))
}

func (d *Driver) EventCreate(flags uint) (Event, error) {
	var e Event
	err := d.c.Call("cuEventCreate", uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return e, err
}

func (d *Driver) EventRecord(e Event, s Stream) error {
	return d.c.Check("cuEventRecord", d.eventRecord, uintptr(e), uintptr(s))
}

func (d *Driver) EventSynchronize(e Event) error { return d.c.Call("cuEventSynchronize", uintptr(e)) }

// EventElapsed returns the milliseconds between two recorded events.
func (d *Driver) EventElapsed(start, end Event) (float32, error) {
	var ms float32
	err := d.c.Call("cuEventElapsedTime", uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))
	return ms, err
}

func (d *Driver) EventDestroy(e Event) error { return d.c.Call("cuEventDestroy_v2", uintptr(e)) }

func (d *Driver) MemAlloc(bytes int64) (DevicePtr, error) {
	var p DevicePtr
	err := d.c.Call("cuMemAlloc_v2", uintptr(unsafe.Pointer(&p)), uintptr(bytes))
	return p, err
}

func (d *Driver) MemFree(p DevicePtr) error { return d.c.Call("cuMemFree_v2", uintptr(p)) }

// MemGetInfo returns free and total bytes of the current context's device.
func (d *Driver) MemGetInfo() (free, total int64, err error) {
	var f, t uint64
	err = d.c.Call("cuMemGetInfo_v2", uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))
	return int64(f), int64(t), err
}

func (d *Driver) MemcpyHtoD(dst DevicePtr, src []byte) error {
	return d.c.Call("cuMemcpyHtoD_v2", uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)))
}

func (d *Driver) MemcpyDtoH(dst []byte, src DevicePtr) error {
	return d.c.Call("cuMemcpyDtoH_v2", uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)))
}

func (d *Driver) MemcpyDtoD(dst, src DevicePtr, bytes int64) error {
	return d.c.Call("cuMemcpyDtoD_v2", uintptr(dst), uintptr(src), uintptr(bytes))
}

// MemcpyHtoDAsync: src must stay alive and unchanged until the stream
// reaches the copy (pinned memory makes it truly asynchronous).
func (d *Driver) MemcpyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	return d.c.Check("cuMemcpyHtoDAsync_v2", d.memcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), uintptr(s))
}

func (d *Driver) MemcpyDtoHAsync(dst []byte, src DevicePtr, s Stream) error {
	return d.c.Check("cuMemcpyDtoHAsync_v2", d.memcpyDtoHAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), uintptr(s))
}

func (d *Driver) MemcpyDtoDAsync(dst, src DevicePtr, bytes int64, s Stream) error {
	return d.c.Call("cuMemcpyDtoDAsync_v2", uintptr(dst), uintptr(src), uintptr(bytes), uintptr(s))
}

func (d *Driver) MemcpyPeer(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, bytes int64) error {
	return d.c.Call("cuMemcpyPeer", uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(bytes))
}

func (d *Driver) MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, bytes int64, s Stream) error {
	return d.c.Call("cuMemcpyPeerAsync", uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(bytes), uintptr(s))
}

func (d *Driver) MemsetD8(dst DevicePtr, v byte, n int64) error {
	return d.c.Call("cuMemsetD8_v2", uintptr(dst), uintptr(v), uintptr(n))
}

func (d *Driver) MemsetD8Async(dst DevicePtr, v byte, n int64, s Stream) error {
	return d.c.Call("cuMemsetD8Async", uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
}

// ModuleLoadData loads a cubin (or PTX) image.
func (d *Driver) ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, errors.New("cuda: ModuleLoadData: empty image")
	}
	var m Module
	err := d.c.Call("cuModuleLoadData", uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(unsafe.SliceData(image))))
	return m, err
}

func (d *Driver) ModuleGetFunction(m Module, name string) (Function, error) {
	cname := append([]byte(name), 0)
	var f Function
	err := d.c.Call("cuModuleGetFunction", uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(unsafe.SliceData(cname))))
	return f, err
}

func (d *Driver) ModuleUnload(m Module) error { return d.c.Call("cuModuleUnload", uintptr(m)) }

// FuncAttrMaxDynamicSharedSizeBytes is
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: the most dynamic
// shared memory a launch of the function may ask for (48 KiB unless
// raised; static and dynamic together up to the device's opt-in limit,
// 227 KiB a block on Hopper).
const FuncAttrMaxDynamicSharedSizeBytes = 8

// FuncAttrPreferredSharedMemoryCarveout is
// CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: the share of the
// unified L1 and shared memory a function prefers as shared memory, in
// percent of the most (the driver takes a supported configuration near
// it that holds the function's blocks). A multiprocessor changes its
// configuration only when idle; on an H200 the blocks of a kernel that
// prefers a small share were no longer placed beside a kernel running
// under the largest (compiler/kernels, decodeCarveout).
const FuncAttrPreferredSharedMemoryCarveout = 9

// FuncAttrSharedSizeBytes is CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: the
// function's static shared memory a block.
const FuncAttrSharedSizeBytes = 1

// FuncGetAttribute reads attribute attr (CUfunction_attribute) of f.
func (d *Driver) FuncGetAttribute(f Function, attr int) (int, error) {
	var v int32
	err := d.c.Call("cuFuncGetAttribute", uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(f))
	return int(v), err
}

// FuncSetAttribute sets attribute attr (CUfunction_attribute) of f to
// value.
func (d *Driver) FuncSetAttribute(f Function, attr, value int) error {
	return d.c.Call("cuFuncSetAttribute", uintptr(f), uintptr(attr), uintptr(value))
}

// LaunchKernel launches f; params holds pointers to each argument value
// (the driver's kernelParams array), which must stay alive for the call.
func (d *Driver) LaunchKernel(f Function, grid, block [3]uint32, shared uint32, s Stream, params []unsafe.Pointer) error {
	return d.c.Check("cuLaunchKernel", d.launch, uintptr(f),
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		uintptr(shared), uintptr(s), uintptr(unsafe.Pointer(unsafe.SliceData(params))), 0)
}

func (d *Driver) IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	err := d.c.Call("cuIpcGetMemHandle", uintptr(unsafe.Pointer(&h)), uintptr(p))
	return h, err
}

func (d *Driver) IpcCloseMemHandle(p DevicePtr) error {
	return d.c.Call("cuIpcCloseMemHandle", uintptr(p))
}

// StreamBeginCapture starts recording the work queued on s into a graph
// instead of running it.
func (d *Driver) StreamBeginCapture(s Stream, mode int) error {
	return d.c.Call("cuStreamBeginCapture_v2", uintptr(s), uintptr(mode))
}

// StreamEndCapture ends the capture on s and returns the recorded graph.
func (d *Driver) StreamEndCapture(s Stream) (Graph, error) {
	var g Graph
	err := d.c.Call("cuStreamEndCapture", uintptr(s), uintptr(unsafe.Pointer(&g)))
	return g, err
}

// StreamIsCapturing returns CaptureNone, CaptureActive or
// CaptureInvalidated.
func (d *Driver) StreamIsCapturing(s Stream) (int, error) {
	var st int32
	err := d.c.Call("cuStreamIsCapturing", uintptr(s), uintptr(unsafe.Pointer(&st)))
	return int(st), err
}

// GraphInstantiate makes a launchable graph of g (no flags).
func (d *Driver) GraphInstantiate(g Graph) (GraphExec, error) {
	var e GraphExec
	err := d.c.Call("cuGraphInstantiateWithFlags", uintptr(unsafe.Pointer(&e)), uintptr(g), 0)
	return e, err
}

// GraphLaunch queues one run of e on s.
func (d *Driver) GraphLaunch(e GraphExec, s Stream) error {
	return d.c.Call("cuGraphLaunch", uintptr(e), uintptr(s))
}

func (d *Driver) GraphExecDestroy(e GraphExec) error {
	return d.c.Call("cuGraphExecDestroy", uintptr(e))
}
func (d *Driver) GraphDestroy(g Graph) error { return d.c.Call("cuGraphDestroy", uintptr(g)) }

// MemHostAlloc allocates page-locked host memory. The pointer is C
// memory: the Go collector ignores it, and it stays valid until
// MemFreeHost.
func (d *Driver) MemHostAlloc(bytes int64, flags uint) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := d.c.Call("cuMemHostAlloc", uintptr(unsafe.Pointer(&p)), uintptr(bytes), uintptr(flags))
	return p, err
}

// MemHostGetDevicePointer is the device address of mapped host memory.
func (d *Driver) MemHostGetDevicePointer(p unsafe.Pointer) (DevicePtr, error) {
	var dp DevicePtr
	err := d.c.Call("cuMemHostGetDevicePointer_v2", uintptr(unsafe.Pointer(&dp)), uintptr(p), 0)
	return dp, err
}

func (d *Driver) MemFreeHost(p unsafe.Pointer) error { return d.c.Call("cuMemFreeHost", uintptr(p)) }
