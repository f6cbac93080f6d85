package interp

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/kernels"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	vmplans "github.com/chorus-rt/chorus/compiler/vm/plans"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// Sentinel errors that callers test with errors.Is.
var (
	// ErrLoad: the module text does not parse or verify, or names a
	// function no worker has registered.
	ErrLoad = errors.New("vm: cannot load module")
	// ErrUnsupported: the module needs something this worker cannot do
	// (a GPU op on a CPU worker, ipc_memory or custom_allreduce on the
	// host, a dtype a kernel lacks).
	ErrUnsupported = kernels.ErrUnsupported
	// ErrShape: operands whose dtype or shape do not fit the op.
	ErrShape = kernels.ErrShape
	// ErrArgs: a call with the wrong function name, argument count or
	// argument types (wraps registry.ErrBadArgs, so the session reports it
	// as bad arguments).
	ErrArgs = kernels.ErrArgs
)

// Names of the worker functions the VM registers in registry.Global.
const (
	LoadFunc    = "chorus.vm.load"    // (moduleText string, [plan name, plan JSON]...) -> *Module
	RunFunc     = "chorus.vm.run"     // (module, funcName string, args...) -> result(s)
	ResultFunc  = "chorus.vm.result"  // (results []any, i int) -> the i-th result
	CaptureFunc = "chorus.vm.capture" // (module, funcName string, args...) -> *Graph
	ReplayFunc  = "chorus.vm.replay"  // (graph) -> the result(s), the same values every replay
)

// Module is an IR module loaded on one worker (the value "chorus.vm.load"
// leaves in a register): parsed, verified, and translated into one
// program per function with operands resolved to slots, immediates
// decoded, devices mapped to the worker's device and registered
// functions looked up. It is used by its worker's goroutine only.
type Module struct {
	ir     *ir.Module
	funcs  map[string]*program
	worker int
	gpu    *kernels.GPU // made on the first GPU kernel
	// plans are the executors of the plans custom_allreduce calls name
	// (plans.go), made at load.
	plans map[string]planRunner
	// stats counts the host time of runs (RunStatsFunc).
	stats runStats
	// fused counts the instructions fuse made at load; fixed those whose
	// weights markFixed found fixed.
	fused, fixed int
}

// runStats is the host side of a module's runs: calls, the time from a
// run's start to its return (interpreting and issuing, not waiting for
// the device) and the instructions executed.
type runStats struct {
	calls int64
	host  time.Duration
	ops   int64
}

// Funcs returns the names of the module's functions.
func (m *Module) Funcs() []string {
	var out []string
	for _, f := range m.ir.Funcs {
		out = append(out, f.Name)
	}
	return out
}

// program is one function ready to run.
type program struct {
	name    string
	params  []param
	code    []instr
	results []int
	nslots  int
	// cache holds workspace (allocations that never reach a result) per
	// instruction, made by the first run and reused by later ones.
	cache []any
	// writtenParams, fixedParams and soleParams are the parameters some
	// instruction writes, those a fixed operand is a view of and the
	// caches one attention alone writes (markFixed); aliased: this call
	// passed one storage twice where that breaks the promise
	// (aliasedFixed).
	writtenParams, fixedParams, soleParams []int
	aliased                                bool
}

type param struct {
	name string
	slot int
	typ  ir.Type
	dev  tensor.Device // for tensors and storages
}

// instr is one binding with everything decoded that does not change
// between runs.
type instr struct {
	index int // the binding's index in ir.Function.Bindings order
	op    ir.Op
	text  string // the binding, for errors
	def   int    // slot of the defined value, -1 if none
	refs  []int  // slots of the value operands, in order

	shape   tensor.Shape
	dtype   tensor.DType
	dev     tensor.Device
	scope   string
	n       int64 // alloc_storage bytes, view offset
	align   int64
	f       float64   // rms_norm/layer_norm eps, rope theta
	freqs   []float32 // rope's table of inverse frequencies (the table form; nil: theta)
	redOp   reduce.Op
	strat   string // custom_allreduce strategy, as registry.CustomAllReduce spells it
	plan    string // custom_allreduce naming a plan: the plan (Module.plans)
	fn      registry.Func
	fname   string
	args    []callArg
	resType ir.Type
	cached  bool // workspace: allocate once, reuse across runs
	alloc   bool // an allocation (workspace or result)
	fixedW  bool // a product whose weights no instruction writes, an attention whose early operands none does (fixed.go)
}

// callArg is a call_packed argument: a slot (slot >= 0) or an immediate.
type callArg struct {
	slot int
	val  any
}

// LoadText parses and verifies module text and prepares it to run on
// the worker env describes. Devices in the IR are virtual and per worker:
// {cpu} is host memory, {cuda:0} is the worker's own GPU (the session's
// DeviceIDs choose which); other ids are an error, since a worker drives
// one GPU.
//
// Plans that custom_allreduce calls name are resolved here with
// plans.Resolve (library algorithms; plan files are read by this
// worker); compiler/vm.Load resolves them on the controller instead and
// sends them along. Loading a module with plans is collective (every worker loads the plan
// executors).
func LoadText(env registry.Env, text string) (*Module, error) {
	return loadText(env, text, nil)
}

func loadText(env registry.Env, text string, plans map[string]*plan.Plan) (*Module, error) {
	m, err := ir.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%w: worker %d: %w", ErrLoad, env.WorkerID(), err)
	}
	return loadModule(env, m, plans)
}

// LoadModule is LoadText for a module already parsed (it is not copied;
// the caller must not change it afterwards).
func LoadModule(env registry.Env, m *ir.Module) (*Module, error) {
	return loadModule(env, m, nil)
}

func loadModule(env registry.Env, m *ir.Module, plans map[string]*plan.Plan) (*Module, error) {
	if err := ir.VerifyDevices(m); err != nil {
		return nil, fmt.Errorf("%w: worker %d: the VM runs device-planned IR (run plan-devices first): %w", ErrLoad, env.WorkerID(), err)
	}
	vm := &Module{ir: m, funcs: map[string]*program{}, worker: env.WorkerID()}
	devs := map[string]tensor.Device{} // each plan's device: its first call's
	for _, f := range m.Funcs {
		p, err := translate(env, f)
		if err != nil {
			return nil, fmt.Errorf("worker %d: func @%s: %w", env.WorkerID(), f.Name, err)
		}
		vm.fused += fuse(p.code, p.results)
		p.writtenParams, p.fixedParams, p.soleParams = markFixed(p.code, len(p.params))
		for _, in := range p.code {
			if in.fixedW {
				vm.fixed++
			}
		}
		vm.funcs[f.Name] = p
		for _, in := range p.code {
			if _, ok := devs[in.plan]; in.plan != "" && !ok {
				devs[in.plan] = in.dev
			}
		}
	}
	// Every worker gets here with the same module (or the controller's
	// plan resolution failed first), so the executors are made in the
	// same order on every worker.
	for _, spec := range vmplans.Specs(m) {
		p := plans[spec]
		if p == nil {
			var err error
			if p, err = vmplans.Resolve(spec, env.NumWorkers()); err != nil {
				vm.closePlans()
				return nil, fmt.Errorf("worker %d: %w: %w", env.WorkerID(), ErrLoad, err)
			}
		}
		r, err := newPlanRunner(env, p, devs[spec])
		if err != nil {
			vm.closePlans()
			return nil, fmt.Errorf("worker %d: custom_allreduce plan %q: %w", env.WorkerID(), spec, err)
		}
		if vm.plans == nil {
			vm.plans = map[string]planRunner{}
		}
		vm.plans[spec] = r
	}
	return vm, nil
}

// closePlans frees the plan executors of a module that failed to load.
func (m *Module) closePlans() {
	for spec, r := range m.plans {
		r.Close()
		delete(m.plans, spec)
	}
}

// deviceOf maps a planned virtual device to a device of this worker.
func deviceOf(env registry.Env, vd vdevice.VirtualDevice) (tensor.Device, error) {
	switch vd.DeviceType() {
	case vdevice.CPU:
		return tensor.CPUDevice, nil
	case vdevice.CUDA:
		own := env.Device()
		if own.Kind != tensor.CUDA {
			return tensor.Device{}, fmt.Errorf("%w: the module runs on %v, worker %d is on %v (compile for this device: vm.Pipeline)", ErrUnsupported, vd.DevicePart(), env.WorkerID(), own)
		}
		if id := vd.VirtualDeviceID(); id != 0 {
			return tensor.Device{}, fmt.Errorf("%w: virtual device cuda:%d: each worker drives one GPU, virtual cuda:0", ErrUnsupported, id)
		}
		return own, nil
	}
	return tensor.Device{}, fmt.Errorf("%w: value without a planned device %v (run plan-devices)", ErrLoad, vd)
}

// roots maps every value to the value whose memory it uses (through
// aliases, reshapes and storage views).
func roots(f *ir.Function) map[string]string {
	parent := map[string]string{}
	for _, b := range f.Bindings() {
		if b.Op.IsView() && b.Result != "" {
			if r, ok := b.Ref(0); ok {
				parent[b.Result] = string(r)
			}
		}
	}
	out := map[string]string{}
	for name := range parent {
		r := name
		for i := 0; i < len(parent)+1; i++ {
			p, ok := parent[r]
			if !ok {
				break
			}
			r = p
		}
		out[name] = r
	}
	return out
}

func translate(env registry.Env, f *ir.Function) (*program, error) {
	p := &program{name: f.Name}
	slots := map[string]int{}
	newSlot := func(name string) int {
		slots[name] = p.nslots
		p.nslots++
		return p.nslots - 1
	}
	for _, prm := range f.Params {
		pa := param{name: prm.Name, slot: newSlot(prm.Name), typ: prm.Type}
		if vd, ok := ir.DeviceOf(prm.Type); ok {
			d, err := deviceOf(env, vd)
			if err != nil {
				return nil, fmt.Errorf("parameter %%%s: %w", prm.Name, err)
			}
			pa.dev = d
		}
		p.params = append(p.params, pa)
	}
	// Allocations whose memory reaches a result are made fresh by every
	// run; the rest are workspace.
	rootOf := roots(f)
	types := f.Types()
	escapes := map[string]bool{}
	for _, r := range f.Results {
		n := string(r)
		if x, ok := rootOf[n]; ok {
			n = x
		}
		escapes[n] = true
	}
	for i, b := range f.Bindings() {
		in, err := decode(env, b, slots, types)
		if err != nil {
			return nil, fmt.Errorf("binding %d (%s): %w", i, b.Op, err)
		}
		in.index = i
		if b.Result != "" {
			in.def = newSlot(b.Result)
			isAlloc := b.Op == ir.OpAllocStorage || b.Op == ir.OpAllocTensor ||
				(b.Op == ir.OpCallPacked && in.fname == passes.IPCAllocStorageFunc)
			in.cached = isAlloc && !escapes[b.Result]
			in.alloc = isAlloc
		}
		p.code = append(p.code, in)
	}
	for _, r := range f.Results {
		p.results = append(p.results, slots[string(r)])
	}
	p.cache = make([]any, len(p.code))
	return p, nil
}

// decode turns a verified binding into an instruction.
func decode(env registry.Env, b *ir.Binding, slots map[string]int, types map[string]ir.Type) (instr, error) {
	in := instr{op: b.Op, text: b.String(), def: -1}
	for _, r := range b.Refs() {
		s, ok := slots[string(r)]
		if !ok {
			return in, fmt.Errorf("%w: %v undefined", ErrLoad, r)
		}
		in.refs = append(in.refs, s)
	}
	dev := func(a ir.Arg) error {
		d, err := deviceOf(env, vdevice.VirtualDevice(a.(ir.VDLit)))
		in.dev = d
		return err
	}
	hostOnlyScope := func() error {
		if in.dev.Kind == tensor.CPU && in.scope != tensor.ScopeGlobal {
			return fmt.Errorf("%w: memory scope %q on the host: CPU workers have only %q memory (compile CPU programs without ipc-allreduce-rewrite; vm.Pipeline does)", ErrUnsupported, in.scope, tensor.ScopeGlobal)
		}
		return nil
	}
	switch b.Op {
	case ir.OpAllocStorage:
		in.n, in.align = int64(b.Args[0].(ir.Int)), int64(b.Args[1].(ir.Int))
		in.scope = string(b.Args[3].(ir.Str))
		if err := dev(b.Args[2]); err != nil {
			return in, err
		}
		return in, hostOnlyScope()
	case ir.OpAllocTensor:
		in.shape, in.dtype = tensor.Shape(b.Args[0].(ir.ShapeLit)), tensor.DType(b.Args[1].(ir.DTypeLit))
		in.scope = string(b.Args[3].(ir.Str))
		if err := dev(b.Args[2]); err != nil {
			return in, err
		}
		return in, hostOnlyScope()
	case ir.OpAllocTensorView:
		in.n = int64(b.Args[1].(ir.Int))
		in.shape, in.dtype = tensor.Shape(b.Args[2].(ir.ShapeLit)), tensor.DType(b.Args[3].(ir.DTypeLit))
	case ir.OpReshape:
		in.shape = tensor.Shape(b.Args[1].(ir.ShapeLit))
	case ir.OpAllreduce, ir.OpReduceScatter:
		op, err := reduce.ParseOp(string(b.Args[1].(ir.Sym)))
		if err != nil {
			return in, fmt.Errorf("%w: %v", ErrLoad, err)
		}
		in.redOp = op
	case ir.OpCustomAllreduce:
		if spec, ok := ir.CustomAllreducePlan(b); ok {
			// The plan's runner decides which devices it serves.
			in.plan = spec
			vd, _ := ir.DeviceOf(types[string(b.Args[0].(ir.Ref))])
			return in, dev(ir.VDLit(vd))
		}
		in.strat = strings.ReplaceAll(string(b.Args[1].(ir.Sym)), "_", "")
		if vd, ok := ir.DeviceOf(types[string(b.Args[0].(ir.Ref))]); ok && vd.DeviceType() == vdevice.CPU {
			return in, fmt.Errorf("%w: custom_allreduce of host memory: the IPC all-reduce runs on GPUs only (compile CPU programs without ipc-allreduce-rewrite; vm.Pipeline does)", ErrUnsupported)
		}
	case ir.OpEmbedding, ir.OpRMSNorm, ir.OpLayerNorm, ir.OpRope, ir.OpAttention, ir.OpSilu, ir.OpMul, ir.OpArgmax:
		switch b.Op {
		case ir.OpRMSNorm, ir.OpRope:
			in.f, _ = b.FloatArg(2)
			if fs, ok := b.Args[2].(ir.Floats); ok {
				in.freqs = make([]float32, len(fs))
				for i, f := range fs {
					in.freqs[i] = float32(f)
				}
			}
		case ir.OpLayerNorm:
			in.f, _ = b.FloatArg(3)
		}
		// The float operand decides the kernel: the table of an
		// embedding, the input of the rest.
		i := 0
		if b.Op == ir.OpEmbedding {
			i = 1
		}
		t, _ := types[string(b.Args[i].(ir.Ref))].(ir.TensorType)
		switch t.DType {
		case tensor.Float32, tensor.Float16, tensor.BFloat16:
		case tensor.Float64:
			if t.Device.DeviceType() != vdevice.CPU {
				return in, fmt.Errorf("%w: %s of float64 on a GPU (float32, float16, bfloat16)", ErrUnsupported, b.Op)
			}
		default:
			return in, fmt.Errorf("%w: %s of %s (float32, float16, bfloat16, float64)", ErrUnsupported, b.Op, t.DType)
		}
	case ir.OpMatmul, ir.OpMatmulNT, ir.OpAdd, ir.OpGelu:
		t, _ := types[string(b.Args[0].(ir.Ref))].(ir.TensorType)
		switch t.DType {
		case tensor.Float32, tensor.Float16, tensor.BFloat16:
		case tensor.Float64:
			if t.Device.DeviceType() != vdevice.CPU && b.Op != ir.OpMatmul && b.Op != ir.OpMatmulNT {
				return in, fmt.Errorf("%w: %s of float64 on a GPU (float32, float16, bfloat16)", ErrUnsupported, b.Op)
			}
		default:
			return in, fmt.Errorf("%w: %s of %s (float32, float16, bfloat16, float64)", ErrUnsupported, b.Op, t.DType)
		}
	case ir.OpDeviceCopy:
		// src and dst are checked against the operands by VerifyDevices;
		// the operands' own devices drive the copy.
	case ir.OpCallPacked:
		in.fname = string(b.Args[0].(ir.Str))
		fn, err := registry.LookupFunc(env, in.fname)
		if err != nil {
			return in, fmt.Errorf("%w: call_packed: %w", ErrLoad, err)
		}
		in.fn, in.resType = fn, b.Type
		for _, a := range b.Args[1:] {
			ca := callArg{slot: -1}
			switch x := a.(type) {
			case ir.Ref:
				ca.slot = slots[string(x)]
			case ir.Int:
				ca.val = int64(x)
			case ir.Str:
				ca.val = string(x)
			case ir.Sym:
				ca.val = string(x)
			case ir.Bool:
				ca.val = bool(x)
			case ir.ShapeLit:
				ca.val = tensor.Shape(x).Clone()
			case ir.DTypeLit:
				ca.val = tensor.DType(x)
			case ir.VDLit:
				d, err := deviceOf(env, vdevice.VirtualDevice(x))
				if err != nil {
					return in, err
				}
				ca.val = d
			default:
				return in, fmt.Errorf("%w: call_packed argument %v", ErrLoad, a)
			}
			in.args = append(in.args, ca)
		}
		if vd, ok := ir.DeviceOf(b.Type); ok && b.Result != "" {
			if err := dev(ir.VDLit(vd)); err != nil {
				return in, err
			}
			in.scope = vd.MemoryScope()
		}
	}
	return in, nil
}

// storageOf accepts a storage or a tensor (its storage) as a storage value.
func storageOf(v any) (*tensor.Storage, bool) {
	switch x := v.(type) {
	case *tensor.Storage:
		return x, x != nil
	case *tensor.Tensor:
		if x != nil {
			return x.Storage(), true
		}
	}
	return nil, false
}

// checkAlign reports storage whose first byte is not aligned as asked.
func checkAlign(st *tensor.Storage, align int64) error {
	if align <= 1 {
		return nil
	}
	var p uintptr
	if h := st.Host(); len(h) > 0 {
		p = uintptr(unsafe.Pointer(unsafe.SliceData(h)))
	} else if b := st.Buffer(); b != nil {
		p = b.Ptr()
	}
	if p%uintptr(align) != 0 {
		return fmt.Errorf("%w: storage at %#x is not %d-byte aligned", ErrUnsupported, p, align)
	}
	return nil
}
