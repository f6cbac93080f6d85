package vm

import (
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
		name string
		edit func([]instr) []instr
		want int
	}{
		{"decoder", nil, 1},
		{"mul_operands_swapped", func(c []instr) []instr { c[7].refs = []int{4, 5, 6}; return c }, 1},
		{"gate_read_again", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAdd, def: -1, refs: []int{3, 3, 9}})
		}, 0},
		{"act_read_again", func(c []instr) []instr {
			return append(c, instr{op: ir.OpArgmax, def: -1, refs: []int{5, 9}})
		}, 0},
		{"other_input", func(c []instr) []instr { c[3].refs = []int{9, 2, 4}; return c }, 0},
		{"gelu_not_silu", func(c []instr) []instr { c[5].op = ir.OpGelu; return c }, 0},
		{"work_in_between", func(c []instr) []instr {
			return append(c[:4], append([]instr{{op: ir.OpAdd, def: -1, refs: []int{0, 0, 0}}}, c[4:]...)...)
		}, 0},
		{"chorus_layout", func(c []instr) []instr { c[1].op, c[3].op = ir.OpMatmul, ir.OpMatmul; return c }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := gatedCode(c.edit)
			before := append([]instr(nil), code...)
			n := fuseGated(code)
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
