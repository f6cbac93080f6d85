package worker

import (
	"fmt"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// Builtins holds the functions every worker offers whatever registry it
// was given. Names share the "chorus." prefix so user functions cannot
// shadow them by accident.
var Builtins = registry.New()

func lookup(r *registry.Registry, name string) (registry.Func, error) {
	if f, err := Builtins.Lookup(name); err == nil {
		return f, nil
	}
	return r.Lookup(name)
}

func init() {
	must := func(name string, fn any) {
		if err := Builtins.RegisterTyped(name, fn); err != nil {
			panic(err)
		}
	}
	must("chorus.worker_id", func(env registry.Env) int64 { return int64(env.WorkerID()) })
	must("chorus.worker_rank", func(env registry.Env) int64 { return int64(env.WorkerRank()) })
	must("chorus.num_workers", func(env registry.Env) int64 { return int64(env.NumWorkers()) })
	must("chorus.num_groups", func(env registry.Env) int64 { return int64(env.NumGroups()) })
	must("chorus.group_id", func(env registry.Env) int64 { return int64(env.GroupID()) })
	must("chorus.group_size", func(env registry.Env) int64 { return int64(env.GroupSize()) })
	must("chorus.device", func(env registry.Env) tensor.Device { return env.Device() })
	must("chorus.empty", empty)
	must("chorus.noop", func() {})
}

// empty(shape, dtype, device, worker0_only, in_group) allocates a zeroed
// tensor. device nil means the worker's own device. With worker0_only only
// worker 0 allocates (worker 0 of each group when in_group is also set);
// the others store nil, which is what scatter/gather roots expect.
func empty(env registry.Env, shape tensor.Shape, dtype tensor.DType, dev any, worker0Only, inGroup bool) (*tensor.Tensor, error) {
	d := env.Device()
	switch x := dev.(type) {
	case nil:
	case tensor.Device:
		d = x
	case string:
		p, err := tensor.ParseDevice(x)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
		}
		d = p
	default:
		return nil, fmt.Errorf("%w: device argument is a %T, want a device, a string or nil", registry.ErrBadArgs, dev)
	}
	if worker0Only {
		rank := env.WorkerID()
		if inGroup {
			rank = env.WorkerRank()
		}
		if rank != 0 {
			return nil, nil
		}
	}
	return env.Alloc(dtype, shape, d, tensor.ScopeGlobal)
}
