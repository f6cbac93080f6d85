package vm

import (
	"fmt"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// Instructions the VM makes itself when it loads a function (never in
// IR text): a fused gated projection, and the no-op left where one of
// the instructions it replaced was.
const (
	// opGated: refs [x, wg, wu, g, u, a, out] stand for
	// matmul_nt(x, wg, g); matmul_nt(x, wu, u); silu(g, a); mul(a, u, out).
	opGated ir.Op = 250
	opNop   ir.Op = 251
)

// fuseGated finds, in a function's code, the gated MLP of a Llama-style
// decoder in the Hugging Face layout,
//
//	matmul_nt(%x, %wg, %g)   matmul_nt(%x, %wu, %u)   silu(%g, %a)   mul(%a, %u, %out)
//
// in this order with only allocations and views between them, where g, u
// and a are read by nothing else and nothing writes x, wg or wu in
// between, and replaces the four with one opGated at the mul (where every
// operand has been allocated) and no-ops. On a GPU opGated is one pass
// over both weights with the activation and the product in its epilogue
// (kernels_gemv.cu gemv_gated) when planGemv takes the shape; otherwise,
// and on CPUs, it runs the four ops in order. It returns how many it
// fused.
func fuseGated(code []instr) int {
	uses := map[int]int{} // slot -> instructions reading it
	for _, in := range code {
		for _, s := range readsOf(in) {
			uses[s]++
		}
	}
	quiet := func(op ir.Op) bool {
		switch op {
		case ir.OpAllocTensor, ir.OpAllocStorage, ir.OpAllocTensorView, ir.OpReshape, ir.OpAlias, opNop:
			return true
		}
		return false
	}
	n := 0
	for i := range code {
		gm := &code[i]
		if gm.op != ir.OpMatmulNT {
			continue
		}
		x, wg, g := gm.refs[0], gm.refs[1], gm.refs[2]
		// the next three compute instructions, allocations skipped
		var next []int
		for j := i + 1; j < len(code) && len(next) < 3; j++ {
			if !quiet(code[j].op) {
				next = append(next, j)
			}
		}
		if len(next) < 3 {
			continue
		}
		um, si, mu := &code[next[0]], &code[next[1]], &code[next[2]]
		if um.op != ir.OpMatmulNT || si.op != ir.OpSilu || mu.op != ir.OpMul {
			continue
		}
		u, a := um.refs[2], si.refs[1]
		if um.refs[0] != x || si.refs[0] != g || len(mu.refs) != 3 {
			continue
		}
		if !(mu.refs[0] == a && mu.refs[1] == u) && !(mu.refs[0] == u && mu.refs[1] == a) {
			continue
		}
		wu, out := um.refs[1], mu.refs[2]
		distinct := map[int]bool{x: true, wg: true, wu: true, g: true, u: true, a: true, out: true}
		if len(distinct) != 7 || uses[g] != 1 || uses[u] != 1 || uses[a] != 1 {
			continue
		}
		fused := instr{index: mu.index, op: opGated, def: -1, refs: []int{x, wg, wu, g, u, a, out},
			text: fmt.Sprintf("gated projection (bindings %d, %d, %d, %d fused)", gm.index, um.index, si.index, mu.index)}
		*gm, *um, *si = nopOf(*gm), nopOf(*um), nopOf(*si)
		*mu = fused
		n++
	}
	return n
}

func nopOf(in instr) instr {
	return instr{index: in.index, op: opNop, def: -1, text: in.text + " (fused)"}
}

// readsOf lists the slots an instruction reads (its refs other than the
// out operand it writes, and call_packed's slot arguments).
func readsOf(in instr) []int {
	var s []int
	for _, a := range in.args {
		if a.slot >= 0 {
			s = append(s, a.slot)
		}
	}
	refs := in.refs
	switch in.op {
	case ir.OpMatmul, ir.OpMatmulNT, ir.OpAdd, ir.OpGelu, ir.OpEmbedding, ir.OpRMSNorm, ir.OpLayerNorm, ir.OpRope,
		ir.OpSilu, ir.OpMul, ir.OpArgmax, ir.OpAllreduce, ir.OpAllgather, ir.OpReduceScatter, ir.OpBroadcast,
		ir.OpCustomAllreduce, ir.OpDeviceCopy:
		if len(refs) > 0 {
			refs = refs[:len(refs)-1]
		}
	}
	return append(s, refs...)
}

// gated runs an opGated instruction (t: x, wg, wu, g, u, a, out).
func (m *Module) gated(env registry.Env, t []*tensor.Tensor) error {
	host := 0
	for _, x := range t {
		if x.IsHost() {
			host++
		}
	}
	if host == 0 {
		g, err := m.gpuKernels(env)
		if err != nil {
			return err
		}
		if ok, err := g.tryGated(t); ok || err != nil {
			return err
		}
	}
	steps := []struct {
		op   ir.Op
		args []*tensor.Tensor
	}{
		{ir.OpMatmulNT, []*tensor.Tensor{t[0], t[1], t[3]}},
		{ir.OpMatmulNT, []*tensor.Tensor{t[0], t[2], t[4]}},
		{ir.OpSilu, []*tensor.Tensor{t[3], t[5]}},
		{ir.OpMul, []*tensor.Tensor{t[5], t[4], t[6]}},
	}
	for _, s := range steps {
		var err error
		if s.op == ir.OpMatmulNT {
			err = m.kernel(env, s.op, s.args)
		} else {
			err = m.modelKernel(env, &instr{op: s.op}, s.args)
		}
		if err != nil {
			return fmt.Errorf("%v: %w", s.op, err)
		}
	}
	return nil
}
