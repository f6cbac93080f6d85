package run

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/verify"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Names of the worker functions this package registers in registry.Global.
const (
	FuncLoad  = "chorus.plan.load"  // (plan_json []byte, id []byte, timeout_ms int) -> handle
	FuncRun   = "chorus.plan.run"   // (handle, send, recv *tensor.Tensor, op string)
	FuncClose = "chorus.plan.close" // (handle)
	FuncBench = "chorus.plan.bench" // (handle, dtype, in_count, out_count, iters, warmup) -> float64 [time_us, wrong]
)

// ErrBadHandle: a plan function got something that is not a loaded plan.
var ErrBadHandle = errors.New("run: not a loaded plan (use the result of " + FuncLoad + ")")

// handle is what a worker register holds for a loaded plan. An
// unreachable handle closes its executor.
type handle struct {
	x *cpuexec.Executor

	mvOnce sync.Once
	mv     *verify.Movement
	mvErr  error
}

// movement is the plan's data movement, computed by the verifier on first
// use (only collectives without a fixed result need it).
func (h *handle) movement() (*verify.Movement, error) {
	h.mvOnce.Do(func() { h.mv, h.mvErr = movementOf(h.x.Plan()) })
	return h.mv, h.mvErr
}

func newHandle(x *cpuexec.Executor) *handle {
	h := &handle{x: x}
	runtime.AddCleanup(h, func(x *cpuexec.Executor) { x.Close() }, x)
	return h
}

func executor(v any) (*cpuexec.Executor, error) {
	h, ok := v.(*handle)
	if !ok || h == nil {
		return nil, fmt.Errorf("%w: got %T", ErrBadHandle, v)
	}
	if h.x == nil {
		return nil, fmt.Errorf("%w: the plan was closed", ErrBadHandle)
	}
	return h.x, nil
}

func init() {
	registry.MustRegisterTyped(FuncLoad, func(env registry.Env, planJSON, id []byte, timeoutMs int64) (any, error) {
		p, err := plan.Parse(planJSON)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
		}
		cfg := ccl.Config{ID: id, Rank: env.WorkerID(), Size: env.NumWorkers(), Timeout: time.Duration(timeoutMs) * time.Millisecond}
		x, err := cpuexec.Join(env.Context(), cfg, p)
		if err != nil {
			return nil, err
		}
		return newHandle(x), nil
	})
	registry.MustRegisterTyped(FuncRun, func(env registry.Env, h any, send, recv *tensor.Tensor, op string) error {
		x, err := executor(h)
		if err != nil {
			return err
		}
		o, err := reduce.ParseOp(op)
		if err != nil {
			return fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
		}
		span := traceRun(env, x.Plan(), "plan/", send)
		err = x.Run(env.Context(), send, recv, o)
		span.End(err)
		return err
	})
	registry.MustRegisterTyped(FuncClose, func(h any) error {
		hd, ok := h.(*handle)
		if !ok || hd == nil {
			return fmt.Errorf("%w: got %T", ErrBadHandle, h)
		}
		if hd.x == nil {
			return nil
		}
		err := hd.x.Close()
		hd.x = nil
		return err
	})
	registry.MustRegisterTyped(FuncBench, benchWorker)
}

// traceRun records a run of plan p as a collective of the worker's trace
// (numbered per plan name, so runs match across ranks).
func traceRun(env registry.Env, p *plan.Plan, kind string, send *tensor.Tensor) registry.CollectiveSpan {
	var n int64
	if send != nil {
		n = send.NumBytes()
	}
	return registry.BeginCollective(env, string(p.Collective), "plan "+p.Name, kind+p.Name, n)
}

// Collective is a plan loaded on every worker of a session: a collective
// that runs on the CPU executor.
type Collective struct{ loaded }

// loaded is a plan's executors on every worker (CPU or GPU): the
// register holding them and the worker functions that run and close
// them.
type loaded struct {
	s      *session.Session
	p      *plan.Plan
	h      *session.DRef // the per-worker handles
	run    *session.DRef
	close  *session.DRef
	closed bool
}

// load finds the worker functions fns (load, run, close), calls load
// with args on every worker and waits for all of them; what names the
// caller in errors.
func (c *loaded) load(ctx context.Context, what string, fns [3]string, args ...any) error {
	var load *session.DRef
	var err error
	for i, ref := range []**session.DRef{&load, &c.run, &c.close} {
		if *ref, err = c.s.GetGlobalFunc(ctx, fns[i]); err != nil {
			c.release()
			return fmt.Errorf("run: %s: %w", what, err)
		}
	}
	defer load.Release()
	if c.h, err = c.s.CallPacked(load, args...); err != nil {
		c.release()
		return fmt.Errorf("run: %s: %w", what, err)
	}
	if err := c.s.Sync(ctx); err != nil {
		c.release()
		return fmt.Errorf("run: %s plan %q: %w", what, c.p.Name, err)
	}
	return nil
}

// Load makes plan p a collective of s: the controller makes an id (as
// InitCCL does), every worker joins the CPU executor with it as rank
// WorkerID of NumWorkers, and Load returns once all have joined (or with
// the workers' errors). timeout bounds every later wait of a worker for
// another (0: 60 s). The plan must have NumWorkers ranks.
func Load(ctx context.Context, s *session.Session, p *plan.Plan, timeout time.Duration) (*Collective, error) {
	if p == nil {
		return nil, fmt.Errorf("run: Load: nil plan")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("run: Load: plan %q: %w", p.Name, err)
	}
	if p.NumRanks() != s.NumWorkers() {
		return nil, fmt.Errorf("run: Load: plan %q has %d ranks, the session %d workers", p.Name, p.NumRanks(), s.NumWorkers())
	}
	raw, err := p.Marshal()
	if err != nil {
		return nil, fmt.Errorf("run: Load: %w", err)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	c := &Collective{loaded{s: s, p: p}}
	if err := c.load(ctx, "Load", [3]string{FuncLoad, FuncRun, FuncClose}, raw, id, timeout.Milliseconds()); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *loaded) release() {
	for _, d := range []*session.DRef{c.h, c.run, c.close} {
		if d != nil {
			d.Release()
		}
	}
}

// Plan is the loaded plan.
func (c *loaded) Plan() *plan.Plan { return c.p }

// Handle is the register holding every worker's executor (for worker
// functions of FuncRun's and FuncBench's signatures).
func (c *loaded) Handle() *session.DRef { return c.h }

// Run runs the plan on every worker with send and recv (tensors in
// registers, host memory); op is the reduction (sum, min, max). Like
// CallPacked it is asynchronous: failures (bad sizes, mismatches between
// workers, timeouts naming rank, thread block and op) surface at the next
// Sync.
func (c *loaded) Run(ctx context.Context, send, recv *session.DRef, op reduce.Op) error {
	if c.closed {
		return fmt.Errorf("run: plan %q: Run after Close", c.p.Name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.s.CallPackedDiscard(c.run, c.h, send, recv, op.String())
}

// Close releases every worker's executor (asynchronously, like Run; on
// GPUs the workers synchronize their devices first).
func (c *loaded) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.s.CallPackedDiscard(c.close, c.h)
	c.release()
	return err
}
