package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"runtime"
	"slices"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels_prefill.cu
var prefillKernelSource string

// Shapes of the prefill attention kernel (kernels_prefill.cu).
const (
	prefillWarps = 4                 // PF_WARPS: warps per block
	prefillRows  = 16 * prefillWarps // PF_ROWS: query rows (token x head) per block
	// prefillMinTokens is the fewest tokens a sequence brings for a call
	// to take the prefill kernel: below, a block's rows are mostly
	// padding: decode (1 token) goes to dec_attn, a few tokens (a
	// speculative step) to the split-KV kernel (one block per token).
	prefillMinTokens = 16
	// prefillMaxGroup is the most query heads a kv head takes (a block's
	// rows hold at least prefillRows / 8 = 8 tokens).
	prefillMaxGroup = 8
)

// prefillMin is prefillMinTokens, a variable so that a benchmark can send
// the calls to the split-KV kernel for the same-run comparison.
var prefillMin = prefillMinTokens

// prefillPlan is one launch of prefill_attn.
type prefillPlan struct {
	d      int // head dim: 64 or 128
	tq     int // tokens a block: prefillRows / (hq / hkv)
	blocks int // query blocks a sequence and kv head
}

// planPrefill decides whether the prefill kernel takes an attention call
// (after its cache append): float16 or bfloat16, head dim 64 or 128, at
// most prefillMaxGroup query heads a kv head, at least prefillMinTokens
// tokens a sequence, 16-byte aligned operands, a grid the GPU takes; a
// block holds prefillRows rows of (token, head), so tq tokens of a kv
// head's G query heads.
func planPrefill(dims attnDims, dt tensor.DType, aligned bool) (prefillPlan, bool) {
	if dt != tensor.Float16 && dt != tensor.BFloat16 || !aligned || dims.t < 1 || dims.batch < 1 || dims.hkv < 1 || dims.hq%dims.hkv != 0 {
		return prefillPlan{}, false
	}
	g := dims.hq / dims.hkv
	switch {
	case dims.d != 64 && dims.d != 128:
		return prefillPlan{}, false
	case g < 1 || g > prefillMaxGroup:
		return prefillPlan{}, false
	case dims.tps() < prefillMin, dims.t%dims.batch != 0:
		return prefillPlan{}, false
	case dims.hkv > 65535 || dims.batch > 65535 || dims.maxSeq < 1 || dims.maxSeq > math.MaxInt32 || dims.tps() > math.MaxInt32/2:
		return prefillPlan{}, false
	}
	p := prefillPlan{d: dims.d, tq: prefillRows / g}
	p.blocks = (dims.tps() + p.tq - 1) / p.tq
	return p, true
}

// kernel is the plan's kernel for dtype suffix suf.
func (p prefillPlan) kernel(suf string) string { return fmt.Sprintf("prefill_attn_%s_d%d", suf, p.d) }

// grid is (query blocks, kv heads, sequences).
func (p prefillPlan) grid(dims attnDims) [3]uint32 {
	return [3]uint32{uint32(p.blocks), uint32(dims.hkv), uint32(dims.batch)}
}

// prefillKernelNames are the kernels of kernels_prefill.cu.
var prefillKernelNames = []string{"prefill_attn_f16_d64", "prefill_attn_f16_d128", "prefill_attn_bf16_d64", "prefill_attn_bf16_d128"}

// prefillKernels compiles and loads kernels_prefill.cu (a module of its
// own: a failure there leaves the split-KV path working) at the first
// call it takes.
func (g *GPU) prefillKernels() error {
	if g.prefillMod != 0 {
		return nil
	}
	err := g.dev.Do(func(cuda.Stream) (err error) {
		if g.prefillMod, err = g.loadModule(prefillModule()); err != nil {
			return err
		}
		g.carveoutErr = g.decodeCarveouts()
		return nil
	})
	if err != nil {
		return fmt.Errorf("vm: prefill attention kernels on cuda:%d: %w", g.dev.Ordinal(), err)
	}
	return nil
}

// decodeCarveouts sets each dec_attn kernel's shared-memory carveout
// preference (decodeCarveout) from its registers' blocks a
// multiprocessor, its static shared memory and the device's most. Call
// it inside g.dev.Do.
func (g *GPU) decodeCarveouts() error {
	d, err := g.drv.DeviceGet(g.dev.Ordinal())
	if err != nil {
		return err
	}
	most, err := g.drv.DeviceAttribute(d, cuda.AttrMaxSharedMemoryPerMultiprocessor)
	if err != nil {
		return err
	}
	for _, n := range decodeKernelNames {
		f := g.fns[n].f
		blocks, err := g.drv.OccupancyMaxActiveBlocksPerMultiprocessor(f, prefillWarps*32, 0)
		if err != nil {
			return fmt.Errorf("%s: occupancy: %w", n, err)
		}
		shared, err := g.drv.FuncGetAttribute(f, cuda.FuncAttrSharedSizeBytes)
		if err != nil {
			return fmt.Errorf("%s: shared memory: %w", n, err)
		}
		pct := decodeCarveout(blocks, shared, most)
		if err := g.drv.FuncSetAttribute(f, cuda.FuncAttrPreferredSharedMemoryCarveout, pct); err != nil {
			return fmt.Errorf("%s: shared memory carveout %d%%: %w", n, pct, err)
		}
	}
	return nil
}

// tryPrefillAttention runs the attention half of the op (after the cache
// append; p: q, k, v, k_cache, v_cache, pos, out) through prefill_attn
// when planPrefill takes the call, and reports whether it ran.
func (g *GPU) tryPrefillAttention(dims attnDims, dt tensor.DType, p []uint64) (bool, error) {
	pl, ok := planPrefill(dims, dt, aligned16(p[0], p[3], p[4], p[6]))
	if !ok {
		return false, nil
	}
	suf, err := kernelSuffix(dt)
	if err != nil {
		return false, err
	}
	if err := g.prefillKernels(); err != nil {
		return false, err
	}
	a := &struct {
		q, kc, vc, pos, out   uint64
		hq, hkv, seq, tps, tq int32
		scale2                float32
	}{p[0], p[3], p[4], p[5], p[6], int32(dims.hq), int32(dims.hkv), int32(dims.maxSeq), int32(dims.tps()), int32(pl.tq),
		float32(math.Log2E / math.Sqrt(float64(dims.d)))}
	err = g.launchGrid(pl.kernel(suf), pl.grid(dims), prefillWarps*32,
		unsafe.Pointer(&a.q), unsafe.Pointer(&a.kc), unsafe.Pointer(&a.vc), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out),
		unsafe.Pointer(&a.hq), unsafe.Pointer(&a.hkv), unsafe.Pointer(&a.seq), unsafe.Pointer(&a.tps), unsafe.Pointer(&a.tq),
		unsafe.Pointer(&a.scale2))
	runtime.KeepAlive(a)
	return true, err
}

// prefillModule is kernels_prefill.cu: prefill and decode attention.
func prefillModule() module {
	return module{"chorus_vm_prefill.cu", cudasrc.Half + cudasrc.PDL + kernelSource + prefillKernelSource, append(slices.Clone(prefillKernelNames), decodeKernelNames...)}
}
