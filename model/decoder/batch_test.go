package decoder_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/tensor"
)

// generateBatch runs m's Opts.Batch sequences together (different
// prompts of 3 tokens, then 4 decode steps, each sequence fed its own
// reference's greedy token) and checks every step's logits on every
// worker against one float64 reference per sequence, and the greedy
// tokens. replay uses the captured decode graph.
func generateBatch(t *testing.T, ctx context.Context, m *decoder.Model, replay bool) float64 {
	t.Helper()
	c, batch := m.Config, m.Opts.Batch
	refs := make([]*decoder.Reference, batch)
	var prompt []int32
	var want [][]float64
	for b := range refs {
		r, err := decoder.NewRandomReference(c, seed)
		if err != nil {
			t.Fatal(err)
		}
		refs[b] = r
		p := []int32{int32(3 + 5*b), int32((17 + 11*b) % c.Vocab), int32((42 + 7*b) % c.Vocab)}
		prompt = append(prompt, p...)
		w, err := r.Step(p, []int32{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, w...)
	}
	st, err := m.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	if replay {
		if err := m.CaptureDecode(ctx); err != nil {
			t.Fatal(err)
		}
	}
	worst := 0.0
	for step := 0; ; step++ {
		worst = math.Max(worst, compare(t, ctx, m, st, want, fmt.Sprintf("step %d", step)))
		toks, err := m.Tokens(ctx, st, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(toks) != len(want) {
			t.Fatalf("step %d: %d tokens, want %d", step, len(toks), len(want))
		}
		for i, row := range want {
			rtol, atol := tolerance(c.DType, 1)
			if toks[i] != int32(decoder.Argmax(row)) && margin(row) > 2*(atol+rtol) {
				t.Errorf("step %d row %d: greedy %d, reference %d (margin %g)", step, i, toks[i], decoder.Argmax(row), margin(row))
			}
		}
		st.Release()
		if step == 4 {
			break
		}
		// Every sequence's next token: the last row of its reference.
		per := len(want) / batch
		next := make([]int32, batch)
		for b := range next {
			next[b] = int32(decoder.Argmax(want[(b+1)*per-1]))
		}
		if replay {
			st, err = m.ReplayDecodeBatch(ctx, next)
		} else {
			st, err = m.DecodeBatch(ctx, next)
		}
		if err != nil {
			t.Fatal(err)
		}
		want = want[:0]
		for b, r := range refs {
			w, err := r.Step([]int32{next[b]}, []int32{int32(m.Pos() - 1)})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, w...)
		}
	}
	return worst
}

// TestDecoderBatch decodes 3 sequences together on 1 and 2 CPU workers
// (float32, and bfloat16 on one) against a float64 reference per
// sequence.
func TestDecoderBatch(t *testing.T) {
	for _, r := range []struct {
		n  int
		dt tensor.DType
	}{{1, tensor.Float32}, {2, tensor.Float32}, {1, tensor.BFloat16}} {
		t.Run(fmt.Sprintf("%d/%s", r.n, r.dt), func(t *testing.T) {
			ctx := bg(t)
			s := newSession(t, ctx, "threaded", r.n, nil)
			if r.n > 1 {
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
			}
			c := decoder.Small(r.dt)
			if r.n == 1 {
				c = hfVariant(c) // head dim 12, q/k/v biases, the HF layout
			}
			w, err := decoder.RandomWeights(ctx, s, c, seed)
			if err != nil {
				t.Fatal(err)
			}
			defer decoder.ReleaseWeights(w)
			m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{PrefillLen: 3, Batch: 3}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			t.Logf("largest logit error / largest logit: %.2g", generateBatch(t, ctx, m, false))

			// Prompts of 5 tokens each: a batched @prefill compiled at
			// first use.
			m.Reset()
			var prompt []int32
			var want [][]float64
			for b := range m.Opts.Batch {
				ref, err := decoder.NewRandomReference(c, seed)
				if err != nil {
					t.Fatal(err)
				}
				p := make([]int32, 5)
				for i := range p {
					p[i] = int32((i*31 + b*17 + 2) % c.Vocab)
				}
				w, err := ref.Step(p, []int32{0, 1, 2, 3, 4})
				if err != nil {
					t.Fatal(err)
				}
				prompt, want = append(prompt, p...), append(want, w...)
			}
			st, err := m.Prefill(ctx, prompt)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, ctx, m, st, want, "batched prefill of 5")
			st.Release()
			if got := m.PrefillLengths(); len(got) != 1 || got[0] != 5 || m.Pos() != 5 {
				t.Errorf("after a batched prefill of 5: lengths %v, position %d", got, m.Pos())
			}
		})
	}
}

// TestDecoderBatchErrors: a batched model refuses steps of the wrong
// size (and Decode, one token) before sending anything, and a negative
// batch at Load.
func TestDecoderBatchErrors(t *testing.T) {
	ctx := bg(t)
	s := newSession(t, ctx, "threaded", 1, nil)
	c := decoder.Small(tensor.Float32)
	w, err := decoder.RandomWeights(ctx, s, c, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer decoder.ReleaseWeights(w)
	if _, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{Batch: -1}, w); !errors.Is(err, decoder.ErrConfig) {
		t.Errorf("Batch -1: %v", err)
	}
	m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{Batch: 2}, w)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	for name, f := range map[string]func() (*decoder.Step, error){
		"decode of one":     func() (*decoder.Step, error) { return m.Decode(ctx, 1) },
		"batch of three":    func() (*decoder.Step, error) { return m.DecodeBatch(ctx, []int32{1, 2, 3}) },
		"uneven prompts":    func() (*decoder.Step, error) { return m.Prefill(ctx, []int32{1, 2, 3}) },
		"token outside":     func() (*decoder.Step, error) { return m.DecodeBatch(ctx, []int32{1, int32(c.Vocab)}) },
		"replay before cap": func() (*decoder.Step, error) { return m.ReplayDecodeBatch(ctx, []int32{1, 2}) },
	} {
		if st, err := f(); err == nil {
			st.Release()
			t.Errorf("%s: no error", name)
		}
	}
	if m.Pos() != 0 {
		t.Errorf("refused steps moved the position to %d", m.Pos())
	}
}

// TestDecoderBatchGPU decodes 8 and 16 sequences together on one GPU
// (bfloat16, the HF layout: the skinny-matrix kernels take 8 rows, the
// tensor-core ones 16), eagerly and through the captured graph, against
// a float64 reference per sequence.
func TestDecoderBatchGPU(t *testing.T) {
	gpuCount(t)
	for _, batch := range []int{8, 16, 32} {
		t.Run(fmt.Sprint(batch), func(t *testing.T) {
			ctx := bg(t)
			s := newSession(t, ctx, "process", 1, []int{0})
			c := decoder.Small(tensor.BFloat16)
			c.Hidden, c.Heads, c.KVHeads, c.FFN, c.Vocab = 256, 4, 2, 512, 300
			c.Layout = decoder.LayoutHF
			w, err := decoder.RandomWeights(ctx, s, c, seed)
			if err != nil {
				t.Fatal(err)
			}
			defer decoder.ReleaseWeights(w)
			m, err := decoder.Load(ctx, s, c, tensor.CUDADevice(0), decoder.Options{PrefillLen: 3, Batch: batch, Strategy: "auto"}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			eager := generateBatch(t, ctx, m, false)
			m.Reset()
			graph := generateBatch(t, ctx, m, true)
			t.Logf("largest logit error / largest logit: eager %.2g, graph %.2g", eager, graph)
		})
	}
}
