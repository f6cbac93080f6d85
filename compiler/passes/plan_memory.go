package passes

import (
	"fmt"
	"sort"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

const planMemoryName = "plan-memory"

// StorageAlignment is the alignment PlanMemory and LowerGPUIPCAllocStorage
// ask for: enough for 16-byte vector loads and for cache lines.
const StorageAlignment = 64

// PlanMemory is static, scope-aware memory planning. Inside each block,
// tensors allocated by alloc_tensor(shape, dtype, device, scope) whose
// lifetimes do not overlap share storage. A tensor's lifetime runs from
// its allocation to the last binding of the block that uses it or any
// alias or reshape of it. Tensors that escape the block (returned, or used
// in a later block) are left alone.
//
// Free storage is pooled by (device, scope, dtype), so IPC buffers only
// ever reuse IPC buffers, and a storage is never shared across devices or
// dtypes (every view is at offset 0). The reuse rule is TVM's: among the
// free storages of the pool whose size lies in [size/16, size*16), take
// the smallest that fits, else grow the largest smaller one, else make a
// new one. Ties go to the storage made first, so the plan is the same on
// every worker (IPC allocations must happen in the same order everywhere).
//
// The result is explicit in the IR: one
// `%storageN = alloc_storage(bytes, 64, device, scope)` per storage at the
// start of the block, and every planned allocation becomes a view
// `alloc_tensor(%storageN, 0, shape, dtype)` with the same type.
// Packed functions are assumed not to keep references to their
// arguments past the call.
func PlanMemory() Pass {
	return Pass{Name: planMemoryName, Run: func(m *ir.Module) (*ir.Module, error) {
		return forEachFunc(m, func(f *ir.Function) error {
			nm := newNamer(f)
			escapes := escapingValues(f)
			for _, blk := range f.Blocks {
				if err := planBlock(blk, escapes, nm); err != nil {
					return err
				}
			}
			return nil
		})
	}}
}

type poolKey struct {
	device string // DevicePart().String(): structural
	scope  string
	dtype  tensor.DType
}

type token struct {
	id    int
	key   poolKey
	dev   vdevice.VirtualDevice
	bytes int64
	name  string
}

// rootOf maps alias and reshape results to the value they share memory
// with, transitively.
func rootOf(f *ir.Function) map[string]string {
	roots := map[string]string{}
	for _, b := range f.Bindings() {
		if (b.Op == ir.OpAlias || b.Op == ir.OpReshape) && b.Result != "" {
			src, _ := b.Ref(0)
			r := string(src)
			if rr, ok := roots[r]; ok {
				r = rr
			}
			roots[b.Result] = r
		}
	}
	return roots
}

func root(roots map[string]string, name string) string {
	if r, ok := roots[name]; ok {
		return r
	}
	return name
}

// escapingValues returns the roots of values returned by the function or
// used outside the block that defines their root.
func escapingValues(f *ir.Function) map[string]bool {
	roots := rootOf(f)
	esc := map[string]bool{}
	for _, r := range f.Results {
		esc[root(roots, string(r))] = true
	}
	defBlock := map[string]int{}
	for bi, blk := range f.Blocks {
		for _, b := range blk.Bindings {
			if b.Result != "" {
				defBlock[b.Result] = bi
			}
			for _, r := range b.Refs() {
				rt := root(roots, string(r))
				if db, ok := defBlock[rt]; ok && db != bi {
					esc[rt] = true
				}
			}
		}
	}
	return esc
}

func planBlock(blk *ir.Block, escapes map[string]bool, nm *namer) error {
	roots := rootOf(&ir.Function{Blocks: []*ir.Block{blk}})
	// Candidates and their last uses (indices into the block).
	cand := map[string]int64{} // root -> bytes
	last := map[string]int{}
	for i, b := range blk.Bindings {
		if b.Op == ir.OpAllocTensor && b.Result != "" && !escapes[b.Result] && len(b.Args) == 4 {
			if tt, ok := b.Type.(ir.TensorType); ok {
				n, err := tt.Bytes()
				if err != nil {
					return fmt.Errorf("%%%s: %w", b.Result, err)
				}
				cand[b.Result] = n
				last[b.Result] = i
			}
		}
		for _, r := range b.Refs() {
			if rt := root(roots, string(r)); hasKey(cand, rt) {
				last[rt] = i
			}
		}
	}
	if len(cand) == 0 {
		return nil
	}

	var tokens []*token
	free := map[poolKey][]*token{}
	assigned := map[string]*token{}
	releaseAt := map[int][]string{}
	for name, i := range last {
		releaseAt[i] = append(releaseAt[i], name)
	}
	for i, b := range blk.Bindings {
		if size, ok := cand[b.Result]; ok && b.Op == ir.OpAllocTensor {
			tt := b.Type.(ir.TensorType)
			key := poolKey{tt.Device.DevicePart().String(), tt.Device.MemoryScope(), tt.DType}
			tok, rest := takeFree(free[key], size)
			free[key] = rest
			if tok == nil {
				tok = &token{id: len(tokens), key: key, dev: tt.Device}
				tokens = append(tokens, tok)
			}
			tok.bytes = max(tok.bytes, size)
			assigned[b.Result] = tok
		}
		// Release in a fixed order so the plan does not depend on map order.
		names := releaseAt[i]
		sort.Strings(names)
		for _, name := range names {
			if tok := assigned[name]; tok != nil {
				free[tok.key] = append(free[tok.key], tok)
			}
		}
	}

	var head []*ir.Binding
	for _, tok := range tokens {
		tok.name = nm.fresh(fmt.Sprintf("storage%d", tok.id))
		head = append(head, &ir.Binding{
			Result: tok.name,
			Type:   ir.StorageType{Device: tok.dev},
			Op:     ir.OpAllocStorage,
			Args: []ir.Arg{ir.Int(tok.bytes), ir.Int(StorageAlignment),
				ir.VDLit(tok.dev.DevicePart()), ir.Str(tok.dev.MemoryScope())},
		})
	}
	for _, b := range blk.Bindings {
		tok := assigned[b.Result]
		if tok == nil || b.Op != ir.OpAllocTensor {
			continue
		}
		shape, dt := b.Args[0], b.Args[1]
		b.Op = ir.OpAllocTensorView
		b.Args = []ir.Arg{ir.Ref(tok.name), ir.Int(0), shape, dt}
	}
	blk.Bindings = append(head, blk.Bindings...)
	return nil
}

// takeFree picks a free storage for size bytes by TVM's rule and returns
// it with the remaining free list; nil if none is in range.
func takeFree(list []*token, size int64) (*token, []*token) {
	var best *token
	bestFits := false
	for _, t := range list {
		// In [size/16, size*16), written without multiplying (no overflow).
		if t.bytes < (size+15)/16 || t.bytes/16 >= size {
			continue
		}
		fits := t.bytes >= size
		switch {
		case best == nil,
			fits && !bestFits,
			fits && bestFits && (t.bytes < best.bytes || (t.bytes == best.bytes && t.id < best.id)),
			!fits && !bestFits && (t.bytes > best.bytes || (t.bytes == best.bytes && t.id < best.id)):
			best, bestFits = t, fits
		}
	}
	if best == nil {
		return nil, list
	}
	rest := make([]*token, 0, len(list)-1)
	for _, t := range list {
		if t != best {
			rest = append(rest, t)
		}
	}
	return best, rest
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// MemoryUsage is the memory a function allocates, in bytes.
type MemoryUsage struct {
	Total   int64
	ByScope map[string]int64
}

// PeakMemory returns the bytes a VM holds at the peak of a call of f.
// chorus's VM releases a call's allocations when the call returns, so the
// peak is the sum of every allocation the function makes: alloc_storage,
// alloc_tensor of a shape (views allocate nothing) and calls of the IPC
// allocator (IPCAllocStorageFunc). Comparing it before and after
// PlanMemory shows what planning saved.
func PeakMemory(f *ir.Function) (MemoryUsage, error) {
	u := MemoryUsage{ByScope: map[string]int64{}}
	add := func(scope string, n int64) {
		u.Total += n
		u.ByScope[scope] += n
	}
	for _, b := range f.Bindings() {
		switch {
		case b.Op == ir.OpAllocStorage && len(b.Args) == 4:
			n, _ := b.Args[0].(ir.Int)
			s, _ := b.Args[3].(ir.Str)
			add(string(s), int64(n))
		case b.Op == ir.OpAllocTensor && len(b.Args) == 4:
			tt, ok := b.Type.(ir.TensorType)
			if !ok {
				return MemoryUsage{}, fmt.Errorf("%w: %%%s is not a tensor", ErrInvalidIR, b.Result)
			}
			n, err := tt.Bytes()
			if err != nil {
				return MemoryUsage{}, fmt.Errorf("%%%s: %w", b.Result, err)
			}
			s, _ := b.Args[3].(ir.Str)
			add(string(s), n)
		case b.Op == ir.OpCallPacked && len(b.Args) >= 2 && b.Args[0] == ir.Str(IPCAllocStorageFunc):
			n, _ := b.Args[1].(ir.Int)
			add(ir.ScopeIPC, int64(n))
		}
	}
	return u, nil
}
