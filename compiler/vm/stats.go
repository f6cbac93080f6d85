package vm

import (
	"context"
	"fmt"
	"time"

	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// RunStats is the host side of a loaded module's runs on one worker
// since the last RunStats (RunStatsFunc).
type RunStats struct {
	Calls int64         // Run and Capture calls
	Host  time.Duration // from each call's start to its return: interpreting and issuing
	Ops   int64         // instructions executed
	Fused int           // fused instructions made at load (fuse.go)
	Fixed int           // instructions whose early operands (weights; an attention's positions and cache rows) no other instruction writes (interp/fixed.go): read before the PDL wait
}

// RunStats fetches and resets every worker's RunStats of p's module (it
// waits for the work sent before it).
func (p *Program) RunStats(ctx context.Context) ([]RunStats, error) {
	if p.handle == nil {
		return nil, fmt.Errorf("vm: run stats: %w", session.ErrReleased)
	}
	f, err := p.s.GetGlobalFunc(ctx, RunStatsFunc)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	r, err := p.s.CallPacked(f, p.handle)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	out := make([]RunStats, p.s.NumWorkers())
	for w := range out {
		v, err := p.s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			return nil, err
		}
		t, ok := v.(*tensor.Tensor)
		if !ok {
			return nil, fmt.Errorf("vm: run stats of worker %d: got a %T", w, v)
		}
		d, err := tensor.ToFloat64(t)
		if err != nil || len(d) != 5 {
			return nil, fmt.Errorf("vm: run stats of worker %d: %v (%v)", w, d, err)
		}
		out[w] = RunStats{Calls: int64(d[0]), Host: time.Duration(d[1] * 1e9), Ops: int64(d[2]), Fused: int(d[3]), Fixed: int(d[4])}
	}
	return out, nil
}
