package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels_attn.cu
var attnKernelSource string

const (
	attnWarps     = 4    // ATTN_WARPS
	attnMaxSplits = 1024 // ATTN_MAX_SPLITS
	// attnMaxChunk is the most cache rows one split takes (as long as the
	// scratch allows): a batch of 32 sequences fills the GPU's block
	// count with 3 splits, but chunks of 1378 rows are read one latency
	// after another by a block's warps; Llama-3-8B at batch 32 and
	// context 4096 took 24.4 ms a step on an H200 so, where PyTorch's
	// graph took 12.6.
	attnMaxChunk = 256
	// attnScratchMax bounds the split results of one attention call
	// (float32 max, sum and output per token, head and split); calls
	// that would need more use fewer splits.
	attnScratchMax = 64 << 20
)

// attnPlan is one split-KV attention launch.
type attnPlan struct {
	epl    int // head-dim elements per lane: 2, 4 or 8
	splits int // row chunks per (token, kv head)
	chunk  int // rows per chunk
	// fill is how many splits fill the GPU with blocks: a token at
	// position p spreads rows 0..p over that many, in chunks of at most
	// chunk rows (attn_chunk): a short context neither leaves blocks idle
	// nor runs more blocks of a few rows than the GPU holds (a batch of 32
	// at context 128 in chunks of 8 rows took 7.35 ms a step on an H200,
	// 6.71 in chunks of 48).
	fill int
}

// scratch is the float32 bytes of the split results.
func (p attnPlan) scratch(t, hq, d int) int64 {
	if p.splits == 1 {
		return 0
	}
	return int64(t) * int64(hq) * int64(p.splits) * int64(d+2) * 4
}

// planAttention decides whether the split-KV kernel takes an attention
// call (float16 or bfloat16, head dim 64, 128 or 256, at most 8 query
// heads per kv head (4 at 256), 16-byte aligned operands), and how many
// row chunks each (token, kv head) gets: enough blocks for four per
// multiprocessor, chunks of 8 to attnMaxChunk rows (fewer splits where
// the scratch would pass attnScratchMax). The split is fixed by the cache's
// size, not the position, so a captured graph serves every position;
// chunk is the most rows a split takes (a token at position p spreads
// rows 0..p over the splits: attn_chunk in kernels_attn.cu).
func planAttention(t, hq, hkv, d, maxSeq int, dt tensor.DType, aligned bool, sms int) (attnPlan, bool) {
	if dt != tensor.Float16 && dt != tensor.BFloat16 || !aligned || t < 1 || hkv < 1 || hq%hkv != 0 || maxSeq < 1 {
		return attnPlan{}, false
	}
	p := attnPlan{epl: d / 32}
	g := hq / hkv
	switch {
	case d != 64 && d != 128 && d != 256:
		return attnPlan{}, false
	case g > 8 || (d == 256 && g > 4):
		return attnPlan{}, false
	case t > 65535 || hkv > 65535:
		return attnPlan{}, false
	}
	want := 4 * max(sms, 1)
	p.splits = max(1, min(max((want+hkv*t-1)/(hkv*t), (maxSeq+attnMaxChunk-1)/attnMaxChunk), (maxSeq+7)/8, attnMaxSplits))
	for p.splits > 1 && p.scratch(t, hq, d) > attnScratchMax {
		p.splits /= 2
	}
	p.chunk = (maxSeq + p.splits - 1) / p.splits
	p.chunk = (p.chunk + 7) / 8 * 8
	p.splits = (maxSeq + p.chunk - 1) / p.chunk
	p.fill = max(1, min((want+hkv*t-1)/(hkv*t), p.splits))
	return p, true
}

// kernel is the split kernel of family (attn_split, attn_rope_split) for
// dtype suffix suf and g query heads a kv head: the one sized for 4 heads
// where g fits, else the one for 8 (4 at head dim 256). The registers
// for q and the output of heads a call does not have limit the blocks a
// multiprocessor holds (ncu, Llama-3-8B at batch 32 and context 4096 on
// an H200: 4 blocks of 4 warps, 25% occupancy, 15-24% of the DRAM
// bandwidth); sized for 4 heads a Llama-3-8B step on an H200 took 19.2
// against 21.5 ms at batch 32 and context 4096, 9.24-9.33 against 10.13
// at batch 8, 5.51 against 5.65 at batch 1 (same run).
func (p attnPlan) kernel(family, suf string, g int) string {
	name := fmt.Sprintf("%s_%s_e%d", family, suf, p.epl)
	if g <= 4 && p.epl <= 4 {
		name += "_q4"
	}
	return name
}

// chunkAt is attn_chunk of kernels_attn.cu (keep the two the same): the
// rows of each split for a token at position pos >= 0, the fewest (a
// multiple of 8) that cover rows 0..pos with fill splits, at most chunk.
func (p attnPlan) chunkAt(pos int) int {
	return min(p.chunk, ((pos+p.fill)/p.fill+7)/8*8)
}

// attnPart is the device address of the split results of a launch of pl
// (0: one split, none).
func (g *GPU) attnPart(pl attnPlan, dims attnDims) (uint64, error) {
	n := pl.scratch(dims.t, dims.hq, dims.d)
	if n == 0 {
		return 0, nil
	}
	b, err := g.scratchBuf(&g.attnBufs, n, "attention")
	if err != nil {
		return 0, err
	}
	return uint64(b.Ptr()), nil
}

// attnCombine merges the splits of a launch of pl into out (nothing to
// do for one split).
func (g *GPU) attnCombine(suf string, pl attnPlan, dims attnDims, part, pos, out uint64) error {
	if pl.splits == 1 {
		return nil
	}
	a := &struct {
		part, pos, out             uint64
		hq, d, splits, chunk, fill int32
	}{part, pos, out, int32(dims.hq), int32(dims.d), int32(pl.splits), int32(pl.chunk), int32(pl.fill)}
	err := g.launchGrid("attn_combine_"+suf, [3]uint32{uint32(dims.hq), uint32(dims.t), 1}, uint32(dims.d),
		unsafe.Pointer(&a.part), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out), unsafe.Pointer(&a.hq), unsafe.Pointer(&a.d),
		unsafe.Pointer(&a.splits), unsafe.Pointer(&a.chunk), unsafe.Pointer(&a.fill))
	runtime.KeepAlive(a)
	return err
}

// trySplitAttention runs the attention half of the op (after the cache
// append) through the prefill kernel when planPrefill takes it (many
// tokens a sequence), the tensor-core decode kernel when planDecode
// takes it (one token a sequence), else through the split-KV kernels
// when planAttention takes it.
func (g *GPU) trySplitAttention(dims attnDims, dt tensor.DType, p []uint64) (bool, error) {
	if ok, err := g.tryPrefillAttention(dims, dt, p); ok || err != nil {
		return ok, err
	}
	if ok, err := g.tryDecodeAttention(dims, dt, p, nil); ok || err != nil {
		return ok, err
	}
	if err := g.gemvKernels(); err != nil {
		return false, err
	}
	pl, ok := planAttention(dims.t, dims.hq, dims.hkv, dims.d, dims.maxSeq, dt, aligned16(p[0], p[3], p[4], p[6]), g.sms)
	if !ok || dims.maxSeq > math.MaxInt32 {
		return false, nil
	}
	return true, g.splitAttention(pl, dims, dt, p, nil)
}

// splitAttention runs the split-KV kernel as pl plans it, and the
// combine: attn_split on the caches as they are (freqs nil), or
// attn_rope_split, which also rotates q and k by the rotary table freqs
// and appends k and v. p: q, k, v, k_cache, v_cache, pos, out.
func (g *GPU) splitAttention(pl attnPlan, dims attnDims, dt tensor.DType, p []uint64, freqs []float32) error {
	suf, err := kernelSuffix(dt)
	if err != nil {
		return err
	}
	part, err := g.attnPart(pl, dims)
	if err != nil {
		return err
	}
	rope := freqs != nil
	a := &struct {
		q, k, v, kc, vc, pos, out, part uint64
		hq, hkv, seq, chunk, fill       int32
		scale                           float32
		tps                             int32
		f                               [attnMaxHalf]float32
	}{q: p[0], k: p[1], v: p[2], kc: p[3], vc: p[4], pos: p[5], out: p[6], part: part, hq: int32(dims.hq), hkv: int32(dims.hkv),
		seq: int32(dims.maxSeq), chunk: int32(pl.chunk), fill: int32(pl.fill), scale: float32(1 / math.Sqrt(float64(dims.d))), tps: int32(dims.tps())}
	family := "attn_split"
	params := []unsafe.Pointer{unsafe.Pointer(&a.q)}
	if rope {
		family = "attn_rope_split"
		copy(a.f[:], freqs)
		params = append(params, unsafe.Pointer(&a.k), unsafe.Pointer(&a.v))
	}
	params = append(params, unsafe.Pointer(&a.kc), unsafe.Pointer(&a.vc), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out), unsafe.Pointer(&a.part),
		unsafe.Pointer(&a.hq), unsafe.Pointer(&a.hkv), unsafe.Pointer(&a.seq), unsafe.Pointer(&a.chunk), unsafe.Pointer(&a.fill), unsafe.Pointer(&a.scale))
	if rope {
		params = append(params, unsafe.Pointer(&a.f))
	} else {
		params = append(params, unsafe.Pointer(&a.tps))
	}
	err = g.launchGrid(pl.kernel(family, suf, dims.hq/dims.hkv), [3]uint32{uint32(pl.splits), uint32(dims.hkv), uint32(dims.t)}, attnWarps*32, params...)
	if err == nil {
		err = g.attnCombine(suf, pl, dims, a.part, a.pos, a.out)
	}
	runtime.KeepAlive(a)
	return err
}

// attnMaxHalf is ATTN_MAX_HALF: the most inverse frequencies (head_dim /
// 2) attn_rope_split takes.
const attnMaxHalf = 128

// TryRopeAttention runs rope (table form) of q and k, the cache append
// and attention as one launch and the combine when every sequence brings
// one token (decode): dec_attn_rope where planDecode takes the call,
// else attn_rope_split where planAttention does; t: q and k before the
// rotation ([tokens, heads, head_dim]), v, the caches, pos and out, as
// the attention op takes them. It reports false, having run nothing,
// otherwise.
func (g *GPU) TryRopeAttention(t []*tensor.Tensor, freqs []float32) (bool, error) {
	if len(t) != 7 {
		return false, fmt.Errorf("%w: rope attention takes 7 operands, got %d", ErrShape, len(t))
	}
	dims, err := checkAttention(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
	if err != nil {
		return false, err
	}
	if dims.t == 0 || dims.tps() != 1 || len(freqs) != dims.d/2 || len(freqs) > attnMaxHalf || dims.maxSeq > math.MaxInt32 {
		return false, nil
	}
	if err := g.gemvKernels(); err != nil {
		return false, err
	}
	p, err := g.ptrs([]string{"q", "k", "v", "k_cache", "v_cache", "pos", "out"}, t...)
	if err != nil {
		return false, err
	}
	dt := t[0].DType()
	if ok, err := g.tryDecodeAttention(dims, dt, p, freqs); ok || err != nil {
		return ok, err
	}
	pl, ok := planAttention(dims.t, dims.hq, dims.hkv, dims.d, dims.maxSeq, dt, aligned16(p[0], p[1], p[2], p[3], p[4], p[6]), g.sms)
	if !ok {
		return false, nil
	}
	return true, g.splitAttention(pl, dims, dt, p, freqs)
}
