package registry

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/ipc"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/internal/sys/shmarena"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/tensor"
)

// Capabilities: what a function can reach on its worker beyond Env, each
// a small interface that the worker (runtime/worker.Worker, the Env every
// function receives) implements. Packages that run on workers (plan
// executors, the compiler's VM, the model loaders, benchmarks) reach the
// device, its stream, the communicators, IPC memory, the trace and the
// memory marks through these, so they do not import the worker package: GPUOf, CommsOf, IPCOf
// and TracerOf return the capability or an error naming it, and the
// helpers below (ToHost, FromHost, CopyTensor, SyncDevice, NewStopwatch,
// BeginGPU, BeginCollective) keep the behaviour of a worker without the
// capability (host tensors are copied on the host, a host-only worker has
// no device to wait for, a worker without a trace records nothing).

// Sentinel errors of the capabilities.
var (
	// ErrNoCapability: the Env does not offer the capability (it is not
	// a chorus worker).
	ErrNoCapability = errors.New("capability not available")
	// ErrNoDevice: a device the worker cannot allocate on, or a GPU
	// capability asked of a host-only worker.
	ErrNoDevice = errors.New("device not available")
	// ErrNoCCL: a collective was called before InitCCL.
	ErrNoCCL = errors.New("no communicator: call InitCCL first")
	// ErrNoIPC: IPC memory needs workers on GPUs and a GPU communicator.
	ErrNoIPC = errors.New("ipc_memory needs GPU workers and InitCCL with a GPU backend (nccl)")
)

// ScopeIPC is the memory scope of CUDA IPC memory: every worker of the
// session can read it (see package ccl/ipc). Env.Alloc on a GPU worker
// allocates it (collectively).
const ScopeIPC = "ipc_memory"

// Funcs are the functions a worker calls by name: its built-ins, then
// its registry (what GetGlobalFunc finds).
type Funcs interface {
	LookupFunc(name string) (Func, error)
}

// LookupFunc finds name as env's worker would (Funcs); an Env without
// the capability searches Global.
func LookupFunc(env Env, name string) (Func, error) {
	if f, ok := env.(Funcs); ok {
		return f.LookupFunc(name)
	}
	return Global.Lookup(name)
}

// GPU is the device a worker is bound to and its stream: the device work
// of every package on the worker is queued there, in order.
type GPU interface {
	// GPUDevice is the bound device: a *device.CUDA on a GPU, a
	// host-memory device.Fake in tests; nil on a host-only worker.
	GPUDevice() device.Device
	// SyncDevice waits for the device work queued so far and reports a
	// custom all-reduce or device hook that gave up on its peers (a
	// no-op on a host-only worker).
	SyncDevice() error
	// Capture records the device work fn queues into a graph instead of
	// running it (runtime/worker.Worker.Capture says what fn may do).
	Capture(fn func() error) (device.Graph, error)
	// NewStopwatch times the worker's work call by call: CUDA events on
	// its stream on a GPU, the host clock on a host-only worker.
	NewStopwatch(marks int) (device.Stopwatch, error)
}

// Copier moves tensors between the host and the worker's device, ordered
// with the rest of the worker's device work. Host tensors are copied on
// the host.
type Copier interface {
	// ToHost returns a host copy of t (t itself when it is on the host).
	ToHost(t *tensor.Tensor) (*tensor.Tensor, error)
	// FromHost copies the host tensor src into dst (on the host or on
	// the worker's device); dtype and shape must match.
	FromHost(dst, src *tensor.Tensor) error
	// CopyTensor copies src into dst (same dtype and shape), on the
	// worker's stream when either is on its device.
	CopyTensor(dst, src *tensor.Tensor) error
}

// Comms are the worker's communicators (after InitCCL).
type Comms interface {
	// Comm is the communicator a function should use: its group's when
	// inGroup is set (and there are groups), else the global one;
	// ErrNoCCL before InitCCL.
	Comm(inGroup bool) (ccl.Comm, error)
}

// IPC is the worker's CUDA IPC memory (package ccl/ipc), made on first
// use after InitCCL with a GPU backend, and what runs on it.
type IPC interface {
	// IPCMemory returns the IPC allocator and the host control
	// communicator of its ranks, for packages that run their own kernels
	// on IPC memory (ErrNoIPC without a GPU or a GPU communicator).
	IPCMemory() (*ipc.Allocator, ccl.Comm, error)
	// AddDeviceHook registers h until remove is called.
	AddDeviceHook(h DeviceHook) (remove func(), err error)
	// CustomAllReduce runs the IPC all-reduce of send into recv over
	// every worker: strategy is auto, oneshot, twoshot or nccl; op is
	// sum, min or max (others go to NCCL under auto, and are an error
	// for oneshot/twoshot).
	CustomAllReduce(send, recv *tensor.Tensor, op, strategy string) error
	// LastStrategy is the strategy the latest custom all-reduce ran (""
	// before the first).
	LastStrategy() string
	// PeerCopy queues, on the worker's stream, a copy of src (on this
	// worker's GPU) into worker peer's instance of the IPC tensor dst
	// (same number of bytes): a copy-engine transfer over NVLink or
	// PCIe, the link's bound in the benchmarks.
	PeerCopy(dst, src *tensor.Tensor, peer int) error
}

// DeviceHook is device work of another package that runs on the worker's
// IPC memory (a GPU plan executor, package algo/gpuexec): Abort is called
// when a peer is lost (with the custom all-reducer's), Check after the
// device was synchronized (SyncDevice reports its error), Close before the
// IPC memory is freed (InitCCL again, or the end of the worker).
type DeviceHook interface {
	Abort()
	Check() error
	Close() error
}

// Memory is the worker's memory accounting: its device allocator's pool,
// its IPC memory and its process's host peaks.
type Memory interface {
	// Memory returns the worker's high-water marks.
	Memory() MemoryStats
}

// MemoryStats are one worker's memory high-water marks.
type MemoryStats struct {
	Worker int `json:"worker"`
	// PID is the worker's process. Workers of a threaded session share
	// the controller's process, so its host peak is theirs together.
	PID int `json:"pid"`
	// HostPeakBytes is the peak resident memory of the worker's process
	// (VmHWM in /proc/self/status); -1 when it cannot be read (HostError
	// says why, e.g. not on Linux).
	HostPeakBytes int64  `json:"host_peak_bytes"`
	HostError     string `json:"host_error,omitempty"`
	// GPU: the most device memory the worker's allocator held at once
	// (device.Stats.DevicePeak: tensors, workspace, cached buffers) and
	// the IPC memory it holds (custom all-reduce buffers and ipc_memory
	// tensors; that allocator keeps what it allocated until it closes, so
	// this is its peak too). Memory that CUDA, cuBLAS and NCCL take for
	// themselves is not counted. Zero on host-only workers.
	DevicePeakBytes int64 `json:"device_peak_bytes"`
	IPCBytes        int64 `json:"ipc_bytes"`
	// HasDevice: the worker is bound to a GPU (or a fake one).
	HasDevice bool `json:"has_device"`
	// HostShared is set by the controller (session.Memory), not the
	// worker: the worker's process is the controller's (a threaded
	// session) or another worker's, so HostPeakBytes is process-wide,
	// not this worker's alone.
	HostShared bool `json:"host_shared"`
	// SharedTensors is the worker process's shared tensor arena (process
	// workers on the host; nil when it has none) and HostAlloc what the
	// tensor package's host allocator did: Fallbacks counts tensors that
	// went to the Go heap because the arena could not serve them.
	SharedTensors *shmarena.Stats       `json:"shared_tensors,omitempty"`
	HostAlloc     tensor.HostAllocStats `json:"host_alloc"`
}

// DeviceTotalPeakBytes is DevicePeakBytes plus IPCBytes.
func (m MemoryStats) DeviceTotalPeakBytes() int64 { return m.DevicePeakBytes + m.IPCBytes }

// Tracer is the worker's event recorder (docs/observability.md): the
// flight recorder always, the timeline when the session traces.
type Tracer interface {
	// Recorder is the worker's recorder.
	Recorder() *trace.Recorder
	// BeginCollective records the start of a collective that does not go
	// through a ccl.Comm (a plan, the custom all-reduce) on the worker's
	// collectives track. name is the collective ("allreduce"), comm the
	// sequence it is numbered in (one per communicator or plan: the
	// numbers match across ranks), backend how it runs ("ipc/oneshot",
	// "plan/allreduce_ring").
	BeginCollective(name, comm, backend string, bytes int64) CollectiveSpan
	// BeginGPU marks the worker's stream before device work issued
	// outside the worker (a VM kernel, a plan executor's kernels).
	BeginGPU() GPUSpan
}

// BeginActivity records, on env's worker's flight recorder (and its
// timeline when the session traces), the start of long work inside the
// command in progress, such as "NVRTC compile chorus_vm_tc.cu"; a hang
// report names it next to the command. The func returned records its
// end. A no-op where env has no Tracer. Call both on the goroutine that
// runs the command, or on one it waits for (a device executor).
func BeginActivity(env Env, name string) (end func()) {
	t, ok := env.(Tracer)
	if !ok {
		return func() {}
	}
	rec := t.Recorder() // Record drops what neither a ring nor the timeline keeps
	if rec == nil {
		return func() {}
	}
	track := rec.Track(trace.ThreadActivity)
	rec.Record(&trace.Event{Track: track, Name: name, Cat: trace.CatActivity, Phase: trace.Begin})
	return func() { rec.Record(&trace.Event{Track: track, Name: name, Cat: trace.CatActivity, Phase: trace.End}) }
}

// CollectiveSpan is a collective being recorded (Tracer.BeginCollective);
// End ends it. A value: recording allocates nothing. The zero span
// records nothing.
type CollectiveSpan struct {
	// Site is the span's events' site (nil: not recorded), Seq its
	// number in its sequence and Bytes the data it moves.
	Site  *trace.Site
	Seq   uint64
	Bytes int64
}

// End records the end of the collective, with its failure if any.
func (s CollectiveSpan) End(err error) {
	if s.Site == nil {
		return
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	s.Site.Mark(trace.End, 0, s.Seq, s.Bytes, msg)
}

// GPUMarks ends a GPUSpan: it marks the stream after the work and names
// it in the trace (implemented by the worker).
type GPUMarks interface {
	EndGPU(name string, bytes int64)
}

// GPUSpan is device work being timed on the worker's stream for the
// trace (Tracer.BeginGPU); End marks the stream after it. A value: with
// the timeline off it costs a branch and records nothing.
type GPUSpan struct {
	// Marks ends the span; nil: the work is not timed.
	Marks GPUMarks
}

// End marks the stream after the work and names it in the trace
// ("matmul", "allreduce gpuplan/NAME"); bytes is the data it wrote.
func (s GPUSpan) End(name string, bytes int64) {
	if s.Marks != nil {
		s.Marks.EndGPU(name, bytes)
	}
}

// missing is the error of a capability env does not offer.
func missing(env Env, capability string, sentinel error, why string) error {
	return fmt.Errorf("worker %d: %w: the %s capability: %s", env.WorkerID(), sentinel, capability, why)
}

// GPUOf returns env's GPU: an error wrapping ErrNoDevice when env is a
// host-only worker or not a chorus worker.
func GPUOf(env Env) (GPU, error) {
	g, ok := env.(GPU)
	if !ok {
		return nil, missing(env, "GPU", ErrNoDevice, fmt.Sprintf("%T is not a chorus worker", env))
	}
	if g.GPUDevice() == nil {
		return nil, missing(env, "GPU", ErrNoDevice, fmt.Sprintf("the worker is on %v, not bound to a GPU (session DeviceIDs)", env.Device()))
	}
	return g, nil
}

// CUDAOf returns the CUDA device of env's GPU, for packages that launch
// their own kernels on its context and stream (so they are ordered with
// the worker's copies and collectives): an error wrapping ErrNoDevice on
// a host-only worker or one bound to a fake GPU.
func CUDAOf(env Env) (*device.CUDA, error) {
	g, err := GPUOf(env)
	if err != nil {
		return nil, err
	}
	c, ok := g.GPUDevice().(*device.CUDA)
	if !ok {
		return nil, missing(env, "CUDA", ErrNoDevice, fmt.Sprintf("the worker's device is a %T", g.GPUDevice()))
	}
	return c, nil
}

// CommsOf returns env's communicators (ErrNoCapability when env is not
// a chorus worker).
func CommsOf(env Env) (Comms, error) {
	c, ok := env.(Comms)
	if !ok {
		return nil, missing(env, "communicator", ErrNoCapability, fmt.Sprintf("collectives need a chorus worker, got %T", env))
	}
	return c, nil
}

// Comm is CommsOf(env) then Comms.Comm(inGroup).
func Comm(env Env, inGroup bool) (ccl.Comm, error) {
	c, err := CommsOf(env)
	if err != nil {
		return nil, err
	}
	return c.Comm(inGroup)
}

// Capture is GPUOf(env) then GPU.Capture(fn).
func Capture(env Env, fn func() error) (device.Graph, error) {
	g, err := GPUOf(env)
	if err != nil {
		return nil, fmt.Errorf("%w (graph capture needs a GPU)", err)
	}
	return g.Capture(fn)
}

// IPCOf returns env's IPC memory (ErrNoCapability when env is not a
// chorus worker; whether the worker can make IPC memory is decided at
// first use: ErrNoIPC).
func IPCOf(env Env) (IPC, error) {
	c, ok := env.(IPC)
	if !ok {
		return nil, missing(env, "IPC memory", ErrNoCapability, fmt.Sprintf("IPC memory needs a chorus worker, got %T", env))
	}
	return c, nil
}

// CustomAllReduce is IPCOf(env) then IPC.CustomAllReduce.
func CustomAllReduce(env Env, send, recv *tensor.Tensor, op, strategy string) error {
	c, err := IPCOf(env)
	if err != nil {
		return err
	}
	return c.CustomAllReduce(send, recv, op, strategy)
}

// TracerOf returns env's recorder (ErrNoCapability when env is not a
// chorus worker). BeginGPU and BeginCollective record nothing there
// instead of failing.
func TracerOf(env Env) (Tracer, error) {
	t, ok := env.(Tracer)
	if !ok {
		return nil, missing(env, "trace", ErrNoCapability, fmt.Sprintf("%T records no trace", env))
	}
	return t, nil
}

// BeginGPU is Tracer.BeginGPU on env's worker; the zero span (nothing
// timed) when env has no trace.
func BeginGPU(env Env) GPUSpan {
	if t, ok := env.(Tracer); ok {
		return t.BeginGPU()
	}
	return GPUSpan{}
}

// BeginCollective is Tracer.BeginCollective on env's worker; the zero
// span (nothing recorded) when env has no trace.
func BeginCollective(env Env, name, comm, backend string, bytes int64) CollectiveSpan {
	if t, ok := env.(Tracer); ok {
		return t.BeginCollective(name, comm, backend, bytes)
	}
	return CollectiveSpan{}
}

// ToHost returns a host copy of t, for functions running on a worker (t
// itself when it already lives on the host).
func ToHost(env Env, t *tensor.Tensor) (*tensor.Tensor, error) {
	if t.IsHost() {
		return t, nil
	}
	c, ok := env.(Copier)
	if !ok {
		return nil, missing(env, "copy", ErrNoCapability, fmt.Sprintf("ToHost of a tensor on %v needs a chorus worker, got %T", t.Device(), env))
	}
	return c.ToHost(t)
}

// FromHost copies the host tensor src into dst (on the host or on env's
// GPU); dtype and shape must match.
func FromHost(env Env, dst, src *tensor.Tensor) error {
	if dst.IsHost() {
		return CopyHost(dst, src)
	}
	c, ok := env.(Copier)
	if !ok {
		return missing(env, "copy", ErrNoCapability, fmt.Sprintf("FromHost into a tensor on %v needs a chorus worker, got %T", dst.Device(), env))
	}
	return c.FromHost(dst, src)
}

// CopyTensor copies src into dst (same dtype and shape): on env's GPU
// the copy is queued on its stream (ordered with collectives and
// kernels); host tensors are copied at once.
func CopyTensor(env Env, dst, src *tensor.Tensor) error {
	if !tensor.SameLayout(dst, src) {
		return fmt.Errorf("%w: copy %s%v into %s%v", ErrBadArgs, src.DType(), src.Shape(), dst.DType(), dst.Shape())
	}
	if dst.IsHost() && src.IsHost() {
		return CopyHost(dst, src)
	}
	c, ok := env.(Copier)
	if !ok {
		return missing(env, "copy", ErrNoCapability, fmt.Sprintf("CopyTensor of device tensors needs a chorus worker, got %T", env))
	}
	return c.CopyTensor(dst, src)
}

// CopyHost copies the host tensor src into the host tensor dst (same
// dtype and shape).
func CopyHost(dst, src *tensor.Tensor) error {
	if !tensor.SameLayout(dst, src) {
		return fmt.Errorf("layout mismatch: destination %s%v, source %s%v", dst.DType(), dst.Shape(), src.DType(), src.Shape())
	}
	d, err := dst.HostBytes()
	if err != nil {
		return err
	}
	s, err := src.HostBytes()
	if err != nil {
		return err
	}
	copy(d, s)
	return nil
}

// SyncDevice waits for the device work env's worker queued (a no-op on
// host-only workers and on an Env without a GPU).
func SyncDevice(env Env) error {
	g, err := GPUOf(env)
	if err != nil {
		return nil
	}
	return g.SyncDevice()
}

// NewStopwatch times env's work call by call: on a GPU, marks are CUDA
// events on the worker's stream (device time between them); on a
// host-only worker (or an Env without a GPU), the host clock. marks
// bounds the marks between two Laps.
func NewStopwatch(env Env, marks int) (device.Stopwatch, error) {
	g, err := GPUOf(env)
	if err != nil {
		return device.NewHostStopwatch(marks), nil
	}
	return g.NewStopwatch(marks)
}
