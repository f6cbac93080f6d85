package interp

import (
	"slices"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/tensor"
)

// TestMarkFixed: a product's weights are fixed when each is (a view of)
// a parameter no instruction writes; an attention's early operands when
// its positions are such a parameter and each cache a parameter it
// alone writes; the parameters written, fixed and sole are reported for
// the per-call alias check.
func TestMarkFixed(t *testing.T) {
	// params: x 0, w 1, wg 2, wu 3, k cache 4, v cache 5, pos 6; then
	// slots 7.. as below
	base := func() []instr {
		return []instr{
			{op: ir.OpAllocTensor, def: 7},                                   // 0: out
			{op: ir.OpMatmulNT, def: -1, refs: []int{0, 1, 7}},               // 1: x·wᵀ
			{op: ir.OpReshape, def: 8, refs: []int{2}},                       // 2: a view of wg
			{op: ir.OpAllocTensor, def: 9},                                   // 3
			{op: opGated, def: -1, refs: []int{0, 8, 3, 10, 11, 12, 9}},      // 4: gated on the view
			{op: ir.OpAttention, def: -1, refs: []int{0, 0, 0, 4, 5, 6, 13}}, // 5: appends to the caches
		}
	}
	for _, c := range []struct {
		name                string
		edit                func([]instr) []instr
		fixed               []int // instructions marked
		written, fixd, sole []int
	}{
		{"params", nil, []int{1, 4, 5}, []int{4, 5}, []int{1, 2, 3, 6}, []int{4, 5}},
		{"weight written", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAdd, def: -1, refs: []int{0, 0, 1}})
		}, []int{4, 5}, []int{1, 4, 5}, []int{2, 3, 6}, []int{4, 5}},
		{"view of weight written", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAlias, def: 14, refs: []int{3}}, instr{op: ir.OpRMSNorm, def: -1, refs: []int{0, 0, 14}})
		}, []int{1, 5}, []int{3, 4, 5}, []int{1, 6}, []int{4, 5}},
		{"weight computed", func(c []instr) []instr {
			c[1].refs = []int{0, 9, 7}
			return c
		}, []int{4, 5}, []int{4, 5}, []int{2, 3, 6}, []int{4, 5}},
		{"call_packed argument", func(c []instr) []instr {
			return append(c, instr{op: ir.OpCallPacked, def: -1, args: []callArg{{slot: 1}, {slot: -1, val: int64(3)}}})
		}, []int{4, 5}, []int{1, 4, 5}, []int{2, 3, 6}, []int{4, 5}},
		{"add and norm", func(c []instr) []instr {
			return append(c, instr{op: opAddNorm, def: -1, refs: []int{0, 7, 14, 2, 15}})
		}, []int{1, 4, 5, 6}, []int{4, 5}, []int{1, 2, 3, 6}, []int{4, 5}},
		{"norm weight written", func(c []instr) []instr {
			return append(c, instr{op: opAddNorm, def: -1, refs: []int{0, 7, 14, 15, 3}})
		}, []int{1, 5}, []int{3, 4, 5}, []int{1, 6}, []int{4, 5}},
		{"nt3", func(c []instr) []instr {
			return append(c, instr{op: opNT3, def: -1, refs: []int{0, 1, 2, 3, 14, 15, 16}})
		}, []int{1, 4, 5, 6}, []int{4, 5}, []int{1, 2, 3, 6}, []int{4, 5}},
		{"positions written", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAdd, def: -1, refs: []int{6, 6, 6}})
		}, []int{1, 4}, []int{4, 5, 6}, []int{1, 2, 3}, nil},
		{"cache appended twice", func(c []instr) []instr {
			return append(c, instr{op: ir.OpAttention, def: -1, refs: []int{0, 0, 0, 4, 5, 6, 14}})
		}, []int{1, 4}, []int{4, 5}, []int{1, 2, 3}, nil},
		{"view of cache written", func(c []instr) []instr {
			return append(c, instr{op: ir.OpReshape, def: 14, refs: []int{5}}, instr{op: ir.OpSilu, def: -1, refs: []int{0, 14}})
		}, []int{1, 4}, []int{4, 5}, []int{1, 2, 3}, nil},
		{"one cache for k and v", func(c []instr) []instr {
			c[5].refs = []int{0, 0, 0, 4, 4, 6, 13}
			return c
		}, []int{1, 4}, []int{4}, []int{1, 2, 3}, nil},
		{"cache computed", func(c []instr) []instr {
			c[5].refs = []int{0, 0, 0, 9, 5, 6, 13}
			return c
		}, []int{1, 4}, []int{5}, []int{1, 2, 3}, nil},
		{"rope and attention", func(c []instr) []instr {
			c[5] = instr{op: opRopeAttn, def: -1, refs: []int{0, 0, 0, 4, 5, 6, 13, 14, 15}}
			return c
		}, []int{1, 4, 5}, []int{4, 5}, []int{1, 2, 3, 6}, []int{4, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := base()
			if c.edit != nil {
				code = c.edit(code)
			}
			written, fixd, sole := markFixed(code, 7)
			var got []int
			for i, in := range code {
				if in.fixedW {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, c.fixed) || !slices.Equal(written, c.written) || !slices.Equal(fixd, c.fixd) || !slices.Equal(sole, c.sole) {
				t.Errorf("fixed %v written %v fixed params %v sole %v, want %v %v %v %v", got, written, fixd, sole, c.fixed, c.written, c.fixd, c.sole)
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
	// a sole cache (1) passed again as another written parameter (2)
	sole := &program{writtenParams: []int{1, 2}, fixedParams: []int{0}, soleParams: []int{1}}
	if aliasedFixed(sole, []any{a, b, tensor.FromSlice([]float32{0})}) {
		t.Error("distinct sole and written storages seen as aliased")
	}
	if aliasedFixed(sole, []any{a, b, b.Storage()}) != true {
		t.Error("a sole cache's storage passed as another written parameter: not seen")
	}
}
