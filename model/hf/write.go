package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/tensor"
)

// ErrExists: WriteRandom's folder already holds a checkpoint.
var ErrExists = errors.New("hf: the folder already holds a checkpoint")

// DefaultMaxFileBytes is the most tensor data WriteRandom puts in one
// file (transformers' default shard size is 5 GB).
const DefaultMaxFileBytes = 4 << 30

// WriteOptions tune WriteRandom.
type WriteOptions struct {
	// MaxFileBytes bounds each safetensors file's data (0:
	// DefaultMaxFileBytes); with more than one file an index is written.
	MaxFileBytes int64
	// Architecture for config.json (default ArchLlama).
	Architecture string
	// Tied writes no lm_head.weight and tie_word_embeddings true.
	Tied bool
}

// JSON is config.json for c: the keys transformers writes for Llama,
// Mistral and Qwen2 (transformers 4's spelling: rope_theta,
// rope_scaling).
func (c *Config) JSON() ([]byte, error) {
	types := map[string]string{ArchLlama: "llama", ArchMistral: "mistral", ArchQwen2: "qwen2"}
	m := map[string]any{
		"architectures": []string{c.Architecture}, "model_type": types[c.Architecture],
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.FFN, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta, "tie_word_embeddings": c.TieEmbeddings,
		"hidden_act": "silu", "max_position_embeddings": c.MaxPositionEmbeddings,
	}
	if c.Rope.Type != "" && c.Rope.Type != decoder.RopeDefault {
		m["rope_scaling"] = c.Rope
	}
	if c.DType != tensor.Invalid {
		m["torch_dtype"] = c.DType.String()
	}
	if len(c.BOS) == 1 {
		m["bos_token_id"] = c.BOS[0]
	}
	if len(c.EOS) == 1 {
		m["eos_token_id"] = c.EOS[0]
	} else if len(c.EOS) > 1 {
		m["eos_token_id"] = c.EOS
	}
	if c.Architecture == ArchMistral && c.SlidingWindow > 0 {
		m["sliding_window"] = c.SlidingWindow
	}
	return json.MarshalIndent(m, "", "  ")
}

// FromDecoder is the Hugging Face config of a decoder configuration (the
// HF layout, RMSNorm, SiLU).
func FromDecoder(d decoder.Config, o WriteOptions) (*Config, error) {
	if err := d.Validate(1); err != nil {
		return nil, err
	}
	if d.Norm != "" && d.Norm != decoder.NormRMS || d.Act != "" && d.Act != decoder.ActSiLU {
		return nil, fmt.Errorf("%w: Hugging Face decoders here use RMSNorm and SiLU, not %s and %s", ErrConfig, d.Norm, d.Act)
	}
	arch := o.Architecture
	if arch == "" {
		arch = ArchLlama
	}
	if d.QKVBias != (arch == ArchQwen2) {
		return nil, fmt.Errorf("%w: %s with q/k/v biases %v (Qwen2 has them, Llama and Mistral do not)", ErrConfig, arch, d.QKVBias)
	}
	return &Config{Architecture: arch, Vocab: d.Vocab, Hidden: d.Hidden, FFN: d.FFN, Layers: d.Layers, Heads: d.Heads, KVHeads: d.KVHeads,
		HeadDim: d.HeadDim(), NormEps: d.NormEps, RopeTheta: d.RopeTheta, Rope: d.Rope, TieEmbeddings: o.Tied, QKVBias: d.QKVBias,
		MaxPositionEmbeddings: max(d.MaxSeq, 4096), DType: d.DType, BOS: []int{0}, EOS: []int{d.Vocab - 1}}, nil
}

// checkFolder refuses a folder that holds a checkpoint (naming the file)
// and a folder whose parent does not exist; it makes the folder itself.
func checkFolder(dir string) error {
	if _, err := os.Stat(filepath.Dir(filepath.Clean(dir))); err != nil {
		return fmt.Errorf("hf: %s: the parent folder must exist: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.Mkdir(dir, 0o755)
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		n := e.Name()
		if n == ConfigFile || n == safetensors.IndexName || strings.HasSuffix(n, ".safetensors") {
			return fmt.Errorf("%w: %s (chorus never overwrites a checkpoint)", ErrExists, filepath.Join(dir, n))
		}
	}
	return nil
}

// WriteRandom writes the random model of d with seed (decoder.RandomParam's
// values, so decoder.NewRandomReference is its reference) into dir as a
// Hugging Face folder: config.json and the tensors under Hugging Face
// names, in files of at most o.MaxFileBytes of data (with
// model.safetensors.index.json when there are several). dir may exist
// (without a checkpoint in it: ErrExists names the file) or not (its
// parent must). The values of each file are generated on every CPU
// (decoder.RandomFill) and written in large writes.
func WriteRandom(dir string, d decoder.Config, seed uint64, o WriteOptions) error {
	d.Layout = decoder.LayoutHF
	hc, err := FromDecoder(d, o)
	if err != nil {
		return err
	}
	ts, err := Tensors(d, o.Tied)
	if err != nil {
		return err
	}
	if err := checkFolder(dir); err != nil {
		return err
	}
	specs := map[string]decoder.ParamSpec{}
	for _, p := range d.Params() {
		specs[p.Name] = p
	}
	limit := o.MaxFileBytes
	if limit <= 0 {
		limit = DefaultMaxFileBytes
	}
	var groups [][]Tensor
	var size int64
	elem := int64(d.DType.Size())
	for _, t := range ts {
		n, _ := t.Shape.NumElements()
		if len(groups) == 0 || size+n*elem > limit && size > 0 {
			groups = append(groups, nil)
			size = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], t)
		size += n * elem
	}
	weightMap := map[string]string{}
	var total int64
	meta := map[string]string{"format": "pt", "chorus_seed": fmt.Sprint(seed)}
	for i, g := range groups {
		name := "model.safetensors"
		if len(groups) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups))
		}
		var named []safetensors.Named
		for _, t := range g {
			x, err := tensor.New(d.DType, t.Shape)
			if err != nil {
				return fmt.Errorf("hf: %s: %w", t.Name, err)
			}
			if err := decoder.RandomFill(specs[t.Param], seed, d.DType, x.Bytes()); err != nil {
				return err
			}
			named = append(named, safetensors.Named{Name: t.Name, Tensor: x})
			weightMap[t.Name] = name
			total += x.NumBytes()
		}
		if err := safetensors.WriteFile(filepath.Join(dir, name), named, meta); err != nil {
			return err
		}
	}
	if len(groups) > 1 {
		idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, safetensors.IndexName), append(idx, '\n'), 0o644); err != nil {
			return err
		}
	}
	cfg, err := hc.JSON()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ConfigFile), append(cfg, '\n'), 0o644)
}
