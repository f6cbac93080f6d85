package plans

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/compiler/ir"
)

// Resolve returns the all-reduce plan spec names for ranks workers: the
// library algorithm of that name built for ranks, or else the plan file
// at that path. The plan must be an allreduce of ranks ranks that the
// GPU executor can run (gpuexec.CheckPlan, verifier included). Errors
// name the plan ("custom_allreduce plan %q: ..."); the VM wraps them in
// its ErrLoad.
func Resolve(spec string, ranks int) (*plan.Plan, error) {
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
		err = check(p, ranks)
	}
	if err != nil {
		return nil, fmt.Errorf("custom_allreduce plan %q: %w", spec, err)
	}
	return p, nil
}

func check(p *plan.Plan, ranks int) error {
	if p.Collective != plan.AllReduce {
		return fmt.Errorf("plan %q is a %s, custom_allreduce needs an allreduce", p.Name, p.Collective)
	}
	return gpuexec.CheckPlan(p, ranks, false)
}

// Specs lists the plans a module's custom_allreduce calls name, in the
// order they first appear (the order every worker loads their
// executors in).
func Specs(m *ir.Module) []string {
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
