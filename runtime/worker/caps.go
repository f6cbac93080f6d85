package worker

import (
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/ipc"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// The worker is the Env of every function it runs, and offers the
// capabilities of package registry through it: functions reach the
// device, the communicators, IPC memory and the trace with
// registry.GPUOf, CommsOf, IPCOf and TracerOf, never by naming *Worker.
var (
	_ registry.GPU    = (*Worker)(nil)
	_ registry.Copier = (*Worker)(nil)
	_ registry.Comms  = (*Worker)(nil)
	_ registry.IPC    = (*Worker)(nil)
	_ registry.Tracer = (*Worker)(nil)
	_ registry.Funcs  = (*Worker)(nil)
)

// LookupFunc finds a function the way GetGlobalFunc does: the built-ins
// first, then the worker's registry.
func (w *Worker) LookupFunc(name string) (registry.Func, error) { return lookup(w.cfg.Registry, name) }

// GPUDevice is the device the worker is bound to (CUDA or a Fake), nil
// on a host-only worker.
func (w *Worker) GPUDevice() device.Device {
	if w.dev == nil {
		return nil
	}
	return w.dev
}

// SyncDevice waits for the device work this worker queued (a no-op on a
// host-only worker) and reports a custom all-reduce or device hook that
// gave up waiting for its peers.
func (w *Worker) SyncDevice() error { return SyncDevice(w) }

// Capture records the device work fn queues on this worker's GPU (see
// the function Capture).
func (w *Worker) Capture(fn func() error) (device.Graph, error) { return Capture(w, fn) }

// NewStopwatch times this worker's work call by call (see the function
// NewStopwatch).
func (w *Worker) NewStopwatch(marks int) (device.Stopwatch, error) { return NewStopwatch(w, marks) }

// ToHost returns a host copy of t (t itself when it is on the host).
func (w *Worker) ToHost(t *tensor.Tensor) (*tensor.Tensor, error) { return ToHost(w, t) }

// FromHost copies the host tensor src into dst (on the host or on this
// worker's GPU); dtype and shape must match.
func (w *Worker) FromHost(dst, src *tensor.Tensor) error { return FromHost(w, dst, src) }

// CopyTensor copies src into dst (same dtype and shape), on the worker's
// stream when either is on its GPU.
func (w *Worker) CopyTensor(dst, src *tensor.Tensor) error { return CopyTensor(w, dst, src) }

// Comm returns the communicator of this worker: the group's when inGroup
// is set (and there are groups), else the global one.
func (w *Worker) Comm(inGroup bool) (ccl.Comm, error) { return w.comm(inGroup) }

// IPCMemory returns the worker's IPC allocator and its host control
// communicator (made on first use after InitCCL with a GPU backend).
func (w *Worker) IPCMemory() (*ipc.Allocator, ccl.Comm, error) { return IPC(w) }

// AddDeviceHook registers h until remove is called.
func (w *Worker) AddDeviceHook(h registry.DeviceHook) (remove func(), err error) {
	return AddDeviceHook(w, h)
}

// CustomAllReduce runs the IPC all-reduce of send into recv over every
// worker (see the function CustomAllReduce).
func (w *Worker) CustomAllReduce(send, recv *tensor.Tensor, op, strategy string) error {
	return CustomAllReduce(w, send, recv, op, strategy)
}

// LastStrategy is the strategy the worker's latest custom all-reduce ran.
func (w *Worker) LastStrategy() string { return LastStrategy(w) }

// PeerCopy queues a copy of src into worker peer's instance of the IPC
// tensor dst (see the function PeerCopy).
func (w *Worker) PeerCopy(dst, src *tensor.Tensor, peer int) error {
	return PeerCopy(w, dst, src, peer)
}

// BeginCollective records the start of a collective on this worker's
// collectives track (see the function BeginCollective).
func (w *Worker) BeginCollective(name, comm, backend string, bytes int64) registry.CollectiveSpan {
	s := BeginCollective(w, name, comm, backend, bytes)
	return registry.CollectiveSpan{Site: s.site, Seq: s.seq, Bytes: s.bytes}
}

// BeginGPU marks the worker's stream before device work issued outside
// this package; the span's End marks it after.
func (w *Worker) BeginGPU() registry.GPUSpan {
	if w.gpuBegin() {
		return registry.GPUSpan{Marks: gpuSpanEnd{w}}
	}
	return registry.GPUSpan{}
}

// gpuMarks ends the span BeginGPU began (one pointer: a GPUSpan holds it
// without allocating).
type gpuSpanEnd struct{ w *Worker }

func (m gpuSpanEnd) EndGPU(name string, bytes int64) {
	if m.w.gpu != nil && m.w.gpu.open {
		m.w.gpuEnd(true, name, bytes)
	}
}
