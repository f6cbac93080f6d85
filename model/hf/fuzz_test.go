package hf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// FuzzParseConfig: ParseConfig takes any bytes without panicking; a
// config it accepts gives a decoder configuration or an error (never a
// panic), and its JSON is read back and written again unchanged, so a
// checkpoint chorus writes (WriteRandom) is one it reads.
func FuzzParseConfig(f *testing.F) {
	for _, m := range []string{"llama3", "llama3_d128", "mistral", "qwen2"} {
		b, err := os.ReadFile(filepath.Join("testdata", m, ConfigFile))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{}`,
		`[]`,
		`{"architectures": ["LlamaForCausalLM"]}`,
		`{"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000}`,
		`{"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}}`,
		`{"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": {"type": "linear", "factor": 2}}`,
		`{"architectures": ["MistralForCausalLM"], "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "sliding_window": 4}`,
		`{"architectures": ["Qwen2ForCausalLM"], "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "use_sliding_window": true, "sliding_window": 4, "max_window_layers": 0}`,
		`{"architectures": ["LlamaForCausalLM"], "eos_token_id": [1, 2], "bos_token_id": 0, "torch_dtype": "bfloat16"}`,
		`{"architectures": ["LlamaForCausalLM"]} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		for _, o := range []DecoderOptions{
			{Workers: 1, MaxSeq: 16, DType: tensor.BFloat16},
			{Workers: 2, MaxSeq: 1 << 20, DType: tensor.Float16, LMHead: "split"},
		} {
			_, _ = c.Decoder(o) // an error is fine; a panic fails
		}
		j, err := c.JSON()
		if err != nil {
			t.Fatalf("JSON of an accepted config: %v", err)
		}
		c2, err := ParseConfig(j)
		if err != nil {
			t.Fatalf("the JSON of an accepted config is refused: %v\n%s", err, j)
		}
		j2, err := c2.JSON()
		if err != nil {
			t.Fatalf("JSON of the config read back: %v", err)
		}
		if !bytes.Equal(j, j2) {
			t.Fatalf("JSON changed after one round:\n%s\n%s", j, j2)
		}
	})
}
