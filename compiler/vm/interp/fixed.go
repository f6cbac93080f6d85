package interp

import (
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/tensor"
)

// Fixed weights. A skinny product or residual norm launched with PDL
// may read its weights before it waits for the kernel before it
// (kernels.GPU.SetFixedWeights) when no kernel of the call writes them:
// then the loads overlap the previous kernel's tail. The load-time half
// of that promise is here: a weight operand is fixed when it is (a view
// of) a parameter that no instruction of the function writes. The
// run-time half: no parameter the function writes shares a storage with
// a fixed one (aliasedFixed, per call), and the GPU side counts the
// call's launches (the first kernel of a call waits for everything
// before it, so no kernel of an earlier call can still be writing).

// weightRefs are the positions of an instruction's weight operands (the
// kernels SetFixedWeights speaks for), nil for other instructions.
func weightRefs(in *instr) []int {
	switch in.op {
	case ir.OpMatmulNT:
		return []int{1}
	case opGated:
		return []int{1, 2}
	case opNT3:
		return []int{1, 2, 3}
	case opAddNorm:
		return []int{3} // the norm weight
	}
	return nil
}

// writesOf lists the slots an instruction may write, erring on the side
// of more: every operand of an op it does not know, every slot argument
// of call_packed.
func writesOf(in *instr) []int {
	switch {
	case in.op.IsView(), in.op == ir.OpAllocStorage, in.op == ir.OpAllocTensor, in.op == opNop:
		return nil
	case in.op == ir.OpCallPacked:
		var s []int
		for _, a := range in.args {
			if a.slot >= 0 {
				s = append(s, a.slot)
			}
		}
		return s
	}
	switch in.op {
	case ir.OpMatmul, ir.OpMatmulNT, ir.OpAdd, ir.OpGelu, ir.OpEmbedding, ir.OpRMSNorm, ir.OpLayerNorm, ir.OpRope,
		ir.OpSilu, ir.OpMul, ir.OpArgmax, ir.OpAllreduce, ir.OpAllgather, ir.OpReduceScatter, ir.OpBroadcast,
		ir.OpCustomAllreduce, ir.OpDeviceCopy:
		if len(in.refs) > 0 {
			return in.refs[len(in.refs)-1:]
		}
		return nil
	case opGated:
		return in.refs[3:] // g, u, a, out
	case opNT3:
		return in.refs[4:] // the three outputs
	case opAddNorm:
		return []int{in.refs[2], in.refs[4]} // sum, out
	}
	return in.refs // attention, rope+attention (the caches), anything new
}

// markFixed sets fixedW on every instruction of code whose weight operands
// are all fixed (nparams: the parameters are slots 0 .. nparams-1) and
// returns the parameters some instruction writes and those a fixed
// weight is a view of.
func markFixed(code []instr, nparams int) (written, fixed []int) {
	parent := map[int]int{}
	for i := range code {
		if in := &code[i]; in.op.IsView() && in.def >= 0 && len(in.refs) > 0 {
			parent[in.def] = in.refs[0]
		}
	}
	root := func(s int) int {
		for range len(parent) + 1 {
			p, ok := parent[s]
			if !ok {
				break
			}
			s = p
		}
		return s
	}
	w := map[int]bool{}
	for i := range code {
		for _, s := range writesOf(&code[i]) {
			w[root(s)] = true
		}
	}
	f := map[int]bool{}
	for i := range code {
		in := &code[i]
		pos := weightRefs(in)
		ok := len(pos) > 0
		for _, j := range pos {
			r := root(in.refs[j])
			ok = ok && r < nparams && !w[r]
		}
		in.fixedW = ok
		if ok {
			for _, j := range pos {
				f[root(in.refs[j])] = true
			}
		}
	}
	for s := range nparams {
		if w[s] {
			written = append(written, s)
		}
		if f[s] {
			fixed = append(fixed, s)
		}
	}
	return written, fixed
}

// aliasedFixed reports whether a parameter the function writes shares a
// storage with a fixed weight parameter in this call's arguments (the
// caller passed one tensor twice): then no weight is fixed this call.
func aliasedFixed(p *program, regs []any) bool {
	if len(p.fixedParams) == 0 || len(p.writtenParams) == 0 {
		return false
	}
	seen := map[*tensor.Storage]bool{}
	for _, s := range p.writtenParams {
		if st, ok := storageOf(regs[s]); ok {
			seen[st] = true
		}
	}
	for _, s := range p.fixedParams {
		if st, ok := storageOf(regs[s]); ok && seen[st] {
			return true
		}
	}
	return false
}

// withFixed runs f, a product or norm, with the GPU told its weights are fixed
// when they are (in.fixedW, and not aliased this call).
func (m *Module) withFixed(p *program, in *instr, f func() error) error {
	if !in.fixedW || p.aliased || m.gpu == nil {
		return f()
	}
	g := m.gpu
	g.SetFixedWeights(true)
	defer g.SetFixedWeights(false)
	return f()
}
