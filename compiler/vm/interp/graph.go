package interp

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
)

// Graph is one function of a module captured as a CUDA graph on one
// worker (the value "chorus.vm.capture" leaves in a register). Replay runs
// the function's device work again, on the same arguments and into the
// same result tensors, without any of the VM's host work: no operand
// decoding, no argument checks, no launches one by one.
type Graph struct {
	mu     sync.Mutex
	g      device.Graph
	result any
	// keep holds everything the graph reads or writes (arguments,
	// results), so none of it is freed while the graph lives.
	keep []any
}

// Capture runs function name once as Run does (the warm-up makes the
// workspace, loads kernels and makes the custom all-reducer's
// workspaces: nothing may be allocated inside a capture), then runs it
// again inside registry.Capture, reusing the warm-up's result allocations.
// The graph computes into those results at every replay; the warm-up's
// result is the value Replay returns. Functions whose work runs on the
// host (CPU tensors, call_packed, device_copy) cannot be captured and fail
// with ErrUnsupported, rather than being replayed without that work.
//
// As with Run, every worker must capture the same functions in the same
// order, and replay them the same number of times in the same order
// relative to its other collectives.
func (m *Module) Capture(env registry.Env, name string, args []any) (*Graph, error) {
	rec := &runMode{record: map[int]any{}}
	result, err := m.run(env, name, args, rec)
	if err != nil {
		return nil, err
	}
	g, err := registry.Capture(env, func() error {
		_, err := m.run(env, name, args, &runMode{reuse: rec.record})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("vm: worker %d: capture @%s: %w", env.WorkerID(), name, err)
	}
	keep := append([]any{result}, args...)
	for _, v := range rec.record {
		keep = append(keep, v)
	}
	gr := &Graph{g: g, result: result, keep: keep}
	// A graph dropped from its register is destroyed with it.
	runtime.AddCleanup(gr, func(dg device.Graph) { dg.Close() }, g)
	return gr, nil
}

// Replay queues one run of the graph on the worker's stream and returns
// the function's result (the same tensors every time: a later replay
// overwrites them).
func (g *Graph) Replay() (any, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.g == nil {
		return nil, fmt.Errorf("vm: replay of a released graph: %w", device.ErrClosed)
	}
	if err := g.g.Launch(); err != nil {
		return nil, fmt.Errorf("vm: replay: %w", err)
	}
	return g.result, nil
}

// Release destroys the graph (replays already queued still run).
func (g *Graph) Release() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.g == nil {
		return nil
	}
	err := g.g.Close()
	g.g, g.keep = nil, nil
	return err
}
