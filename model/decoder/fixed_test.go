package decoder_test

import (
	"testing"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/tensor"
)

// TestFixedWeights: in the decode module the VM finds every operand a
// kernel reads before its PDL wait fixed (compiler/vm/interp/fixed.go):
// per layer the q/k/v triple, o, the gated projection, down, the
// residual norms and the attention (its positions, and its caches,
// which it alone appends to), and the LM head. The count comes from the
// module the decoder builds, so an IR change that made a weight an
// instruction's output, gave two attentions one cache (or stopped the
// fusions) shows here before it shows as a slower step.
func TestFixedWeights(t *testing.T) {
	hf := func() decoder.Config {
		c := decoder.Small(tensor.Float32)
		c.Layout = decoder.LayoutHF
		return c
	}
	// Each of the module's two functions (@decode, @prefill of 3 tokens)
	// has, per layer, the q/k/v triple, o, the gated projection and down
	// (matmul_nt, the HF layout) and two residual adds with the next norm
	// (the first layer's first norm follows the embedding; the final norm
	// follows the last add), the attention, and the LM head; the chorus
	// layout's products are matmul ([in, out] weights, never a skinny
	// kernel), so only its norms and attention count.
	for _, c := range []struct {
		name      string
		workers   int
		cfg       decoder.Config
		perLayer  int
		perModule int
	}{
		{"hf", 1, hf(), 7, 1},
		{"hf-2-workers", 2, hf(), 7, 1},
		{"chorus-layout", 1, decoder.Small(tensor.Float32), 3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := bg(t)
			s := newSession(t, ctx, "threaded", c.workers, nil)
			if c.workers > 1 {
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
			}
			cfg := c.cfg
			w, err := decoder.RandomWeights(ctx, s, cfg, seed)
			if err != nil {
				t.Fatal(err)
			}
			defer decoder.ReleaseWeights(w)
			m, err := decoder.Load(ctx, s, cfg, tensor.CPUDevice, decoder.Options{PrefillLen: 3}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			rs, err := m.Program.RunStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := 2 * (c.perLayer*cfg.Layers + c.perModule)
			for wk, r := range rs {
				if r.Fixed != want {
					t.Errorf("worker %d: %d instructions with fixed operands, want %d (%d layers)", wk, r.Fixed, want, cfg.Layers)
				}
			}
		})
	}
}
