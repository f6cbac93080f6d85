package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/ipc"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// ScopeIPC is the memory scope of CUDA IPC memory: every worker of the
// session can read it (see package ccl/ipc; registry.ScopeIPC).
const ScopeIPC = registry.ScopeIPC

// ErrNoIPC: IPC memory needs workers on GPUs and a GPU communicator
// (registry.ErrNoIPC).
var ErrNoIPC = registry.ErrNoIPC

// ipcState is a worker's IPC allocator and all-reducer, made on first use
// after InitCCL and closed with the communicators.
type ipcState struct {
	alloc *ipc.Allocator
	ar    *ipc.AllReducer
	// hooks: device work of other packages on this IPC memory (GPU plan
	// executors), by registration number; guarded by commMu.
	hooks    map[int]registry.DeviceHook
	hookNext int
}

func (w *Worker) ensureIPC() (*ipc.Allocator, error) {
	if w.ipc.alloc != nil {
		return w.ipc.alloc, nil
	}
	cd, ok := w.dev.(*device.CUDA)
	if !ok || w.comms.control == nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, ErrNoIPC)
	}
	drv, err := cuda.Load()
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, err)
	}
	a, err := ipc.NewAllocator(ipc.Config{Rank: w.cfg.ID, Size: w.cfg.NumWorkers, Ordinal: cd.Ordinal(), Driver: drv,
		Exec:    func(fn func(uintptr) error) error { return cd.Do(func(s cuda.Stream) error { return fn(uintptr(s)) }) },
		Control: w.comms.control})
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, err)
	}
	w.ipc.alloc = a
	return a, nil
}

// allocIPC makes a zeroed tensor in IPC memory; every worker must make the
// same allocation at the same point (checked: ccl.ErrMismatch otherwise).
func (w *Worker) allocIPC(dt tensor.DType, shape tensor.Shape) (*tensor.Tensor, error) {
	a, err := w.ensureIPC()
	if err != nil {
		return nil, err
	}
	n, err := shape.NumElements()
	if err != nil {
		return nil, err
	}
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor: invalid dtype %v", dt)
	}
	b, err := a.Alloc(w.ctx, n*int64(dt.Size()))
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, err)
	}
	st := tensor.NewDeviceStorage(w.cfg.Device, ScopeIPC, device.Wrap(b.Data[w.cfg.ID], max(b.Size, 1), w.cfg.Device.ID))
	t, err := tensor.View(st, 0, dt, shape)
	if err != nil {
		a.Free(b)
		return nil, err
	}
	runtime.AddCleanup(st, func(b *ipc.Buffer) { a.Free(b) }, b)
	return t, nil
}

// ipcNames are a custom all-reduce's trace strings: its span's backend
// and its GPU timeline entry.
type ipcNames struct{ backend, gpu string }

// ipcNamesOf holds them per strategy, made once: the trace finds a span's
// site again by the identity of its strings (trace.SiteCache), so names
// concatenated at every call made a new site every call, an allocation
// and its text written into the flight recorder's ring.
var ipcNamesOf = func() map[ipc.Strategy]ipcNames {
	m := map[ipc.Strategy]ipcNames{}
	for _, s := range []ipc.Strategy{ipc.Auto, ipc.OneShot, ipc.TwoShot, ipc.NCCL} {
		m[s] = makeIPCNames(s)
	}
	return m
}()

func makeIPCNames(s ipc.Strategy) ipcNames {
	return ipcNames{"ipc/" + s.String(), "allreduce ipc/" + s.String()}
}

func ipcTraceNames(s ipc.Strategy) ipcNames {
	if n, ok := ipcNamesOf[s]; ok {
		return n
	}
	return makeIPCNames(s)
}

// CustomAllReduce runs the IPC all-reduce (package ccl/ipc) of send into
// recv over every worker: strategy is auto, oneshot, twoshot or nccl; op
// is sum, min or max (others go to NCCL under auto, and are an error for
// oneshot/twoshot).
func (w *Worker) CustomAllReduce(send, recv *tensor.Tensor, op, strategy string) error {
	o, err := reduce.ParseOp(op)
	if err != nil {
		return fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
	}
	s, err := ipc.ParseStrategy(strategy)
	if err != nil {
		return err
	}
	ar, err := w.ensureAllReducer()
	if err != nil {
		return err
	}
	names := ipcTraceNames(s)
	span := w.BeginCollective("allreduce", "ipc", names.backend, nbytes(send))
	g := w.gpuBegin()
	err = ar.AllReduce(w.ctx, send, recv, o, s)
	w.gpuEnd(g, names.gpu, nbytes(send))
	span.End(err)
	return err
}

// LastStrategy is the strategy the worker's latest custom all-reduce ran
// ("" before the first).
func (w *Worker) LastStrategy() string {
	if w.ipc.ar != nil {
		return w.ipc.ar.Last().String()
	}
	return ""
}

func (w *Worker) ensureAllReducer() (*ipc.AllReducer, error) {
	if w.ipc.ar != nil {
		return w.ipc.ar, nil
	}
	a, err := w.ensureIPC()
	if err != nil {
		return nil, err
	}
	capturing := func() bool {
		c, ok := w.dev.(device.Capturer)
		return ok && c.Capturing()
	}
	ar, err := ipc.NewAllReducer(w.ctx, a, w.comms.global, ipc.Options{Capturing: capturing, AutoTable: w.cfg.IPCAutoTable, SkipChecks: w.cfg.SkipChecks,
		Activity: func(name string) func() { return registry.BeginActivity(w, name) }})
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, err)
	}
	w.commMu.Lock() // Abort reads it from another goroutine
	w.ipc.ar = ar
	w.commMu.Unlock()
	return ar, nil
}

// checkIPC reports a custom all-reduce that gave up waiting for its peers
// (after the device was synchronized).
func (w *Worker) checkIPC() error {
	var errs []error
	if w.ipc.ar != nil {
		errs = append(errs, w.ipc.ar.Check())
	}
	w.commMu.Lock()
	hooks := make([]registry.DeviceHook, 0, len(w.ipc.hooks))
	for _, h := range w.ipc.hooks {
		hooks = append(hooks, h)
	}
	w.commMu.Unlock()
	for _, h := range hooks {
		errs = append(errs, h.Check())
	}
	return errors.Join(errs...)
}

// ipcInUse refuses to replace the communicators while IPC tensors are
// alive: their memory would be freed under them.
func (w *Worker) ipcInUse() error {
	if w.ipc.alloc == nil {
		return nil
	}
	runtime.GC() // unreachable tensors return their memory in cleanups
	live := w.ipc.alloc.Stats().Live
	if w.ipc.ar != nil {
		live -= w.ipc.ar.Workspaces()
	}
	if live > 0 {
		return fmt.Errorf("worker %d: %d allocations in ipc_memory are still referenced; release them before calling InitCCL again", w.cfg.ID, live)
	}
	return nil
}

// closeIPC frees IPC memory; every worker does it at the same point
// (InitCCL again, or the end of the session).
func (w *Worker) closeIPC() {
	w.commMu.Lock() // Abort must not reach an all-reducer being closed
	ar := w.ipc.ar
	w.ipc.ar = nil
	hooks := w.ipc.hooks
	w.ipc.hooks = nil
	w.commMu.Unlock()
	for _, h := range hooks {
		h.Close()
	}
	if ar != nil {
		ar.Close()
	}
	if w.ipc.alloc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		w.ipc.alloc.Close(ctx)
		cancel()
	}
	w.ipc.alloc = nil
}

func init() {
	if err := Builtins.RegisterTyped("chorus.custom_allreduce", func(env registry.Env, send *tensor.Tensor, strategy string, op string, recv *tensor.Tensor) error {
		return registry.CustomAllReduce(env, send, recv, op, strategy)
	}); err != nil {
		panic(err)
	}
}

// PeerCopy queues, on this worker's stream, a copy of src (a tensor on
// this worker's GPU) into worker peer's instance of the IPC tensor dst
// (same number of bytes): a copy-engine transfer over NVLink or PCIe.
// It is how the benchmarks measure the link's bound.
func (w *Worker) PeerCopy(dst, src *tensor.Tensor, peer int) error {
	if peer < 0 || peer >= w.cfg.NumWorkers {
		return fmt.Errorf("%w: PeerCopy: peer %d of %d workers", registry.ErrBadArgs, peer, w.cfg.NumWorkers)
	}
	if dst.NumBytes() != src.NumBytes() {
		return fmt.Errorf("%w: PeerCopy: dst has %d bytes, src %d", registry.ErrBadArgs, dst.NumBytes(), src.NumBytes())
	}
	cd, ok := w.dev.(*device.CUDA)
	if !ok || w.ipc.alloc == nil {
		return fmt.Errorf("worker %d: PeerCopy: %w", w.cfg.ID, ErrNoIPC)
	}
	sb, err := w.deviceBuffer(src)
	if err != nil {
		return err
	}
	db, err := w.deviceBuffer(dst)
	if err != nil {
		return err
	}
	b, off, ok := w.ipc.alloc.Lookup(uint64(db.Ptr()) + uint64(dst.Offset()))
	if !ok {
		return fmt.Errorf("%w: PeerCopy: dst is not IPC memory (scope %q)", registry.ErrBadArgs, ScopeIPC)
	}
	to := cuda.DevicePtr(b.Data[peer] + uint64(off))
	from := cuda.DevicePtr(uint64(sb.Ptr()) + uint64(src.Offset()))
	drv, err := cuda.Load()
	if err != nil {
		return err
	}
	return cd.Do(func(s cuda.Stream) error { return drv.MemcpyDtoDAsync(to, from, src.NumBytes(), s) })
}

// IPCMemory returns the worker's IPC allocator and its host control
// communicator (made on first use after InitCCL with a GPU backend), for
// packages that run their own kernels on IPC memory.
func (w *Worker) IPCMemory() (*ipc.Allocator, ccl.Comm, error) {
	a, err := w.ensureIPC()
	if err != nil {
		return nil, nil, err
	}
	return a, w.comms.control, nil
}

// AddDeviceHook registers h (device work of another package on the
// worker's IPC memory: registry.DeviceHook) until remove is called.
func (w *Worker) AddDeviceHook(h registry.DeviceHook) (remove func(), err error) {
	w.commMu.Lock()
	defer w.commMu.Unlock()
	if w.ipc.hooks == nil {
		w.ipc.hooks = map[int]registry.DeviceHook{}
	}
	id := w.ipc.hookNext
	w.ipc.hookNext++
	w.ipc.hooks[id] = h
	return func() {
		w.commMu.Lock()
		delete(w.ipc.hooks, id)
		w.commMu.Unlock()
	}, nil
}
