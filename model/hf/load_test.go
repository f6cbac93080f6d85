package hf_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/hf"
	"github.com/chorus-rt/chorus/model/safetensors"
	_ "github.com/chorus-rt/chorus/model/shardload"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func TestMain(m *testing.M) {
	worker.Main() // process sessions re-execute this binary as workers
	os.Exit(m.Run())
}

// sharesStorage (a, b tensors) -> whether a is a view of b's memory.
const sharesStorage = "hftest.shares_storage"

func init() {
	registry.MustRegisterTyped(sharesStorage, func(env registry.Env, a, b *tensor.Tensor) (bool, error) {
		return a.Storage() == b.Storage(), nil
	})
}

// checkTiedHead checks that a split LM head tied to the embedding is a
// view of it (no second copy) on every worker whose vocabulary block
// lies inside the vocabulary, and a padded copy on the others.
func checkTiedHead(t *testing.T, ctx context.Context, s *session.Session, c decoder.Config, w map[string]*session.DRef) {
	t.Helper()
	f, err := s.GetGlobalFunc(ctx, sharesStorage)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	r, err := s.CallPacked(f, w[decoder.ParamLMHead], w[decoder.ParamEmbed])
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	n := s.NumWorkers()
	for i := range n {
		v, err := s.DebugGetFromRemote(ctx, r, i)
		if err != nil {
			t.Fatal(err)
		}
		want := (i+1)*c.VocabShard(n) <= c.Vocab
		if v != want {
			t.Errorf("worker %d of %d: LM head a view of the embedding: %v, want %v", i, n, v, want)
		}
	}
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const seed = 7

// small is a decoder with what Hugging Face models add: GQA, a head dim
// apart from hidden/heads, llama3 rotary scaling.
func small(dt tensor.DType) decoder.Config {
	c := decoder.Small(dt)
	c.Vocab, c.Heads, c.KVHeads, c.HeadSize, c.MaxSeq = 96, 8, 4, 12, 12
	c.Rope = decoder.RopeScaling{Type: decoder.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 64}
	return c
}

func newSession(t *testing.T, ctx context.Context, kind string, n int) *session.Session {
	t.Helper()
	var s *session.Session
	var err error
	if kind == "threaded" {
		s, err = session.NewThreaded(session.Options{NumWorkers: n})
	} else {
		s, err = session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: n}})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	if n > 1 {
		if err := s.InitCCL(ctx, "cpu", 0); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestLoadRandom writes random Llama (several files and an index) and
// Qwen2 (q/k/v biases, tied embeddings) folders, loads them through
// Open and Load over 1, 2 and 4 workers, and runs a prefill and decode
// steps against the float64 reference of the same weights; every
// worker's bytes read add up to each tensor once (split ones) or once
// per worker (replicated ones). The vocabulary of 94 does not divide
// over 4 workers: the split LM head's last block is padded (read short
// and padded untied, a padded copy of the embedding's rows tied).
func TestLoadRandom(t *testing.T) {
	for _, tc := range []struct {
		arch  string
		tied  bool
		bias  bool
		files int64
	}{
		{hf.ArchLlama, false, false, 20000},
		{hf.ArchQwen2, true, true, 0},
	} {
		c := small(tensor.Float32)
		c.QKVBias, c.Vocab = tc.bias, 94
		dir := filepath.Join(t.TempDir(), "m")
		if err := hf.WriteRandom(dir, c, seed, hf.WriteOptions{Architecture: tc.arch, Tied: tc.tied, MaxFileBytes: tc.files}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, safetensors.IndexName)); (err == nil) != (tc.files > 0) {
			t.Fatalf("%s: index %v", tc.arch, err)
		}
		for _, run := range []struct {
			kind string
			n    int
		}{{"threaded", 1}, {"threaded", 2}, {"threaded", 4}, {"process", 2}} {
			t.Run(fmt.Sprintf("%s/%s/%d", tc.arch, run.kind, run.n), func(t *testing.T) {
				leaktest.Check(t)
				ctx := bg(t)
				ck, err := hf.Open(dir, hf.Options{Workers: run.n, MaxSeq: c.MaxSeq})
				if err != nil {
					t.Fatal(err)
				}
				if ck.Source != tensor.Float32 || ck.Decoder.HeadDim() != 12 || ck.Decoder.QKVBias != tc.bias || ck.HF.TieEmbeddings != tc.tied {
					t.Fatalf("checkpoint %+v", ck)
				}
				s := newSession(t, ctx, run.kind, run.n)
				m, err := hf.Load(ctx, s, ck, tensor.CPUDevice, hf.LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Release()
				checkBytes(t, ck, m.Stats.BytesRead, run.n)
				if tc.tied && run.n > 1 {
					checkTiedHead(t, ctx, s, ck.Decoder, m.Weights)
				}
				ref := reference(t, ck.Decoder, tc.tied)
				checkGreedy(t, ctx, m.Model, ref, []int32{3, 17, 42, 90}, 4, 2e-5)
			})
		}
	}
}

// reference is the float64 reference of a random checkpoint (the LM head
// is the embedding when tied).
func reference(t *testing.T, c decoder.Config, tied bool) *decoder.Reference {
	var embed decoder.ParamSpec
	for _, p := range c.Params() {
		if p.Name == decoder.ParamEmbed {
			embed = p
		}
	}
	ref, err := decoder.NewReference(c, func(p decoder.ParamSpec) []float64 {
		if tied && p.Name == decoder.ParamLMHead {
			return decoder.RandomParam(embed, seed, c.DType)
		}
		return decoder.RandomParam(p, seed, c.DType)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// checkBytes: split tensors are read once over the workers, replicated
// ones once by each.
func checkBytes(t *testing.T, ck *hf.Checkpoint, got []int64, n int) {
	t.Helper()
	var want, sum int64
	for _, x := range ck.Tensors {
		b, _ := x.Shape.NumElements()
		b *= int64(ck.Decoder.DType.Size())
		if x.Split == decoder.Replicate {
			b *= int64(n)
		}
		want += b
	}
	for _, b := range got {
		sum += b
	}
	if len(got) != n || sum != want {
		t.Errorf("bytes read %v (sum %d), want a sum of %d over %d workers", got, sum, want, n)
	}
}

// checkGreedy runs prompt and steps greedy decode steps on m and ref (ref
// fed m's tokens) and checks every step's logits within rtol of the
// largest and the greedy token wherever the reference's margin is clear.
func checkGreedy(t *testing.T, ctx context.Context, m *decoder.Model, ref *decoder.Reference, prompt []int32, steps int, rtol float64) {
	t.Helper()
	pos := make([]int32, len(prompt))
	for i := range pos {
		pos[i] = int32(i)
	}
	st, err := m.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Step(prompt, pos)
	if err != nil {
		t.Fatal(err)
	}
	for step := 0; ; step++ {
		got, err := m.Logits(ctx, st, 0)
		if err != nil {
			t.Fatal(err)
		}
		toks, err := m.Tokens(ctx, st, 0)
		st.Release()
		if err != nil {
			t.Fatal(err)
		}
		row := want[len(want)-1]
		last := got[len(got)-m.Config.Vocab:]
		top := 0.0
		for _, v := range row {
			top = math.Max(top, math.Abs(v))
		}
		for j, v := range row {
			if math.Abs(last[j]-v) > rtol*top {
				t.Fatalf("step %d logit %d: %v, reference %v (tolerance %g of %g)", step, j, last[j], v, rtol, top)
			}
		}
		tok := toks[len(toks)-1]
		if int(tok) != decoder.Argmax(row) {
			t.Fatalf("step %d: greedy %d, reference %d", step, tok, decoder.Argmax(row))
		}
		if step == steps {
			return
		}
		if st, err = m.Decode(ctx, tok); err != nil {
			t.Fatal(err)
		}
		if want, err = ref.Step([]int32{tok}, []int32{int32(m.Pos() - 1)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadConvert: a bfloat16 checkpoint loads in its own dtype by
// default, and as float32 when asked (every value exactly, so the logits
// match the bfloat16 weights' float64 reference within float32 rounding).
func TestLoadConvert(t *testing.T) {
	leaktest.Check(t)
	c := small(tensor.BFloat16)
	dir := filepath.Join(t.TempDir(), "m")
	if err := hf.WriteRandom(dir, c, seed, hf.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ck, err := hf.Open(dir, hf.Options{Workers: 2, MaxSeq: c.MaxSeq})
	if err != nil || ck.Decoder.DType != tensor.BFloat16 || ck.Source != tensor.BFloat16 {
		t.Fatalf("default dtype: %+v, %v", ck, err)
	}
	ck, err = hf.Open(dir, hf.Options{Workers: 2, MaxSeq: c.MaxSeq, DType: tensor.Float32})
	if err != nil || ck.Decoder.DType != tensor.Float32 {
		t.Fatalf("converted: %+v, %v", ck, err)
	}
	ctx := bg(t)
	s := newSession(t, ctx, "threaded", 2)
	m, err := hf.Load(ctx, s, ck, tensor.CPUDevice, hf.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	// The reference of the bfloat16 values, computed as float32 weights.
	rc := ck.Decoder
	ref, err := decoder.NewReference(rc, func(p decoder.ParamSpec) []float64 { return decoder.RandomParam(p, seed, tensor.BFloat16) })
	if err != nil {
		t.Fatal(err)
	}
	checkGreedy(t, ctx, m.Model, ref, []int32{1, 2, 3}, 2, 2e-5)
	// bytes read are the checkpoint's (2 bytes an element), not float32's.
	var sum int64
	for _, b := range m.Stats.BytesRead {
		sum += b
	}
	if sum > 2*ck.Bytes || sum < ck.Bytes {
		t.Errorf("read %d bytes of a %d-byte bfloat16 checkpoint on 2 workers", sum, ck.Bytes)
	}
}

// TestOpenRefusals: a checkpoint whose tensors do not match its config
// is refused before anything is loaded, naming the tensors.
func TestOpenRefusals(t *testing.T) {
	c := small(tensor.Float32)
	base := filepath.Join(t.TempDir(), "m")
	if err := hf.WriteRandom(base, c, seed, hf.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(base)
	if err != nil {
		t.Fatal(err)
	}
	var all []safetensors.Named
	for _, n := range ck.Names() {
		f, _, _ := ck.Lookup(n)
		x, err := f.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, safetensors.Named{Name: n, Tensor: x})
	}
	ck.Close()
	cfg, _ := os.ReadFile(filepath.Join(base, hf.ConfigFile))
	// variant writes a folder with the tensors edited.
	variant := func(t *testing.T, edit func([]safetensors.Named) []safetensors.Named) string {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, hf.ConfigFile), cfg, 0o644)
		if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), edit(append([]safetensors.Named(nil), all...)), nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name string
		edit func([]safetensors.Named) []safetensors.Named
		want []string
	}{
		{"missing", func(ts []safetensors.Named) []safetensors.Named { return ts[1:] }, []string{"missing 1 tensors: lm_head.weight"}},
		{"extra", func(ts []safetensors.Named) []safetensors.Named {
			return append(ts, safetensors.Named{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", Tensor: tensor.MustNew(tensor.Float32, tensor.Shape{12})})
		}, []string{"1 tensors the config does not use: model.layers.0.self_attn.rotary_emb.inv_freq"}},
		{"shape", func(ts []safetensors.Named) []safetensors.Named {
			ts[0] = safetensors.Named{Name: ts[0].Name, Tensor: tensor.MustNew(tensor.Float32, tensor.Shape{95, 64})}
			return ts
		}, []string{"mis-shaped", ts0Name(all) + ": want [96 64], got [95 64]"}},
		{"dtype", func(ts []safetensors.Named) []safetensors.Named {
			s := ts[0].Tensor.Shape()
			ts[0] = safetensors.Named{Name: ts[0].Name, Tensor: tensor.MustNew(tensor.Int32, s)}
			return ts
		}, []string{"unsupported dtype", "int32"}},
		{"mixed", func(ts []safetensors.Named) []safetensors.Named {
			s := ts[0].Tensor.Shape()
			ts[0] = safetensors.Named{Name: ts[0].Name, Tensor: tensor.MustNew(tensor.Float16, s)}
			return ts
		}, []string{"mixes dtypes [float16 float32]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := variant(t, tc.edit)
			if tc.name == "mixed" {
				// config.json names no dtype here.
				b := strings.Replace(string(cfg), `"torch_dtype": "float32",`, "", 1)
				os.WriteFile(filepath.Join(dir, hf.ConfigFile), []byte(b), 0o644)
			}
			_, err := hf.Open(dir, hf.Options{Workers: 1, MaxSeq: 8})
			if !errors.Is(err, hf.ErrTensors) {
				t.Fatalf("got %v, want ErrTensors", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not say %q", err, w)
				}
			}
		})
	}
	// 8 heads over 4 kv heads: 8 workers replicate the kv heads, 16 have
	// fewer query heads than workers.
	if _, err := hf.Open(base, hf.Options{Workers: 16, MaxSeq: 8}); !errors.Is(err, hf.ErrConfig) || !strings.Contains(err.Error(), "num_key_value_heads") {
		t.Errorf("4 kv heads over 16 workers: %v", err)
	}
	if _, err := hf.Open(base, hf.Options{Workers: 1, MaxSeq: 8, DType: tensor.Int8}); !errors.Is(err, hf.ErrConfig) {
		t.Errorf("dtype int8: %v", err)
	}
}

func ts0Name(all []safetensors.Named) string { return all[0].Name }

// TestWriteRandomRefuses: WriteRandom never overwrites a checkpoint and
// never makes a missing parent folder.
func TestWriteRandomRefuses(t *testing.T) {
	c := small(tensor.Float32)
	dir := t.TempDir()
	if err := hf.WriteRandom(dir, c, seed, hf.WriteOptions{}); err != nil {
		t.Fatalf("an empty existing folder: %v", err)
	}
	err := hf.WriteRandom(dir, c, seed, hf.WriteOptions{})
	if !errors.Is(err, hf.ErrExists) || !strings.Contains(err.Error(), filepath.Join(dir, hf.ConfigFile)) && !strings.Contains(err.Error(), "model.safetensors") {
		t.Errorf("second write: %v", err)
	}
	if err := hf.WriteRandom(filepath.Join(dir, "no", "such"), c, seed, hf.WriteOptions{}); err == nil || !strings.Contains(err.Error(), "parent folder must exist") {
		t.Errorf("missing parent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the parent was made: %v", err)
	}
	c.QKVBias = true
	if err := hf.WriteRandom(filepath.Join(dir, "b"), c, seed, hf.WriteOptions{}); !errors.Is(err, hf.ErrConfig) {
		t.Errorf("Llama with q/k/v biases: %v", err)
	}
}
