package worker

import (
	"fmt"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
)

// Built-ins that capture any worker function's device work as a CUDA
// graph and replay it, so a controller can use graphs without writing a
// worker function for it (the compiler's VM has its own, which also
// handles allocation: compiler/vm).
const (
	// GraphCaptureFunc(name, args...) -> graph: one call of function name
	// inside Capture. The function must not allocate, sync or read the
	// device back (device.ErrCapturing); make one ordinary call first so
	// workspaces exist (the custom all-reducer's, for instance).
	GraphCaptureFunc = "chorus.graph.capture"
	// GraphLaunchFunc(graph) replays it on the worker's stream.
	GraphLaunchFunc = "chorus.graph.launch"
)

// capturedCall is the value GraphCaptureFunc leaves in a register: the
// graph, and the arguments and result of the captured call, kept alive
// while the graph is (it holds their addresses).
type capturedCall struct {
	g    device.Graph
	keep []any
}

func init() {
	if err := Builtins.Register(GraphCaptureFunc, captureCall); err != nil {
		panic(err)
	}
	if err := Builtins.RegisterTyped(GraphLaunchFunc, func(v any) error {
		c, ok := v.(*capturedCall)
		if !ok || c == nil {
			return fmt.Errorf("%w: %s: argument is a %T, not a graph made by %s", registry.ErrBadArgs, GraphLaunchFunc, v, GraphCaptureFunc)
		}
		return c.g.Launch()
	}); err != nil {
		panic(err)
	}
}

func captureCall(env registry.Env, args []any) (any, error) {
	w, ok := env.(*Worker)
	if !ok {
		return nil, fmt.Errorf("%s needs a chorus worker, got %T", GraphCaptureFunc, env)
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("%w: %s(name, args...): no function name", registry.ErrBadArgs, GraphCaptureFunc)
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("%w: %s: the first argument is a %T, not a function name", registry.ErrBadArgs, GraphCaptureFunc, args[0])
	}
	if name == GraphCaptureFunc || name == GraphLaunchFunc {
		return nil, fmt.Errorf("%w: %s of %s", registry.ErrBadArgs, GraphCaptureFunc, name)
	}
	f, err := lookup(w.cfg.Registry, name)
	if err != nil {
		return nil, err
	}
	var result any
	g, err := w.Capture(func() error {
		var err error
		result, err = f(env, args[1:])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("worker %d: %s %q: %w", w.cfg.ID, GraphCaptureFunc, name, err)
	}
	return &capturedCall{g: g, keep: append([]any{result}, args[1:]...)}, nil
}
