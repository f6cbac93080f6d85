package hf

import (
	"fmt"
	"strings"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/shard"
	"github.com/chorus-rt/chorus/tensor"
)

// layerNames maps a decoder layer parameter's suffix to the Hugging Face
// name's suffix after "model.layers.N.".
var layerNames = map[string]string{
	decoder.AttnNormW: "input_layernorm.weight",
	decoder.AttnWQ:    "self_attn.q_proj.weight",
	decoder.AttnWK:    "self_attn.k_proj.weight",
	decoder.AttnWV:    "self_attn.v_proj.weight",
	decoder.AttnWO:    "self_attn.o_proj.weight",
	decoder.AttnBQ:    "self_attn.q_proj.bias",
	decoder.AttnBK:    "self_attn.k_proj.bias",
	decoder.AttnBV:    "self_attn.v_proj.bias",
	decoder.MLPNormW:  "post_attention_layernorm.weight",
	decoder.MLPWGate:  "mlp.gate_proj.weight",
	decoder.MLPWUp:    "mlp.up_proj.weight",
	decoder.MLPWDown:  "mlp.down_proj.weight",
}

// Hugging Face names of the parameters outside the layers.
const (
	NameEmbed  = "model.embed_tokens.weight"
	NameNorm   = "model.norm.weight"
	NameLMHead = "lm_head.weight"
)

// Name is the Hugging Face tensor name of a decoder parameter (Llama,
// Mistral and Qwen2 name them alike).
func Name(param string) (string, error) {
	switch param {
	case decoder.ParamEmbed:
		return NameEmbed, nil
	case decoder.ParamNormW:
		return NameNorm, nil
	case decoder.ParamLMHead:
		return NameLMHead, nil
	}
	var i int
	var rest string
	if n, _ := fmt.Sscanf(param, "layers.%d.", &i); n == 1 {
		rest = strings.TrimPrefix(param, fmt.Sprintf("layers.%d.", i))
		if s, ok := layerNames[rest]; ok && param == decoder.LayerParam(i, rest) {
			return fmt.Sprintf("model.layers.%d.%s", i, s), nil
		}
	}
	return "", fmt.Errorf("%w: decoder parameter %q has no Hugging Face name", ErrTensors, param)
}

// Tensor is one tensor the checkpoint must hold.
type Tensor struct {
	Name  string // Hugging Face name
	Param string // the decoder parameter it loads as
	Shape tensor.Shape
	Split decoder.Split // of the [out, in] matrix (rows: output features)
	// Spec is the decoder parameter's spec (its kv-head units, its
	// padding).
	Spec decoder.ParamSpec
}

// Tensors lists the tensors of c's checkpoint, in decoder.Config.Params
// order; with tied embeddings there is no lm_head.weight (the decoder's
// LM head is the embedding's data).
func Tensors(c decoder.Config, tied bool) ([]Tensor, error) {
	var ts []Tensor
	for _, p := range c.Params() {
		if tied && p.Name == decoder.ParamLMHead {
			continue
		}
		n, err := Name(p.Name)
		if err != nil {
			return nil, err
		}
		ts = append(ts, Tensor{Name: n, Param: p.Name, Shape: p.Shape, Split: p.Split, Spec: p})
	}
	return ts, nil
}

// Spec is the shard loader's spec for the tensors: q, k, v, gate and up
// ([out, in]) split by rows (output features; k and v by whole kv heads,
// replicated when the workers outnumber them), o and down by columns
// (input features), biases with their rows, embedding and norms
// replicated, the LM head replicated or split by rows (vocabulary); one
// rule per tensor by exact name (decoder.ParamSpec.ShardRule), anything
// else an error. convert, if not Invalid, converts every tensor to that
// dtype as it loads.
func Spec(ts []Tensor, convert tensor.DType) *shard.Spec {
	s := &shard.Spec{Default: "error"}
	for _, t := range ts {
		r := t.Spec.ShardRule()
		r.Match = t.Name
		if convert != tensor.Invalid {
			r.Convert = convert.String()
		}
		s.Rules = append(s.Rules, r)
	}
	return s
}
