package decoder

import (
	"fmt"
	"io"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/tensor"
)

// Function names of the module Build makes.
const (
	FuncPrefill = "prefill"
	FuncDecode  = "decode"
)

// CacheParam is the IR parameter name of layer i's K ("k") or V ("v")
// cache.
func CacheParam(kv string, i int) string { return fmt.Sprintf("%s_cache.%d", kv, i) }

// IR parameters of a split LM head on several workers, after the caches:
// the worker's one-hot column [n, 1] (1 in its rank's row), and, when n
// does not divide the vocabulary, the mask [n·P] added to the gathered
// logits (0, then -inf on the padding). Model makes them
// (LMHeadPlaceFunc, LMHeadMaskFunc).
const (
	ParamLMHeadPlace = "lm_head.place"
	ParamLMHeadMask  = "lm_head.mask"
)

// HeadParams lists the extra parameters of the split LM head on n
// workers (none when replicated or on one worker).
func (c Config) HeadParams(n int) []string {
	if c.LMHeadMode() != LMHeadSplit || n == 1 {
		return nil
	}
	if c.LogitsWidth(n) > c.Vocab {
		return []string{ParamLMHeadPlace, ParamLMHeadMask}
	}
	return []string{ParamLMHeadPlace}
}

// Build returns the module one worker runs for n workers: @prefill over
// prefillLen tokens (left out when prefillLen is 0) and @decode over one.
// Both are
//
//	(ids: int32[T], pos: int32[T], params... (Config.Params order, worker
//	 shards), k_cache.0, v_cache.0, ..., k_cache.L-1, v_cache.L-1)
//	  -> (logits: [T, vocab], next: int32[T])
//
// with devices left to the pipeline. With n > 1 each layer has exactly two
// all-reduces (sum): the attention output projection's and the MLP down
// projection's partial sums. A split LM head (LMHeadSplit, n > 1) adds
// one: each worker computes its P = VocabShard(n) logits, multiplies them
// into row r of a zero [T, n, P] (by the one-hot lm_head.place) and the
// sum all-reduce gathers every worker's logits, in vocabulary order, on
// every worker (exact: the other workers add zeros). An all-reduce rather
// than an all-gather: on GPUs it is the custom IPC all-reduce the layers
// use, captured in CUDA graphs and offered by the "ipc" backend (ranks
// sharing a GPU), and its result is [T, n·P] in token-major order, which
// an all-gather of [T, P] blocks (rank-major) is not for T > 1. Padding
// columns (n not dividing the vocabulary) get -inf (lm_head.mask), so
// argmax never picks them; the logits are then [T, LogitsWidth(n)].
func Build(c Config, n, prefillLen int) (*ir.Module, error) {
	return BuildBatch(c, n, prefillLen, 1)
}

// BuildBatch is Build for batch sequences decoded together: every
// function takes batch equal runs of tokens (T = batch·prefillLen for
// @prefill, batch for @decode; ids and pos sequence by sequence) and
// caches [batch, max_seq, kv_heads/n, head_dim] (BatchCacheShape), and
// returns logits and next for every token. Batch 1 is Build's module.
func BuildBatch(c Config, n, prefillLen, batch int) (*ir.Module, error) {
	if err := c.Validate(n); err != nil {
		return nil, err
	}
	if batch < 1 {
		return nil, fmt.Errorf("%w: batch of %d sequences (at least 1)", ErrConfig, batch)
	}
	if prefillLen < 0 || prefillLen > c.MaxSeq {
		return nil, fmt.Errorf("%w: prefill of %d tokens with a %d-row cache", ErrConfig, prefillLen, c.MaxSeq)
	}
	m := &ir.Module{Name: "tp_decoder"}
	if prefillLen > 0 {
		f, err := buildStep(c, n, FuncPrefill, prefillLen, batch)
		if err != nil {
			return nil, err
		}
		m.Funcs = append(m.Funcs, f)
	}
	f, err := buildStep(c, n, FuncDecode, 1, batch)
	if err != nil {
		return nil, err
	}
	m.Funcs = append(m.Funcs, f)
	return m, nil
}

// BuildPrefill returns a module with @prefill over t tokens only (the
// same signature as Build's): what Model compiles, on first use, for a
// prompt length it has no program for.
func BuildPrefill(c Config, n, t int) (*ir.Module, error) {
	return buildPrefill(c, n, t, 1)
}

// buildPrefill is BuildPrefill for batch sequences of t tokens each.
func buildPrefill(c Config, n, t, batch int) (*ir.Module, error) {
	if err := c.Validate(n); err != nil {
		return nil, err
	}
	if t < 1 || t > c.MaxSeq || batch < 1 {
		return nil, fmt.Errorf("%w: prefill of %d tokens in %d sequences with a %d-row cache", ErrConfig, t, batch, c.MaxSeq)
	}
	f, err := buildStep(c, n, FuncPrefill, t, batch)
	if err != nil {
		return nil, err
	}
	return &ir.Module{Name: fmt.Sprintf("tp_decoder_prefill_%d", t), Funcs: []*ir.Function{f}}, nil
}

// BatchCacheShape is one worker's K (or V) cache of one layer for batch
// sequences: CacheShape for one, [batch, max_seq, kv_heads/n, head_dim]
// for more (the attention op's batched form).
func (c Config) BatchCacheShape(n, batch int) tensor.Shape {
	s := c.CacheShape(n)
	if batch <= 1 {
		return s
	}
	return append(tensor.Shape{int64(batch)}, s...)
}

// buildStep is one function over batch sequences of t tokens each.
func buildStep(c Config, n int, name string, t, batch int) (*ir.Function, error) {
	dt, any := c.DType, vdevice.Unconstrained
	T, H, V, D := int64(t)*int64(batch), int64(c.Hidden), int64(c.Vocab), int64(c.HeadDim())
	hq, hkv, ffn := int64(c.Heads/n), int64(c.KVHeadsPerWorker(n)), int64(c.FFN/n)
	b := ir.NewFunc(name)
	ids := b.Param("ids", ir.Tensor(tensor.Shape{T}, tensor.Int32, any))
	pos := b.Param("pos", ir.Tensor(tensor.Shape{T}, tensor.Int32, any))
	w, transposed := map[string]ir.Ref{}, map[string]bool{}
	for _, p := range c.Params() {
		w[p.Name] = b.Param(p.Name, ir.Tensor(p.ShardShape(n), dt, any))
		transposed[p.Name] = p.Transposed
	}
	// matmul is x·W of parameter name: matmul_nt for [out, in] weights
	// (LayoutHF), read transposed by the kernel instead of copied.
	matmul := func(x ir.Ref, name string, out ir.Ref) {
		if transposed[name] {
			b.MatmulNT(x, w[name], out)
		} else {
			b.Matmul(x, w[name], out)
		}
	}
	kc, vc := make([]ir.Ref, c.Layers), make([]ir.Ref, c.Layers)
	for i := range c.Layers {
		kc[i] = b.Param(CacheParam("k", i), ir.Tensor(c.BatchCacheShape(n, batch), dt, any))
		vc[i] = b.Param(CacheParam("v", i), ir.Tensor(c.BatchCacheShape(n, batch), dt, any))
	}
	P, W := int64(c.VocabShard(n)), int64(c.LogitsWidth(n))
	for _, name := range c.HeadParams(n) {
		shape := tensor.Shape{int64(n), 1}
		if name == ParamLMHeadMask {
			shape = tensor.Shape{W}
		}
		w[name] = b.Param(name, ir.Tensor(shape, dt, any))
	}
	alloc := func(name string, shape ...int64) ir.Ref { return b.AllocTensor(name, shape, dt, any, "") }
	// The rotary table (Hugging Face's inv_freq, scaling applied): rope's
	// table form, the same for every layer.
	invFreq := c.InvFreq()
	// bias adds a projection's bias [width] to every row of x [T, width].
	bias := func(x ir.Ref, name, out string, width int64) ir.Ref {
		y := alloc(out, T, width)
		b.Add(x, w[name], y)
		return y
	}
	norm := func(x ir.Ref, wName, bName, out string) ir.Ref {
		y := alloc(out, T, H)
		if c.norm() == NormLayer {
			b.LayerNorm(x, w[wName], w[bName], c.NormEps, y)
		} else {
			b.RMSNorm(x, w[wName], c.NormEps, y)
		}
		return y
	}
	// residual adds a partial sum (all-reduced first when sharded) to h.
	residual := func(h, partial ir.Ref, name string) ir.Ref {
		if n > 1 {
			sum := alloc(name+"_sum", T, H)
			b.Allreduce(partial, "sum", sum)
			partial = sum
		}
		out := alloc("h", T, H)
		b.Add(h, partial, out)
		return out
	}

	h := alloc("h", T, H)
	b.Embedding(ids, w[ParamEmbed], h)
	for i := range c.Layers {
		l := func(s string) string { return LayerParam(i, s) }
		x := norm(h, l(AttnNormW), l(AttnNormB), "x")
		q := alloc("q", T, hq*D)
		matmul(x, l(AttnWQ), q)
		k := alloc("k", T, hkv*D)
		matmul(x, l(AttnWK), k)
		v := alloc("v", T, hkv*D)
		matmul(x, l(AttnWV), v)
		if c.QKVBias {
			q, k, v = bias(q, l(AttnBQ), "q_b", hq*D), bias(k, l(AttnBK), "k_b", hkv*D), bias(v, l(AttnBV), "v_b", hkv*D)
		}
		qr := alloc("q_rope", T, hq, D)
		b.RopeTable(b.Reshape("q_heads", q, tensor.Shape{T, hq, D}), pos, invFreq, qr)
		kr := alloc("k_rope", T, hkv, D)
		b.RopeTable(b.Reshape("k_heads", k, tensor.Shape{T, hkv, D}), pos, invFreq, kr)
		a := alloc("attn", T, hq, D)
		b.Attention(qr, kr, b.Reshape("v_heads", v, tensor.Shape{T, hkv, D}), kc[i], vc[i], pos, a)
		o := alloc("attn_out", T, H)
		matmul(b.Reshape("attn_flat", a, tensor.Shape{T, hq * D}), l(AttnWO), o)
		h = residual(h, o, "attn_out")

		x = norm(h, l(MLPNormW), l(MLPNormB), "x")
		g := alloc("gate", T, ffn)
		matmul(x, l(MLPWGate), g)
		u := alloc("up", T, ffn)
		matmul(x, l(MLPWUp), u)
		ga := alloc("act", T, ffn)
		if c.act() == ActGELU {
			b.Gelu(g, ga)
		} else {
			b.Silu(g, ga)
		}
		p := alloc("gated", T, ffn)
		b.Mul(ga, u, p)
		d := alloc("down", T, H)
		matmul(p, l(MLPWDown), d)
		h = residual(h, d, "down")
	}
	x := norm(h, ParamNormW, ParamNormB, "x")
	var logits ir.Ref
	if P != V {
		// The split head: this worker's logits, placed in its row of
		// [T, n, P] and gathered by the sum all-reduce.
		local := alloc("logits_local", T, P)
		matmul(x, ParamLMHead, local)
		placed := alloc("logits_placed", T, int64(n), P)
		b.Mul(b.Reshape("logits_row", local, tensor.Shape{T, 1, P}), w[ParamLMHeadPlace], placed)
		logits = alloc("logits", T, W)
		b.Allreduce(b.Reshape("logits_parts", placed, tensor.Shape{T, W}), "sum", logits)
		if W > V {
			masked := alloc("logits_masked", T, W)
			b.Add(logits, w[ParamLMHeadMask], masked)
			logits = masked
		}
	} else {
		logits = alloc("logits", T, V)
		matmul(x, ParamLMHead, logits)
	}
	next := b.AllocTensor("next", tensor.Shape{T}, tensor.Int32, any, "")
	b.Argmax(logits, next)
	b.Return(logits, next)
	return b.Finish()
}

// Compile builds the decoder for n workers on dev (cpu, or cuda for GPU
// workers) and runs vm.Pipeline(dev, strategy) on it; with printAfter
// set, the IR after every pass goes there.
func Compile(c Config, n, prefillLen int, dev tensor.Device, strategy string, printAfter io.Writer) (*ir.Module, error) {
	return compileBatch(c, n, prefillLen, 1, dev, strategy, printAfter)
}

// compileBatch is Compile of BuildBatch.
func compileBatch(c Config, n, prefillLen, batch int, dev tensor.Device, strategy string, printAfter io.Writer) (*ir.Module, error) {
	src, err := BuildBatch(c, n, prefillLen, batch)
	if err != nil {
		return nil, err
	}
	return compileModule(src, dev, strategy, printAfter)
}

// compileModule runs vm.Pipeline(dev, strategy) on src.
func compileModule(src *ir.Module, dev tensor.Device, strategy string, printAfter io.Writer) (*ir.Module, error) {
	p, err := vm.Pipeline(dev, strategy)
	if err != nil {
		return nil, err
	}
	out, err := p.Run(src, passes.RunOptions{PrintAfterEach: printAfter})
	if err != nil {
		return nil, fmt.Errorf("decoder: compile: %w", err)
	}
	return out, nil
}
