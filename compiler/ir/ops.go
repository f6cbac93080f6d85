package ir

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

// Op is an operation. Ops that compute tensors are destination-passing:
// their last operand is the tensor they write (see the package comment).
type Op uint8

const (
	OpInvalid Op = iota
	// %b = %a : T — a plain alias (printed without an op name).
	OpAlias
	// %s = alloc_storage(bytes, alignment, device, scope) : storage<...>
	OpAllocStorage
	// %t = alloc_tensor(shape, dtype, device, scope) : tensor<...>
	OpAllocTensor
	// %t = alloc_tensor(%storage, offset, shape, dtype) : tensor<...> — a
	// view of a storage at a byte offset (printed alloc_tensor too).
	OpAllocTensorView
	// [%r =] call_packed("registered.name", args...) [: T]
	OpCallPacked
	// allreduce(%x, op, %out); op is sum, prod, min, max or avg.
	OpAllreduce
	// allgather(%x, %out): out is every rank's x, in rank order.
	OpAllgather
	// reduce_scatter(%x, op, %out): out is this rank's slice of the reduction.
	OpReduceScatter
	// broadcast(%x, %out): out is worker 0's x.
	OpBroadcast
	// custom_allreduce(%x, strategy, %out): the IPC all-reduce (sum);
	// strategy is auto, one_shot or two_shot (a symbol), or a string that
	// names an execution plan (a library algorithm or a plan file) run by
	// the GPU executor; x lives in ipc_memory.
	OpCustomAllreduce
	// %v = reshape(%x, shape) : T — a view with another shape, same elements.
	OpReshape
	// device_copy(%x, src, dst, %out): copy between virtual devices.
	OpDeviceCopy
	// matmul(%a, %b, %out): a [..., m, k] times b [k, n] into out [..., m, n].
	OpMatmul
	// add(%a, %b, %out): elementwise with numpy broadcasting.
	OpAdd
	// gelu(%x, %out): GELU, tanh approximation.
	OpGelu
	// embedding(%ids, %table, %out): out[..., :] = table[ids[...], :];
	// ids int32 of any shape S, table [V, H], out S+[H].
	OpEmbedding
	// rms_norm(%x, %w, eps, %out): x / sqrt(mean(x²) + eps) · w over the
	// last dim; w [H].
	OpRMSNorm
	// layer_norm(%x, %w, %b, eps, %out): (x - mean) / sqrt(var + eps) · w
	// + b over the last dim (biased variance); w, b [H].
	OpLayerNorm
	// rope(%x, %pos, theta, %out): rotary position embedding, the
	// rotate-half form (GPT-NeoX, Llama): x [T, heads, D] (D even), pos
	// int32 [T]; pair (i, i + D/2) turns by pos·theta^(-2i/D).
	// rope(%x, %pos, [f0, ..., f(D/2-1)], %out), the table form: pair i
	// turns by float32(pos)·f_i in float32 (Hugging Face's rotary
	// embedding; the table holds the inverse frequencies, scaled or not,
	// so the kernels know nothing of scaling schemes).
	OpRope
	// attention(%q, %k, %v, %k_cache, %v_cache, %pos, %out): writes this
	// step's k and v into the caches at rows pos, then causal attention
	// of every query t over cache rows 0..pos[t] (softmax scale
	// 1/sqrt(D)); grouped-query heads: query head h reads kv head
	// h / (Hq/Hkv). q [T, Hq, D], k and v [T, Hkv, D], caches [S, Hkv, D],
	// pos int32 [T], out [T, Hq, D]. The caches are written too (they
	// persist across calls: pass them as parameters).
	OpAttention
	// silu(%x, %out): x · sigmoid(x).
	OpSilu
	// mul(%a, %b, %out): elementwise product with numpy broadcasting.
	OpMul
	// argmax(%x, %out): index of the largest element over the last dim
	// (the first on ties; NaN never wins), x [..., N] float, out [...] int32.
	OpArgmax
	// matmul_nt(%a, %b, %out): a [..., m, k] times the transpose of b
	// [n, k] into out [..., m, n] (b as nn.Linear and Hugging Face
	// checkpoints store weights, [out, in]).
	OpMatmulNT
	numOps
)

type argKind uint8

const (
	kRef argKind = iota
	kInt
	kStr
	kSym
	kShape
	kDType
	kVD
	kStrategy // a symbol or a string (custom_allreduce's strategy)
	kFloat    // a float or an int immediate (an attribute such as eps)
	kRopeFreq // rope's theta (a float or an int) or its table (Floats)
)

var kindNames = [...]string{kRef: "value", kInt: "int", kStr: "string", kSym: "symbol", kShape: "shape", kDType: "dtype", kVD: "virtual device",
	kStrategy: "strategy symbol or plan string", kFloat: "number", kRopeFreq: "number or float list"}

type resultKind uint8

const (
	resNone     resultKind = iota // the op defines no value
	resValue                      // the op defines one value
	resOptional                   // call_packed: either
)

type opInfo struct {
	name     string
	args     []argKind
	variadic bool // more arguments of any kind may follow
	result   resultKind
}

var opTable = [numOps]opInfo{
	OpAlias:           {"alias", []argKind{kRef}, false, resValue},
	OpAllocStorage:    {"alloc_storage", []argKind{kInt, kInt, kVD, kStr}, false, resValue},
	OpAllocTensor:     {"alloc_tensor", []argKind{kShape, kDType, kVD, kStr}, false, resValue},
	OpAllocTensorView: {"alloc_tensor", []argKind{kRef, kInt, kShape, kDType}, false, resValue},
	OpCallPacked:      {"call_packed", []argKind{kStr}, true, resOptional},
	OpAllreduce:       {"allreduce", []argKind{kRef, kSym, kRef}, false, resNone},
	OpAllgather:       {"allgather", []argKind{kRef, kRef}, false, resNone},
	OpReduceScatter:   {"reduce_scatter", []argKind{kRef, kSym, kRef}, false, resNone},
	OpBroadcast:       {"broadcast", []argKind{kRef, kRef}, false, resNone},
	OpCustomAllreduce: {"custom_allreduce", []argKind{kRef, kStrategy, kRef}, false, resNone},
	OpReshape:         {"reshape", []argKind{kRef, kShape}, false, resValue},
	OpDeviceCopy:      {"device_copy", []argKind{kRef, kVD, kVD, kRef}, false, resNone},
	OpMatmul:          {"matmul", []argKind{kRef, kRef, kRef}, false, resNone},
	OpAdd:             {"add", []argKind{kRef, kRef, kRef}, false, resNone},
	OpGelu:            {"gelu", []argKind{kRef, kRef}, false, resNone},
	OpEmbedding:       {"embedding", []argKind{kRef, kRef, kRef}, false, resNone},
	OpRMSNorm:         {"rms_norm", []argKind{kRef, kRef, kFloat, kRef}, false, resNone},
	OpLayerNorm:       {"layer_norm", []argKind{kRef, kRef, kRef, kFloat, kRef}, false, resNone},
	OpRope:            {"rope", []argKind{kRef, kRef, kRopeFreq, kRef}, false, resNone},
	OpAttention:       {"attention", []argKind{kRef, kRef, kRef, kRef, kRef, kRef, kRef}, false, resNone},
	OpSilu:            {"silu", []argKind{kRef, kRef}, false, resNone},
	OpMul:             {"mul", []argKind{kRef, kRef, kRef}, false, resNone},
	OpArgmax:          {"argmax", []argKind{kRef, kRef}, false, resNone},
	OpMatmulNT:        {"matmul_nt", []argKind{kRef, kRef, kRef}, false, resNone},
}

// Reduction ops of allreduce and reduce_scatter, and the strategies of
// custom_allreduce.
var (
	ReduceOps           = []string{"sum", "prod", "min", "max", "avg"}
	AllreduceStrategies = []string{"auto", "one_shot", "two_shot"}
)

// PlanPrefix marks a custom all-reduce strategy that names an execution
// plan where a strategy is given as text (pass options, vm.Pipeline,
// the CLI's --strategy): "plan:allreduce_packet", "plan:/path/p.json".
// In the IR the plan is the strategy argument as a string.
const PlanPrefix = "plan:"

// CustomAllreducePlan returns the plan a custom_allreduce binding names
// (its strategy argument is a string), if any.
func CustomAllreducePlan(b *Binding) (string, bool) {
	if b.Op != OpCustomAllreduce || len(b.Args) != 3 {
		return "", false
	}
	s, ok := b.Args[1].(Str)
	return string(s), ok
}

// StrategyArg is the strategy argument for a custom all-reduce strategy
// given as text: the symbol (auto, one_shot, two_shot), or the plan's
// string for "plan:NAME".
func StrategyArg(strategy string) Arg {
	if name, ok := strings.CutPrefix(strategy, PlanPrefix); ok {
		return Str(name)
	}
	return Sym(strategy)
}

// Valid reports whether o is a known op.
func (o Op) Valid() bool { return o > OpInvalid && o < numOps }

func (o Op) String() string {
	if o.Valid() {
		return opTable[o].name
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// HasResult reports whether bindings of o define a value (for call_packed:
// whether they may).
func (o Op) HasResult() bool { return o.Valid() && opTable[o].result != resNone }

// OpByName returns the op printed as name. For "alloc_tensor" it returns
// OpAllocTensor; the view form is told apart by its first argument.
func OpByName(name string) (Op, bool) {
	for o := OpAlias; o < numOps; o++ {
		if opTable[o].name == name {
			return o, true
		}
	}
	return OpInvalid, false
}

// IsView reports whether the op's result aliases memory of its first
// operand (alias, reshape, and the view of a storage): such results have
// no memory of their own.
func (o Op) IsView() bool { return o == OpAlias || o == OpReshape || o == OpAllocTensorView }

// Out returns the operand an op writes (its destination), if any.
func (b *Binding) Out() (Ref, bool) {
	switch b.Op {
	case OpAllreduce, OpAllgather, OpReduceScatter, OpBroadcast, OpCustomAllreduce,
		OpDeviceCopy, OpMatmul, OpMatmulNT, OpAdd, OpGelu, OpEmbedding, OpRMSNorm, OpLayerNorm, OpRope,
		OpAttention, OpSilu, OpMul, OpArgmax:
		return b.Ref(len(b.Args) - 1)
	}
	return "", false
}

// IsKernel reports whether o is a compute kernel or a collective: an op
// whose tensor operands must live on one device (device planning joins
// them and copies inputs that cannot).
func (o Op) IsKernel() bool {
	switch o {
	case OpMatmul, OpMatmulNT, OpAdd, OpGelu, OpAllreduce, OpAllgather, OpReduceScatter, OpBroadcast,
		OpCustomAllreduce, OpEmbedding, OpRMSNorm, OpLayerNorm, OpRope, OpAttention, OpSilu,
		OpMul, OpArgmax:
		return true
	}
	return false
}

// Writes returns the operands an op writes: its out operand, and for
// attention also the two caches (operands 4 and 5).
func (b *Binding) Writes() []Ref {
	out, ok := b.Out()
	if !ok {
		return nil
	}
	if b.Op == OpAttention {
		kc, _ := b.Ref(3)
		vc, _ := b.Ref(4)
		return []Ref{kc, vc, out}
	}
	return []Ref{out}
}

// FloatArg returns argument i as a float (a Float or an Int immediate).
func (b *Binding) FloatArg(i int) (float64, bool) {
	if i < 0 || i >= len(b.Args) {
		return 0, false
	}
	switch x := b.Args[i].(type) {
	case Float:
		return float64(x), true
	case Int:
		return float64(x), true
	}
	return 0, false
}

// typeEnv answers the questions the checker asks about operands.
type typeEnv interface {
	typeOf(r Ref) (Type, error)
	// storageBytes is the size of a storage defined by alloc_storage.
	storageBytes(r Ref) (int64, bool)
	// devices says whether operands of one kernel must agree on their
	// device (true after device planning; see VerifyDevices).
	devices() bool
}

// checkArgs checks the argument count and kinds against the op table.
func checkArgs(b *Binding) error {
	if !b.Op.Valid() {
		return fmt.Errorf("%w: %v", ErrUnknownOp, b.Op)
	}
	info := opTable[b.Op]
	if len(b.Args) < len(info.args) || (!info.variadic && len(b.Args) != len(info.args)) {
		want := fmt.Sprint(len(info.args))
		if info.variadic {
			want = "at least " + want
		}
		return fmt.Errorf("%w: %s takes %s, got %d", ErrArity, info.name, want, len(b.Args))
	}
	for i, k := range info.args {
		if !argIs(b.Args[i], k) {
			return fmt.Errorf("%w: %s argument %d must be a %s, got %s %v", ErrBadArg, info.name, i+1, kindNames[k], argKindName(b.Args[i]), b.Args[i])
		}
	}
	for i := len(info.args); i < len(b.Args); i++ {
		if b.Args[i] == nil {
			return fmt.Errorf("%w: %s argument %d is nil", ErrBadArg, info.name, i+1)
		}
	}
	switch {
	case info.result == resValue && b.Result == "":
		return fmt.Errorf("%w: %s defines a value; bind it to a name", ErrBadArg, info.name)
	case info.result == resNone && b.Result != "":
		return fmt.Errorf("%w: %s defines no value (it writes its out operand)", ErrBadArg, info.name)
	case b.Result != "" && b.Type == nil:
		return fmt.Errorf("%w: %%%s has no type", ErrTypeMismatch, b.Result)
	case b.Result == "" && b.Type != nil:
		return fmt.Errorf("%w: a type without a result", ErrTypeMismatch)
	}
	return nil
}

func argIs(a Arg, k argKind) bool {
	switch k {
	case kRef:
		_, ok := a.(Ref)
		return ok
	case kInt:
		_, ok := a.(Int)
		return ok
	case kStr:
		_, ok := a.(Str)
		return ok
	case kSym:
		_, ok := a.(Sym)
		return ok
	case kShape:
		_, ok := a.(ShapeLit)
		return ok
	case kDType:
		_, ok := a.(DTypeLit)
		return ok
	case kVD:
		_, ok := a.(VDLit)
		return ok
	case kStrategy:
		return argIs(a, kSym) || argIs(a, kStr)
	case kFloat:
		_, isF := a.(Float)
		return isF || argIs(a, kInt)
	case kRopeFreq:
		_, isL := a.(Floats)
		return isL || argIs(a, kFloat)
	}
	return false
}

// infer checks a binding whose arguments passed checkArgs and returns the
// type of its result (nil when it defines none; the declared type for
// call_packed, which the compiler cannot see into).
func infer(b *Binding, env typeEnv) (Type, error) {
	tensorArg := func(i int) (TensorType, error) {
		r := b.Args[i].(Ref)
		t, err := env.typeOf(r)
		if err != nil {
			return TensorType{}, err
		}
		tt, ok := t.(TensorType)
		if !ok {
			return TensorType{}, fmt.Errorf("%w: operand %d (%v) must be a tensor, is %v", ErrTypeMismatch, i+1, r, t)
		}
		return tt, nil
	}
	// tensors loads every Ref operand as a tensor.
	tensors := func() ([]TensorType, error) {
		var ts []TensorType
		for i, a := range b.Args {
			if _, ok := a.(Ref); !ok {
				continue
			}
			t, err := tensorArg(i)
			if err != nil {
				return nil, err
			}
			ts = append(ts, t)
		}
		return ts, nil
	}
	sameDevice := func(ts []TensorType) error {
		if !env.devices() {
			return nil
		}
		var d vdevice.VirtualDevice
		for i, t := range ts {
			j, ok := vdevice.Join(d, t.Device.DevicePart())
			if !ok {
				return fmt.Errorf("%w: operand %d is on %v, earlier operands on %v", ErrDevice, i+1, t.Device.DevicePart(), d)
			}
			d = j
		}
		return nil
	}
	sameLayout := func(x, out TensorType) error {
		if x.DType != out.DType || !x.Shape.Equal(out.Shape) {
			return fmt.Errorf("%w: %s input is %v %v, out is %v %v", ErrShape, b.Op, x.Shape, x.DType, out.Shape, out.DType)
		}
		return nil
	}
	symIn := func(i int, set []string, what string) error {
		s := string(b.Args[i].(Sym))
		if !slices.Contains(set, s) {
			return fmt.Errorf("%w: %s %q (want one of %v)", ErrBadArg, what, s, set)
		}
		return nil
	}

	switch b.Op {
	case OpAlias:
		r := b.Args[0].(Ref)
		t, err := env.typeOf(r)
		if err != nil {
			return nil, err
		}
		return CloneType(t), nil

	case OpAllocStorage:
		size, align := int64(b.Args[0].(Int)), int64(b.Args[1].(Int))
		dev, scope := vdevice.VirtualDevice(b.Args[2].(VDLit)), string(b.Args[3].(Str))
		if size < 0 {
			return nil, fmt.Errorf("%w: negative size %d", ErrBadArg, size)
		}
		if align <= 0 || align&(align-1) != 0 {
			return nil, fmt.Errorf("%w: alignment %d is not a power of two", ErrBadArg, align)
		}
		vd, err := allocDevice(dev, scope)
		if err != nil {
			return nil, err
		}
		return StorageType{Device: vd}, nil

	case OpAllocTensor:
		shape, dt := tensor.Shape(b.Args[0].(ShapeLit)), tensor.DType(b.Args[1].(DTypeLit))
		if err := checkTensorLayout(shape, dt); err != nil {
			return nil, err
		}
		vd, err := allocDevice(vdevice.VirtualDevice(b.Args[2].(VDLit)), string(b.Args[3].(Str)))
		if err != nil {
			return nil, err
		}
		return TensorType{Shape: shape.Clone(), DType: dt, Device: vd}, nil

	case OpAllocTensorView:
		r := b.Args[0].(Ref)
		t, err := env.typeOf(r)
		if err != nil {
			return nil, err
		}
		st, ok := t.(StorageType)
		if !ok {
			return nil, fmt.Errorf("%w: %v must be a storage, is %v", ErrTypeMismatch, r, t)
		}
		off := int64(b.Args[1].(Int))
		shape, dt := tensor.Shape(b.Args[2].(ShapeLit)), tensor.DType(b.Args[3].(DTypeLit))
		if err := checkTensorLayout(shape, dt); err != nil {
			return nil, err
		}
		tt := TensorType{Shape: shape.Clone(), DType: dt, Device: st.Device}
		n, _ := tt.Bytes()
		if off < 0 || off%int64(dt.Size()) != 0 {
			return nil, fmt.Errorf("%w: offset %d is negative or not a multiple of the %s size", ErrBadArg, off, dt)
		}
		if size, ok := env.storageBytes(r); ok && (off > size || n > size-off) {
			return nil, fmt.Errorf("%w: view of %d bytes at offset %d does not fit %v (%d bytes)", ErrShape, n, off, r, size)
		}
		return tt, nil

	case OpCallPacked:
		if b.Args[0].(Str) == "" {
			return nil, fmt.Errorf("%w: empty function name", ErrBadArg)
		}
		for _, r := range b.Refs() {
			if _, err := env.typeOf(r); err != nil {
				return nil, err
			}
		}
		return CloneType(b.Type), nil

	case OpAllreduce, OpReduceScatter, OpCustomAllreduce:
		ts, err := tensors()
		if err != nil {
			return nil, err
		}
		if plan, ok := CustomAllreducePlan(b); ok {
			if plan == "" {
				err = fmt.Errorf("%w: custom_allreduce names an empty plan", ErrBadArg)
			}
		} else if b.Op == OpCustomAllreduce {
			err = symIn(1, AllreduceStrategies, "strategy")
		} else {
			err = symIn(1, ReduceOps, "reduction")
		}
		if err != nil {
			return nil, err
		}
		if err := sameDevice(ts); err != nil {
			return nil, err
		}
		x, out := ts[0], ts[1]
		if b.Op == OpReduceScatter {
			if err := checkMultiple(x, out, "input", "out"); err != nil {
				return nil, err
			}
		} else if err := sameLayout(x, out); err != nil {
			return nil, err
		}
		if s := x.Device.MemoryScope(); b.Op == OpCustomAllreduce && s != "" && s != ScopeIPC {
			return nil, fmt.Errorf("%w: custom_allreduce input must be in %q memory, is in %q", ErrDevice, ScopeIPC, s)
		}
		return nil, nil

	case OpAllgather, OpBroadcast, OpGelu:
		ts, err := tensors()
		if err != nil {
			return nil, err
		}
		if err := sameDevice(ts); err != nil {
			return nil, err
		}
		if b.Op == OpAllgather {
			return nil, checkMultiple(ts[1], ts[0], "out", "input")
		}
		return nil, sameLayout(ts[0], ts[1])

	case OpReshape:
		x, err := tensorArg(0)
		if err != nil {
			return nil, err
		}
		shape := tensor.Shape(b.Args[1].(ShapeLit))
		if err := checkTensorLayout(shape, x.DType); err != nil {
			return nil, err
		}
		n1, _ := x.Shape.NumElements()
		n2, _ := shape.NumElements()
		if n1 != n2 {
			return nil, fmt.Errorf("%w: reshape of %v (%d elements) to %v (%d elements)", ErrShape, x.Shape, n1, shape, n2)
		}
		return TensorType{Shape: shape.Clone(), DType: x.DType, Device: x.Device}, nil

	case OpDeviceCopy:
		ts, err := tensors()
		if err != nil {
			return nil, err
		}
		x, out := ts[0], ts[1]
		if err := sameLayout(x, out); err != nil {
			return nil, err
		}
		src, dst := vdevice.VirtualDevice(b.Args[1].(VDLit)), vdevice.VirtualDevice(b.Args[2].(VDLit))
		if !env.devices() {
			return nil, nil
		}
		if _, ok := vdevice.Join(x.Device.DevicePart(), src.DevicePart()); !ok {
			return nil, fmt.Errorf("%w: input is on %v, src says %v", ErrDevice, x.Device, src)
		}
		if _, ok := vdevice.Join(out.Device.DevicePart(), dst.DevicePart()); !ok {
			return nil, fmt.Errorf("%w: out is on %v, dst says %v", ErrDevice, out.Device, dst)
		}
		return nil, nil

	case OpMatmul, OpMatmulNT:
		ts, err := tensors()
		if err != nil {
			return nil, err
		}
		if err := sameDevice(ts); err != nil {
			return nil, err
		}
		a, w, out := ts[0], ts[1], ts[2]
		if a.DType != w.DType || a.DType != out.DType {
			return nil, fmt.Errorf("%w: %s dtypes %v, %v -> %v", ErrTypeMismatch, b.Op, a.DType, w.DType, out.DType)
		}
		if len(a.Shape) < 2 || len(w.Shape) != 2 {
			return nil, fmt.Errorf("%w: %s needs a of rank >= 2 and b of rank 2, got %v and %v", ErrShape, b.Op, a.Shape, w.Shape)
		}
		// b is [k, n] for matmul, [n, k] for matmul_nt.
		k, n := w.Shape[0], w.Shape[1]
		if b.Op == OpMatmulNT {
			k, n = n, k
		}
		r := len(a.Shape)
		if a.Shape[r-1] != k {
			return nil, fmt.Errorf("%w: %s inner dims differ: %v x %v", ErrShape, b.Op, a.Shape, w.Shape)
		}
		want := append(a.Shape[:r-1:r-1], n)
		if !out.Shape.Equal(want) {
			return nil, fmt.Errorf("%w: %s %v x %v gives %v, out is %v", ErrShape, b.Op, a.Shape, w.Shape, want, out.Shape)
		}
		return nil, nil

	case OpAdd:
		ts, err := tensors()
		if err != nil {
			return nil, err
		}
		if err := sameDevice(ts); err != nil {
			return nil, err
		}
		x, y, out := ts[0], ts[1], ts[2]
		if x.DType != y.DType || x.DType != out.DType {
			return nil, fmt.Errorf("%w: add dtypes %v, %v -> %v", ErrTypeMismatch, x.DType, y.DType, out.DType)
		}
		want, err := BroadcastShapes(x.Shape, y.Shape)
		if err != nil {
			return nil, err
		}
		if !out.Shape.Equal(want) {
			return nil, fmt.Errorf("%w: add of %v and %v gives %v, out is %v", ErrShape, x.Shape, y.Shape, want, out.Shape)
		}
		return nil, nil

	case OpEmbedding, OpRMSNorm, OpLayerNorm, OpRope, OpAttention, OpSilu, OpMul, OpArgmax:
		ts, err := tensors()
		if err != nil {
			return nil, err
		}
		if err := sameDevice(ts); err != nil {
			return nil, err
		}
		return nil, inferModelOp(b, ts)
	}
	return nil, fmt.Errorf("%w: %v", ErrUnknownOp, b.Op)
}

// isFloat reports the floating-point dtypes the model ops take.
func isFloat(dt tensor.DType) bool {
	return dt == tensor.Float32 || dt == tensor.Float16 || dt == tensor.BFloat16 || dt == tensor.Float64
}

// inferModelOp checks the operands of the ops a transformer decoder
// needs (ts are the tensor operands in order; the last is out).
func inferModelOp(b *Binding, ts []TensorType) error {
	out := ts[len(ts)-1]
	op := b.Op
	floats := func(xs ...TensorType) error {
		for _, x := range xs {
			if !isFloat(x.DType) {
				return fmt.Errorf("%w: %s of %s (float32, float16, bfloat16, float64)", ErrTypeMismatch, op, x.DType)
			}
			if x.DType != xs[0].DType {
				return fmt.Errorf("%w: %s dtypes differ: %s and %s", ErrTypeMismatch, op, xs[0].DType, x.DType)
			}
		}
		return nil
	}
	positions := func(p TensorType, t int64) error {
		if p.DType != tensor.Int32 || len(p.Shape) != 1 || p.Shape[0] != t {
			return fmt.Errorf("%w: %s positions must be int32 [%d], are %s%v", ErrShape, op, t, p.DType, p.Shape)
		}
		return nil
	}
	attr := func(i int, what string, positive bool) error {
		f, _ := b.FloatArg(i)
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || (positive && f == 0) {
			return fmt.Errorf("%w: %s %s %v", ErrBadArg, op, what, f)
		}
		return nil
	}
	same := func(x TensorType) error {
		if !x.Shape.Equal(out.Shape) || x.DType != out.DType {
			return fmt.Errorf("%w: %s input is %v %v, out is %v %v", ErrShape, op, x.Shape, x.DType, out.Shape, out.DType)
		}
		return nil
	}
	lastDim := func(x TensorType) int64 {
		if len(x.Shape) == 0 {
			return -1
		}
		return x.Shape[len(x.Shape)-1]
	}
	switch op {
	case OpEmbedding:
		ids, table := ts[0], ts[1]
		if ids.DType != tensor.Int32 {
			return fmt.Errorf("%w: embedding ids must be int32, are %s", ErrTypeMismatch, ids.DType)
		}
		if len(table.Shape) != 2 {
			return fmt.Errorf("%w: embedding table must be [vocab, hidden], is %v", ErrShape, table.Shape)
		}
		if err := floats(table, out); err != nil {
			return err
		}
		want := append(ids.Shape.Clone(), table.Shape[1])
		if !out.Shape.Equal(want) {
			return fmt.Errorf("%w: embedding of ids %v in %v gives %v, out is %v", ErrShape, ids.Shape, table.Shape, want, out.Shape)
		}
	case OpRMSNorm, OpLayerNorm:
		x, w := ts[0], ts[1]
		params := ts[1 : len(ts)-1]
		if err := floats(append([]TensorType{x, out}, params...)...); err != nil {
			return err
		}
		if err := same(x); err != nil {
			return err
		}
		for _, p := range params {
			if len(p.Shape) != 1 || p.Shape[0] != lastDim(x) || lastDim(x) < 1 {
				return fmt.Errorf("%w: %s of %v needs weights [%d], got %v", ErrShape, op, x.Shape, lastDim(x), w.Shape)
			}
		}
		return attr(len(b.Args)-2, "eps", false)
	case OpRope:
		x, pos := ts[0], ts[1]
		if err := floats(x, out); err != nil {
			return err
		}
		if err := same(x); err != nil {
			return err
		}
		if len(x.Shape) != 3 || x.Shape[2]%2 != 0 {
			return fmt.Errorf("%w: rope input must be [tokens, heads, head_dim] with an even head_dim, is %v", ErrShape, x.Shape)
		}
		if err := positions(pos, x.Shape[0]); err != nil {
			return err
		}
		if fs, ok := b.Args[2].(Floats); ok {
			if int64(len(fs)) != x.Shape[2]/2 {
				return fmt.Errorf("%w: rope table has %d inverse frequencies, head_dim %d needs %d", ErrBadArg, len(fs), x.Shape[2], x.Shape[2]/2)
			}
			for i, f := range fs {
				if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > math.MaxFloat32 {
					return fmt.Errorf("%w: rope inverse frequency %d is %v (finite, >= 0, a float32)", ErrBadArg, i, f)
				}
			}
			return nil
		}
		return attr(2, "theta", true)
	case OpAttention:
		q, k, v, kc, vc, pos := ts[0], ts[1], ts[2], ts[3], ts[4], ts[5]
		if err := floats(q, k, v, kc, vc, out); err != nil {
			return err
		}
		if err := same(q); err != nil {
			return err
		}
		if len(q.Shape) != 3 || len(k.Shape) != 3 || (len(kc.Shape) != 3 && len(kc.Shape) != 4) {
			return fmt.Errorf("%w: attention needs q, k, v [tokens, heads, head_dim] and caches [max_seq, kv_heads, head_dim] or [batch, max_seq, kv_heads, head_dim], got %v, %v, %v", ErrShape, q.Shape, k.Shape, kc.Shape)
		}
		t, hq, d, hkv := q.Shape[0], q.Shape[1], q.Shape[2], k.Shape[1]
		if len(kc.Shape) == 4 {
			// A batch: the tokens are batch equal runs, run i on cache i.
			if !vc.Shape.Equal(kc.Shape) || kc.Shape[0] < 1 || t%kc.Shape[0] != 0 {
				return fmt.Errorf("%w: attention of %d tokens over caches %v and %v (the tokens must split evenly over the batch)", ErrShape, t, kc.Shape, vc.Shape)
			}
			kc.Shape, vc.Shape = kc.Shape[1:], vc.Shape[1:]
		}
		if !v.Shape.Equal(k.Shape) || k.Shape[0] != t || k.Shape[2] != d {
			return fmt.Errorf("%w: attention q %v, k %v, v %v", ErrShape, q.Shape, k.Shape, v.Shape)
		}
		if hkv < 1 || hq%hkv != 0 {
			return fmt.Errorf("%w: attention %d query heads are not a multiple of %d kv heads", ErrShape, hq, hkv)
		}
		if !vc.Shape.Equal(kc.Shape) || kc.Shape[1] != hkv || kc.Shape[2] != d || kc.Shape[0] < 1 {
			return fmt.Errorf("%w: attention caches %v and %v for kv %v", ErrShape, kc.Shape, vc.Shape, k.Shape)
		}
		return positions(pos, t)
	case OpSilu:
		if err := floats(ts[0], out); err != nil {
			return err
		}
		return same(ts[0])
	case OpMul:
		x, y := ts[0], ts[1]
		if err := floats(x, y, out); err != nil {
			return err
		}
		want, err := BroadcastShapes(x.Shape, y.Shape)
		if err != nil {
			return err
		}
		if !out.Shape.Equal(want) {
			return fmt.Errorf("%w: mul of %v and %v gives %v, out is %v", ErrShape, x.Shape, y.Shape, want, out.Shape)
		}
	case OpArgmax:
		x := ts[0]
		if err := floats(x); err != nil {
			return err
		}
		if out.DType != tensor.Int32 {
			return fmt.Errorf("%w: argmax out must be int32, is %s", ErrTypeMismatch, out.DType)
		}
		if len(x.Shape) < 1 || x.Shape[len(x.Shape)-1] < 1 || !out.Shape.Equal(x.Shape[:len(x.Shape)-1]) {
			return fmt.Errorf("%w: argmax of %v gives %v, out is %v", ErrShape, x.Shape, x.Shape[:max(len(x.Shape)-1, 0)], out.Shape)
		}
	}
	return nil
}

// allocDevice is an allocation's virtual device: the device argument with
// the scope argument as its memory scope. The scope lives in its own
// argument, so the device argument must not carry another one.
func allocDevice(dev vdevice.VirtualDevice, scope string) (vdevice.VirtualDevice, error) {
	if scope == "" {
		return vdevice.VirtualDevice{}, fmt.Errorf("%w: empty memory scope (use %q)", ErrBadArg, ScopeGlobal)
	}
	if s := dev.MemoryScope(); s != "" && s != scope {
		return vdevice.VirtualDevice{}, fmt.Errorf("%w: device %v has scope %q, the scope argument says %q", ErrDevice, dev, s, scope)
	}
	return dev.WithScope(scope), nil
}

func checkTensorLayout(shape tensor.Shape, dt tensor.DType) error {
	if !dt.Valid() {
		return fmt.Errorf("%w: invalid dtype %v", ErrBadArg, dt)
	}
	if err := shape.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrShape, err)
	}
	if n, _ := shape.NumElements(); n > (1<<62)/int64(dt.Size()) {
		return fmt.Errorf("%w: %v of %v is too large", ErrShape, shape, dt)
	}
	return nil
}

// checkMultiple checks that big holds a whole number of small's elements
// (the world size is not known at compile time) of the same dtype.
func checkMultiple(big, small TensorType, bigName, smallName string) error {
	if big.DType != small.DType {
		return fmt.Errorf("%w: %s is %v, %s is %v", ErrTypeMismatch, bigName, big.DType, smallName, small.DType)
	}
	nb, _ := big.Shape.NumElements()
	ns, _ := small.Shape.NumElements()
	if ns == 0 || nb%ns != 0 {
		return fmt.Errorf("%w: %s has %d elements, not a multiple of the %s's %d", ErrShape, bigName, nb, smallName, ns)
	}
	return nil
}

// BroadcastShapes returns the numpy broadcast of two shapes: aligned from
// the right, each pair of dims equal or one of them 1.
func BroadcastShapes(a, b tensor.Shape) (tensor.Shape, error) {
	n := max(len(a), len(b))
	out := make(tensor.Shape, n)
	for i := 1; i <= n; i++ {
		da, db := int64(1), int64(1)
		if i <= len(a) {
			da = a[len(a)-i]
		}
		if i <= len(b) {
			db = b[len(b)-i]
		}
		switch {
		case da == db || db == 1:
			out[n-i] = da
		case da == 1:
			out[n-i] = db
		default:
			return nil, fmt.Errorf("%w: %v and %v do not broadcast", ErrShape, a, b)
		}
	}
	return out, nil
}
