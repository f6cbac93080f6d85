package decoder

import (
	"fmt"
	"math"
)

// Rotary scaling types (Hugging Face's rope_type names).
const (
	RopeDefault = "default" // no scaling (also the empty string)
	RopeLinear  = "linear"  // every inverse frequency divided by Factor
	RopeLlama3  = "llama3"  // Llama 3.1's: low frequencies divided by Factor, a smooth ramp between
)

// RopeScaling is a scaled rotary embedding. The zero value is none.
type RopeScaling struct {
	Type           string  `json:"rope_type"`
	Factor         float64 `json:"factor,omitempty"`
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`  // llama3
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"` // llama3
	// OriginalMaxPos is llama3's original_max_position_embeddings.
	OriginalMaxPos int `json:"original_max_position_embeddings,omitempty"`
}

func (r RopeScaling) String() string {
	switch r.Type {
	case RopeLinear:
		return fmt.Sprintf("linear (factor %g)", r.Factor)
	case RopeLlama3:
		return fmt.Sprintf("llama3 (factor %g, low %g, high %g, original context %d)", r.Factor, r.LowFreqFactor, r.HighFreqFactor, r.OriginalMaxPos)
	}
	return RopeDefault
}

// Validate checks the type and the fields it uses.
func (r RopeScaling) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: rope scaling %q: %s", ErrConfig, r.Type, fmt.Sprintf(format, args...))
	}
	pos := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	switch r.Type {
	case "", RopeDefault:
		if r != (RopeScaling{Type: r.Type}) {
			return bad("takes no factors")
		}
	case RopeLinear:
		if !pos(r.Factor) {
			return bad("factor %v (want > 0)", r.Factor)
		}
	case RopeLlama3:
		switch {
		case !pos(r.Factor):
			return bad("factor %v (want > 0)", r.Factor)
		case !pos(r.LowFreqFactor) || !pos(r.HighFreqFactor) || r.HighFreqFactor <= r.LowFreqFactor:
			return bad("low_freq_factor %v and high_freq_factor %v (want 0 < low < high)", r.LowFreqFactor, r.HighFreqFactor)
		case r.OriginalMaxPos < 1:
			return bad("original_max_position_embeddings %d (want > 0)", r.OriginalMaxPos)
		}
	default:
		return bad("unknown type (%q, %q or %q)", RopeDefault, RopeLinear, RopeLlama3)
	}
	return nil
}

// InvFreq is the rotary embedding's table of inverse frequencies, one per
// pair of a head (HeadDim/2), in float32 computed step by step as
// transformers computes it in PyTorch (float32 tensors, Python scalars
// rounded to float32): default 1 / theta^(2i/d); linear divides by the
// factor; llama3 divides the low frequencies (wavelength above
// original/low_freq_factor) by the factor, keeps the high ones (below
// original/high_freq_factor) and blends in between. The pair at position
// p turns by float32(p)·InvFreq[i] (the rope op's table form). Only pow
// may differ from PyTorch's in the last bit (it is rounded correctly
// here; PyTorch's vectorized powf is within one ulp).
func (c Config) InvFreq() []float32 {
	d := c.HeadDim()
	base := float32(c.RopeTheta)
	inv := make([]float32, d/2)
	for i := range inv {
		e := float32(2*i) / float32(d)
		inv[i] = 1 / float32(math.Pow(float64(base), float64(e)))
	}
	r := c.Rope
	switch r.Type {
	case RopeLinear:
		f := float32(r.Factor)
		for i := range inv {
			inv[i] /= f
		}
	case RopeLlama3:
		// Every product is converted explicitly: Go may not fuse it
		// into a multiply-add then, so each step rounds as PyTorch's.
		factor, low := float32(r.Factor), float32(r.LowFreqFactor)
		old := float32(r.OriginalMaxPos)
		lowWave := float32(float64(r.OriginalMaxPos) / r.LowFreqFactor)
		highWave := float32(float64(r.OriginalMaxPos) / r.HighFreqFactor)
		twoPi := float32(2 * math.Pi)
		span := float32(r.HighFreqFactor - r.LowFreqFactor)
		for i, f := range inv {
			// PyTorch's scalar / tensor is tensor.reciprocal() * scalar.
			wave := float32(float32(1/f) * twoPi)
			scaled := f
			if wave > lowWave {
				scaled = f / factor
			}
			smooth := (float32(float32(1/wave)*old) - low) / span
			smoothed := float32(float32(float32(1-smooth)*scaled)/factor) + float32(smooth*scaled)
			if !(wave < highWave) && !(wave > lowWave) {
				scaled = smoothed
			}
			inv[i] = scaled
		}
	}
	return inv
}
