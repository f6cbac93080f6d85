package decoder

import (
	"errors"
	"fmt"
	"math"

	"github.com/chorus-rt/chorus/tensor"
)

// ErrConfig is returned for a configuration that cannot be built or run
// (sizes, divisibility by the worker count, dtype, norm, activation).
var ErrConfig = errors.New("decoder: bad configuration")

// Norm kinds and activations.
const (
	NormRMS   = "rms"   // RMSNorm: x / sqrt(mean(x²) + eps) · w
	NormLayer = "layer" // LayerNorm with bias: (x - mean) / sqrt(var + eps) · w + b
	ActSiLU   = "silu"  // gated MLP: silu(x·w_gate) · (x·w_up)
	ActGELU   = "gelu"  // gated MLP with GELU (tanh approximation)
)

// LM head placements (Config.LMHead).
const (
	// LMHeadReplicated: every worker holds the whole LM head and computes
	// every logit; no collective.
	LMHeadReplicated = "replicated"
	// LMHeadSplit: worker r holds vocabulary rows [r·P, (r+1)·P), P =
	// ceil(vocab / n) (the last rows zero where n does not divide the
	// vocabulary), computes those logits, and the workers gather them
	// (see Build).
	LMHeadSplit = "split"
	// DefaultLMHead is the placement of an empty Config.LMHead.
	DefaultLMHead = LMHeadSplit
)

// Weight layouts of the matrices in a checkpoint.
const (
	// LayoutChorus stores matrices [in, out]: a layer computes x·W.
	LayoutChorus = "chorus"
	// LayoutHF stores them [out, in], as PyTorch's nn.Linear and Hugging
	// Face checkpoints do: a layer computes x·Wᵀ (matmul_nt, no copy).
	LayoutHF = "hf"
)

// Config is the model's shape and numerics.
type Config struct {
	Vocab   int
	Hidden  int
	Layers  int
	Heads   int // query heads
	KVHeads int // key/value heads (Heads a multiple of it)
	FFN     int // MLP inner size
	MaxSeq  int // KV cache rows

	DType     tensor.DType
	NormEps   float64
	RopeTheta float64
	Norm      string // NormRMS (default) or NormLayer
	Act       string // ActSiLU (default) or ActGELU
	Layout    string // LayoutChorus (default) or LayoutHF

	// HeadSize is the head dimension when it is not Hidden / Heads (0:
	// Hidden / Heads). The query projection then has Heads·HeadSize
	// outputs, which need not equal Hidden.
	HeadSize int
	// QKVBias: the query, key and value projections add a bias (Qwen2).
	QKVBias bool
	// Rope scales the rotary embedding's frequencies (the zero value: none).
	Rope RopeScaling
	// LMHead is LMHeadReplicated or LMHeadSplit ("": DefaultLMHead).
	LMHead string
}

// Small is a small configuration for tests and demos.
func Small(dt tensor.DType) Config {
	return Config{Vocab: 64, Hidden: 64, Layers: 2, Heads: 8, KVHeads: 4, FFN: 128, MaxSeq: 16, DType: dt, NormEps: 1e-5, RopeTheta: 10000}
}

// HeadDim is HeadSize, or Hidden / Heads when HeadSize is 0.
func (c Config) HeadDim() int {
	if c.HeadSize > 0 {
		return c.HeadSize
	}
	return c.Hidden / max(c.Heads, 1)
}

func (c Config) norm() string {
	if c.Norm == "" {
		return NormRMS
	}
	return c.Norm
}

func (c Config) act() string {
	if c.Act == "" {
		return ActSiLU
	}
	return c.Act
}

// LMHeadMode is LMHead, or DefaultLMHead when it is empty.
func (c Config) LMHeadMode() string {
	if c.LMHead == "" {
		return DefaultLMHead
	}
	return c.LMHead
}

// VocabShard is the vocabulary rows a worker holds of n: ceil(vocab/n)
// when the LM head is split, else the whole vocabulary.
func (c Config) VocabShard(n int) int {
	if c.LMHeadMode() != LMHeadSplit || n < 1 {
		return c.Vocab
	}
	return (c.Vocab + n - 1) / n
}

// LogitsWidth is the width of the logits a step returns on n workers:
// n·VocabShard(n) when the LM head is split (the padding columns past
// Vocab hold -inf), else Vocab.
func (c Config) LogitsWidth(n int) int {
	if c.LMHeadMode() != LMHeadSplit {
		return c.Vocab
	}
	return n * c.VocabShard(n)
}

// KVHeadsPerWorker is how many kv heads a worker of n holds: KVHeads/n,
// or 1 when n is a multiple of KVHeads (each kv head replicated on
// n/KVHeads workers, those whose query heads read it).
func (c Config) KVHeadsPerWorker(n int) int {
	if n > c.KVHeads {
		return 1
	}
	return c.KVHeads / max(n, 1)
}

func (c Config) layout() string {
	if c.Layout == "" {
		return LayoutChorus
	}
	return c.Layout
}

func (c Config) String() string {
	s := fmt.Sprintf("vocab %d, hidden %d, %d layers, %d heads (%d kv, head dim %d), ffn %d, max seq %d, %s, %s norm, %s, %s layout",
		c.Vocab, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim(), c.FFN, c.MaxSeq, c.DType, c.norm(), c.act(), c.layout())
	if c.QKVBias {
		s += ", qkv bias"
	}
	if c.Rope.Type != "" && c.Rope.Type != RopeDefault {
		s += ", rope " + c.Rope.String()
	}
	if c.LMHead != "" {
		s += ", lm head " + c.LMHead
	}
	return s
}

// Validate checks the configuration for n workers: positive sizes, whole
// heads (Hidden = Heads · head_dim unless HeadSize is set; an even
// head_dim), Heads a multiple of KVHeads, KVHeads divisible by n, or n a
// multiple of KVHeads dividing Heads (each kv head replicated on the
// n/KVHeads workers whose query heads read it, as vLLM does), FFN
// divisible by n, a split LM head leaving every worker a vocabulary row,
// and the rotary scaling (RopeScaling.Validate).
func (c Config) Validate(n int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s (%v)", ErrConfig, fmt.Sprintf(format, args...), c)
	}
	switch {
	case c.Vocab < 1 || c.Hidden < 1 || c.Layers < 1 || c.Heads < 1 || c.KVHeads < 1 || c.FFN < 1 || c.MaxSeq < 1:
		return bad("sizes must be positive")
	case c.Vocab > math.MaxInt32:
		return bad("vocab %d does not fit int32 token ids", c.Vocab)
	case c.HeadSize < 0:
		return bad("head size %d", c.HeadSize)
	case c.HeadSize == 0 && c.Hidden%c.Heads != 0:
		return bad("hidden %d is not %d whole heads", c.Hidden, c.Heads)
	case c.HeadDim()%2 != 0 || c.HeadDim() < 2:
		return bad("head dim %d is not even", c.HeadDim())
	case c.Heads%c.KVHeads != 0:
		return bad("%d heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)
	case n < 1 || c.KVHeads%n != 0 && (n%c.KVHeads != 0 || c.Heads%n != 0):
		return bad("%d kv heads do not split over %d workers, nor replicate over them (%d workers a multiple of the kv heads, dividing the %d heads)", c.KVHeads, n, n, c.Heads)
	case c.FFN%n != 0:
		return bad("ffn %d does not split over %d workers", c.FFN, n)
	case c.DType != tensor.Float32 && c.DType != tensor.Float16 && c.DType != tensor.BFloat16:
		return bad("dtype %s (float32, float16, bfloat16)", c.DType)
	case math.IsNaN(c.NormEps) || c.NormEps < 0 || math.IsInf(c.NormEps, 0):
		return bad("norm eps %v", c.NormEps)
	case !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0):
		return bad("rope theta %v", c.RopeTheta)
	case c.norm() != NormRMS && c.norm() != NormLayer:
		return bad("norm %q (%q or %q)", c.Norm, NormRMS, NormLayer)
	case c.act() != ActSiLU && c.act() != ActGELU:
		return bad("activation %q (%q or %q)", c.Act, ActSiLU, ActGELU)
	case c.layout() != LayoutChorus && c.layout() != LayoutHF:
		return bad("layout %q (%q or %q)", c.Layout, LayoutChorus, LayoutHF)
	case c.LMHeadMode() != LMHeadReplicated && c.LMHeadMode() != LMHeadSplit:
		return bad("lm head %q (%q or %q)", c.LMHead, LMHeadReplicated, LMHeadSplit)
	case c.LMHeadMode() == LMHeadSplit && (n-1)*c.VocabShard(n) >= c.Vocab:
		return bad("a vocabulary of %d in rows of %d leaves worker %d of %d none: use the %q LM head", c.Vocab, c.VocabShard(n), n-1, n, LMHeadReplicated)
	}
	if err := c.Rope.Validate(); err != nil {
		return fmt.Errorf("%w (%v)", err, c)
	}
	return nil
}

// Split is how a parameter is divided over the workers.
type Split int

const (
	Replicate Split = iota // every worker holds all of it
	SplitCols              // worker r holds columns [r·C/n, (r+1)·C/n)
	SplitRows              // worker r holds rows [r·R/n, (r+1)·R/n)
)

func (s Split) String() string {
	switch s {
	case Replicate:
		return "replicate"
	case SplitCols:
		return "split columns"
	case SplitRows:
		return "split rows"
	}
	return fmt.Sprintf("split(%d)", int(s))
}

// ParamSpec is one parameter: its name (as in the checkpoint and the IR),
// its full shape as stored and how it is sharded. Matrices are [in, out]
// (a layer computes x·W), or [out, in] with Transposed set (LayoutHF:
// x·Wᵀ, PyTorch's nn.Linear layout), where the split axis is swapped
// with the shape: a column-parallel layer splits the rows of [out, in].
type ParamSpec struct {
	Name       string
	Shape      tensor.Shape // full, unsharded, as stored
	Split      Split
	Transposed bool
	// Units, if set, is the number of whole units (kv heads) the split
	// dimension holds: with more workers than units, worker r holds unit
	// r·Units/n (replicated on n/Units workers) instead of a 1/n slice.
	Units int64
	// Padded: the split dimension is cut in n blocks of ceil(size/n), the
	// last one(s) short of real elements; a worker's shard has the full
	// block's shape, zero past the end (the split LM head).
	Padded bool
}

// Canonical is the parameter in the [in, out] layout: p itself, or for a
// Transposed one the same matrix transposed (shape and split swapped).
func (p ParamSpec) Canonical() ParamSpec {
	if !p.Transposed {
		return p
	}
	q := ParamSpec{Name: p.Name, Shape: tensor.Shape{p.Shape[1], p.Shape[0]}, Split: p.Split, Units: p.Units, Padded: p.Padded}
	switch p.Split {
	case SplitCols:
		q.Split = SplitRows
	case SplitRows:
		q.Split = SplitCols
	}
	return q
}

// splitDim is the index of the split dimension (-1: replicated).
func (p ParamSpec) splitDim() int {
	switch p.Split {
	case SplitCols:
		return len(p.Shape) - 1
	case SplitRows:
		return 0
	}
	return -1
}

// Block is worker r of n's interval [lo, hi) of a split dimension of
// size elements: an even 1/n slice; with units < n (Units) the whole
// unit r·units/n; padded, [r·P, min((r+1)·P, size)) with P = ceil(size/n).
func Block(size, units int64, padded bool, r, n int) (lo, hi int64) {
	R, N := int64(r), int64(n)
	switch {
	case padded:
		b := (size + N - 1) / N
		return min(R*b, size), min((R+1)*b, size)
	case units > 0 && units < N:
		u := R * units / N
		return u * size / units, (u + 1) * size / units
	}
	return R * size / N, (R + 1) * size / N
}

// shardSize is the split dimension's size on a worker of n.
func (p ParamSpec) shardSize(size int64, n int) int64 {
	if p.Padded {
		return (size + int64(n) - 1) / int64(n)
	}
	lo, hi := Block(size, p.Units, false, 0, n)
	return hi - lo
}

// ShardShape is worker r's shape of the parameter for n workers (the
// same for every r: splits are even, replicated units whole, padded
// blocks full).
func (p ParamSpec) ShardShape(n int) tensor.Shape {
	s := p.Shape.Clone()
	if d := p.splitDim(); d >= 0 {
		s[d] = p.shardSize(s[d], n)
	}
	return s
}

// ShardRange is worker r's block of the full parameter: rows [r0, r1)
// and columns [c0, c1) (1-D parameters have one row). A padded block may
// be shorter than ShardShape (the rest is zero).
func (p ParamSpec) ShardRange(r, n int) (r0, r1, c0, c1 int64) {
	rows, cols := int64(1), p.Shape[len(p.Shape)-1]
	if len(p.Shape) == 2 {
		rows = p.Shape[0]
	}
	r0, r1, c0, c1 = 0, rows, 0, cols
	switch p.Split {
	case SplitCols:
		c0, c1 = Block(cols, p.Units, p.Padded, r, n)
	case SplitRows:
		r0, r1 = Block(rows, p.Units, p.Padded, r, n)
	}
	return r0, r1, c0, c1
}

// Parameter names. Layer i's names are LayerParam(i, suffix).
const (
	ParamEmbed     = "embed"       // [vocab, hidden], replicated
	ParamNormW     = "norm.weight" // final norm [hidden], replicated
	ParamNormB     = "norm.bias"   // LayerNorm only
	ParamLMHead    = "lm_head"     // [hidden, vocab], replicated or split by vocabulary (LMHead)
	AttnNormW      = "attn_norm.weight"
	AttnNormB      = "attn_norm.bias"
	AttnWQ         = "attn.wq" // [hidden, heads·head_dim], columns
	AttnWK         = "attn.wk" // [hidden, kv_heads·head_dim], columns
	AttnWV         = "attn.wv" // [hidden, kv_heads·head_dim], columns
	AttnWO         = "attn.wo" // [heads·head_dim, hidden], rows
	AttnBQ         = "attn.bq" // [heads·head_dim] (QKVBias), split with wq's outputs
	AttnBK         = "attn.bk" // [kv_heads·head_dim] (QKVBias)
	AttnBV         = "attn.bv" // [kv_heads·head_dim] (QKVBias)
	MLPNormW       = "mlp_norm.weight"
	MLPNormB       = "mlp_norm.bias"
	MLPWGate       = "mlp.w_gate" // [hidden, ffn], columns
	MLPWUp         = "mlp.w_up"   // [hidden, ffn], columns
	MLPWDown       = "mlp.w_down" // [ffn, hidden], rows
	layerPrefixFmt = "layers.%d."
)

// LayerParam is the name of layer i's parameter suffix ("attn.wq" ->
// "layers.3.attn.wq").
func LayerParam(i int, suffix string) string { return fmt.Sprintf(layerPrefixFmt, i) + suffix }

// Params lists every parameter in the order the IR functions take them.
func (c Config) Params() []ParamSpec {
	h, v, f := int64(c.Hidden), int64(c.Vocab), int64(c.FFN)
	q, kv := int64(c.Heads*c.HeadDim()), int64(c.KVHeads*c.HeadDim())
	layer := c.norm() == NormLayer
	ps := []ParamSpec{{Name: ParamEmbed, Shape: tensor.Shape{v, h}, Split: Replicate}}
	norm := func(w, b string) {
		ps = append(ps, ParamSpec{Name: w, Shape: tensor.Shape{h}, Split: Replicate})
		if layer {
			ps = append(ps, ParamSpec{Name: b, Shape: tensor.Shape{h}, Split: Replicate})
		}
	}
	// lin is a matrix from in to out features, [in, out] split as given,
	// or in the HF layout the transpose of that; units and padded are
	// ParamSpec's.
	lin := func(name string, in, out int64, split Split, units int64, padded bool) {
		p := ParamSpec{Name: name, Shape: tensor.Shape{in, out}, Split: split, Units: units, Padded: padded}
		if c.layout() == LayoutHF {
			p.Shape, p.Transposed = tensor.Shape{out, in}, true
			switch split {
			case SplitCols:
				p.Split = SplitRows
			case SplitRows:
				p.Split = SplitCols
			}
		}
		ps = append(ps, p)
	}
	for i := range c.Layers {
		l := func(s string) string { return LayerParam(i, s) }
		norm(l(AttnNormW), l(AttnNormB))
		// k and v are whole kv heads: replicated when the workers
		// outnumber them.
		units := int64(c.KVHeads)
		lin(l(AttnWQ), h, q, SplitCols, 0, false)
		lin(l(AttnWK), h, kv, SplitCols, units, false)
		lin(l(AttnWV), h, kv, SplitCols, units, false)
		if c.QKVBias {
			// 1-D: split along its only dimension, with the outputs.
			ps = append(ps, ParamSpec{Name: l(AttnBQ), Shape: tensor.Shape{q}, Split: SplitCols},
				ParamSpec{Name: l(AttnBK), Shape: tensor.Shape{kv}, Split: SplitCols, Units: units},
				ParamSpec{Name: l(AttnBV), Shape: tensor.Shape{kv}, Split: SplitCols, Units: units})
		}
		lin(l(AttnWO), q, h, SplitRows, 0, false)
		norm(l(MLPNormW), l(MLPNormB))
		lin(l(MLPWGate), h, f, SplitCols, 0, false)
		lin(l(MLPWUp), h, f, SplitCols, 0, false)
		lin(l(MLPWDown), f, h, SplitRows, 0, false)
	}
	norm(ParamNormW, ParamNormB)
	if c.LMHeadMode() == LMHeadSplit {
		lin(ParamLMHead, h, v, SplitCols, 0, true)
	} else {
		lin(ParamLMHead, h, v, Replicate, 0, false)
	}
	return ps
}

// CacheShape is one worker's K (or V) cache of one layer for n workers:
// [max_seq, KVHeadsPerWorker(n), head_dim].
func (c Config) CacheShape(n int) tensor.Shape {
	return tensor.Shape{int64(c.MaxSeq), int64(c.KVHeadsPerWorker(n)), int64(c.HeadDim())}
}
