package interp

import (
	"fmt"
	"runtime"
	"time"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/kernels"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// Run calls function name of a loaded module on this worker. Every worker
// of the session must run the same calls in the same order (collectives
// and IPC allocations are collective). It returns the function's result:
// the value itself for one result, nil for none, and an []any for more
// (see ResultFunc).
func (m *Module) Run(env registry.Env, name string, args []any) (any, error) {
	return m.run(env, name, args, nil)
}

// runMode changes how a run treats allocations, for Capture.
type runMode struct {
	// record, when set, receives every result allocation (by pc).
	record map[int]any
	// reuse, when set, supplies them instead of allocating (a capture
	// may not allocate), and refuses work that would run on the host.
	reuse map[int]any
}

func (m *Module) run(env registry.Env, name string, args []any, mode *runMode) (any, error) {
	t0 := time.Now()
	defer func() { m.stats.calls++; m.stats.host += time.Since(t0) }()
	p, ok := m.funcs[name]
	if !ok {
		return nil, fmt.Errorf("%w: worker %d: no function @%s in the module (has %v)", ErrArgs, env.WorkerID(), name, m.Funcs())
	}
	if len(args) != len(p.params) {
		return nil, fmt.Errorf("%w: worker %d: func @%s takes %d arguments, got %d", ErrArgs, env.WorkerID(), name, len(p.params), len(args))
	}
	regs := make([]any, p.nslots)
	for i, prm := range p.params {
		v, err := checkParam(prm, args[i])
		if err != nil {
			return nil, fmt.Errorf("%w: worker %d: func @%s: argument %d (%%%s): %v", ErrArgs, env.WorkerID(), name, i, prm.name, err)
		}
		regs[prm.slot] = v
	}
	p.aliased = aliasedFixed(p, regs)
	if m.gpu != nil {
		m.gpu.BeginCall()
	}
	for pc := range p.code {
		in := &p.code[pc]
		m.stats.ops++
		if err := m.exec(env, p, pc, in, regs, mode); err != nil {
			return nil, fmt.Errorf("vm: worker %d: func @%s: binding %d (%s): %w", env.WorkerID(), name, in.index, in.text, err)
		}
	}
	switch len(p.results) {
	case 0:
		return nil, nil
	case 1:
		return regs[p.results[0]], nil
	}
	out := make([]any, len(p.results))
	for i, s := range p.results {
		out[i] = regs[s]
	}
	return out, nil
}

// checkParam checks an argument against its parameter's type.
func checkParam(prm param, v any) (any, error) {
	switch t := prm.typ.(type) {
	case ir.TensorType:
		x, ok := v.(*tensor.Tensor)
		if !ok || x == nil {
			return nil, fmt.Errorf("want a tensor %v, got %T", t, v)
		}
		if x.DType() != t.DType || !x.Shape().Equal(t.Shape) {
			return nil, fmt.Errorf("want %s%v, got %s%v", t.DType, t.Shape, x.DType(), x.Shape())
		}
		if x.Device().Kind != prm.dev.Kind {
			return nil, fmt.Errorf("want a tensor on %v, got one on %v", prm.dev, x.Device())
		}
		return x, nil
	case ir.StorageType:
		st, ok := storageOf(v)
		if !ok {
			return nil, fmt.Errorf("want a storage, got %T", v)
		}
		return st, nil
	}
	return v, nil
}

func tensorAt(regs []any, slot int) (*tensor.Tensor, error) {
	t, ok := regs[slot].(*tensor.Tensor)
	if !ok || t == nil {
		return nil, fmt.Errorf("%w: operand is a %T, not a tensor", ErrShape, regs[slot])
	}
	return t, nil
}

// exec runs one instruction.
func (m *Module) exec(env registry.Env, p *program, pc int, in *instr, regs []any, mode *runMode) error {
	if in.cached && p.cache[pc] != nil {
		regs[in.def] = p.cache[pc]
		return nil
	}
	if mode != nil && mode.reuse != nil {
		if v, ok := mode.reuse[pc]; ok {
			regs[in.def] = v
			return nil
		}
		if err := capturable(in, regs); err != nil {
			return err
		}
	}
	// ts loads the value operands as tensors.
	ts := func() ([]*tensor.Tensor, error) {
		out := make([]*tensor.Tensor, len(in.refs))
		for i, s := range in.refs {
			t, err := tensorAt(regs, s)
			if err != nil {
				return nil, err
			}
			out[i] = t
		}
		return out, nil
	}
	var v any
	switch in.op {
	case ir.OpAlias:
		v = regs[in.refs[0]]

	case ir.OpAllocStorage:
		t, err := env.Alloc(tensor.Uint8, tensor.Shape{in.n}, in.dev, in.scope)
		if err != nil {
			return err
		}
		if err := checkAlign(t.Storage(), in.align); err != nil {
			return err
		}
		v = t.Storage()

	case ir.OpAllocTensor:
		t, err := env.Alloc(in.dtype, in.shape, in.dev, in.scope)
		if err != nil {
			return err
		}
		v = t

	case ir.OpAllocTensorView:
		st, ok := storageOf(regs[in.refs[0]])
		if !ok {
			return fmt.Errorf("%w: view of a %T, not a storage", ErrShape, regs[in.refs[0]])
		}
		t, err := tensor.View(st, in.n, in.dtype, in.shape)
		if err != nil {
			return err
		}
		v = t

	case ir.OpReshape:
		x, err := tensorAt(regs, in.refs[0])
		if err != nil {
			return err
		}
		t, err := x.Reshape(in.shape)
		if err != nil {
			return err
		}
		v = t

	case ir.OpCallPacked:
		args := make([]any, len(in.args))
		for i, a := range in.args {
			if a.slot >= 0 {
				args[i] = regs[a.slot]
			} else {
				args[i] = a.val
			}
		}
		r, err := in.fn(env, args)
		if err != nil {
			return fmt.Errorf("call_packed %q: %w", in.fname, err)
		}
		if in.def < 0 {
			return nil
		}
		if v, err = checkResult(in, r); err != nil {
			return fmt.Errorf("call_packed %q: %w", in.fname, err)
		}

	case ir.OpAllreduce, ir.OpAllgather, ir.OpReduceScatter, ir.OpBroadcast:
		t, err := ts()
		if err != nil {
			return err
		}
		return collective(env, in, t[0], t[1])

	case ir.OpCustomAllreduce:
		t, err := ts()
		if err != nil {
			return err
		}
		if in.plan != "" {
			r := m.plans[in.plan]
			if r == nil {
				return fmt.Errorf("%w: custom_allreduce plan %q was not loaded", ErrLoad, in.plan)
			}
			g := registry.BeginGPU(env)
			err := r.Run(env.Context(), t[0], t[1], reduce.Sum)
			g.End("allreduce plan "+in.plan, t[0].NumBytes())
			return err
		}
		if t[0].IsHost() || t[1].IsHost() {
			return fmt.Errorf("%w: custom_allreduce of host memory: the IPC all-reduce runs on GPUs only", ErrUnsupported)
		}
		return registry.CustomAllReduce(env, t[0], t[1], "sum", in.strat)

	case ir.OpDeviceCopy:
		t, err := ts()
		if err != nil {
			return err
		}
		return deviceCopy(env, t[0], t[1])

	case ir.OpMatmul, ir.OpMatmulNT, ir.OpAdd, ir.OpGelu:
		t, err := ts()
		if err != nil {
			return err
		}
		return m.withFixed(p, in, func() error { return m.kernel(env, in.op, t) })

	case ir.OpEmbedding, ir.OpRMSNorm, ir.OpLayerNorm, ir.OpRope, ir.OpAttention, ir.OpSilu, ir.OpMul, ir.OpArgmax:
		t, err := ts()
		if err != nil {
			return err
		}
		return m.withFixed(p, in, func() error { return m.modelKernel(env, in, t) })

	case opGated:
		t, err := ts()
		if err != nil {
			return err
		}
		return m.withFixed(p, in, func() error { return m.gated(env, t) })

	case opNT3:
		t, err := ts()
		if err != nil {
			return err
		}
		return m.withFixed(p, in, func() error { return m.nt3(env, t) })

	case opAddNorm:
		t, err := ts()
		if err != nil {
			return err
		}
		return m.withFixed(p, in, func() error { return m.addNorm(env, in, t) })

	case opRopeAttn:
		t, err := ts()
		if err != nil {
			return err
		}
		return m.withFixed(p, in, func() error { return m.ropeAttn(env, in, t) })

	case opNop:
		return nil

	default:
		return fmt.Errorf("%w: op %v", ErrUnsupported, in.op)
	}
	regs[in.def] = v
	if in.cached {
		p.cache[pc] = v
	} else if mode != nil && mode.record != nil && in.alloc {
		mode.record[pc] = v
	}
	return nil
}

// capturable refuses, inside a capture, instructions whose work would run
// on the host once (at capture) instead of at every replay.
func capturable(in *instr, regs []any) error {
	switch in.op {
	case ir.OpAlias, ir.OpAllocTensorView, ir.OpReshape:
		return nil // views: no work
	case ir.OpCallPacked:
		return fmt.Errorf("%w: call_packed %q in a captured function: its host work would run once, not at every replay", ErrUnsupported, in.fname)
	case ir.OpDeviceCopy:
		return fmt.Errorf("%w: device_copy in a captured function: it goes through the host", ErrUnsupported)
	}
	for _, s := range in.refs {
		if t, ok := regs[s].(*tensor.Tensor); ok && t.IsHost() {
			return fmt.Errorf("%w: %v of host memory in a captured function: it runs on the host, once, not at every replay", ErrUnsupported, in.op)
		}
	}
	return nil
}

// checkResult checks a packed call's result against the declared type.
func checkResult(in *instr, r any) (any, error) {
	switch t := in.resType.(type) {
	case ir.StorageType:
		st, ok := storageOf(r)
		if !ok {
			return nil, fmt.Errorf("%w: declared %v, returned %T", ErrShape, t, r)
		}
		if in.scope != "" && st.Scope != in.scope {
			return nil, fmt.Errorf("%w: declared scope %q, returned storage in %q", ErrShape, in.scope, st.Scope)
		}
		return st, nil
	case ir.TensorType:
		x, ok := r.(*tensor.Tensor)
		if !ok || x == nil || x.DType() != t.DType || !x.Shape().Equal(t.Shape) {
			return nil, fmt.Errorf("%w: declared %v, returned %v", ErrShape, t, r)
		}
		return x, nil
	}
	return r, nil
}

// collective runs allreduce, allgather, reduce_scatter or broadcast (from
// worker 0) over all workers of the session.
func collective(env registry.Env, in *instr, x, out *tensor.Tensor) error {
	c, err := registry.Comm(env, false)
	if err != nil {
		return err
	}
	ctx := env.Context()
	switch in.op {
	case ir.OpAllreduce:
		return c.AllReduce(ctx, x, out, in.redOp)
	case ir.OpAllgather:
		return c.AllGather(ctx, x, out)
	case ir.OpReduceScatter:
		return c.ReduceScatter(ctx, x, out, in.redOp)
	}
	return c.Broadcast(ctx, x, out, 0)
}

// deviceCopy copies x into out between host and the worker's GPU (GPU to
// GPU goes through the host: a worker has one GPU, so this only happens
// for copies between scopes).
func deviceCopy(env registry.Env, x, out *tensor.Tensor) error {
	if !tensor.SameLayout(x, out) {
		return fmt.Errorf("%w: device_copy of %s%v into %s%v", ErrShape, x.DType(), x.Shape(), out.DType(), out.Shape())
	}
	h, err := registry.ToHost(env, x)
	if err != nil {
		return err
	}
	return registry.FromHost(env, out, h)
}

// gpuKernels returns the module's GPU kernels on env's worker, made at
// the first GPU op and freed with the module.
func (m *Module) gpuKernels(env registry.Env) (*kernels.GPU, error) {
	if m.gpu != nil {
		return m.gpu, nil
	}
	g, err := kernels.Open(env)
	if err != nil {
		return nil, err
	}
	m.gpu = g
	runtime.AddCleanup(m, func(g *kernels.GPU) { g.Close() }, g)
	return g, nil
}

// kernel runs matmul, matmul_nt, add or gelu on the operands' device.
func (m *Module) kernel(env registry.Env, op ir.Op, t []*tensor.Tensor) error {
	host := true
	for _, x := range t {
		host = host && x.IsHost()
	}
	if !host {
		g, err := m.gpuKernels(env)
		if err != nil {
			return err
		}
		span := registry.BeginGPU(env)
		switch op {
		case ir.OpMatmul:
			err = g.Matmul(t[0], t[1], t[2])
		case ir.OpMatmulNT:
			err = g.MatmulNT(t[0], t[1], t[2])
		case ir.OpAdd:
			err = g.Add(t[0], t[1], t[2])
		default:
			err = g.Gelu(t[0], t[1])
		}
		out := t[len(t)-1]
		span.End(op.String(), out.NumBytes())
		return err
	}
	switch op {
	case ir.OpMatmul:
		return kernels.CPUMatmul(t[0], t[1], t[2])
	case ir.OpMatmulNT:
		return kernels.CPUMatmulNT(t[0], t[1], t[2])
	case ir.OpAdd:
		return kernels.CPUAdd(t[0], t[1], t[2])
	}
	return kernels.CPUGelu(t[0], t[1])
}

// modelKernel runs one of the decoder ops on the operands' device (every
// operand on the host, or every operand on the worker's GPU).
func (m *Module) modelKernel(env registry.Env, in *instr, t []*tensor.Tensor) error {
	host, dev := 0, 0
	for _, x := range t {
		if x.IsHost() {
			host++
		} else {
			dev++
		}
	}
	if host > 0 && dev > 0 {
		return fmt.Errorf("%w: %v with operands on the host and on the GPU", ErrUnsupported, in.op)
	}
	if dev > 0 {
		g, err := m.gpuKernels(env)
		if err != nil {
			return err
		}
		span := registry.BeginGPU(env)
		if in.op == ir.OpRope && in.freqs != nil {
			err = g.RopeTable(t, in.freqs)
		} else {
			err = g.Model(in.op, in.f, t)
		}
		span.End(in.op.String(), t[len(t)-1].NumBytes())
		return err
	}
	switch in.op {
	case ir.OpEmbedding:
		return kernels.CPUEmbedding(t[0], t[1], t[2])
	case ir.OpRMSNorm:
		return kernels.CPURMSNorm(t[0], t[1], in.f, t[2])
	case ir.OpLayerNorm:
		return kernels.CPULayerNorm(t[0], t[1], t[2], in.f, t[3])
	case ir.OpRope:
		if in.freqs != nil {
			return kernels.CPURopeTable(t[0], t[1], in.freqs, t[2])
		}
		return kernels.CPURope(t[0], t[1], in.f, t[2])
	case ir.OpAttention:
		return kernels.CPUAttention(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
	case ir.OpSilu:
		return kernels.CPUSilu(t[0], t[1])
	case ir.OpMul:
		return kernels.CPUMul(t[0], t[1], t[2])
	case ir.OpArgmax:
		return kernels.CPUArgmax(t[0], t[1])
	}
	return fmt.Errorf("%w: op %v", ErrUnsupported, in.op)
}
