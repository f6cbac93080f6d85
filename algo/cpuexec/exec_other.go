//go:build !linux

package cpuexec

import (
	"context"
	"errors"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// ErrUnsupported: the CPU executor needs Linux (shared memory and futexes).
var ErrUnsupported = errors.New("cpuexec: the CPU executor needs Linux")

// Executor is unavailable on this platform.
type Executor struct{}

// Join fails on this platform.
func Join(ctx context.Context, cfg ccl.Config, p *plan.Plan) (*Executor, error) {
	return nil, ErrUnsupported
}

func (x *Executor) Rank() int        { return 0 }
func (x *Executor) Size() int        { return 0 }
func (x *Executor) Plan() *plan.Plan { return nil }
func (x *Executor) Close() error     { return nil }

func (x *Executor) Run(ctx context.Context, in, out *tensor.Tensor, op reduce.Op) error {
	return ErrUnsupported
}
