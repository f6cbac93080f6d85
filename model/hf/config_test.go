package hf_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/hf"
	"github.com/chorus-rt/chorus/tensor"
)

// llama is a small Llama-3-style config.json as transformers 4 writes it.
func llama() map[string]any {
	return map[string]any{
		"architectures": []any{"LlamaForCausalLM"}, "model_type": "llama", "vocab_size": 256, "hidden_size": 64,
		"intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 1024, "hidden_act": "silu",
		"tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false, "torch_dtype": "float32",
		"bos_token_id": 1, "eos_token_id": 2,
		"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
	}
}

func encode(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConfigRefusals: every config.json chorus does not compute as
// transformers does is refused by ParseConfig, naming the field.
func TestConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		edit        func(m map[string]any)
	}{
		{"unknown architecture", "architectures", func(m map[string]any) { m["architectures"] = []any{"GPT2LMHeadModel"} }},
		{"two architectures", "architectures", func(m map[string]any) { m["architectures"] = []any{"LlamaForCausalLM", "MistralForCausalLM"} }},
		{"no architecture", "architectures", func(m map[string]any) { delete(m, "architectures") }},
		{"gelu", "hidden_act", func(m map[string]any) { m["hidden_act"] = "gelu" }},
		{"mlp bias", "mlp_bias", func(m map[string]any) { m["mlp_bias"] = true }},
		{"attention bias", "attention_bias", func(m map[string]any) { m["attention_bias"] = true }},
		{"yarn", "rope_scaling.rope_type", func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4.0} }},
		{"dynamic (old spelling)", "rope_scaling.rope_type", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "dynamic", "factor": 2.0} }},
		{"types differ", "rope_scaling", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"type": "linear", "rope_type": "llama3", "factor": 2.0}
		}},
		{"unknown rope key", "rope_scaling", func(m map[string]any) { m["rope_scaling"].(map[string]any)["beta_fast"] = 32 }},
		{"llama3 without context", "rope_scaling.original_max_position_embeddings", func(m map[string]any) {
			delete(m["rope_scaling"].(map[string]any), "original_max_position_embeddings")
		}},
		{"llama3 bands", "rope_scaling", func(m map[string]any) { m["rope_scaling"].(map[string]any)["high_freq_factor"] = 0.5 }},
		{"linear without factor", "rope_scaling", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "linear"} }},
		{"partial rotary", "rope_scaling.partial_rotary_factor", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"rope_type": "default", "partial_rotary_factor": 0.5}
		}},
		{"theta", "rope_theta", func(m map[string]any) { m["rope_theta"] = -1.0 }},
		{"v5 theta", "rope_parameters.rope_theta", func(m map[string]any) {
			delete(m, "rope_scaling")
			m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 0.0}
		}},
		{"quantized", "quantization_config", func(m map[string]any) { m["quantization_config"] = map[string]any{"bits": 4} }},
		{"kv heads", "num_key_value_heads", func(m map[string]any) { m["num_key_value_heads"] = 3 }},
		{"no vocab", "vocab_size", func(m map[string]any) { delete(m, "vocab_size") }},
		{"fraction", "hidden_size", func(m map[string]any) { m["hidden_size"] = 64.5 }},
		{"whole heads", "hidden_size", func(m map[string]any) { m["hidden_size"] = 66 }},
		{"odd head dim", "head_dim", func(m map[string]any) { m["head_dim"] = 15 }},
		{"dtype", "torch_dtype", func(m map[string]any) { m["torch_dtype"] = "float8_e4m3fn" }},
		{"v5 dtype", "dtype", func(m map[string]any) { delete(m, "torch_dtype"); m["dtype"] = "int8" }},
		{"eos", "eos_token_id", func(m map[string]any) { m["eos_token_id"] = "</s>" }},
		{"negative eos", "eos_token_id", func(m map[string]any) { m["eos_token_id"] = []any{2, -1} }},
		{"layer types", "layer_types", func(m map[string]any) { m["layer_types"] = []any{"full_attention", "chunked_attention"} }},
		{"window without size", "sliding_window", func(m map[string]any) {
			m["architectures"], m["use_sliding_window"] = []any{"Qwen2ForCausalLM"}, true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := llama()
			tc.edit(m)
			_, err := hf.ParseConfig(encode(t, m))
			if !errors.Is(err, hf.ErrConfig) || !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("got %v, want ErrConfig naming %q", err, tc.field)
			}
		})
	}
	if _, err := hf.ParseConfig([]byte(`{"architectures": ["LlamaForCausalLM"]} {}`)); !errors.Is(err, hf.ErrConfig) {
		t.Errorf("trailing data: %v", err)
	}
}

// TestConfigSpellings: transformers 4's and 5's spellings of the same
// model parse alike, absent fields take the architecture's defaults, and
// Qwen2 and Mistral read their own fields.
func TestConfigSpellings(t *testing.T) {
	v4, err := hf.ParseConfig(encode(t, llama()))
	if err != nil {
		t.Fatal(err)
	}
	m := llama()
	delete(m, "rope_scaling")
	delete(m, "rope_theta")
	delete(m, "torch_dtype")
	m["dtype"] = "float32"
	m["rope_parameters"] = map[string]any{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
	v5, err := hf.ParseConfig(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if !equalConfigs(v4, v5) {
		t.Errorf("transformers 4: %+v\ntransformers 5: %+v", v4, v5)
	}
	if v4.Rope.Type != decoder.RopeLlama3 || v4.RopeTheta != 500000 || v4.HeadDim != 16 || v4.DType != tensor.Float32 || v4.EOS[0] != 2 {
		t.Errorf("parsed %+v", v4)
	}
	// Defaults: kv heads = heads, rms_norm_eps 1e-6, theta 10000, no
	// scaling; "type" is the old spelling of rope_type; head_dim apart
	// from hidden/heads.
	m = llama()
	for _, k := range []string{"num_key_value_heads", "rms_norm_eps", "rope_theta", "torch_dtype", "eos_token_id"} {
		delete(m, k)
	}
	m["rope_scaling"] = map[string]any{"type": "linear", "factor": 2.0}
	m["head_dim"] = 32
	c, err := hf.ParseConfig(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if c.KVHeads != 4 || c.NormEps != 1e-6 || c.RopeTheta != 10000 || c.Rope.Type != decoder.RopeLinear || c.Rope.Factor != 2 ||
		c.HeadDim != 32 || c.DType != tensor.Invalid || c.EOS != nil {
		t.Errorf("defaults: %+v", c)
	}
	d, err := c.Decoder(hf.DecoderOptions{Workers: 4, MaxSeq: 32, DType: tensor.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	if d.HeadDim() != 32 || d.HeadSize != 32 || d.Layout != decoder.LayoutHF || d.DType != tensor.BFloat16 || d.MaxSeq != 32 {
		t.Errorf("decoder config %v", d)
	}
	// Qwen2: biases always, the window off while use_sliding_window is
	// false, eos lists.
	m = llama()
	m["architectures"], m["sliding_window"], m["use_sliding_window"], m["eos_token_id"] = []any{"Qwen2ForCausalLM"}, 32, false, []any{5, 6}
	delete(m, "rope_scaling")
	q, err := hf.ParseConfig(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if !q.QKVBias || q.SlidingWindow != 0 || len(q.EOS) != 2 || q.Rope.Type != "" {
		t.Errorf("qwen2: %+v", q)
	}
	if _, err := q.Decoder(hf.DecoderOptions{Workers: 1, MaxSeq: 100, DType: tensor.Float32}); err != nil {
		t.Errorf("qwen2 without a window in use: %v", err)
	}
}

func equalConfigs(a, b *hf.Config) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestDecoderRefusals: what depends on the worker count and the context.
func TestDecoderRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		edit        func(m map[string]any)
		workers     int
		maxSeq      int
	}{
		// 2 kv heads, 4 heads: 3 workers neither split nor replicate
		// them, nor do 8 (a multiple of the kv heads, not dividing the
		// heads); 4 replicate them (TestGolden).
		{"kv heads over workers", "num_key_value_heads", func(m map[string]any) {}, 3, 16},
		{"kv heads replicated past the heads", "num_key_value_heads", func(m map[string]any) {}, 8, 16},
		{"ffn over workers", "intermediate_size", func(m map[string]any) { m["intermediate_size"] = 129 }, 2, 16},
		{"context", "max_position_embeddings", func(m map[string]any) {}, 1, 2000},
		{"mistral window in use", "sliding_window", func(m map[string]any) {
			m["architectures"], m["sliding_window"] = []any{"MistralForCausalLM"}, 64
		}, 1, 65},
		{"qwen2 window in use", "sliding_window", func(m map[string]any) {
			m["architectures"], m["sliding_window"], m["use_sliding_window"] = []any{"Qwen2ForCausalLM"}, 64, true
		}, 1, 100},
		{"layer types window", "sliding_window", func(m map[string]any) {
			m["architectures"], m["sliding_window"], m["layer_types"] = []any{"Qwen2ForCausalLM"}, 8, []any{"full_attention", "sliding_attention"}
		}, 1, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := llama()
			tc.edit(m)
			c, err := hf.ParseConfig(encode(t, m))
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Decoder(hf.DecoderOptions{Workers: tc.workers, MaxSeq: tc.maxSeq, DType: tensor.Float32})
			if !errors.Is(err, hf.ErrConfig) || !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("got %v, want ErrConfig naming %q", err, tc.field)
			}
		})
	}
	// Mistral v0.1's window of 4096 is fine for contexts within it.
	m := llama()
	m["architectures"], m["sliding_window"] = []any{"MistralForCausalLM"}, 64
	c, err := hf.ParseConfig(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decoder(hf.DecoderOptions{Workers: 2, MaxSeq: 64, DType: tensor.Float32}); err != nil {
		t.Errorf("context within the window: %v", err)
	}
}

// TestGenerationConfig: generation_config.json's eos ids join
// config.json's (Llama 3 Instruct lists several there).
func TestGenerationConfig(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, hf.ConfigFile), encode(t, llama()), 0o644)
	os.WriteFile(filepath.Join(dir, hf.GenerationConfigFile), []byte(`{"eos_token_id": [2, 7, 9], "do_sample": true}`), 0o644)
	c, err := hf.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.EOS) != 3 || c.EOS[1] != 7 || c.EOS[2] != 9 {
		t.Errorf("eos %v", c.EOS)
	}
	os.WriteFile(filepath.Join(dir, hf.GenerationConfigFile), []byte(`{"eos_token_id": "x"}`), 0o644)
	if _, err := hf.ReadConfig(dir); !errors.Is(err, hf.ErrConfig) || !strings.Contains(err.Error(), "generation_config.json") {
		t.Errorf("bad generation config: %v", err)
	}
}
