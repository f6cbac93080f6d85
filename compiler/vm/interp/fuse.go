package interp

import (
	"fmt"
	"slices"

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
	// opNT3: refs [x, w0, w1, w2, o0, o1, o2] stand for three
	// matmul_nt(x, wi, oi) (the q, k and v projections).
	opNT3 ir.Op = 252
	// opAddNorm: refs [x, y, sum, w, out] and f (eps) stand for
	// add(x, y, sum); rms_norm(sum, w, eps, out).
	opAddNorm ir.Op = 253
	// opRopeAttn: refs [q, k, v, kc, vc, pos, out, qr, kr] and freqs stand
	// for rope(q, pos, qr); rope(k, pos, kr); attention(qr, kr, v, kc,
	// vc, pos, out), rope in its table form.
	opRopeAttn ir.Op = 254
)

// fuse applies every fusion to a function's code (at load; results are
// the slots the function returns) and returns how many instructions it
// made.
func fuse(code []instr, results []int) int {
	return fuseGated(code, results) + fuseNT3(code) + fuseAddNorm(code) + fuseRopeAttn(code, results)
}

// quiet reports ops that do no work of their own (allocations, views):
// fusions look past them.
func quiet(op ir.Op) bool {
	switch op {
	case ir.OpAllocTensor, ir.OpAllocStorage, ir.OpAllocTensorView, ir.OpReshape, ir.OpAlias, opNop:
		return true
	}
	return false
}

// nextWork returns the indices of the next n instructions after i that
// do work (fewer at the end of the code).
func nextWork(code []instr, i, n int) []int {
	var next []int
	for j := i + 1; j < len(code) && len(next) < n; j++ {
		if !quiet(code[j].op) {
			next = append(next, j)
		}
	}
	return next
}

// fuseNT3 finds three matmul_nt of one x, one after the other with only
// allocations and views between (the q, k and v projections), and
// replaces them with one opNT3 at the third and no-ops: one launch over
// the three weights (gemv_nt3) where planGemv takes them, else the
// three products.
func fuseNT3(code []instr) int {
	n := 0
	for i := range code {
		a := &code[i]
		if a.op != ir.OpMatmulNT {
			continue
		}
		next := nextWork(code, i, 2)
		if len(next) < 2 {
			continue
		}
		b, c := &code[next[0]], &code[next[1]]
		if b.op != ir.OpMatmulNT || c.op != ir.OpMatmulNT || b.refs[0] != a.refs[0] || c.refs[0] != a.refs[0] {
			continue
		}
		x := a.refs[0]
		outs := map[int]bool{a.refs[2]: true, b.refs[2]: true, c.refs[2]: true}
		if len(outs) != 3 || outs[x] {
			continue
		}
		fused := instr{index: c.index, op: opNT3, def: -1, refs: []int{x, a.refs[1], b.refs[1], c.refs[1], a.refs[2], b.refs[2], c.refs[2]},
			text: fmt.Sprintf("three products of one input (bindings %d, %d, %d fused)", a.index, b.index, c.index)}
		*a, *b = nopOf(*a), nopOf(*b)
		*c = fused
		n++
	}
	return n
}

// fuseAddNorm finds add(%x, %y, %sum) followed, with only allocations
// and views between, by rms_norm(%sum, %w, eps, %out) (a residual add and
// the next layer's norm), and replaces the pair with one opAddNorm at
// the norm: one kernel writes sum and out (add_rms_norm), or the two ops
// run as before.
func fuseAddNorm(code []instr) int {
	n := 0
	for i := range code {
		a := &code[i]
		if a.op != ir.OpAdd || len(a.refs) != 3 {
			continue
		}
		next := nextWork(code, i, 1)
		if len(next) < 1 {
			continue
		}
		r := &code[next[0]]
		if r.op != ir.OpRMSNorm || len(r.refs) != 3 || r.refs[0] != a.refs[2] {
			continue
		}
		x, y, sum, w, out := a.refs[0], a.refs[1], a.refs[2], r.refs[1], r.refs[2]
		if out == x || out == y || out == sum {
			continue
		}
		fused := instr{index: r.index, op: opAddNorm, def: -1, refs: []int{x, y, sum, w, out}, f: r.f,
			text: fmt.Sprintf("residual add and norm (bindings %d, %d fused)", a.index, r.index)}
		*a = nopOf(*a)
		*r = fused
		n++
	}
	return n
}

// fuseRopeAttn finds rope(%q, %pos, %qr) and rope(%k, %pos, %kr) of one
// table, then attention(%qr, %kr, %v, %kc, %vc, %pos, %out), with only
// allocations and views between and qr, kr read by nothing else, and
// replaces them with one opRopeAttn at the attention: on a GPU one
// kernel rotates q and k as it loads them, appends k and v to the caches
// and attends (kernels.TryRopeAttention, decode steps), else the three
// ops run as before.
func fuseRopeAttn(code []instr, results []int) int {
	uses := useCounts(code, results)
	n := 0
	for i := range code {
		a := &code[i]
		if a.op != ir.OpRope || a.freqs == nil || len(a.refs) != 3 {
			continue
		}
		next := nextWork(code, i, 2)
		if len(next) < 2 {
			continue
		}
		b, c := &code[next[0]], &code[next[1]]
		if b.op != ir.OpRope || len(b.refs) != 3 || !slices.Equal(a.freqs, b.freqs) || b.refs[1] != a.refs[1] ||
			c.op != ir.OpAttention || len(c.refs) != 7 {
			continue
		}
		qr, kr, pos := a.refs[2], b.refs[2], a.refs[1]
		if c.refs[0] != qr || c.refs[1] != kr || c.refs[5] != pos || qr == kr || uses[qr] != 1 || uses[kr] != 1 {
			continue
		}
		fused := instr{index: c.index, op: opRopeAttn, def: -1, freqs: a.freqs,
			refs: []int{a.refs[0], b.refs[0], c.refs[2], c.refs[3], c.refs[4], pos, c.refs[6], qr, kr},
			text: fmt.Sprintf("rope and attention (bindings %d, %d, %d fused)", a.index, b.index, c.index)}
		*a, *b = nopOf(*a), nopOf(*b)
		*c = fused
		n++
	}
	return n
}

// ropeAttn runs an opRopeAttn instruction (t: q, k, v, kc, vc, pos, out,
// qr, kr).
func (m *Module) ropeAttn(env registry.Env, in *instr, t []*tensor.Tensor) error {
	if onGPU(t) {
		g, err := m.gpuKernels(env)
		if err != nil {
			return err
		}
		if ok, err := g.TryRopeAttention(t[:7], in.freqs); ok || err != nil {
			return err
		}
	}
	rope := &instr{op: ir.OpRope, freqs: in.freqs}
	if err := m.modelKernel(env, rope, []*tensor.Tensor{t[0], t[5], t[7]}); err != nil {
		return err
	}
	if err := m.modelKernel(env, rope, []*tensor.Tensor{t[1], t[5], t[8]}); err != nil {
		return err
	}
	return m.modelKernel(env, &instr{op: ir.OpAttention}, []*tensor.Tensor{t[7], t[8], t[2], t[3], t[4], t[5], t[6]})
}

// nt3 runs an opNT3 instruction.
func (m *Module) nt3(env registry.Env, t []*tensor.Tensor) error {
	if onGPU(t) {
		g, err := m.gpuKernels(env)
		if err != nil {
			return err
		}
		if ok, err := g.TryNT3(t); ok || err != nil {
			return err
		}
	}
	for i := range 3 {
		if err := m.kernel(env, ir.OpMatmulNT, []*tensor.Tensor{t[0], t[1+i], t[4+i]}); err != nil {
			return err
		}
	}
	return nil
}

// addNorm runs an opAddNorm instruction.
func (m *Module) addNorm(env registry.Env, in *instr, t []*tensor.Tensor) error {
	if onGPU(t) {
		g, err := m.gpuKernels(env)
		if err != nil {
			return err
		}
		if ok, err := g.TryAddNorm(t, in.f); ok || err != nil {
			return err
		}
	}
	if err := m.kernel(env, ir.OpAdd, []*tensor.Tensor{t[0], t[1], t[2]}); err != nil {
		return err
	}
	return m.modelKernel(env, &instr{op: ir.OpRMSNorm, f: in.f}, []*tensor.Tensor{t[2], t[3], t[4]})
}

// onGPU reports whether every operand is in device memory.
func onGPU(t []*tensor.Tensor) bool {
	for _, x := range t {
		if x.IsHost() {
			return false
		}
	}
	return true
}

// fuseGated finds, in a function's code, the gated MLP of a Llama-style
// decoder in the Hugging Face layout,
//
//	matmul_nt(%x, %wg, %g)   matmul_nt(%x, %wu, %u)   silu(%g, %a)   mul(%a, %u, %out)
//
// in this order with only allocations and views between them, where g, u
// and a are read by nothing else and are not results (results lists the
// function's result slots), and replaces the four with one opGated at the mul (where every
// operand has been allocated) and no-ops. On a GPU opGated is one pass
// over both weights with the activation and the product in its epilogue
// (kernels_gemv.cu gemv_gated) when planGemv takes the shape; otherwise,
// and on CPUs, it runs the four ops in order. It returns how many it
// fused.
func fuseGated(code []instr, results []int) int {
	uses := useCounts(code, results)
	n := 0
	for i := range code {
		gm := &code[i]
		if gm.op != ir.OpMatmulNT {
			continue
		}
		x, wg, g := gm.refs[0], gm.refs[1], gm.refs[2]
		next := nextWork(code, i, 3)
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

// useCounts maps each slot to the instructions that read it, plus one if
// the function returns it.
func useCounts(code []instr, results []int) map[int]int {
	uses := map[int]int{}
	for _, in := range code {
		for _, s := range readsOf(in) {
			uses[s]++
		}
	}
	for _, s := range results {
		uses[s]++
	}
	return uses
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
	if onGPU(t) {
		g, err := m.gpuKernels(env)
		if err != nil {
			return err
		}
		if ok, err := g.TryGated(t); ok || err != nil {
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
	for i, s := range steps {
		if i == 2 && onGPU(t) {
			// silu and mul in one pass (prefill rows: the products ran apart)
			g, err := m.gpuKernels(env)
			if err != nil {
				return err
			}
			if ok, err := g.TrySiluMul(t[3], t[4], t[6]); ok || err != nil {
				return err
			}
		}
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
