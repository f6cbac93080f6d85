package kernels

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/chorus-rt/chorus/tensor"
)

// Shapes of the tensor-core decode attention (dec_attn, kernels_prefill.cu).
const (
	decodeMaxGroup = 16  // DEC_MAX_GROUP: query heads a kv head (one 16-row operand)
	decodeMaxHalf  = 128 // DEC_MAX_HALF: inverse frequencies dec_attn_rope takes
	decodeTile     = 64  // PF_KEYS: cache rows a block copies at once
)

// decodeBlocksPerSM and decodeMaxChunk split a sequence's cache over
// dec_attn blocks: enough splits for about decodeBlocksPerSM blocks a
// multiprocessor, and no block over decodeMaxChunk rows. Fewer, longer
// blocks won at every batch: a warp keeps a group of rows' loads in
// flight (32 rows then, DEC_KEYS = 16 since), so a block streams well
// without others beside it, while every split costs a merge and a read
// in the combine. On an H200 (same run,
// BenchmarkGPUDecodeAttention: Llama-3-8B, a 4133-row cache, position
// 4100) one block a multiprocessor and up to 4096 rows a block took 45.5
// us at batch 8 and 140 at batch 32, two and up to 512 rows 54.7 and 165;
// a decode step at batch 32 and context 4096 9.41 against 10.35 ms, at
// batch 8 and context 128 5.11 against 5.31. Variables so that the
// kernel benchmark can compare choices in one run.
var (
	decodeBlocksPerSM = 1
	decodeMaxChunk    = 4096
)

// decodePlan is one launch of dec_attn: splits chunks of at most chunk
// cache rows a (sequence, kv head), a short context spread over fill of
// them (attnPlan's rule, so that attn_combine merges the splits).
type decodePlan struct {
	d                   int
	splits, chunk, fill int
}

// planDecode decides whether dec_attn takes an attention call: one token
// a sequence (decode), float16 or bfloat16, head dim 64 or 128, at most
// decodeMaxGroup query heads a kv head, 16-byte aligned operands, a grid
// the GPU takes; sms is the GPU's multiprocessor count. Like the split-KV
// plan it depends on the cache's size, not the position, so a captured
// graph serves every position.
func planDecode(dims attnDims, dt tensor.DType, aligned bool, sms int) (decodePlan, bool) {
	if dt != tensor.Float16 && dt != tensor.BFloat16 || !aligned || dims.t < 1 || dims.tps() != 1 || dims.hkv < 1 || dims.hq%dims.hkv != 0 {
		return decodePlan{}, false
	}
	switch g := dims.hq / dims.hkv; {
	case dims.d != 64 && dims.d != 128:
		return decodePlan{}, false
	case g < 1 || g > decodeMaxGroup:
		return decodePlan{}, false
	case dims.hkv > 65535 || dims.t > 65535 || dims.maxSeq < 1 || dims.maxSeq > math.MaxInt32:
		return decodePlan{}, false
	}
	pairs := dims.t * dims.hkv
	fill := (decodeBlocksPerSM*max(sms, 1) + pairs - 1) / pairs
	p := decodePlan{d: dims.d}
	p.splits = max(1, min(max(fill, (dims.maxSeq+decodeMaxChunk-1)/decodeMaxChunk), (dims.maxSeq+7)/8, attnMaxSplits))
	for p.splits > 1 && p.attn().scratch(dims.t, dims.hq, dims.d) > attnScratchMax {
		p.splits /= 2
	}
	p.chunk = (dims.maxSeq + p.splits - 1) / p.splits
	if p.chunk > decodeTile {
		p.chunk = (p.chunk + decodeTile - 1) / decodeTile * decodeTile // whole tiles
	} else {
		p.chunk = (p.chunk + 7) / 8 * 8
	}
	p.splits = (dims.maxSeq + p.chunk - 1) / p.chunk
	p.fill = max(1, min(fill, p.splits))
	return p, true
}

// attn is the split part of the plan as attn_combine takes it.
func (p decodePlan) attn() attnPlan { return attnPlan{splits: p.splits, chunk: p.chunk, fill: p.fill} }

// kernel is the plan's kernel for dtype suffix suf, with the rotary
// embedding and the cache append (rope) or after them.
func (p decodePlan) kernel(suf string, rope bool) string {
	if rope {
		return fmt.Sprintf("dec_attn_rope_%s_d%d", suf, p.d)
	}
	return fmt.Sprintf("dec_attn_%s_d%d", suf, p.d)
}

// grid is (splits, kv heads, sequences).
func (p decodePlan) grid(dims attnDims) [3]uint32 {
	return [3]uint32{uint32(p.splits), uint32(dims.hkv), uint32(dims.t)}
}

// decodeKernelNames are the dec_attn kernels of kernels_prefill.cu.
var decodeKernelNames = []string{
	"dec_attn_f16_d64", "dec_attn_f16_d128", "dec_attn_bf16_d64", "dec_attn_bf16_d128",
	"dec_attn_rope_f16_d64", "dec_attn_rope_f16_d128", "dec_attn_rope_bf16_d64", "dec_attn_rope_bf16_d128",
}

// tryDecodeAttention runs attention of one token a sequence through
// dec_attn and attn_combine when planDecode takes the call, and reports
// whether it ran. p: q, k, v, k_cache, v_cache, pos, out. With freqs
// (head_dim / 2 inverse frequencies) the kernel also rotates q and k and
// appends k and v to the caches (q and k unrotated); without, the
// caches hold the rows already.
func (g *GPU) tryDecodeAttention(dims attnDims, dt tensor.DType, p []uint64, freqs []float32) (bool, error) {
	rope := freqs != nil
	if rope && (len(freqs) != dims.d/2 || len(freqs) > decodeMaxHalf) {
		return false, nil
	}
	if err := g.gemvKernels(); err != nil { // attn_combine, the multiprocessor count
		return false, err
	}
	ops := []uint64{p[0], p[3], p[4], p[6]}
	if rope {
		ops = append(ops, p[1], p[2])
	}
	pl, ok := planDecode(dims, dt, aligned16(ops...), g.sms)
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
	part, err := g.attnPart(pl.attn(), dims)
	if err != nil {
		return true, err
	}
	a := &struct {
		q, k, v, kc, vc, pos, out, part uint64
		hq, hkv, seq, chunk, fill       int32
		scale2                          float32
		pre                             int32
		f                               [decodeMaxHalf]float32
	}{q: p[0], k: p[1], v: p[2], kc: p[3], vc: p[4], pos: p[5], out: p[6], part: part, hq: int32(dims.hq), hkv: int32(dims.hkv),
		seq: int32(dims.maxSeq), chunk: int32(pl.chunk), fill: int32(pl.fill), scale2: float32(math.Log2E / math.Sqrt(float64(dims.d))),
		pre: g.preArg()}
	params := []unsafe.Pointer{unsafe.Pointer(&a.q)}
	if rope {
		copy(a.f[:], freqs)
		params = append(params, unsafe.Pointer(&a.k), unsafe.Pointer(&a.v))
	}
	params = append(params, unsafe.Pointer(&a.kc), unsafe.Pointer(&a.vc), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out), unsafe.Pointer(&a.part),
		unsafe.Pointer(&a.hq), unsafe.Pointer(&a.hkv), unsafe.Pointer(&a.seq), unsafe.Pointer(&a.chunk), unsafe.Pointer(&a.fill),
		unsafe.Pointer(&a.scale2), unsafe.Pointer(&a.pre))
	if rope {
		params = append(params, unsafe.Pointer(&a.f))
	}
	err = g.launchGrid(pl.kernel(suf, rope), pl.grid(dims), prefillWarps*32, params...)
	if err == nil {
		err = g.attnCombine(suf, pl.attn(), dims, a.part, a.pos, a.out)
	}
	runtime.KeepAlive(a)
	return true, err
}
