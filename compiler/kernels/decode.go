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
//
// decodeFuseSplits is the most splits whose merge the launch's last
// blocks do (a counter per sequence and kv head; DEC_TAIL splits' results
// loaded at once), instead of an attn_combine launch after it. H200,
// Llama-3-8B, graph-replayed, both builds twice in one call: batch 32
// (2 splits) 5.570-5.594 -> 5.433-5.450 ms a step at context 128,
// 9.589-9.619 -> 9.553-9.558 at 4096; batch 8 (3 splits) 4.425-4.439 ->
// 4.414-4.428 and 5.584-5.632 -> 5.535-5.536; batch 1 (17 splits, left
// to attn_combine) 4.039-4.084 and 4.289-4.309 against 4.038-4.077 and
// 4.272-4.285. Merged by its last blocks (BenchmarkGPUDecodeAttention),
// batch 1's 17 splits took 17.8 against 15.6 us at position 4100 and
// 13.4 against 10.2 at 130 (8 blocks merge what attn_combine spreads
// over 32); a cap of 16 splits so that batch 1 could merge in one round
// made its blocks longer (13 of 320 rows: a step 1.036x slower at
// context 4096).
//
// decodeMinRows is the fewest cache rows a split takes where the cache
// is short: a block's warps take DEC_KEYS rows each, so a block reads 64
// rows in one round of loads, as long as it takes to read 8. A short
// cache (137 rows at context 128) is then 3 splits, merged by the
// launch's last block, instead of 17 of 8 rows and an attn_combine
// launch after them. Caches past 17 x 64 rows at batch 1 keep their
// splits. H200s, Llama-3-8B, graph-replayed, both builds twice in one
// call (2026-11-29): over 2 GPUs batch 8 at context 128 (5 splits -> 3)
// 3.116-3.122 -> 3.076-3.086 ms, batch 1 (33 -> 3) 2.683-2.687 ->
// 2.690-2.703; one GPU batch 1 at context 128 (17 -> 3) 3.940-3.946 ->
// 3.940-3.991, at 512 (17 -> 9) 3.967-3.982 -> 3.976-3.985. The merge in
// the last block costs about what the attn_combine launch did; one
// launch fewer a layer, and the rank of two at batch 8 gains 1.3%.
var (
	decodeBlocksPerSM = 1
	decodeMaxChunk    = 4096
	decodeFuseSplits  = 8
	decodeMinRows     = 64
)

// decodeCarveout is the shared-memory share (percent of the device's
// most, cuda.AttrMaxSharedMemoryPerMultiprocessor) the dec_attn kernels
// prefer: enough for the blocks a multiprocessor their registers allow
// (blocks, shared bytes a block, 1 KiB a block reserved), plus one
// percent; the driver rounds a preference up to a supported capacity
// (on an H200 two blocks of head dim 128: 15%, the 64 KiB configuration;
// TestDecodeCarveout), the rest of the 256 KiB stays L1. Without it the
// attention's blocks, launched early (PDL) while a product with large
// shared-memory rings still ran, were placed beside it under that
// product's configuration (228 KiB shared, 28 KiB of L1) and kept it for
// the whole launch, each block 10% slower (globaltimer stamps: 72.8
// against 66.0 us at batch 32, context 4096, behind the tensor-core
// q/k/v kernel). H200, Llama-3-8B (head dim 128), graph-replayed, both
// builds in two rounds of one call (2026-11-29): batch 16 at context
// 4096 6.697-6.763 -> 6.331-6.368 ms, at 128 4.545-4.562 -> 4.474-4.482,
// batch 8 at 4096 5.470 -> 5.391-5.418, batch 1 at 4096 4.211-4.212 ->
// 4.153-4.185; batch 1 and 8 at 128 and batch 32 (cuBLAS's q/k/v before
// the attention) within the noise. Launching the attention without PDL
// instead took batch 16 at 4096 to 6.514 (and batch 1 1.035-1.045x
// slower); a 0% preference, the least shared memory, left room for one
// block: 1.07-1.19x slower. Other GPUs and head dim 64 get the same rule
// from their own numbers (not measured).
func decodeCarveout(blocks, shared, maxShared int) int {
	if maxShared <= 0 || blocks <= 0 {
		return 100
	}
	need := blocks * (shared + 1<<10)
	return min(100, (need*100+maxShared-1)/maxShared+1)
}

// decodePlan is one launch of dec_attn: splits chunks of at most chunk
// cache rows a (sequence, kv head), a short context spread over fill of
// them (attnPlan's rule). With fuse the last block of a (sequence, kv
// head) merges its splits, else attn_combine does after the launch.
type decodePlan struct {
	d                   int
	splits, chunk, fill int
	fuse                bool
	// g8: at most 8 query heads a kv head, so the _g8 kernels, which
	// keep rows 0-7 of the 16-row operands (kernels_prefill.cu).
	g8 bool
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
	p := decodePlan{d: dims.d, g8: dims.hq/dims.hkv <= 8}
	p.splits = max(1, min(max(fill, (dims.maxSeq+decodeMaxChunk-1)/decodeMaxChunk), (dims.maxSeq+decodeMinRows-1)/decodeMinRows, attnMaxSplits))
	for p.splits > 1 && p.scratch(dims.t, dims.hq) > attnScratchMax {
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
	p.fuse = p.splits > 1 && p.splits <= decodeFuseSplits
	return p, true
}

// attn is the split part of the plan as attn_combine takes it.
func (p decodePlan) attn() attnPlan { return attnPlan{splits: p.splits, chunk: p.chunk, fill: p.fill} }

// scratch is the float32 bytes of the split results, at most: per
// token, head and split its max, sum and output, and where the last
// block merges two unused (head_dim + 4 floats, so that a split's output
// starts 16-byte aligned for dec_merge).
func (p decodePlan) scratch(t, hq int) int64 {
	if p.splits == 1 {
		return 0
	}
	return int64(t) * int64(hq) * int64(p.splits) * int64(p.d+4) * 4
}

// counters is the bytes of the per-(sequence, kv head) counters of a
// split launch (the last block of each merges its splits).
func (p decodePlan) counters(t, hkv int) int64 {
	if p.splits == 1 {
		return 0
	}
	return counterBytes(int64(t) * int64(hkv))
}

// kernel is the plan's kernel for dtype suffix suf, with the rotary
// embedding and the cache append (rope) or after them.
func (p decodePlan) kernel(suf string, rope bool) string {
	g8 := ""
	if p.g8 {
		g8 = "_g8"
	}
	if rope {
		return fmt.Sprintf("dec_attn_rope_%s_d%d%s", suf, p.d, g8)
	}
	return fmt.Sprintf("dec_attn_%s_d%d%s", suf, p.d, g8)
}

// grid is (splits, kv heads, sequences).
func (p decodePlan) grid(dims attnDims) [3]uint32 {
	return [3]uint32{uint32(p.splits), uint32(dims.hkv), uint32(dims.t)}
}

// decodeKernelNames are the dec_attn kernels of kernels_prefill.cu.
var decodeKernelNames = []string{
	"dec_attn_f16_d64", "dec_attn_f16_d128", "dec_attn_bf16_d64", "dec_attn_bf16_d128",
	"dec_attn_rope_f16_d64", "dec_attn_rope_f16_d128", "dec_attn_rope_bf16_d64", "dec_attn_rope_bf16_d128",
	"dec_attn_f16_d64_g8", "dec_attn_f16_d128_g8", "dec_attn_bf16_d64_g8", "dec_attn_bf16_d128_g8",
	"dec_attn_rope_f16_d64_g8", "dec_attn_rope_f16_d128_g8", "dec_attn_rope_bf16_d64_g8", "dec_attn_rope_bf16_d128_g8",
}

// tryDecodeAttention runs attention of one token a sequence through
// dec_attn (and attn_combine where the plan does not fuse the merge)
// when planDecode takes the call, and reports whether it ran. p: q, k, v, k_cache, v_cache, pos, out. With freqs
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
	var part, cnt uint64
	if pl.fuse {
		part, cnt, err = g.decodeScratch(pl, dims)
	} else {
		part, err = g.attnPart(pl.attn(), dims)
	}
	if err != nil {
		return true, err
	}
	a := &struct {
		q, k, v, kc, vc, pos, out, part, cnt uint64
		hq, hkv, seq, chunk, fill            int32
		scale2                               float32
		pre                                  int32
		f                                    [decodeMaxHalf]float32
	}{q: p[0], k: p[1], v: p[2], kc: p[3], vc: p[4], pos: p[5], out: p[6], part: part, cnt: cnt, hq: int32(dims.hq), hkv: int32(dims.hkv),
		seq: int32(dims.maxSeq), chunk: int32(pl.chunk), fill: int32(pl.fill),
		scale2: float32(math.Log2E / math.Sqrt(float64(dims.d))), pre: g.preArg()}
	params := []unsafe.Pointer{unsafe.Pointer(&a.q)}
	if rope {
		copy(a.f[:], freqs)
		params = append(params, unsafe.Pointer(&a.k), unsafe.Pointer(&a.v))
	}
	params = append(params, unsafe.Pointer(&a.kc), unsafe.Pointer(&a.vc), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out), unsafe.Pointer(&a.part),
		unsafe.Pointer(&a.cnt), unsafe.Pointer(&a.hq), unsafe.Pointer(&a.hkv), unsafe.Pointer(&a.seq), unsafe.Pointer(&a.chunk),
		unsafe.Pointer(&a.fill), unsafe.Pointer(&a.scale2), unsafe.Pointer(&a.pre))
	if rope {
		params = append(params, unsafe.Pointer(&a.f))
	}
	err = g.launchGrid(pl.kernel(suf, rope), pl.grid(dims), prefillWarps*32, params...)
	if err == nil && !pl.fuse {
		err = g.attnCombine(suf, pl.attn(), dims, a.part, a.pos, a.out)
	}
	runtime.KeepAlive(a)
	return true, err
}

// decodeScratch returns the device addresses of a fused launch's results
// and counters. The results share the split-KV
// attention's buffers (g.attnBufs); the counters share the tensor-core
// products' (g.tcCounters: every counter is zero between launches, the
// last block resetting its own, so any launch may use any buffer long
// enough).
func (g *GPU) decodeScratch(pl decodePlan, dims attnDims) (part, cnt uint64, err error) {
	b, err := g.scratchBuf(&g.attnBufs, pl.scratch(dims.t, dims.hq), "decode attention")
	if err != nil {
		return 0, 0, err
	}
	c, err := g.scratchBuf(&g.tcCounters, pl.counters(dims.t, dims.hkv), "decode attention")
	if err != nil {
		return 0, 0, err
	}
	return uint64(b.Ptr()), uint64(c.Ptr()), nil
}
