package decoder

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/chorus-rt/chorus/tensor"
)

// configJSON is Config's file form (config.json next to the safetensors
// files; bench/decoder_ref.py reads the same keys).
type configJSON struct {
	Vocab      int          `json:"vocab"`
	Hidden     int          `json:"hidden"`
	Layers     int          `json:"layers"`
	Heads      int          `json:"heads"`
	KVHeads    int          `json:"kv_heads"`
	FFN        int          `json:"ffn"`
	MaxSeq     int          `json:"max_seq"`
	DType      string       `json:"dtype"`
	NormEps    float64      `json:"norm_eps"`
	RopeTheta  float64      `json:"rope_theta"`
	Norm       string       `json:"norm"`
	Activation string       `json:"activation"`
	Layout     string       `json:"layout,omitempty"`
	HeadDim    int          `json:"head_dim,omitempty"`
	QKVBias    bool         `json:"qkv_bias,omitempty"`
	Rope       *RopeScaling `json:"rope_scaling,omitempty"`
	LMHead     string       `json:"lm_head,omitempty"`
}

// MarshalJSON writes the configuration with the dtype by name and the
// norm and activation spelled out.
func (c Config) MarshalJSON() ([]byte, error) {
	j := configJSON{c.Vocab, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.FFN, c.MaxSeq,
		c.DType.String(), c.NormEps, c.RopeTheta, c.norm(), c.act(), c.layout(), c.HeadSize, c.QKVBias, nil, c.LMHead}
	if c.Rope != (RopeScaling{}) {
		r := c.Rope
		j.Rope = &r
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a configuration strictly: unknown keys and unknown
// dtypes are errors (wrapping ErrConfig). It does not Validate.
func (c *Config) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var j configJSON
	if err := d.Decode(&j); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	dt, err := tensor.ParseDType(j.DType)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	*c = Config{Vocab: j.Vocab, Hidden: j.Hidden, Layers: j.Layers, Heads: j.Heads, KVHeads: j.KVHeads, FFN: j.FFN, MaxSeq: j.MaxSeq,
		DType: dt, NormEps: j.NormEps, RopeTheta: j.RopeTheta, Norm: j.Norm, Act: j.Activation, Layout: j.Layout,
		HeadSize: j.HeadDim, QKVBias: j.QKVBias, LMHead: j.LMHead}
	if j.Rope != nil {
		c.Rope = *j.Rope
	}
	return nil
}
