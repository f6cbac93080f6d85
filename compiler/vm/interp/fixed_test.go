package interp

import (
	"slices"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/tensor"
)

// TestMarkFixed: a product's weights are fixed when each is (a view of)
// a parameter no instruction writes; the parameters written and those
// fixed are reported for the per-call alias check.
func TestMarkFixed(t *testing.T) {
	// params: x 0, w 1, wg 2, wu 3, cache 4; then slots 5.. as below
	base := func() []instr {
		return []instr{
			{op: ir.OpAllocTensor, def: 5},                                   // 0: out
			{op: ir.OpMatmulNT, def: -1, refs: []int{0, 1, 5}},               // 1: x·wᵀ
			{op: ir.OpReshape, def: 6, refs: []int{2}},                       // 2: a view of wg
			{op: ir.OpAllocTensor, def: 7},                                   // 3
			{op: opGated, def: -1, refs: []int{0, 6, 3, 8, 9, 10, 7}},        // 4: gated on the view
			{op: ir.OpAttention, def: -1, refs: []int{0, 0, 0, 4, 4, 0, 11}}, // 5: writes the cache
		}
	}
	for _, c := range []struct {
		name          string
		edit          func([]instr) []instr
		fixed         []int // instructions marked
		written, fixd []int
	}{
		{"params", nil, []int{1, 4}, []int{0, 4}, []int{1, 2, 3}},
		{"weight written", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAdd, def: -1, refs: []int{0, 0, 1}})
		}, []int{4}, []int{0, 1, 4}, []int{2, 3}},
		{"view of weight written", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAlias, def: 12, refs: []int{3}}, instr{op: ir.OpRMSNorm, def: -1, refs: []int{0, 0, 12}})
		}, []int{1}, []int{0, 3, 4}, []int{1}},
		{"weight computed", func(c []instr) []instr {
			c[1].refs = []int{0, 7, 5}
			return c
		}, []int{4}, []int{0, 4}, []int{2, 3}},
		{"call_packed argument", func(c []instr) []instr {
			return append(c, instr{op: ir.OpCallPacked, def: -1, args: []callArg{{slot: 1}, {slot: -1, val: int64(3)}}})
		}, []int{4}, []int{0, 1, 4}, []int{2, 3}},
		{"add and norm", func(c []instr) []instr {
			return append(c, instr{op: opAddNorm, def: -1, refs: []int{0, 5, 13, 2, 14}})
		}, []int{1, 4, 6}, []int{0, 4}, []int{1, 2, 3}},
		{"norm weight written", func(c []instr) []instr {
			return append(c, instr{op: opAddNorm, def: -1, refs: []int{0, 5, 13, 14, 3}})
		}, []int{1}, []int{0, 3, 4}, []int{1}},
		{"nt3", func(c []instr) []instr {
			return append(c, instr{op: opNT3, def: -1, refs: []int{0, 1, 2, 3, 13, 14, 15}})
		}, []int{1, 4, 6}, []int{0, 4}, []int{1, 2, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := base()
			if c.edit != nil {
				code = c.edit(code)
			}
			written, fixd := markFixed(code, 5)
			var got []int
			for i, in := range code {
				if in.fixedW {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, c.fixed) || !slices.Equal(written, c.written) || !slices.Equal(fixd, c.fixd) {
				t.Errorf("fixed %v written %v fixed params %v, want %v %v %v", got, written, fixd, c.fixed, c.written, c.fixd)
			}
		})
	}
}

// TestAliasedFixed: one storage passed as a written parameter and as a
// fixed weight turns the promise off for that call only.
func TestAliasedFixed(t *testing.T) {
	p := &program{writtenParams: []int{1}, fixedParams: []int{0, 2}}
	a := tensor.FromSlice([]float32{1, 2, 3, 4})
	b := tensor.FromSlice([]float32{1, 2, 3, 4})
	view, err := a.Reshape(tensor.Shape{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	if aliasedFixed(p, []any{a, b, b.Storage()}) != true {
		t.Error("storage passed as written and fixed: not seen")
	}
	if aliasedFixed(p, []any{a, view, b}) != true {
		t.Error("a view of a fixed weight passed as written: not seen")
	}
	if aliasedFixed(p, []any{a, b, tensor.FromSlice([]float32{0})}) {
		t.Error("distinct storages seen as aliased")
	}
	if aliasedFixed(&program{fixedParams: []int{0}}, []any{a}) {
		t.Error("nothing written, yet aliased")
	}
}
