package interp

import (
	"slices"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
)

// gatedCode is the gated MLP as the decoder emits it in the HF layout
// (slots: x 0, wg 1, wu 2, g 3, u 4, a 5, out 6, wd 7, down 8), with
// edit applied to it first.
func gatedCode(edit func([]instr) []instr) []instr {
	code := []instr{
		{op: ir.OpAllocTensor, def: 3},
		{op: ir.OpMatmulNT, def: -1, refs: []int{0, 1, 3}},
		{op: ir.OpAllocTensor, def: 4},
		{op: ir.OpMatmulNT, def: -1, refs: []int{0, 2, 4}},
		{op: ir.OpAllocTensor, def: 5},
		{op: ir.OpSilu, def: -1, refs: []int{3, 5}},
		{op: ir.OpAllocTensor, def: 6},
		{op: ir.OpMul, def: -1, refs: []int{5, 4, 6}},
		{op: ir.OpMatmulNT, def: -1, refs: []int{6, 7, 8}},
	}
	for i := range code {
		code[i].index = i
	}
	if edit != nil {
		code = edit(code)
	}
	return code
}

func TestFuseGated(t *testing.T) {
	for _, c := range []struct {
		name    string
		edit    func([]instr) []instr
		results []int
		want    int
	}{
		{"decoder", nil, []int{8}, 1},
		{"activation_returned", nil, []int{5, 8}, 0},
		{"mul_operands_swapped", func(c []instr) []instr { c[7].refs = []int{4, 5, 6}; return c }, nil, 1},
		{"gate_read_again", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAdd, def: -1, refs: []int{3, 3, 9}})
		}, nil, 0},
		{"act_read_again", func(c []instr) []instr {
			return append(c, instr{op: ir.OpArgmax, def: -1, refs: []int{5, 9}})
		}, nil, 0},
		{"other_input", func(c []instr) []instr { c[3].refs = []int{9, 2, 4}; return c }, nil, 0},
		{"gelu_not_silu", func(c []instr) []instr { c[5].op = ir.OpGelu; return c }, nil, 0},
		{"work_in_between", func(c []instr) []instr {
			return append(c[:4], append([]instr{{op: ir.OpAdd, def: -1, refs: []int{0, 0, 0}}}, c[4:]...)...)
		}, nil, 0},
		{"chorus_layout", func(c []instr) []instr { c[1].op, c[3].op = ir.OpMatmul, ir.OpMatmul; return c }, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := gatedCode(c.edit)
			before := append([]instr(nil), code...)
			n := fuseGated(code, c.results)
			if n != c.want {
				t.Fatalf("fused %d, want %d", n, c.want)
			}
			if n == 0 {
				for i := range code {
					if code[i].op != before[i].op {
						t.Errorf("instruction %d changed from %v to %v", i, before[i].op, code[i].op)
					}
				}
				return
			}
			for _, i := range []int{1, 3, 5} {
				if code[i].op != opNop {
					t.Errorf("instruction %d is %v, want a no-op", i, code[i].op)
				}
			}
			g := code[7]
			if g.op != opGated || len(g.refs) != 7 || g.refs[0] != 0 || g.refs[1] != 1 || g.refs[2] != 2 || g.refs[6] != 6 || g.index != 7 {
				t.Errorf("fused instruction %+v", g)
			}
			if code[8].op != ir.OpMatmulNT {
				t.Errorf("the down projection became %v", code[8].op)
			}
		})
	}
}

func TestFuseNT3AndAddNorm(t *testing.T) {
	// q, k, v projections of x (slot 0) by w 1, 2, 3 into 4, 5, 6, then
	// a residual add of 7 and 8 into 9 and its norm by 10 into 11.
	code := []instr{
		{op: ir.OpAllocTensor, def: 4},
		{op: ir.OpMatmulNT, def: -1, refs: []int{0, 1, 4}},
		{op: ir.OpAllocTensor, def: 5},
		{op: ir.OpMatmulNT, def: -1, refs: []int{0, 2, 5}},
		{op: ir.OpAllocTensor, def: 6},
		{op: ir.OpMatmulNT, def: -1, refs: []int{0, 3, 6}},
		{op: ir.OpAdd, def: -1, refs: []int{7, 8, 9}},
		{op: ir.OpAllocTensor, def: 11},
		{op: ir.OpRMSNorm, def: -1, refs: []int{9, 10, 11}, f: 1e-5},
	}
	for i := range code {
		code[i].index = i
	}
	if n := fuse(code, nil); n != 2 {
		t.Fatalf("fused %d, want 2", n)
	}
	if code[1].op != opNop || code[3].op != opNop || code[6].op != opNop {
		t.Errorf("the replaced instructions are %v, %v, %v", code[1].op, code[3].op, code[6].op)
	}
	if c := code[5]; c.op != opNT3 || len(c.refs) != 7 || c.refs[0] != 0 || c.refs[3] != 3 || c.refs[4] != 4 || c.refs[6] != 6 {
		t.Errorf("fused products %+v", c)
	}
	if c := code[8]; c.op != opAddNorm || len(c.refs) != 5 || c.refs[2] != 9 || c.refs[3] != 10 || c.refs[4] != 11 || c.f != 1e-5 {
		t.Errorf("fused add and norm %+v", c)
	}
	// Not fused: two products only, a product of another input, a norm
	// of something else than the sum, work in between.
	for _, c := range []struct {
		name string
		code []instr
	}{
		{"two", []instr{{op: ir.OpMatmulNT, refs: []int{0, 1, 4}}, {op: ir.OpMatmulNT, refs: []int{0, 2, 5}}, {op: ir.OpSilu, refs: []int{4, 6}}}},
		{"other_x", []instr{{op: ir.OpMatmulNT, refs: []int{0, 1, 4}}, {op: ir.OpMatmulNT, refs: []int{0, 2, 5}}, {op: ir.OpMatmulNT, refs: []int{9, 3, 6}}}},
		{"norm_of_other", []instr{{op: ir.OpAdd, refs: []int{7, 8, 9}}, {op: ir.OpRMSNorm, refs: []int{7, 10, 11}}}},
		{"work_between", []instr{{op: ir.OpAdd, refs: []int{7, 8, 9}}, {op: ir.OpSilu, refs: []int{9, 12}}, {op: ir.OpRMSNorm, refs: []int{9, 10, 11}}}},
		{"layer_norm", []instr{{op: ir.OpAdd, refs: []int{7, 8, 9}}, {op: ir.OpLayerNorm, refs: []int{9, 10, 12, 11}}}},
	} {
		if n := fuse(c.code, nil); n != 0 {
			t.Errorf("%s: fused %d", c.name, n)
		}
	}
}

func TestFuseRopeAttn(t *testing.T) {
	f := []float32{1, 0.5}
	// rope of q (0) and k (1) at pos 5 into 7 and 8, attention of them
	// with v 2, caches 3 and 4 into 6.
	rope := func(x, out int, f []float32) instr {
		return instr{op: ir.OpRope, def: -1, refs: []int{x, 5, out}, freqs: f}
	}
	attn := instr{op: ir.OpAttention, def: -1, refs: []int{7, 8, 2, 3, 4, 5, 6}}
	code := []instr{{op: ir.OpAllocTensor, def: 7}, rope(0, 7, f), {op: ir.OpAllocTensor, def: 8}, rope(1, 8, f), {op: ir.OpAllocTensor, def: 6}, attn}
	for i := range code {
		code[i].index = i
	}
	if n := fuse(code, nil); n != 1 {
		t.Fatalf("fused %d, want 1", n)
	}
	if code[1].op != opNop || code[3].op != opNop {
		t.Errorf("the replaced instructions are %v, %v", code[1].op, code[3].op)
	}
	want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8}
	if c := code[5]; c.op != opRopeAttn || !slices.Equal(c.refs, want) || !slices.Equal(c.freqs, f) {
		t.Errorf("fused %+v, want refs %v", c, want)
	}
	// Not fused: rope with theta (no table), two tables, another
	// position, a rotated q read again, a rotated k that is a result.
	theta := rope(0, 7, nil)
	other := attn
	other.refs = []int{7, 8, 2, 3, 4, 9, 6}
	for _, c := range []struct {
		name    string
		code    []instr
		results []int
	}{
		{"theta", []instr{theta, rope(1, 8, nil), attn}, nil},
		{"tables", []instr{rope(0, 7, f), rope(1, 8, []float32{1, 0.25}), attn}, nil},
		{"pos", []instr{rope(0, 7, f), rope(1, 8, f), other}, nil},
		{"q_read_again", []instr{rope(0, 7, f), rope(1, 8, f), attn, {op: ir.OpSilu, refs: []int{7, 10}}}, nil},
		{"k_result", []instr{rope(0, 7, f), rope(1, 8, f), attn}, []int{8}},
	} {
		if n := fuse(c.code, c.results); n != 0 {
			t.Errorf("%s: fused %d", c.name, n)
		}
	}
}
