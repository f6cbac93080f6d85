package gpuworker

import (
	"fmt"
	"runtime"
	"time"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/runtime/registry"
)

// Options tune Load.
type Options struct {
	Timeout time.Duration // a kernel's wait for a peer (0: gpuexec's 30 s)
	Force   bool          // run a plan the verifier rejects
}

// Executor is a plan loaded on one worker's GPU. Load is collective:
// every worker of the session loads the same plan at the same point of
// its command stream, and makes the same calls.
type Executor struct {
	X      *gpuexec.Executor
	remove func()
}

// Load makes the GPU executor of p on the worker env describes. A worker
// without a GPU fails with registry.ErrNoDevice, one without IPC memory
// (no InitCCL with a GPU backend) with registry.ErrNoIPC.
func Load(env registry.Env, p *plan.Plan, o Options) (*Executor, error) {
	cd, err := registry.CUDAOf(env)
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w: plans on GPUs need workers bound to GPUs (session DeviceIDs)", env.WorkerID(), registry.ErrNoDevice)
	}
	ipcm, err := registry.IPCOf(env)
	if err != nil {
		return nil, err
	}
	alloc, control, err := ipcm.IPCMemory()
	if err != nil {
		return nil, err
	}
	drv, err := cuda.Load()
	if err != nil {
		return nil, err
	}
	cfg := gpuexec.Config{Rank: env.WorkerID(), Size: env.NumWorkers(), Ordinal: cd.Ordinal(), Driver: drv,
		Exec:  func(fn func(uintptr) error) error { return cd.Do(func(s cuda.Stream) error { return fn(uintptr(s)) }) },
		Alloc: alloc, Control: control, Timeout: o.Timeout, Force: o.Force,
		Activity: func(name string) func() { return registry.BeginActivity(env, name) }}
	x, err := gpuexec.New(env.Context(), cfg, p)
	if err != nil {
		return nil, err
	}
	remove, err := ipcm.AddDeviceHook(x)
	if err != nil {
		x.Close()
		return nil, err
	}
	e := &Executor{X: x, remove: remove}
	// Dropped without Close (its register released): make its kernels and
	// calls stop; the worker closes it with its IPC memory (device hook).
	runtime.AddCleanup(e, func(x *gpuexec.Executor) { x.Abort() }, x)
	return e, nil
}

// Close unregisters the executor and frees it (after its stream drained).
// Closing twice is a no-op.
func (e *Executor) Close() error {
	if e.X == nil {
		return nil
	}
	e.remove()
	err := e.X.Close()
	e.X = nil
	return err
}
