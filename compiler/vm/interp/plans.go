package interp

import (
	"context"
	"fmt"

	"github.com/chorus-rt/chorus/algo/gpuworker"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// A custom_allreduce whose strategy is a string names an execution plan
// (package compiler/vm/plans). The controller resolves and checks every
// plan at Load and sends the plans with the module text (LoadFunc's
// trailing (name, plan JSON) pairs); each worker then loads one GPU
// executor per plan (algo/gpuworker, collective, in the order the plans
// first appear in the module) before the module is ready, and every
// custom_allreduce naming the plan runs it (sum).

// parsePlanArgs decodes LoadFunc's trailing (name, plan JSON) pairs
// (compiler/vm.Load encodes them).
func parsePlanArgs(args []any) (map[string]*plan.Plan, error) {
	if len(args)%2 != 0 {
		return nil, fmt.Errorf("%w: %s: plans come as (name, plan JSON) pairs, got %d values", ErrArgs, LoadFunc, len(args))
	}
	out := map[string]*plan.Plan{}
	for i := 0; i < len(args); i += 2 {
		spec, ok1 := args[i].(string)
		raw, ok2 := args[i+1].([]byte)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: %s: plan pair %d is (%T, %T), want (string, []byte)", ErrArgs, LoadFunc, i/2, args[i], args[i+1])
		}
		p, err := plan.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: custom_allreduce plan %q: %w", ErrLoad, spec, err)
		}
		out[spec] = p
	}
	return out, nil
}

// planRunner runs one plan on a worker: the GPU executor, or a fake in
// tests.
type planRunner interface {
	Run(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error
	Close() error
}

// newPlanRunner loads p on the worker for tensors on dev (collective).
// Tests replace it with a fake that runs on CPU workers.
var newPlanRunner = func(env registry.Env, p *plan.Plan, dev tensor.Device) (planRunner, error) {
	if dev.Kind != tensor.CUDA {
		return nil, fmt.Errorf("%w: custom_allreduce of host memory: plans run on GPUs (algo/gpuexec); compile CPU programs without ipc-allreduce-rewrite (vm.Pipeline does)", ErrUnsupported)
	}
	e, err := gpuworker.Load(env, p, gpuworker.Options{})
	if err != nil {
		return nil, err
	}
	return gpuRunner{e}, nil
}

type gpuRunner struct{ e *gpuworker.Executor }

func (g gpuRunner) Run(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	if g.e.X == nil {
		return fmt.Errorf("%w: the plan's executor was closed", ErrUnsupported)
	}
	return g.e.X.Run(ctx, send, recv, op)
}

func (g gpuRunner) Close() error { return g.e.Close() }
