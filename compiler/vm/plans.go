package vm

import (
	"fmt"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vm/plans"
)

// planArgs resolves the module's plans on the controller for LoadFunc:
// (spec, plan JSON) pairs.
func planArgs(m *ir.Module, ranks int) ([]any, error) {
	var out []any
	for _, spec := range plans.Specs(m) {
		p, err := plans.Resolve(spec, ranks)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLoad, err)
		}
		raw, err := p.Marshal()
		if err != nil {
			return nil, err
		}
		out = append(out, spec, raw)
	}
	return out, nil
}
