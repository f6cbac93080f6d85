package vm

import (
	"context"
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Program is a module loaded on every worker of a session, seen from the
// controller.
type Program struct {
	s      *session.Session
	mod    *ir.Module
	handle *session.DRef // the *Module on every worker
	run    *session.DRef
	result *session.DRef
	// capture and replay are fetched at the first Capture.
	capture, replay *session.DRef
}

// Load verifies m (it must be device-planned: compile it with a pipeline
// that starts with plan-devices, such as Pipeline's), sends its text to
// every worker of s, and waits until every worker has parsed, verified
// and prepared it, so errors in the module are reported here. m is
// copied; later changes to it do not reach the workers. Plans that
// custom_allreduce calls name are resolved and checked here
// (compiler/vm/plans.Resolve: library algorithms for s's worker count,
// or plan files read here) and sent with the module; the workers load
// their GPU executors before Load returns.
func Load(ctx context.Context, s *session.Session, m *ir.Module) (*Program, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil module", ErrLoad)
	}
	if err := ir.VerifyDevices(m); err != nil {
		return nil, fmt.Errorf("%w: module @%s: the VM runs device-planned IR (run plan-devices first): %w", ErrLoad, m.Name, err)
	}
	p := &Program{s: s, mod: m.Clone()}
	var err error
	fail := func(err error) (*Program, error) {
		p.Release()
		return nil, fmt.Errorf("vm: load module @%s: %w", m.Name, err)
	}
	load, err := s.GetGlobalFunc(ctx, LoadFunc)
	if err != nil {
		return fail(err)
	}
	defer load.Release()
	if p.run, err = s.GetGlobalFunc(ctx, RunFunc); err != nil {
		return fail(err)
	}
	if p.result, err = s.GetGlobalFunc(ctx, ResultFunc); err != nil {
		return fail(err)
	}
	plans, err := planArgs(p.mod, s.NumWorkers())
	if err != nil {
		return fail(err)
	}
	if p.handle, err = s.CallPacked(load, append([]any{p.mod.String()}, plans...)...); err != nil {
		return fail(err)
	}
	if err := s.Sync(ctx); err != nil {
		return fail(err)
	}
	return p, nil
}

// Module is the module the workers run (do not modify it).
func (p *Program) Module() *ir.Module { return p.mod }

// Call runs function name on every worker with args, which must be
// DRefs (one per parameter: tensors of the parameter's dtype and shape on
// its device, in registers of this session). Like Session.CallPacked it
// does not wait: the result is a DRef on every worker (the result value
// for one result; a list for several, see Result), and failures surface
// at the next sync or use of the result. ctx is checked before sending.
func (p *Program) Call(ctx context.Context, name string, args ...any) (*session.DRef, error) {
	if err := p.prepare(ctx, "call", name, args); err != nil {
		return nil, err
	}
	all := append([]any{p.handle, name}, args...)
	r, err := p.s.CallPacked(p.run, all...)
	if err != nil {
		return nil, fmt.Errorf("vm: call @%s: %w", name, err)
	}
	return r, nil
}

// prepare checks, on the controller, what Call and Capture send: the
// context, the program, the function and its arguments' count and kind.
func (p *Program) prepare(ctx context.Context, verb, name string, args []any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.handle == nil {
		return fmt.Errorf("vm: %s @%s: %w", verb, name, session.ErrReleased)
	}
	f := p.mod.Func(name)
	if f == nil {
		var names []string
		for _, g := range p.mod.Funcs {
			names = append(names, "@"+g.Name)
		}
		return fmt.Errorf("%w: %s @%s: module @%s has %v", ErrArgs, verb, name, p.mod.Name, names)
	}
	if len(args) != len(f.Params) {
		return fmt.Errorf("%w: %s @%s: %d arguments, the function takes %d", ErrArgs, verb, name, len(args), len(f.Params))
	}
	for i, a := range args {
		if _, ok := a.(*session.DRef); !ok {
			return fmt.Errorf("%w: %s @%s: argument %d (%%%s: %v) is a %T; pass a DRef (values live on the workers)", ErrArgs, verb, name, i, f.Params[i].Name, f.Params[i].Type, a)
		}
	}
	return nil
}

// Capture runs function name once on every worker and captures a second
// run as a CUDA graph (Module.Capture: GPU work only, nothing allocated
// inside). It returns a DRef to the graph on every worker; Replay runs it
// again. Asynchronous like Call: failures surface at the next sync.
func (p *Program) Capture(ctx context.Context, name string, args ...any) (*session.DRef, error) {
	if err := p.prepare(ctx, "capture", name, args); err != nil {
		return nil, err
	}
	if p.capture == nil {
		var err error
		if p.capture, err = p.s.GetGlobalFunc(ctx, CaptureFunc); err != nil {
			return nil, err
		}
		if p.replay, err = p.s.GetGlobalFunc(ctx, ReplayFunc); err != nil {
			return nil, err
		}
	}
	r, err := p.s.CallPacked(p.capture, append([]any{p.handle, name}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("vm: capture @%s: %w", name, err)
	}
	return r, nil
}

// Replay runs a graph made by Capture on every worker and returns a DRef
// to its result: the same tensors at every replay (a later replay
// overwrites them). Asynchronous like Call.
func (p *Program) Replay(ctx context.Context, graph *session.DRef) (*session.DRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.replay == nil {
		return nil, fmt.Errorf("%w: replay before any Capture", ErrArgs)
	}
	r, err := p.s.CallPacked(p.replay, graph)
	if err != nil {
		return nil, fmt.Errorf("vm: replay: %w", err)
	}
	return r, nil
}

// Result returns the i-th result of a call of a function with several
// results (asynchronously, like Call).
func (p *Program) Result(results *session.DRef, i int) (*session.DRef, error) {
	return p.s.CallPacked(p.result, results, i)
}

// Release drops the module on every worker (and the function handles).
// Calls already made are unaffected.
func (p *Program) Release() error {
	var errs []error
	for _, r := range []**session.DRef{&p.handle, &p.run, &p.result, &p.capture, &p.replay} {
		if *r != nil {
			errs = append(errs, (*r).Release())
			*r = nil
		}
	}
	return errors.Join(errs...)
}

// Pipeline is the compile pipeline for programs that the VM runs on
// workers whose device is dev:
//
//   - on a GPU (dev is cuda:N): passes.Default with virtual device cuda:0
//     (each worker's own GPU) and the given custom all-reduce strategy:
//     plan-devices, ipc-allreduce-rewrite, plan-memory,
//     lower-gpu-ipc-alloc-storage;
//   - on the host: plan-devices={cpu} then plan-memory, named "cpu". The
//     IPC rewrite is left out on purpose: IPC memory and the custom
//     all-reduce exist only on GPUs, so CPU programs keep allreduce (the
//     cpu collective backend) instead of failing at run time.
func Pipeline(dev tensor.Device, strategy string) (passes.Pipeline, error) {
	switch dev.Kind {
	case tensor.CUDA:
		vd, err := vdevice.New(vdevice.CUDA, 0, nil, "")
		if err != nil {
			return passes.Pipeline{}, err
		}
		if strategy == "" {
			strategy = "auto"
		}
		return passes.Default(vd, strategy), nil
	case tensor.CPU:
		vd, err := vdevice.New(vdevice.CPU, 0, nil, "")
		if err != nil {
			return passes.Pipeline{}, err
		}
		return passes.Pipeline{Name: "cpu", Passes: []passes.Pass{passes.PlanDevices(vd), passes.PlanMemory()}}, nil
	}
	return passes.Pipeline{}, fmt.Errorf("%w: no pipeline for device %v", ErrUnsupported, dev)
}
