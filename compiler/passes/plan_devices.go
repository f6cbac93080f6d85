package passes

import (
	"fmt"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vdevice"
)

const planDevicesName = "plan-devices"

// fallbackDevice fills whatever the caller's default leaves open.
var fallbackDevice, _ = vdevice.New(vdevice.CUDA, 0, nil, ir.ScopeGlobal)

// PlanDevices gives every tensor and storage value a virtual device with
// device type, id and memory scope constrained:
//
//   - Values that share memory (alias, reshape, views of a storage) form
//     one class and get one virtual device, scope included.
//   - The operands of one kernel (matmul, add, gelu, the collectives,
//     custom_allreduce) must run on one device: their device parts (type,
//     id, target; not the scope, since a kernel may read global and IPC
//     memory alike) are unified with vdevice.Join.
//   - When an input's device cannot join, the kernel runs where its
//     destination (out operand) lives, else where its earlier inputs
//     agree, and the input is copied there first: a fresh
//     alloc_tensor(..., "global") on the kernel's device and a
//     device_copy into it are inserted before the kernel.
//   - An explicit device_copy constrains its input by src and its out by
//     dst; a disagreement there is ErrDeviceConflict.
//   - Fields still unconstrained at the end take def's (vdevice.Default);
//     fields def leaves open fall back to cuda:0, scope "global".
//
// The pass rewrites parameter and result types, allocation device
// arguments (device part; the scope stays in the scope argument) and
// device_copy src/dst arguments to the planned devices. Packed calls are
// opaque: their operands are not constrained.
func PlanDevices(def vdevice.VirtualDevice) Pass {
	def = vdevice.Default(def, fallbackDevice)
	return Pass{Name: planDevicesName, Run: func(m *ir.Module) (*ir.Module, error) {
		out, err := forEachFunc(m, func(f *ir.Function) error { return planDevices(f, def) })
		if err != nil {
			return nil, err
		}
		// Self-check: what this pass promises, beyond well-formedness.
		if err := ir.VerifyDevices(out); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDeviceConflict, err)
		}
		return out, nil
	}}
}

// unionFind over value names, each class carrying a virtual device.
type unionFind struct {
	parent map[string]string
	vd     map[string]vdevice.VirtualDevice
}

func newUnionFind() *unionFind {
	return &unionFind{parent: map[string]string{}, vd: map[string]vdevice.VirtualDevice{}}
}

func (u *unionFind) add(name string, vd vdevice.VirtualDevice) {
	u.parent[name] = name
	u.vd[name] = vd
}

func (u *unionFind) find(name string) string {
	for u.parent[name] != name {
		u.parent[name] = u.parent[u.parent[name]]
		name = u.parent[name]
	}
	return name
}

func (u *unionFind) has(name string) bool { _, ok := u.parent[name]; return ok }

func (u *unionFind) get(name string) vdevice.VirtualDevice { return u.vd[u.find(name)] }

// constrain joins vd into name's class.
func (u *unionFind) constrain(name string, vd vdevice.VirtualDevice) bool {
	r := u.find(name)
	j, ok := vdevice.Join(u.vd[r], vd)
	if ok {
		u.vd[r] = j
	}
	return ok
}

// union merges two classes if their devices join.
func (u *unionFind) union(a, b string) bool {
	ra, rb := u.find(a), u.find(b)
	if ra == rb {
		return true
	}
	j, ok := vdevice.Join(u.vd[ra], u.vd[rb])
	if !ok {
		return false
	}
	u.parent[rb] = ra
	u.vd[ra] = j
	delete(u.vd, rb)
	return true
}

func isKernel(op ir.Op) bool { return op.IsKernel() }

func planDevices(f *ir.Function, def vdevice.VirtualDevice) error {
	// dev unifies device parts; scope unifies memory scopes of values
	// that share memory. Keeping them apart lets one kernel read a global
	// tensor and write an ipc_memory one.
	dev, scope := newUnionFind(), newUnionFind()
	types := map[string]ir.Type{}
	addValue := func(name string, t ir.Type) {
		types[name] = t
		if vd, ok := ir.DeviceOf(t); ok {
			dev.add(name, vd.DevicePart())
			scope.add(name, vdevice.ForScope(vd.MemoryScope()))
		}
	}
	for _, p := range f.Params {
		addValue(p.Name, p.Type)
	}
	nm := newNamer(f)
	for _, blk := range f.Blocks {
		var out []*ir.Binding
		for _, b := range blk.Bindings {
			if b.Result != "" {
				addValue(b.Result, b.Type)
			}
			switch {
			case b.Op.IsView():
				src, _ := b.Ref(0)
				if dev.has(b.Result) && dev.has(string(src)) {
					if !dev.union(b.Result, string(src)) || !scope.union(b.Result, string(src)) {
						return fmt.Errorf("%w: %%%s shares memory with %v but is on %v, %v on %v",
							ErrDeviceConflict, b.Result, src, dev.get(b.Result), src, dev.get(string(src)))
					}
				}
			case b.Op == ir.OpDeviceCopy:
				x, _ := b.Ref(0)
				o, _ := b.Ref(3)
				src, _ := b.Args[1].(ir.VDLit)
				dst, _ := b.Args[2].(ir.VDLit)
				if !dev.constrain(string(x), vdevice.VirtualDevice(src).DevicePart()) {
					return fmt.Errorf("%w: device_copy source %v is on %v, src says %v", ErrDeviceConflict, x, dev.get(string(x)), src)
				}
				if !dev.constrain(string(o), vdevice.VirtualDevice(dst).DevicePart()) {
					return fmt.Errorf("%w: device_copy destination %v is on %v, dst says %v", ErrDeviceConflict, o, dev.get(string(o)), dst)
				}
			case isKernel(b.Op):
				copies, err := planKernel(b, dev, scope, types, nm)
				if err != nil {
					return err
				}
				out = append(out, copies...)
			}
			out = append(out, b)
		}
		blk.Bindings = out
	}

	final := func(name string) vdevice.VirtualDevice {
		d := vdevice.Default(dev.get(name), def.DevicePart())
		s := scope.get(name).MemoryScope()
		if s == "" {
			s = def.MemoryScope()
		}
		return d.WithScope(s)
	}
	for i, p := range f.Params {
		if dev.has(p.Name) {
			f.Params[i].Type = ir.WithDevice(p.Type, final(p.Name))
		}
	}
	for _, b := range f.Bindings() {
		if b.Result != "" && dev.has(b.Result) {
			vd := final(b.Result)
			b.Type = ir.WithDevice(b.Type, vd)
			switch b.Op {
			case ir.OpAllocTensor, ir.OpAllocStorage:
				b.Args[2] = ir.VDLit(vd.DevicePart())
				b.Args[3] = ir.Str(vd.MemoryScope())
			}
		}
		if b.Op == ir.OpDeviceCopy {
			x, _ := b.Ref(0)
			o, _ := b.Ref(3)
			b.Args[1] = ir.VDLit(final(string(x)).DevicePart())
			b.Args[2] = ir.VDLit(final(string(o)).DevicePart())
		}
	}
	return nil
}

// planKernel unifies a kernel's operands and returns the copies to insert
// before it for inputs on another device (rewriting those operands).
func planKernel(b *ir.Binding, dev, scope *unionFind, types map[string]ir.Type, nm *namer) ([]*ir.Binding, error) {
	outRef, _ := b.Out()
	outIdx := len(b.Args) - 1
	if !dev.has(string(outRef)) {
		return nil, nil // not a tensor; Verify reports it
	}
	// The destination decides, then inputs in order.
	where := dev.get(string(outRef))
	var conflicts []int
	for i, a := range b.Args[:outIdx] {
		r, ok := a.(ir.Ref)
		if !ok || !dev.has(string(r)) {
			continue
		}
		if j, ok := vdevice.Join(where, dev.get(string(r))); ok {
			where = j
		} else {
			conflicts = append(conflicts, i)
		}
	}
	isConflict := func(i int) bool {
		for _, c := range conflicts {
			if c == i {
				return true
			}
		}
		return false
	}
	for i, a := range b.Args {
		r, ok := a.(ir.Ref)
		if !ok || !dev.has(string(r)) || isConflict(i) {
			continue
		}
		// Cannot fail: where is the join of every operand left here.
		dev.constrain(string(r), where)
		dev.union(string(outRef), string(r))
	}
	var copies []*ir.Binding
	for _, i := range conflicts {
		x := b.Args[i].(ir.Ref)
		for _, w := range b.Writes() {
			if w == x {
				// A copy of an operand the kernel writes (attention's
				// caches) would take the writes away from it.
				return nil, fmt.Errorf("%w: %s writes %v, which is on %v, the kernel runs on %v", ErrDeviceConflict, b.Op, x, dev.get(string(x)), where)
			}
		}
		tt, ok := types[string(x)].(ir.TensorType)
		if !ok {
			continue
		}
		name := nm.fresh(string(x) + ".copy")
		buf := ir.TensorType{Shape: tt.Shape.Clone(), DType: tt.DType, Device: where.WithScope(ir.ScopeGlobal)}
		types[name] = buf
		dev.add(name, where)
		dev.union(string(outRef), name)
		scope.add(name, vdevice.ForScope(ir.ScopeGlobal))
		copies = append(copies,
			&ir.Binding{Result: name, Type: buf, Op: ir.OpAllocTensor, Args: []ir.Arg{
				ir.ShapeLit(tt.Shape.Clone()), ir.DTypeLit(tt.DType), ir.VDLit(where), ir.Str(ir.ScopeGlobal)}},
			&ir.Binding{Op: ir.OpDeviceCopy, Args: []ir.Arg{
				x, ir.VDLit(dev.get(string(x))), ir.VDLit(where), ir.Ref(name)}})
		b.Args[i] = ir.Ref(name)
	}
	return copies, nil
}
