package passes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vdevice"
)

const ipcRewriteName = "ipc-allreduce-rewrite"

// IPCAllreduceRewrite turns sum all-reduces into the custom IPC
// all-reduce. For each allreduce(%x, sum, %out) whose input traces back
// through aliases and reshapes to an alloc_tensor in scope "global" (or
// already "ipc_memory"), it moves that allocation to scope "ipc_memory"
// (updating the types of the allocation and of every alias and reshape of
// it) and rewrites the call to custom_allreduce(%x, strategy, %out).
// Other reductions, and inputs that come from parameters, packed calls or
// views of a storage, are left alone: their memory cannot be moved to IPC
// memory here. Run it before PlanMemory, which turns allocations into
// views.
//
// A strategy "plan:NAME" (ir.PlanPrefix) makes the call
// custom_allreduce(%x, "NAME", %out): an execution plan, a library
// algorithm or a plan file, that the VM runs on the GPU executor
// (compiler/vm resolves and checks it when the module is loaded).
func IPCAllreduceRewrite(strategy string) Pass {
	return Pass{Name: ipcRewriteName, Run: func(m *ir.Module) (*ir.Module, error) {
		name, isPlan := strings.CutPrefix(strategy, ir.PlanPrefix)
		switch {
		case isPlan && strings.TrimSpace(name) == "":
			return nil, fmt.Errorf("%w: strategy %q names no plan (want %sALGORITHM or %sFILE.json)", ErrBadOption, strategy, ir.PlanPrefix, ir.PlanPrefix)
		case !isPlan && !slices.Contains(ir.AllreduceStrategies, strategy):
			return nil, fmt.Errorf("%w: strategy %q (want one of %v, or %sPLAN)", ErrBadOption, strategy, ir.AllreduceStrategies, ir.PlanPrefix)
		}
		return forEachFunc(m, func(f *ir.Function) error {
			ipcRewrite(f, strategy)
			return nil
		})
	}}
}

func ipcRewrite(f *ir.Function, strategy string) {
	defs := f.Defs()
	moved := map[string]bool{} // allocations moved to IPC memory
	for _, b := range f.Bindings() {
		if b.Op != ir.OpAllreduce || len(b.Args) != 3 || b.Args[1] != ir.Sym("sum") {
			continue
		}
		x, _ := b.Ref(0)
		alloc := traceAlloc(defs, string(x))
		if alloc == nil {
			continue
		}
		if s := alloc.Args[3]; s != ir.Str(ir.ScopeGlobal) && s != ir.Str(ir.ScopeIPC) {
			continue
		}
		moved[alloc.Result] = true
		b.Op = ir.OpCustomAllreduce
		b.Args[1] = ir.StrategyArg(strategy)
	}
	if len(moved) == 0 {
		return
	}
	// Definitions precede uses, so one forward walk reaches every alias.
	for _, b := range f.Bindings() {
		switch {
		case b.Op == ir.OpAllocTensor && moved[b.Result]:
			b.Args[3] = ir.Str(ir.ScopeIPC)
			if vd, ok := b.Args[2].(ir.VDLit); ok { // the scope lives in its own argument
				b.Args[2] = ir.VDLit(vdevice.VirtualDevice(vd).DevicePart())
			}
		case (b.Op == ir.OpAlias || b.Op == ir.OpReshape) && b.Result != "":
			src, _ := b.Ref(0)
			if !moved[string(src)] {
				continue
			}
			moved[b.Result] = true
		default:
			continue
		}
		if vd, ok := ir.DeviceOf(b.Type); ok {
			b.Type = ir.WithDevice(b.Type, vd.WithScope(ir.ScopeIPC))
		}
	}
}

// traceAlloc follows aliases and reshapes back to an alloc_tensor binding
// (nil if the chain ends elsewhere).
func traceAlloc(defs map[string]*ir.Binding, name string) *ir.Binding {
	for range len(defs) + 1 { // bounds the walk even on malformed input
		d := defs[name]
		if d == nil {
			return nil
		}
		switch d.Op {
		case ir.OpAllocTensor:
			if len(d.Args) == 4 {
				return d
			}
			return nil
		case ir.OpAlias, ir.OpReshape:
			src, ok := d.Ref(0)
			if !ok {
				return nil
			}
			name = string(src)
		default:
			return nil
		}
	}
	return nil
}
