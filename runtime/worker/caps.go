package worker

import (
	"fmt"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// The worker is the Env of every function it runs, and offers the
// capabilities of package registry through it: functions reach the
// device, the communicators, IPC memory and the trace with
// registry.GPUOf, CommsOf, IPCOf and TracerOf, never by naming *Worker.
// The methods live beside what they use: Capture and NewStopwatch in
// gpu.go, Comm in ccl.go, the IPC methods in ipc.go, BeginCollective in
// trace.go, Recorder in trace.go.
var (
	_ registry.GPU    = (*Worker)(nil)
	_ registry.Copier = (*Worker)(nil)
	_ registry.Comms  = (*Worker)(nil)
	_ registry.IPC    = (*Worker)(nil)
	_ registry.Tracer = (*Worker)(nil)
	_ registry.Funcs  = (*Worker)(nil)
	_ registry.Memory = (*Worker)(nil)
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
func (w *Worker) SyncDevice() error {
	if w.dev == nil {
		return nil
	}
	if err := w.dev.Sync(); err != nil {
		return err
	}
	return w.checkIPC()
}

// ToHost returns a host copy of t (t itself when it already lives on the
// host).
func (w *Worker) ToHost(t *tensor.Tensor) (*tensor.Tensor, error) {
	if t.IsHost() {
		return t, nil
	}
	return w.toHost(t)
}

// FromHost copies the host tensor src into dst (on the host or on this
// worker's GPU); dtype and shape must match.
func (w *Worker) FromHost(dst, src *tensor.Tensor) error {
	if dst.IsHost() {
		return registry.CopyHost(dst, src)
	}
	return w.fromHost(dst, src)
}

// CopyTensor copies src into dst (same dtype and shape): on the worker's
// GPU the copy is queued on its stream (ordered with collectives and
// kernels); host tensors are copied at once.
func (w *Worker) CopyTensor(dst, src *tensor.Tensor) error {
	if !tensor.SameLayout(dst, src) {
		return fmt.Errorf("%w: copy %s%v into %s%v", registry.ErrBadArgs, src.DType(), src.Shape(), dst.DType(), dst.Shape())
	}
	if dst.IsHost() && src.IsHost() {
		return registry.CopyHost(dst, src)
	}
	if dst.IsHost() {
		h, err := w.toHost(src)
		if err != nil {
			return err
		}
		return registry.CopyHost(dst, h)
	}
	if src.IsHost() {
		return w.fromHost(dst, src)
	}
	db, err := w.deviceBuffer(dst)
	if err != nil {
		return err
	}
	sb, err := w.deviceBuffer(src)
	if err != nil {
		return err
	}
	return w.dev.Copy(db, dst.Offset(), sb, src.Offset(), dst.NumBytes())
}

// BeginGPU marks the worker's stream before device work issued outside
// this package (a VM kernel, a plan executor's kernels, on its CUDA
// stream: registry.CUDAOf); the span's End marks it after.
func (w *Worker) BeginGPU() registry.GPUSpan {
	if w.gpuBegin() {
		return registry.GPUSpan{Marks: gpuSpanEnd{w}}
	}
	return registry.GPUSpan{}
}

// gpuSpanEnd ends the span BeginGPU began (one pointer: a GPUSpan holds
// it without allocating).
type gpuSpanEnd struct{ w *Worker }

func (m gpuSpanEnd) EndGPU(name string, bytes int64) {
	if m.w.gpu != nil && m.w.gpu.open {
		m.w.gpuEnd(true, name, bytes)
	}
}
