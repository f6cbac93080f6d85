package decoder_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/model/shardload"
	"github.com/chorus-rt/chorus/tensor"
)

// The end-to-end path: a random model written as safetensors, loaded
// shard by shard by the workers with the config's ShardSpec (each
// worker reading its own byte ranges, every byte of a split tensor once),
// then prefill and decode steps checked against the float64 reference.
func TestCheckpointEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		kind string
		n    int
		dt   tensor.DType
	}{
		{"threaded", 1, tensor.Float32},
		{"process", 2, tensor.Float32},
		{"threaded", 4, tensor.Float32},
		{"threaded", 2, tensor.BFloat16},
	} {
		t.Run(fmt.Sprintf("%s/%d/%s", tc.kind, tc.n, tc.dt), func(t *testing.T) {
			ctx := bg(t)
			c := decoder.Small(tc.dt)
			dir := t.TempDir()
			if err := decoder.WriteRandom(dir, c, seed); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, decoder.ConfigFile)); err != nil {
				t.Fatal(err)
			}
			s := newSession(t, ctx, tc.kind, tc.n, nil)
			if tc.n > 1 {
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
			}
			w, err := shardload.LoadSharded(ctx, s, dir, c.ShardSpec())
			if err != nil {
				t.Fatal(err)
			}
			defer decoder.ReleaseWeights(w)
			m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{PrefillLen: 3}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			generate(t, ctx, m, false)
		})
	}
	// A checkpoint of another shape is refused by the loaded model's
	// checks, naming the parameter.
	t.Run("wrong config", func(t *testing.T) {
		ctx := bg(t)
		c := decoder.Small(tensor.Float32)
		dir := t.TempDir()
		if err := decoder.WriteRandom(dir, c, seed); err != nil {
			t.Fatal(err)
		}
		s := newSession(t, ctx, "threaded", 1, nil)
		other := c
		other.Layers++
		if _, err := shardload.LoadSharded(ctx, s, dir, other.ShardSpec()); err == nil {
			t.Fatal("a spec naming parameters the checkpoint lacks loaded")
		}
	})
}

// TestLayouts: the same random model written in the chorus layout
// ([in, out]) and in the Hugging Face layout ([out, in]: every matrix of
// the file is the transpose of the other's) loads sharded over 1, 2 and
// 4 CPU workers (the HF spec splits the rows of a column-parallel layer
// and the columns of a row-parallel one), runs through matmul_nt, and
// gives the same greedy tokens and the same logits within the float32
// tolerance as the chorus layout, and as the float64 reference, which
// takes either layout.
func TestLayouts(t *testing.T) {
	base := decoder.Small(tensor.Float32)
	dirs := map[string]string{}
	for _, l := range []string{decoder.LayoutChorus, decoder.LayoutHF} {
		c := base
		c.Layout = l
		dirs[l] = t.TempDir()
		if err := decoder.WriteRandom(dirs[l], c, seed); err != nil {
			t.Fatal(err)
		}
	}
	// The files: every matrix transposed, the rest equal.
	ours, err := safetensors.Open(filepath.Join(dirs[decoder.LayoutChorus], decoder.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	hf, err := safetensors.Open(filepath.Join(dirs[decoder.LayoutHF], decoder.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	matrices := 0
	for _, p := range base.Params() {
		a, err := ours.Tensor(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := hf.Tensor(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		av, _ := tensor.ToFloat64(a)
		bv, _ := tensor.ToFloat64(b)
		if len(p.Shape) == 1 || p.Name == decoder.ParamEmbed {
			if !b.Shape().Equal(a.Shape()) || fmt.Sprint(av) != fmt.Sprint(bv) {
				t.Errorf("%s differs between the layouts", p.Name)
			}
			continue
		}
		matrices++
		r, c := a.Shape()[0], a.Shape()[1]
		if !b.Shape().Equal(tensor.Shape{c, r}) {
			t.Fatalf("%s: HF shape %v, chorus %v", p.Name, b.Shape(), a.Shape())
		}
		for i := range r {
			for j := range c {
				if av[i*c+j] != bv[j*r+i] {
					t.Fatalf("%s (%d, %d): chorus %v, HF (%d, %d) %v", p.Name, i, j, av[i*c+j], j, i, bv[j*r+i])
				}
			}
		}
	}
	if matrices != 7*base.Layers+1 {
		t.Errorf("%d matrices compared, want %d", matrices, 7*base.Layers+1)
	}

	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := bg(t)
			s := newSession(t, ctx, "threaded", n, nil)
			if n > 1 {
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
			}
			var logits [2][][]float64
			var tokens [2][]int32
			for li, l := range []string{decoder.LayoutChorus, decoder.LayoutHF} {
				c := base
				c.Layout = l
				w, err := shardload.LoadSharded(ctx, s, dirs[l], c.ShardSpec())
				if err != nil {
					t.Fatal(err)
				}
				m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{}, w)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Count(m.Module.String(), "matmul_nt("); (l == decoder.LayoutHF) != (got > 0) {
					t.Errorf("%s layout: %d matmul_nt", l, got)
				}
				generate(t, ctx, m, false) // against the reference
				m.Reset()
				g, err := m.Generate(ctx, []int32{3, 17, 42, 9, 1}, 6, false)
				if err != nil {
					t.Fatal(err)
				}
				tokens[li] = g.Tokens
				// Logits of a prefill, as a table to compare.
				m.Reset()
				st, err := m.Prefill(ctx, []int32{5, 8, 13, 21})
				if err != nil {
					t.Fatal(err)
				}
				lg, err := m.Logits(ctx, st, n-1)
				if err != nil {
					t.Fatal(err)
				}
				st.Release()
				logits[li] = append(logits[li], lg)
				m.Release()
				decoder.ReleaseWeights(w)
			}
			if fmt.Sprint(tokens[0]) != fmt.Sprint(tokens[1]) {
				t.Errorf("tokens: chorus layout %v, HF layout %v", tokens[0], tokens[1])
			}
			maxRef := 0.0
			for _, v := range logits[0][0] {
				maxRef = math.Max(maxRef, math.Abs(v))
			}
			rtol, atol := tolerance(tensor.Float32, maxRef)
			for i, v := range logits[0][0] {
				if g := logits[1][0][i]; !(math.Abs(g-v) <= atol+rtol*math.Abs(v)) {
					t.Fatalf("logit %d: HF layout %v, chorus layout %v", i, g, v)
				}
			}
		})
	}
}

// TestRandomFill: the bulk writer gives RandomParam's values exactly, in
// every dtype, for matrices of both layouts (big enough to be filled in
// parallel) and 1-D parameters.
func TestRandomFill(t *testing.T) {
	c := decoder.Small(tensor.Float32)
	c.Vocab, c.QKVBias = 1024, true
	hf := c
	hf.Layout = decoder.LayoutHF
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
		for _, p := range append(c.Params(), hf.Params()...) {
			x := tensor.MustNew(dt, p.Shape)
			if err := decoder.RandomFill(p, 5, dt, x.Bytes()); err != nil {
				t.Fatal(err)
			}
			want := tensor.MustNew(dt, p.Shape)
			if err := tensor.SetFromFloat64(want, decoder.RandomParam(p, 5, dt)); err != nil {
				t.Fatal(err)
			}
			if err := tensor.Equal(x, want); err != nil {
				t.Fatalf("%s %s (transposed %v): %v", dt, p.Name, p.Transposed, err)
			}
		}
	}
	p := c.Params()[0]
	if err := decoder.RandomFill(p, 5, tensor.Float32, make([]byte, 3)); !errors.Is(err, decoder.ErrConfig) {
		t.Errorf("short buffer: %v", err)
	}
	if err := decoder.RandomFill(p, 5, tensor.Int32, make([]byte, 4*64*1024)); !errors.Is(err, decoder.ErrConfig) {
		t.Errorf("int32: %v", err)
	}
}
