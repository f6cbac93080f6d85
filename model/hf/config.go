package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/tensor"
)

// Sentinel errors.
var (
	// ErrConfig: config.json is malformed or asks for something chorus
	// does not compute (the message names the field).
	ErrConfig = errors.New("hf: config.json")
	// ErrTensors: the checkpoint's tensors do not match the config
	// (missing, extra or mis-shaped tensors, dtypes).
	ErrTensors = errors.New("hf: checkpoint tensors")
)

// Supported architectures (config.json's "architectures").
const (
	ArchLlama   = "LlamaForCausalLM"
	ArchMistral = "MistralForCausalLM"
	ArchQwen2   = "Qwen2ForCausalLM"
)

// Architectures lists the architectures chorus loads.
var Architectures = []string{ArchLlama, ArchMistral, ArchQwen2}

// ConfigFile and GenerationConfigFile are the names in a model folder.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
)

// Config is what chorus takes from a Hugging Face config.json: the fields
// that change the math, with the architecture's defaults for absent ones.
type Config struct {
	Architecture          string
	Vocab                 int     // vocab_size
	Hidden                int     // hidden_size
	FFN                   int     // intermediate_size
	Layers                int     // num_hidden_layers
	Heads                 int     // num_attention_heads
	KVHeads               int     // num_key_value_heads (default: Heads)
	HeadDim               int     // head_dim (default: Hidden / Heads)
	NormEps               float64 // rms_norm_eps
	RopeTheta             float64 // rope_theta or rope_parameters.rope_theta
	Rope                  decoder.RopeScaling
	TieEmbeddings         bool // tie_word_embeddings
	QKVBias               bool // Qwen2 always; attention_bias is refused
	MaxPositionEmbeddings int  // max_position_embeddings (0: not given)
	BOS                   []int
	EOS                   []int        // one id or several; generation_config.json's are added
	DType                 tensor.DType // torch_dtype or dtype (Invalid: not given)
	// SlidingWindow is the attention window when sliding-window attention
	// is on (0: off): Config.Decoder refuses contexts longer than it.
	SlidingWindow int
}

// raw is config.json as JSON values by key.
type raw map[string]json.RawMessage

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

func (r raw) has(k string) bool {
	v, ok := r[k]
	return ok && string(bytes.TrimSpace(v)) != "null"
}

func (r raw) int(k string, def int, required bool) (int, error) {
	if !r.has(k) {
		if required {
			return 0, fieldErr(k, "missing")
		}
		return def, nil
	}
	var f float64
	if err := json.Unmarshal(r[k], &f); err != nil || f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
		return 0, fieldErr(k, "%s is not a non-negative integer", r[k])
	}
	return int(f), nil
}

func (r raw) float(k string, def float64) (float64, error) {
	if !r.has(k) {
		return def, nil
	}
	var f float64
	if err := json.Unmarshal(r[k], &f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fieldErr(k, "%s is not a number", r[k])
	}
	return f, nil
}

func (r raw) bool(k string, def bool) (bool, error) {
	if !r.has(k) {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(r[k], &b); err != nil {
		return false, fieldErr(k, "%s is not true or false", r[k])
	}
	return b, nil
}

func (r raw) str(k string) (string, error) {
	if !r.has(k) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(r[k], &s); err != nil {
		return "", fieldErr(k, "%s is not a string", r[k])
	}
	return s, nil
}

// ids reads a token id field: one integer, a list of them, or null.
func (r raw) ids(k string) ([]int, error) {
	if !r.has(k) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(r[k], &one); err == nil {
		if one < 0 {
			return nil, fieldErr(k, "negative token id %d", one)
		}
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(r[k], &many); err != nil {
		return nil, fieldErr(k, "%s is not a token id or a list of them", r[k])
	}
	for _, id := range many {
		if id < 0 {
			return nil, fieldErr(k, "negative token id %d", id)
		}
	}
	return many, nil
}

// ReadConfig reads dir/config.json, and the eos ids of
// dir/generation_config.json when that file exists.
func ReadConfig(dir string) (*Config, error) {
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ConfigFile), err)
	}
	gb, err := os.ReadFile(filepath.Join(dir, GenerationConfigFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	default:
		var g raw
		if err := json.Unmarshal(gb, &g); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, filepath.Join(dir, GenerationConfigFile), err)
		}
		eos, err := g.ids("eos_token_id")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, GenerationConfigFile), err)
		}
		for _, id := range eos {
			if !slices.Contains(c.EOS, id) {
				c.EOS = append(c.EOS, id)
			}
		}
	}
	return c, nil
}

// ParseConfig reads a config.json. It refuses, naming the field: an
// architecture other than Architectures; hidden_act other than silu;
// mlp_bias or Llama's attention_bias (an o_proj bias) true; a rope type
// other than default, linear and llama3 (or unknown keys in its
// parameters, or partial rotary embedding); quantized weights; and
// sizes that are not positive or do not fit together.
func ParseConfig(b []byte) (*Config, error) {
	var r raw
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if d.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrConfig)
	}
	var archs []string
	if !r.has("architectures") {
		return nil, fieldErr("architectures", "missing (want one of %v)", Architectures)
	}
	if err := json.Unmarshal(r["architectures"], &archs); err != nil || len(archs) != 1 {
		return nil, fieldErr("architectures", "%s: want a list of one architecture, one of %v", r["architectures"], Architectures)
	}
	c := &Config{Architecture: archs[0]}
	if !slices.Contains(Architectures, c.Architecture) {
		return nil, fieldErr("architectures", "%q is not supported (supported: %v)", c.Architecture, Architectures)
	}
	var err error
	ints := []struct {
		p        *int
		k        string
		def      int
		required bool
	}{
		{&c.Vocab, "vocab_size", 0, true}, {&c.Hidden, "hidden_size", 0, true}, {&c.FFN, "intermediate_size", 0, true},
		{&c.Layers, "num_hidden_layers", 0, true}, {&c.Heads, "num_attention_heads", 0, true},
		{&c.MaxPositionEmbeddings, "max_position_embeddings", 0, false},
	}
	for _, f := range ints {
		if *f.p, err = r.int(f.k, f.def, f.required); err != nil {
			return nil, err
		}
		if f.required && *f.p < 1 {
			return nil, fieldErr(f.k, "%d (want > 0)", *f.p)
		}
	}
	if c.KVHeads, err = r.int("num_key_value_heads", c.Heads, false); err != nil {
		return nil, err
	}
	if c.KVHeads < 1 || c.Heads%c.KVHeads != 0 {
		return nil, fieldErr("num_key_value_heads", "%d does not divide num_attention_heads %d", c.KVHeads, c.Heads)
	}
	if r.has("head_dim") {
		if c.HeadDim, err = r.int("head_dim", 0, true); err != nil {
			return nil, err
		}
	} else {
		if c.Hidden%c.Heads != 0 {
			return nil, fieldErr("hidden_size", "%d is not num_attention_heads %d whole heads (and head_dim is not given)", c.Hidden, c.Heads)
		}
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.HeadDim < 2 || c.HeadDim%2 != 0 {
		return nil, fieldErr("head_dim", "%d (want an even size)", c.HeadDim)
	}
	if c.NormEps, err = r.float("rms_norm_eps", 1e-6); err != nil {
		return nil, err
	}
	if c.NormEps < 0 {
		return nil, fieldErr("rms_norm_eps", "%v (want >= 0)", c.NormEps)
	}
	if act, err := r.str("hidden_act"); err != nil {
		return nil, err
	} else if act != "" && act != "silu" {
		return nil, fieldErr("hidden_act", "%q is not supported (silu only)", act)
	}
	if mlpBias, err := r.bool("mlp_bias", false); err != nil {
		return nil, err
	} else if mlpBias {
		return nil, fieldErr("mlp_bias", "true is not supported (the MLP projections have no biases in chorus)")
	}
	attnBias, err := r.bool("attention_bias", false)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Architecture == ArchQwen2:
		c.QKVBias = true // Qwen2's q, k and v projections always have biases, o_proj never
	case attnBias:
		return nil, fieldErr("attention_bias", "true is not supported (an o_proj bias; chorus has q, k and v biases only)")
	}
	if r.has("quantization_config") {
		return nil, fieldErr("quantization_config", "quantized weights are not supported")
	}
	if c.TieEmbeddings, err = r.bool("tie_word_embeddings", false); err != nil {
		return nil, err
	}
	if err := c.parseRope(r); err != nil {
		return nil, err
	}
	if err := c.parseSlidingWindow(r); err != nil {
		return nil, err
	}
	if c.BOS, err = r.ids("bos_token_id"); err != nil {
		return nil, err
	}
	if c.EOS, err = r.ids("eos_token_id"); err != nil {
		return nil, err
	}
	for _, k := range []string{"dtype", "torch_dtype"} {
		s, err := r.str(k)
		if err != nil {
			return nil, err
		}
		if s == "" || c.DType != tensor.Invalid {
			continue
		}
		dt, err := tensor.ParseDType(s)
		if err != nil || !slices.Contains([]tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}, dt) {
			return nil, fieldErr(k, "%q is not supported (float32, float16, bfloat16)", s)
		}
		c.DType = dt
	}
	return c, nil
}

// ropeKeys are the keys a rope parameter object may hold.
var ropeKeys = []string{"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "partial_rotary_factor"}

// parseRope reads rope_theta and rope_scaling (transformers 4), or
// rope_parameters (transformers 5: the same keys, rope_theta inside).
func (c *Config) parseRope(r raw) error {
	var err error
	if c.RopeTheta, err = r.float("rope_theta", 10000); err != nil {
		return err
	}
	field := "rope_scaling"
	if r.has("rope_parameters") {
		if r.has("rope_scaling") {
			// transformers 5 may write both; they must agree.
			var a, b any
			json.Unmarshal(r["rope_parameters"], &a)
			json.Unmarshal(r["rope_scaling"], &b)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				return fieldErr("rope_scaling", "differs from rope_parameters")
			}
		}
		field = "rope_parameters"
	}
	if !r.has(field) {
		return c.checkTheta("rope_theta")
	}
	var p raw
	if err := json.Unmarshal(r[field], &p); err != nil {
		return fieldErr(field, "%s is not an object", r[field])
	}
	var unknown []string
	for k := range p {
		if !slices.Contains(ropeKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fieldErr(field, "unknown keys %v (chorus knows %v)", unknown, ropeKeys)
	}
	sub := func(k string) string { return field + "." + k }
	if p.has("rope_theta") {
		if c.RopeTheta, err = p.float("rope_theta", 0); err != nil {
			return fieldErr(sub("rope_theta"), "%s is not a number", p["rope_theta"])
		}
	}
	if err := c.checkTheta(sub("rope_theta")); err != nil {
		return err
	}
	if f, err := p.float("partial_rotary_factor", 1); err != nil || f != 1 {
		return fieldErr(sub("partial_rotary_factor"), "%s: partial rotary embedding is not supported", p["partial_rotary_factor"])
	}
	typ, err := p.str("rope_type")
	if err != nil {
		return fieldErr(sub("rope_type"), "%s is not a string", p["rope_type"])
	}
	old, err := p.str("type")
	if err != nil {
		return fieldErr(sub("type"), "%s is not a string", p["type"])
	}
	switch {
	case typ == "":
		typ = old
	case old != "" && old != typ:
		return fieldErr(field, "rope_type %q and type %q differ", typ, old)
	}
	if typ == "" {
		typ = decoder.RopeDefault
	}
	s := decoder.RopeScaling{Type: typ}
	get := func(k string) (float64, error) {
		v, err := p.float(k, 0)
		if err != nil {
			return 0, fieldErr(sub(k), "%s is not a number", p[k])
		}
		return v, nil
	}
	switch typ {
	case decoder.RopeDefault:
	case decoder.RopeLinear:
		if s.Factor, err = get("factor"); err != nil {
			return err
		}
	case decoder.RopeLlama3:
		if s.Factor, err = get("factor"); err != nil {
			return err
		}
		if s.LowFreqFactor, err = get("low_freq_factor"); err != nil {
			return err
		}
		if s.HighFreqFactor, err = get("high_freq_factor"); err != nil {
			return err
		}
		n, err := get("original_max_position_embeddings")
		if err != nil {
			return err
		}
		if n != math.Trunc(n) || n < 1 || n > math.MaxInt32 {
			return fieldErr(sub("original_max_position_embeddings"), "%v is not a positive integer", n)
		}
		s.OriginalMaxPos = int(n)
	default:
		return fieldErr(sub("rope_type"), "%q is not supported (%s, %s, %s)", typ, decoder.RopeDefault, decoder.RopeLinear, decoder.RopeLlama3)
	}
	if err := s.Validate(); err != nil {
		return fieldErr(field, "%v", strings.TrimPrefix(err.Error(), decoder.ErrConfig.Error()+": "))
	}
	if typ != decoder.RopeDefault {
		c.Rope = s
	}
	return nil
}

func (c *Config) checkTheta(field string) error {
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fieldErr(field, "%v (want > 0)", c.RopeTheta)
	}
	return nil
}

// parseSlidingWindow finds whether sliding-window attention is on:
// Mistral's sliding_window (null: off); Qwen2's use_sliding_window (its
// sliding_window is ignored while that is false), or layer_types naming
// "sliding_attention" (transformers 5).
func (c *Config) parseSlidingWindow(r raw) error {
	w, err := r.int("sliding_window", 0, false)
	if err != nil {
		return err
	}
	on := false
	switch c.Architecture {
	case ArchMistral:
		on = w > 0
	case ArchQwen2:
		if on, err = r.bool("use_sliding_window", false); err != nil {
			return err
		}
	}
	if r.has("layer_types") {
		var types []string
		if err := json.Unmarshal(r["layer_types"], &types); err != nil {
			return fieldErr("layer_types", "%s is not a list of strings", r["layer_types"])
		}
		for i, t := range types {
			switch t {
			case "full_attention":
			case "sliding_attention":
				on = true
			default:
				return fieldErr("layer_types", "layer %d is %q (full_attention or sliding_attention)", i, t)
			}
		}
	}
	if on {
		if w < 1 {
			return fieldErr("sliding_window", "sliding-window attention is on without a window")
		}
		c.SlidingWindow = w
	}
	return nil
}

// DecoderOptions are what a decoder.Config needs beyond config.json.
type DecoderOptions struct {
	Workers int          // tensor-parallel workers
	MaxSeq  int          // the context asked for: prompt plus new tokens (KV cache rows)
	DType   tensor.DType // the decoder's dtype (required)
	// LMHead is the LM head's placement (decoder.Config.LMHead; "":
	// decoder.DefaultLMHead).
	LMHead string
}

// Decoder is the decoder.Config of the model for o's workers and
// context. It refuses a context longer than a sliding window in use (a
// window only matters past its length) or than max_position_embeddings,
// and sizes that do not split over the workers, naming the field. More
// workers than kv heads replicate each kv head on the workers whose query
// heads read it, when the workers are a multiple of the kv heads and
// divide the heads.
func (c *Config) Decoder(o DecoderOptions) (decoder.Config, error) {
	switch {
	case o.Workers < 1:
		return decoder.Config{}, fmt.Errorf("%w: %d workers", ErrConfig, o.Workers)
	case o.MaxSeq < 1:
		return decoder.Config{}, fmt.Errorf("%w: a context of %d tokens", ErrConfig, o.MaxSeq)
	case c.SlidingWindow > 0 && o.MaxSeq > c.SlidingWindow:
		return decoder.Config{}, fieldErr("sliding_window", "sliding-window attention over %d tokens is not supported, and a context of %d tokens would use it (at most %d tokens)", c.SlidingWindow, o.MaxSeq, c.SlidingWindow)
	case c.MaxPositionEmbeddings > 0 && o.MaxSeq > c.MaxPositionEmbeddings:
		return decoder.Config{}, fieldErr("max_position_embeddings", "a context of %d tokens is longer than the model's %d", o.MaxSeq, c.MaxPositionEmbeddings)
	case c.KVHeads%o.Workers != 0 && (o.Workers%c.KVHeads != 0 || c.Heads%o.Workers != 0):
		return decoder.Config{}, fieldErr("num_key_value_heads", "%d kv heads do not split over %d workers, nor replicate over them (use a worker count that divides %d, or a multiple of it that divides num_attention_heads %d)", c.KVHeads, o.Workers, c.KVHeads, c.Heads)
	case c.FFN%o.Workers != 0:
		return decoder.Config{}, fieldErr("intermediate_size", "%d does not split over %d workers", c.FFN, o.Workers)
	}
	d := decoder.Config{
		Vocab: c.Vocab, Hidden: c.Hidden, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads, FFN: c.FFN, MaxSeq: o.MaxSeq,
		DType: o.DType, NormEps: c.NormEps, RopeTheta: c.RopeTheta, Norm: decoder.NormRMS, Act: decoder.ActSiLU,
		Layout: decoder.LayoutHF, QKVBias: c.QKVBias, Rope: c.Rope, LMHead: o.LMHead,
	}
	if c.HeadDim != c.Hidden/c.Heads || c.Hidden%c.Heads != 0 {
		d.HeadSize = c.HeadDim
	}
	if err := d.Validate(o.Workers); err != nil {
		return decoder.Config{}, err
	}
	return d, nil
}
