package ir

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

// FuncBuilder builds a function binding by binding, inferring result
// types. Errors are sticky: the first one is kept, later calls do nothing
// and return "", and Finish returns it, so a chain of calls needs one
// check at the end. Names are hints: a name already in use (or empty)
// gets a numeric suffix, so the returned Ref is the name to use.
type FuncBuilder struct {
	f     *Function
	env   *funcEnv
	names map[string]int
	block *Block
	err   error
	done  bool
}

// NewFunc starts a function.
func NewFunc(name string) *FuncBuilder {
	b := &FuncBuilder{
		f:     &Function{Name: name},
		env:   &funcEnv{defined: map[Ref]Type{}, later: map[Ref]bool{}, sizes: map[Ref]int64{}},
		names: map[string]int{},
	}
	if !IsName(name) {
		b.err = fmt.Errorf("ir: builder: %w: bad function name %q", ErrBadArg, name)
	}
	return b
}

// Err returns the first error so far.
func (b *FuncBuilder) Err() error { return b.err }

func (b *FuncBuilder) fail(err error) {
	if b.err == nil {
		b.err = fmt.Errorf("ir: builder: func @%s: %w", b.f.Name, err)
	}
}

// fresh returns an unused value name based on hint.
func (b *FuncBuilder) fresh(hint string) string {
	if hint == "" {
		hint = "v"
	}
	name := hint
	for {
		if _, used := b.env.defined[Ref(name)]; !used {
			return name
		}
		b.names[hint]++
		name = hint + "." + strconv.Itoa(b.names[hint])
	}
}

// Param adds a parameter. Parameters must come before the first binding.
func (b *FuncBuilder) Param(name string, t Type) Ref {
	if b.err != nil {
		return ""
	}
	if len(b.f.Blocks) > 0 {
		b.fail(fmt.Errorf("%w: parameter %q after the first binding", ErrBadArg, name))
		return ""
	}
	if !IsName(name) {
		b.fail(fmt.Errorf("%w: bad parameter name %q", ErrBadArg, name))
		return ""
	}
	if t == nil {
		b.fail(fmt.Errorf("%w: parameter %q has no type", ErrTypeMismatch, name))
		return ""
	}
	name = b.fresh(name)
	b.f.Params = append(b.f.Params, Param{Name: name, Type: CloneType(t)})
	b.env.defined[Ref(name)] = CloneType(t)
	return Ref(name)
}

// NewBlock ends the current block; later bindings go to a new one. (The
// first binding opens the first block by itself.)
func (b *FuncBuilder) NewBlock() {
	b.block = nil
}

// Emit appends a binding. When result is not "" the binding defines a
// value named after it; its type is inferred (for call_packed, declared
// must give it; otherwise declared may be nil). It returns the value's
// Ref, or "" for ops without a result or after an error.
func (b *FuncBuilder) Emit(result string, op Op, declared Type, args ...Arg) Ref {
	if b.err != nil {
		return ""
	}
	if b.done {
		b.fail(errors.New("Emit after Finish"))
		return ""
	}
	if result != "" && !IsName(result) {
		b.fail(fmt.Errorf("%w: bad value name %q", ErrBadArg, result))
		return ""
	}
	bd := &Binding{Op: op, Args: args, Type: CloneType(declared)}
	if result != "" {
		bd.Result = b.fresh(result)
		if op != OpCallPacked && declared == nil {
			bd.Type = ObjectType{} // placeholder so checkArgs passes; replaced below
		}
	}
	if err := checkArgs(bd); err != nil {
		b.fail(fmt.Errorf("%s: %w", op, err))
		return ""
	}
	got, err := infer(bd, b.env)
	if err != nil {
		b.fail(fmt.Errorf("%s: %w", op, err))
		return ""
	}
	if bd.Result != "" {
		if declared != nil && op != OpCallPacked && !TypeEqual(got, declared) {
			b.fail(fmt.Errorf("%s: %w: declared %v, the op gives %v", op, ErrTypeMismatch, declared, got))
			return ""
		}
		bd.Type = got
		b.env.defined[Ref(bd.Result)] = got
		if op == OpAllocStorage {
			b.env.sizes[Ref(bd.Result)] = int64(args[0].(Int))
		}
	}
	if b.block == nil {
		b.block = &Block{}
		b.f.Blocks = append(b.f.Blocks, b.block)
	}
	b.block.Bindings = append(b.block.Bindings, bd)
	return Ref(bd.Result)
}

// AllocStorage emits %name = alloc_storage(bytes, alignment, device, scope).
func (b *FuncBuilder) AllocStorage(name string, bytes, alignment int64, dev vdevice.VirtualDevice, scope string) Ref {
	return b.Emit(name, OpAllocStorage, nil, Int(bytes), Int(alignment), VDLit(dev), Str(scope))
}

// AllocTensor emits %name = alloc_tensor(shape, dtype, device, scope); an
// empty scope means "global".
func (b *FuncBuilder) AllocTensor(name string, shape tensor.Shape, dt tensor.DType, dev vdevice.VirtualDevice, scope string) Ref {
	if scope == "" {
		scope = ScopeGlobal
	}
	return b.Emit(name, OpAllocTensor, nil, ShapeLit(shape.Clone()), DTypeLit(dt), VDLit(dev), Str(scope))
}

// View emits %name = alloc_tensor(storage, offset, shape, dtype).
func (b *FuncBuilder) View(name string, storage Ref, offset int64, shape tensor.Shape, dt tensor.DType) Ref {
	return b.Emit(name, OpAllocTensorView, nil, storage, Int(offset), ShapeLit(shape.Clone()), DTypeLit(dt))
}

// CallPacked emits a call of a registered function. With a result name
// the call defines a value of type result; with name "" and result nil it
// defines none.
func (b *FuncBuilder) CallPacked(name string, result Type, fn string, args ...Arg) Ref {
	return b.Emit(name, OpCallPacked, result, append([]Arg{Str(fn)}, args...)...)
}

// Alias emits %name = %x.
func (b *FuncBuilder) Alias(name string, x Ref) Ref { return b.Emit(name, OpAlias, nil, x) }

// Reshape emits %name = reshape(%x, shape).
func (b *FuncBuilder) Reshape(name string, x Ref, shape tensor.Shape) Ref {
	return b.Emit(name, OpReshape, nil, x, ShapeLit(shape.Clone()))
}

// Allreduce emits allreduce(%x, op, %out).
func (b *FuncBuilder) Allreduce(x Ref, op string, out Ref) {
	b.Emit("", OpAllreduce, nil, x, Sym(op), out)
}

// Allgather emits allgather(%x, %out).
func (b *FuncBuilder) Allgather(x, out Ref) { b.Emit("", OpAllgather, nil, x, out) }

// ReduceScatter emits reduce_scatter(%x, op, %out).
func (b *FuncBuilder) ReduceScatter(x Ref, op string, out Ref) {
	b.Emit("", OpReduceScatter, nil, x, Sym(op), out)
}

// Broadcast emits broadcast(%x, %out).
func (b *FuncBuilder) Broadcast(x, out Ref) { b.Emit("", OpBroadcast, nil, x, out) }

// CustomAllreduce emits custom_allreduce(%x, strategy, %out); a strategy
// "plan:NAME" names an execution plan (StrategyArg).
func (b *FuncBuilder) CustomAllreduce(x Ref, strategy string, out Ref) {
	b.Emit("", OpCustomAllreduce, nil, x, StrategyArg(strategy), out)
}

// DeviceCopy emits device_copy(%x, src, dst, %out).
func (b *FuncBuilder) DeviceCopy(x Ref, src, dst vdevice.VirtualDevice, out Ref) {
	b.Emit("", OpDeviceCopy, nil, x, VDLit(src), VDLit(dst), out)
}

// Matmul emits matmul(%a, %w, %out).
func (b *FuncBuilder) Matmul(a, w, out Ref) { b.Emit("", OpMatmul, nil, a, w, out) }

// MatmulNT emits matmul_nt(%a, %w, %out): a times the transpose of w
// ([out, in], nn.Linear's layout).
func (b *FuncBuilder) MatmulNT(a, w, out Ref) { b.Emit("", OpMatmulNT, nil, a, w, out) }

// Add emits add(%x, %y, %out).
func (b *FuncBuilder) Add(x, y, out Ref) { b.Emit("", OpAdd, nil, x, y, out) }

// Gelu emits gelu(%x, %out).
func (b *FuncBuilder) Gelu(x, out Ref) { b.Emit("", OpGelu, nil, x, out) }

// Embedding emits embedding(%ids, %table, %out).
func (b *FuncBuilder) Embedding(ids, table, out Ref) { b.Emit("", OpEmbedding, nil, ids, table, out) }

// RMSNorm emits rms_norm(%x, %w, eps, %out).
func (b *FuncBuilder) RMSNorm(x, w Ref, eps float64, out Ref) {
	b.Emit("", OpRMSNorm, nil, x, w, Float(eps), out)
}

// LayerNorm emits layer_norm(%x, %w, %bias, eps, %out).
func (b *FuncBuilder) LayerNorm(x, w, bias Ref, eps float64, out Ref) {
	b.Emit("", OpLayerNorm, nil, x, w, bias, Float(eps), out)
}

// Rope emits rope(%x, %pos, theta, %out).
func (b *FuncBuilder) Rope(x, pos Ref, theta float64, out Ref) {
	b.Emit("", OpRope, nil, x, pos, Float(theta), out)
}

// RopeTable emits rope(%x, %pos, [inv_freq...], %out): the table form,
// angle float32(pos)·invFreq[i] (len(invFreq) = head_dim/2).
func (b *FuncBuilder) RopeTable(x, pos Ref, invFreq []float32, out Ref) {
	fs := make(Floats, len(invFreq))
	for i, f := range invFreq {
		fs[i] = float64(f)
	}
	b.Emit("", OpRope, nil, x, pos, fs, out)
}

// Attention emits attention(%q, %k, %v, %kCache, %vCache, %pos, %out).
func (b *FuncBuilder) Attention(q, k, v, kCache, vCache, pos, out Ref) {
	b.Emit("", OpAttention, nil, q, k, v, kCache, vCache, pos, out)
}

// Silu emits silu(%x, %out).
func (b *FuncBuilder) Silu(x, out Ref) { b.Emit("", OpSilu, nil, x, out) }

// Mul emits mul(%x, %y, %out).
func (b *FuncBuilder) Mul(x, y, out Ref) { b.Emit("", OpMul, nil, x, y, out) }

// Argmax emits argmax(%x, %out).
func (b *FuncBuilder) Argmax(x, out Ref) { b.Emit("", OpArgmax, nil, x, out) }

// TypeOf returns the type of a value defined so far.
func (b *FuncBuilder) TypeOf(r Ref) (Type, bool) {
	t, ok := b.env.defined[r]
	return t, ok
}

// Return sets the returned values.
func (b *FuncBuilder) Return(results ...Ref) {
	if b.err != nil {
		return
	}
	for _, r := range results {
		if _, err := b.env.typeOf(r); err != nil {
			b.fail(fmt.Errorf("return: %w", err))
			return
		}
	}
	b.f.Results = append([]Ref(nil), results...)
}

// Finish returns the function, verified, or the first error.
func (b *FuncBuilder) Finish() (*Function, error) {
	if b.err != nil {
		return nil, b.err
	}
	b.done = true
	if err := VerifyFunction(b.f); err != nil {
		return nil, fmt.Errorf("ir: builder: %w", err)
	}
	return b.f, nil
}

// Tensor is a shorthand for a TensorType.
func Tensor(shape tensor.Shape, dt tensor.DType, dev vdevice.VirtualDevice) TensorType {
	return TensorType{Shape: shape.Clone(), DType: dt, Device: dev}
}
