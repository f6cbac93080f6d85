package passes

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vdevice"
)

// Sentinel errors that callers test with errors.Is.
var (
	// ErrInvalidIR: a pipeline's input, or a pass's output, fails ir.Verify.
	ErrInvalidIR = errors.New("passes: invalid IR")
	// ErrDeviceConflict: device planning found constraints no copy can
	// satisfy (an alias or an explicit device_copy that disagrees).
	ErrDeviceConflict = errors.New("passes: device conflict")
	// ErrBadOption: a pass option or pipeline spec that makes no sense.
	ErrBadOption = errors.New("passes: bad option")
)

// Pass is a named module transformation. Run must not modify its input:
// passes clone the module and return the rewritten clone.
type Pass struct {
	Name string
	Run  func(*ir.Module) (*ir.Module, error)
}

// Pipeline is a named sequence of passes.
type Pipeline struct {
	Name   string
	Passes []Pass
}

// RunOptions control a pipeline run.
type RunOptions struct {
	// PrintAfterEach, when set, receives the module's text after every
	// pass, each preceded by a line "// after pass NAME".
	PrintAfterEach io.Writer
	// SkipVerify turns off ir.Verify of the input and after every pass.
	SkipVerify bool
}

// Run verifies m and applies the passes in order, verifying after each
// one so that a broken pass is named at once: with ir.Verify, and with
// ir.VerifyDevices once PlanDevices has run. m itself is not modified.
func (p Pipeline) Run(m *ir.Module, opts RunOptions) (*ir.Module, error) {
	planned := false
	if m == nil {
		return nil, fmt.Errorf("pipeline %s: %w: nil module", p.Name, ErrInvalidIR)
	}
	if !opts.SkipVerify {
		if err := ir.Verify(m); err != nil {
			return nil, fmt.Errorf("pipeline %s: input: %w: %w", p.Name, ErrInvalidIR, err)
		}
	}
	for _, pass := range p.Passes {
		out, err := pass.Run(m)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: pass %s: %w", p.Name, pass.Name, err)
		}
		planned = planned || pass.Name == planDevicesName
		verify := ir.Verify
		if planned {
			verify = ir.VerifyDevices
		}
		if !opts.SkipVerify {
			if err := verify(out); err != nil {
				return nil, fmt.Errorf("pipeline %s: pass %s: output: %w: %w", p.Name, pass.Name, ErrInvalidIR, err)
			}
		}
		if opts.PrintAfterEach != nil {
			if _, err := io.WriteString(opts.PrintAfterEach, "// after pass "+pass.Name+"\n"); err != nil {
				return nil, fmt.Errorf("pipeline %s: print: %w", p.Name, err)
			}
			if err := ir.Print(opts.PrintAfterEach, out); err != nil {
				return nil, fmt.Errorf("pipeline %s: print: %w", p.Name, err)
			}
		}
		m = out
	}
	return m, nil
}

// Default returns the standard pipeline, named "default": PlanDevices with
// the given default device, IPCAllreduceRewrite(strategy), PlanMemory and
// LowerGPUIPCAllocStorage, in that order (the order compiler.md gives:
// the rewrite must see plain allocations, and planning must know scopes
// before the IPC allocations are lowered to calls).
func Default(dev vdevice.VirtualDevice, strategy string) Pipeline {
	return Pipeline{Name: "default", Passes: []Pass{
		PlanDevices(dev),
		IPCAllreduceRewrite(strategy),
		PlanMemory(),
		LowerGPUIPCAllocStorage(),
	}}
}

// PassByName returns a pass from its spec: a name, optionally "=ARG":
//
//	plan-devices[=VDEVICE]           default device, e.g. plan-devices={cuda:0}
//	ipc-allreduce-rewrite[=STRATEGY] auto (default), one_shot, two_shot, or plan:NAME (a plan)
//	plan-memory
//	lower-gpu-ipc-alloc-storage
func PassByName(spec string) (Pass, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(spec), "=")
	switch name {
	case planDevicesName:
		dev := vdevice.Unconstrained
		if hasArg {
			v, err := ir.ParseVirtualDevice(arg)
			if err != nil {
				return Pass{}, fmt.Errorf("%w: %s: %w", ErrBadOption, name, err)
			}
			dev = v
		}
		return PlanDevices(dev), nil
	case ipcRewriteName:
		if !hasArg {
			arg = "auto"
		}
		return IPCAllreduceRewrite(arg), nil
	case planMemoryName, lowerIPCName:
		if hasArg {
			return Pass{}, fmt.Errorf("%w: %s takes no argument", ErrBadOption, name)
		}
		if name == planMemoryName {
			return PlanMemory(), nil
		}
		return LowerGPUIPCAllocStorage(), nil
	}
	return Pass{}, fmt.Errorf("%w: unknown pass %q (known: %s, %s, %s, %s)", ErrBadOption, name, planDevicesName, ipcRewriteName, planMemoryName, lowerIPCName)
}

// ParsePipeline builds a pipeline from pass specs separated by commas at
// the top level (commas inside braces or parentheses belong to an
// argument), for example
//
//	plan-devices={cuda:0},ipc-allreduce-rewrite=one_shot,plan-memory
func ParsePipeline(name, spec string) (Pipeline, error) {
	p := Pipeline{Name: name}
	depth, start := 0, 0
	for i := 0; i <= len(spec); i++ {
		if i < len(spec) {
			switch spec[i] {
			case '{', '(':
				depth++
				continue
			case '}', ')':
				depth--
				continue
			case ',':
				if depth != 0 {
					continue
				}
			default:
				continue
			}
		}
		part := strings.TrimSpace(spec[start:i])
		start = i + 1
		if part == "" {
			continue
		}
		pass, err := PassByName(part)
		if err != nil {
			return Pipeline{}, fmt.Errorf("pipeline %s: %w", name, err)
		}
		p.Passes = append(p.Passes, pass)
	}
	if depth != 0 {
		return Pipeline{}, fmt.Errorf("pipeline %s: %w: unbalanced brackets in %q", name, ErrBadOption, spec)
	}
	return p, nil
}

// forEachFunc verifies m (passes assume well-formed input and must not
// panic on anything else), clones it and applies fn to every function of
// the clone.
func forEachFunc(m *ir.Module, fn func(*ir.Function) error) (*ir.Module, error) {
	if err := ir.Verify(m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidIR, err)
	}
	c := m.Clone()
	for _, f := range c.Funcs {
		if err := fn(f); err != nil {
			return nil, fmt.Errorf("func @%s: %w", f.Name, err)
		}
	}
	return c, nil
}

// namer hands out value names unused in a function.
type namer struct {
	used map[string]bool
}

func newNamer(f *ir.Function) *namer {
	n := &namer{used: map[string]bool{}}
	for _, p := range f.Params {
		n.used[p.Name] = true
	}
	for _, b := range f.Bindings() {
		if b.Result != "" {
			n.used[b.Result] = true
		}
	}
	return n
}

// fresh returns hint if unused, else hint.1, hint.2, ...
func (n *namer) fresh(hint string) string {
	name := hint
	for i := 1; n.used[name]; i++ {
		name = fmt.Sprintf("%s.%d", hint, i)
	}
	n.used[name] = true
	return name
}
