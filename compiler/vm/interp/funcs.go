package interp

import (
	"fmt"

	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	registry.MustRegisterTyped(LoadFunc, func(env registry.Env, text string, plans ...any) (*Module, error) {
		ps, err := parsePlanArgs(plans)
		if err != nil {
			return nil, err
		}
		return loadText(env, text, ps)
	})
	registry.MustRegisterTyped(RunFunc, func(env registry.Env, m any, name string, args ...any) (any, error) {
		mod, ok := m.(*Module)
		if !ok || mod == nil {
			return nil, fmt.Errorf("%w: %s: first argument is a %T, not a module loaded by %s", ErrArgs, RunFunc, m, LoadFunc)
		}
		return mod.Run(env, name, args)
	})
	registry.MustRegisterTyped(CaptureFunc, func(env registry.Env, m any, name string, args ...any) (*Graph, error) {
		mod, ok := m.(*Module)
		if !ok || mod == nil {
			return nil, fmt.Errorf("%w: %s: first argument is a %T, not a module loaded by %s", ErrArgs, CaptureFunc, m, LoadFunc)
		}
		return mod.Capture(env, name, args)
	})
	registry.MustRegisterTyped(ReplayFunc, func(v any) (any, error) {
		g, ok := v.(*Graph)
		if !ok || g == nil {
			return nil, fmt.Errorf("%w: %s: argument is a %T, not a graph made by %s", ErrArgs, ReplayFunc, v, CaptureFunc)
		}
		return g.Replay()
	})
	registry.MustRegisterTyped(ResultFunc, func(results any, i int) (any, error) {
		rs, ok := results.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: %s: %T is not a list of results", ErrArgs, ResultFunc, results)
		}
		if i < 0 || i >= len(rs) {
			return nil, fmt.Errorf("%w: %s: index %d of %d results", ErrArgs, ResultFunc, i, len(rs))
		}
		return rs[i], nil
	})
	registry.MustRegisterTyped(passes.IPCAllocStorageFunc, ipcAllocStorage)
}

// ipcAllocStorage is the runtime's IPC allocator for
// passes.LowerGPUIPCAllocStorage: nbytes of "ipc_memory" on the worker's
// device (collective: every worker allocates the same sizes in the same
// order). CPU workers have no IPC memory and fail.
func ipcAllocStorage(env registry.Env, nbytes, alignment int64) (*tensor.Storage, error) {
	if nbytes < 0 || alignment <= 0 || alignment&(alignment-1) != 0 {
		return nil, fmt.Errorf("%w: %s(%d, %d): want nbytes >= 0 and a power-of-two alignment", ErrArgs, passes.IPCAllocStorageFunc, nbytes, alignment)
	}
	if env.Device().Kind != tensor.CUDA {
		return nil, fmt.Errorf("%w: %s on worker %d (%v): ipc_memory needs GPU workers", ErrUnsupported, passes.IPCAllocStorageFunc, env.WorkerID(), env.Device())
	}
	t, err := env.Alloc(tensor.Uint8, tensor.Shape{nbytes}, env.Device(), registry.ScopeIPC)
	if err != nil {
		return nil, err
	}
	if err := checkAlign(t.Storage(), alignment); err != nil {
		return nil, err
	}
	return t.Storage(), nil
}
