package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/gpuworker"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// A custom_allreduce whose strategy is a string names an execution plan
// (algo/plan): a library algorithm (algo/library, algo/handplan), built
// for the session's worker count, or else a plan file. The controller
// resolves and checks every plan at Load (ResolvePlan) and sends the
// plans with the module text, so workers never read files; each worker
// then loads one GPU executor per plan (algo/gpuworker, collective, in
// the order the plans first appear in the module) before the module is
// ready, and every custom_allreduce naming the plan runs it (sum).

// ResolvePlan returns the all-reduce plan spec names for ranks workers:
// the library algorithm of that name built for ranks, or else the plan
// file at that path. The plan must be an allreduce of ranks ranks that
// the GPU executor can run (gpuexec.CheckPlan, verifier included).
// Errors wrap ErrLoad.
func ResolvePlan(spec string, ranks int) (*plan.Plan, error) {
	var p *plan.Plan
	var err error
	switch {
	case slices.Contains(library.Names(), spec):
		p, err = library.Build(spec, ranks, library.Options{})
	case slices.Contains(handplan.Names(), spec):
		p, err = handplan.Build(spec, ranks, handplan.Options{})
	default:
		var raw []byte
		if raw, err = os.ReadFile(spec); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				err = fmt.Errorf("neither a library algorithm (chorus plan build --list) nor a plan file: %w", err)
			}
			break
		}
		p, err = plan.Parse(raw)
	}
	if err == nil {
		err = checkPlan(p, ranks)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: custom_allreduce plan %q: %w", ErrLoad, spec, err)
	}
	return p, nil
}

func checkPlan(p *plan.Plan, ranks int) error {
	if p.Collective != plan.AllReduce {
		return fmt.Errorf("plan %q is a %s, custom_allreduce needs an allreduce", p.Name, p.Collective)
	}
	return gpuexec.CheckPlan(p, ranks, false)
}

// modulePlans lists the plans a module's custom_allreduce calls name, in
// the order they first appear.
func modulePlans(m *ir.Module) []string {
	var specs []string
	for _, f := range m.Funcs {
		for _, b := range f.Bindings() {
			if s, ok := ir.CustomAllreducePlan(b); ok && !slices.Contains(specs, s) {
				specs = append(specs, s)
			}
		}
	}
	return specs
}

// planArgs resolves the module's plans on the controller for LoadFunc:
// (spec, plan JSON) pairs.
func planArgs(m *ir.Module, ranks int) ([]any, error) {
	var out []any
	for _, spec := range modulePlans(m) {
		p, err := ResolvePlan(spec, ranks)
		if err != nil {
			return nil, err
		}
		raw, err := p.Marshal()
		if err != nil {
			return nil, err
		}
		out = append(out, spec, raw)
	}
	return out, nil
}

// parsePlanArgs is planArgs' inverse on a worker.
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
