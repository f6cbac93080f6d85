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
//
// A decode attention reads its positions and its caches' rows before
// each sequence's position early the same way. Its promise: the
// positions are a parameter no instruction writes (a fixed one, as a
// weight), and each cache is a parameter that this instruction alone
// writes (a sole one): the attention writes only the row at each
// position, so the rows before it were written by earlier calls. Per
// call, no other written parameter may share a sole one's storage.

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

// attnRefs are the positions of an attention's caches (k, v) and of its
// positions operand; ok false for other instructions.
func attnRefs(in *instr) (kc, vc, pos int, ok bool) {
	if in.op == ir.OpAttention && len(in.refs) == 7 || in.op == opRopeAttn && len(in.refs) == 9 {
		return 3, 4, 5, true
	}
	return 0, 0, 0, false
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
	if kc, vc, _, ok := attnRefs(in); ok {
		// the caches (the appended rows), out; rope+attention also its
		// rotated q and k where it runs as three ops
		return append([]int{in.refs[kc], in.refs[vc]}, in.refs[6:]...)
	}
	return in.refs // anything new
}

// markFixed sets fixedW on every instruction of code whose weight operands
// are all fixed, and on every attention whose positions are fixed and
// whose caches are sole (nparams: the parameters are slots 0 ..
// nparams-1); it returns the parameters some instruction writes, those
// a fixed operand is a view of and the sole caches.
func markFixed(code []instr, nparams int) (written, fixed, sole []int) {
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
	writers := map[int]int{} // root -> instructions that write it
	for i := range code {
		seen := map[int]bool{}
		for _, s := range writesOf(&code[i]) {
			if r := root(s); !seen[r] {
				seen[r] = true
				writers[r]++
			}
		}
	}
	f, so := map[int]bool{}, map[int]bool{}
	for i := range code {
		in := &code[i]
		if kc, vc, pos, ok := attnRefs(in); ok {
			rk, rv, rp := root(in.refs[kc]), root(in.refs[vc]), root(in.refs[pos])
			in.fixedW = rp < nparams && writers[rp] == 0 && rk < nparams && rv < nparams && rk != rv &&
				writers[rk] == 1 && writers[rv] == 1
			if in.fixedW {
				f[rp], so[rk], so[rv] = true, true, true
			}
			continue
		}
		pos := weightRefs(in)
		ok := len(pos) > 0
		for _, j := range pos {
			r := root(in.refs[j])
			ok = ok && r < nparams && writers[r] == 0
		}
		in.fixedW = ok
		if ok {
			for _, j := range pos {
				f[root(in.refs[j])] = true
			}
		}
	}
	for s := range nparams {
		if writers[s] > 0 {
			written = append(written, s)
		}
		if f[s] {
			fixed = append(fixed, s)
		}
		if so[s] {
			sole = append(sole, s)
		}
	}
	return written, fixed, sole
}

// aliasedFixed reports whether a parameter the function writes shares a
// storage with a fixed parameter, or two written parameters share one
// where either is a sole cache, in this call's arguments (the caller
// passed one tensor twice): then nothing is fixed this call.
func aliasedFixed(p *program, regs []any) bool {
	if len(p.fixedParams) == 0 || len(p.writtenParams) == 0 {
		return false
	}
	seen := map[*tensor.Storage]int{}
	for _, s := range p.writtenParams {
		if st, ok := storageOf(regs[s]); ok {
			seen[st]++
		}
	}
	for _, s := range p.fixedParams {
		if st, ok := storageOf(regs[s]); ok && seen[st] > 0 {
			return true
		}
	}
	for _, s := range p.soleParams {
		if st, ok := storageOf(regs[s]); ok && seen[st] > 1 {
			return true
		}
	}
	return false
}

// withFixed runs f, a product, norm or attention, with the GPU told its
// early operands are fixed when they are (in.fixedW, and not aliased
// this call).
func (m *Module) withFixed(p *program, in *instr, f func() error) error {
	if !in.fixedW || p.aliased || m.gpu == nil {
		return f()
	}
	g := m.gpu
	g.SetFixedWeights(true)
	defer g.SetFixedWeights(false)
	return f()
}
