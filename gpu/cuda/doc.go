// Package cuda binds the CUDA driver API (libcuda.so.1) from pure Go, with
// no cgo: the library is opened at run time with purego, every symbol is
// resolved up front by Load (one error names everything missing), and
// calls go through dl.Caller (purego.SyscallN; the status check and the
// pointer rules are written there once) with cached function pointers,
// the cheapest call path (about 0.1 us).
//
// The CUDA context is per OS thread: callers run a device's work on a
// goroutine locked with runtime.LockOSThread after SetCurrent. Function
// names and signatures are those of cuda.h from CUDA 13.0 (driver 580),
// using the versioned entry points (_v2) where the header maps to them.
//
// This package is the driver binding only: NVRTC, NCCL and cuBLAS have
// their own packages, and the device allocator and the CPU fake are in
// gpu/device.
package cuda
