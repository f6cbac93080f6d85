package decoder_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func TestMain(m *testing.M) {
	worker.Main() // process sessions re-execute this binary as workers
	os.Exit(m.Run())
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const seed = 11

// TestShardsCoverParams: the shards of any worker count put together are
// the full parameter, for every parameter of a model with LayerNorm, in
// both layouts, with the LM head replicated and split over a vocabulary
// 4 and 8 do not divide (the padding zero); on 8 workers the 4 kv heads
// are replicated, each worker's shard the kv head its query heads read.
func TestShardsCoverParams(t *testing.T) {
	c := decoder.Small(tensor.Float32)
	c.Norm, c.Vocab = decoder.NormLayer, 61
	hf := c
	hf.Layout = decoder.LayoutHF
	rep := c
	rep.LMHead = decoder.LMHeadReplicated
	for _, p := range append(append(c.Params(), hf.Params()...), rep.Params()...) {
		full := decoder.RandomParam(p, seed, c.DType)
		for _, n := range []int{1, 2, 4, 8} {
			got := make([]float64, len(full))
			cols := p.Shape[len(p.Shape)-1]
			for r := range n {
				sh, err := decoder.RandomShard(p, seed, c.DType, r, n)
				if err != nil {
					t.Fatal(err)
				}
				if !sh.Shape().Equal(p.ShardShape(n)) {
					t.Fatalf("%s: shard %v, ShardShape %v", p.Name, sh.Shape(), p.ShardShape(n))
				}
				v, _ := tensor.ToFloat64(sh)
				r0, r1, c0, c1 := p.ShardRange(r, n)
				s := sh.Shape()
				stride := s[len(s)-1]
				for i := range int64(len(v)) / stride {
					for j := range stride {
						x := v[i*stride+j]
						switch {
						case r0+i < r1 && c0+j < c1:
							got[(r0+i)*cols+c0+j] = x
						case x != 0:
							t.Fatalf("%s: worker %d of %d: padding (%d, %d) is %g", p.Name, r, n, i, j, x)
						}
					}
				}
				if p.Units > 0 && int64(n) > p.Units {
					// The kv head of this worker's first query head.
					kv := int64(r) * int64(c.Heads) / int64(n) / int64(c.Heads/c.KVHeads)
					lo, hi := c0, c1
					if p.Split == decoder.SplitRows {
						lo, hi = r0, r1
					}
					if d := int64(c.HeadDim()); lo != kv*d || hi != (kv+1)*d {
						t.Errorf("%s: worker %d of %d holds [%d, %d), its query heads read kv head %d", p.Name, r, n, lo, hi, kv)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(full) {
				t.Errorf("%s: %d workers' shards differ from the full parameter", p.Name, n)
			}
		}
	}
}

func TestBuild(t *testing.T) {
	c := decoder.Small(tensor.Float16)
	for _, tc := range []struct {
		head  string
		vocab int
	}{{decoder.LMHeadReplicated, 64}, {decoder.LMHeadSplit, 64}, {decoder.LMHeadSplit, 62}} {
		c := c
		c.LMHead, c.Vocab = tc.head, tc.vocab
		for _, n := range []int{1, 2, 4} {
			m, err := decoder.Build(c, n, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Funcs) != 2 || m.Func(decoder.FuncPrefill) == nil || m.Func(decoder.FuncDecode) == nil {
				t.Fatalf("n=%d: functions %v", n, m.Funcs)
			}
			// Two all-reduces per layer and function when sharded, and
			// the split head's gather; none on one worker.
			want, params := 0, 2+len(c.Params())+2*c.Layers
			if n > 1 {
				want = 2 * c.Layers * 2
				if tc.head == decoder.LMHeadSplit {
					want += 2
					params++ // the placement
					if c.Vocab%n != 0 {
						params++ // the padding's mask
					}
				}
			}
			if got := strings.Count(m.String(), "allreduce("); got != want {
				t.Errorf("%s head, vocab %d, n=%d: %d all-reduces, want %d", tc.head, c.Vocab, n, got, want)
			}
			if got := len(m.Func(decoder.FuncDecode).Params); got != params {
				t.Errorf("%s head, vocab %d, n=%d: @decode has %d parameters, want %d", tc.head, c.Vocab, n, got, params)
			}
			f := m.Func(decoder.FuncDecode)
			if got, want := f.Types()[string(f.Results[0])], (ir.TensorType{Shape: tensor.Shape{1, int64(c.LogitsWidth(n))}}); got == nil || !got.(ir.TensorType).Shape.Equal(want.Shape) {
				t.Errorf("%s head, vocab %d, n=%d: logits %v, want %v", tc.head, c.Vocab, n, got, want.Shape)
			}
		}
	}
	gpu, err := decoder.Compile(c, 2, 3, tensor.CUDADevice(0), "one_shot", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The layers' and the split head's all-reduces run on IPC memory.
	if got := strings.Count(gpu.String(), "custom_allreduce("); got != 2*c.Layers*2+2 {
		t.Errorf("GPU program has %d custom all-reduces, want %d", got, 2*c.Layers*2+2)
	}
	cpu, err := decoder.Compile(c, 2, 0, tensor.CPUDevice, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cpu.Funcs) != 1 || strings.Contains(cpu.String(), "custom_allreduce") {
		t.Errorf("CPU program without prefill: %d functions, custom all-reduce %v", len(cpu.Funcs), strings.Contains(cpu.String(), "custom_allreduce"))
	}
	for name, bad := range map[string]func(*decoder.Config){
		"kv heads over 3":             func(c *decoder.Config) {},
		"kv heads 1, heads 8 over 3":  func(c *decoder.Config) { c.KVHeads = 1 },
		"split head of 2 rows over 3": func(c *decoder.Config) { c.Vocab, c.LMHead = 2, decoder.LMHeadSplit },
		"head placement":              func(c *decoder.Config) { c.LMHead = "vocab" },
		"odd head dim":                func(c *decoder.Config) { c.Hidden, c.Heads, c.KVHeads = 24, 8, 8 },
		"groups":                      func(c *decoder.Config) { c.KVHeads = 5 },
		"dtype":                       func(c *decoder.Config) { c.DType = tensor.Int32 },
		"norm":                        func(c *decoder.Config) { c.Norm = "batch" },
		"theta":                       func(c *decoder.Config) { c.RopeTheta = 0 },
	} {
		cc := decoder.Small(tensor.Float32)
		bad(&cc)
		if _, err := decoder.Build(cc, 3, 0); !errors.Is(err, decoder.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	// Replicated kv heads need the workers to be a multiple of the kv
	// heads dividing the heads: 6 heads over 2 kv heads on 4 workers is
	// neither a split nor a replication.
	cc := decoder.Small(tensor.Float32)
	cc.Hidden, cc.Heads, cc.KVHeads = 48, 6, 2
	if _, err := decoder.Build(cc, 4, 0); !errors.Is(err, decoder.ErrConfig) || !strings.Contains(err.Error(), "kv heads") {
		t.Errorf("6 heads, 2 kv heads over 4 workers: %v, want ErrConfig naming the kv heads", err)
	}
	if _, err := decoder.Build(c, 1, c.MaxSeq+1); !errors.Is(err, decoder.ErrConfig) {
		t.Errorf("prefill longer than the cache: %v", err)
	}
}

// TestInvFreq: the rotary table of every scaling type against the
// formulas in float64, for head dim 12, theta 10000: default (within the
// float32 exponent's rounding, which PyTorch shares: 2i/d is a float32
// there too), linear (factor 4), and llama3 (factor 8, low 1, high 4,
// original context 64), whose three bands all occur here. model/hf's
// golden test compares the table with transformers' own.
func TestInvFreq(t *testing.T) {
	c := decoder.Small(tensor.Float32)
	c.HeadSize = 12
	def := c.InvFreq()
	for i, f := range def {
		want := float32(1 / math.Pow(10000, float64(2*i)/12))
		if math.Abs(float64(f-want)) > float64(want)*5e-7 {
			t.Errorf("default %d: %v, want %v", i, f, want)
		}
	}
	c.Rope = decoder.RopeScaling{Type: decoder.RopeLinear, Factor: 4}
	for i, f := range c.InvFreq() {
		if f != def[i]/4 {
			t.Errorf("linear %d: %v, want %v", i, f, def[i]/4)
		}
	}
	c.Rope = decoder.RopeScaling{Type: decoder.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 64}
	got := c.InvFreq()
	var kept, divided, blended int
	for i, f := range got {
		wave := 2 * math.Pi / float64(def[i])
		switch {
		case wave < 16: // original / high
			kept++
			if f != def[i] {
				t.Errorf("llama3 %d (wavelength %.3g): %v, want it kept, %v", i, wave, f, def[i])
			}
		case wave > 64: // original / low
			divided++
			if f != def[i]/8 {
				t.Errorf("llama3 %d (wavelength %.3g): %v, want %v", i, wave, f, def[i]/8)
			}
		default:
			blended++
			s := (64/wave - 1) / 3
			want := (1-s)*float64(def[i])/8 + s*float64(def[i])
			if math.Abs(float64(f)-want) > want*1e-6 {
				t.Errorf("llama3 %d (wavelength %.3g): %v, want %v", i, wave, f, want)
			}
		}
	}
	if kept == 0 || divided == 0 || blended == 0 {
		t.Errorf("bands: %d kept, %d divided, %d blended; the test should cover all three", kept, divided, blended)
	}
	for name, r := range map[string]decoder.RopeScaling{
		"unknown":      {Type: "yarn", Factor: 2},
		"linear 0":     {Type: decoder.RopeLinear},
		"llama3 order": {Type: decoder.RopeLlama3, Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalMaxPos: 16},
		"llama3 ctx":   {Type: decoder.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4},
		"default args": {Type: decoder.RopeDefault, Factor: 2},
	} {
		cc := decoder.Small(tensor.Float32)
		cc.Rope = r
		if err := cc.Validate(1); !errors.Is(err, decoder.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestReferenceIncremental: the reference's KV cache makes a prefill of
// T tokens and T single steps give the same logits.
func TestReferenceIncremental(t *testing.T) {
	c := decoder.Small(tensor.Float32)
	ids, pos := []int32{5, 9, 2, 63}, []int32{0, 1, 2, 3}
	a, _ := decoder.NewRandomReference(c, seed)
	b, _ := decoder.NewRandomReference(c, seed)
	all, err := a.Step(ids, pos)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ids {
		one, err := b.Step(ids[i:i+1], pos[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range one[0] {
			if math.Abs(v-all[i][j]) > 1e-9 {
				t.Fatalf("token %d logit %d: step by step %v, prefill %v", i, j, v, all[i][j])
			}
		}
	}
	// The logits depend on the position and the history.
	c2, _ := decoder.NewRandomReference(c, seed)
	shifted, _ := c2.Step(ids[:1], []int32{1})
	if shifted[0][0] == all[0][0] {
		t.Error("the same token at positions 0 and 1 gives the same logits")
	}
}

// Tolerance is |got - want| <= atol + rtol·|want| on the logits, with
// atol relative to the largest reference logit (maxRef).
func tolerance(dt tensor.DType, maxRef float64) (rtol, atol float64) {
	switch dt {
	case tensor.Float16:
		return 1e-2, 1e-2 * maxRef
	case tensor.BFloat16:
		return 4e-2, 4e-2 * maxRef
	}
	return 2e-5, 2e-5 * maxRef
}

// run is one configuration of the end-to-end test.
type run struct {
	kind string // threaded or process
	n    int
	dt   tensor.DType
	norm string
	act  string
	// hf: the Hugging Face variants: head_dim apart from hidden/heads,
	// q/k/v biases, llama3 rotary scaling, the HF layout.
	hf bool
	// head is the LM head placement ("": the default); kv, if set, the
	// kv heads, and vocab the vocabulary (Small's otherwise).
	head      string
	kv, vocab int
}

// hfVariant is c with what Hugging Face checkpoints add: a head dim of 12
// (8 heads: 96 query features, hidden 64), q/k/v biases, llama3 rotary
// scaling whose low, blended and high bands all occur at head dim 12
// (original context 64), and [out, in] matrices.
func hfVariant(c decoder.Config) decoder.Config {
	c.HeadSize, c.QKVBias, c.Layout = 12, true, decoder.LayoutHF
	c.Rope = decoder.RopeScaling{Type: decoder.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 64}
	return c
}

func (r run) String() string {
	s := fmt.Sprintf("%s/%d/%s", r.kind, r.n, r.dt)
	if r.norm != "" {
		s += "/" + r.norm + "-" + r.act
	}
	if r.hf {
		s += "/hf-variant"
	}
	if r.head != "" {
		s += "/head-" + r.head
	}
	if r.kv != 0 {
		s += fmt.Sprintf("/kv%d", r.kv)
	}
	if r.vocab != 0 {
		s += fmt.Sprintf("/vocab%d", r.vocab)
	}
	return s
}

// config is the run's model.
func (r run) config() decoder.Config {
	c := decoder.Small(r.dt)
	c.Norm, c.Act, c.LMHead = r.norm, r.act, r.head
	if r.hf {
		c = hfVariant(c)
	}
	if r.kv != 0 {
		c.KVHeads = r.kv
	}
	if r.vocab != 0 {
		c.Vocab = r.vocab
	}
	return c
}

func newSession(t *testing.T, ctx context.Context, kind string, n int, ids []int) *session.Session {
	t.Helper()
	var s *session.Session
	var err error
	if kind == "threaded" {
		s, err = session.NewThreaded(session.Options{NumWorkers: n, DeviceIDs: ids})
	} else {
		s, err = session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: ids}})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// compare checks every worker's logits of a step against the reference's
// and returns the largest error relative to the largest logit.
func compare(t *testing.T, ctx context.Context, m *decoder.Model, st *decoder.Step, want [][]float64, what string) float64 {
	t.Helper()
	maxRef := 0.0
	for _, row := range want {
		for _, v := range row {
			maxRef = math.Max(maxRef, math.Abs(v))
		}
	}
	rtol, atol := tolerance(m.Config.DType, maxRef)
	worst := 0.0
	var first []float64
	for w := range m.Workers() {
		got, err := m.Logits(ctx, st, w)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want)*m.Config.Vocab {
			t.Fatalf("%s: worker %d: %d logits, want %d", what, w, len(got), len(want)*m.Config.Vocab)
		}
		for i, row := range want {
			for j, v := range row {
				g := got[i*m.Config.Vocab+j]
				e := math.Abs(g - v)
				worst = math.Max(worst, e/maxRef)
				if !(e <= atol+rtol*math.Abs(v)) {
					t.Fatalf("%s: worker %d token %d logit %d: %v, reference %v (rtol %g, atol %g)", what, w, i, j, g, v, rtol, atol)
				}
			}
		}
		// Every worker computes the same logits (the LM head is
		// replicated after the same all-reduced activations).
		if first == nil {
			first = got
		} else if fmt.Sprint(first) != fmt.Sprint(got) {
			t.Errorf("%s: worker %d's logits differ from worker 0's", what, w)
		}
	}
	return worst
}

// margin is the gap between the two largest values of a row.
func margin(row []float64) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range row {
		if v > a {
			a, b = v, a
		} else if v > b {
			b = v
		}
	}
	return a - b
}

// generate runs a prefill of 3 tokens and 4 decode steps on m and on the
// reference, feeding both the reference's greedy token, and checks the
// logits of every step on every worker and the greedy tokens. replay
// uses the captured decode graph.
func generate(t *testing.T, ctx context.Context, m *decoder.Model, replay bool) float64 {
	c := m.Config
	ref, err := decoder.NewRandomReference(c, seed)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{3, 17, 42}
	st, err := m.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Step(prompt, []int32{0, 1, 2})
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
		for i, row := range want {
			rtol, atol := tolerance(c.DType, 1)
			if toks[i] != int32(decoder.Argmax(row)) && margin(row) > 2*(atol+rtol) {
				t.Errorf("step %d token %d: greedy %d, reference %d (margin %g)", step, i, toks[i], decoder.Argmax(row), margin(row))
			}
		}
		st.Release()
		if step == 4 {
			break
		}
		next := int32(decoder.Argmax(want[len(want)-1]))
		if replay {
			st, err = m.ReplayDecode(ctx, next)
		} else {
			st, err = m.Decode(ctx, next)
		}
		if err != nil {
			t.Fatal(err)
		}
		if want, err = ref.Step([]int32{next}, []int32{int32(m.Pos() - 1)}); err != nil {
			t.Fatal(err)
		}
	}
	return worst
}

// TestDecoder runs the tensor-parallel decoder on 1, 2 and 4 CPU workers
// of threaded and process sessions against the float64 reference:
// a prefill of 3 tokens and 4 decode steps, logits of every step on
// every worker. The half types and the LayerNorm/GELU variant run on two
// threaded workers; the replicated LM head on 2; kv heads replicated (2
// over 4 workers, 4 over 8) with a split head padded past a vocabulary
// that 4 and 8 do not divide.
func TestDecoder(t *testing.T) {
	var runs []run
	for _, k := range []string{"threaded", "process"} {
		for _, n := range []int{1, 2, 4} {
			runs = append(runs, run{kind: k, n: n, dt: tensor.Float32})
		}
	}
	runs = append(runs, run{kind: "threaded", n: 2, dt: tensor.Float16}, run{kind: "threaded", n: 2, dt: tensor.BFloat16},
		run{kind: "threaded", n: 4, dt: tensor.Float32, norm: decoder.NormLayer, act: decoder.ActGELU},
		run{kind: "threaded", n: 1, dt: tensor.Float32, hf: true}, run{kind: "threaded", n: 2, dt: tensor.Float32, hf: true},
		run{kind: "threaded", n: 4, dt: tensor.Float32, hf: true},
		run{kind: "threaded", n: 2, dt: tensor.Float32, head: decoder.LMHeadReplicated},
		run{kind: "process", n: 4, dt: tensor.Float32, head: decoder.LMHeadSplit, hf: true, kv: 2, vocab: 62},
		run{kind: "threaded", n: 8, dt: tensor.Float16, kv: 4, vocab: 61})
	for _, r := range runs {
		t.Run(r.String(), func(t *testing.T) {
			leaktest.Check(t)
			ctx := bg(t)
			s := newSession(t, ctx, r.kind, r.n, nil)
			if r.n > 1 {
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
			}
			c := r.config()
			w, err := decoder.RandomWeights(ctx, s, c, seed)
			if err != nil {
				t.Fatal(err)
			}
			defer decoder.ReleaseWeights(w)
			m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{PrefillLen: 3}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			worst := generate(t, ctx, m, false)
			t.Logf("largest logit error / largest logit: %.2g", worst)
		})
	}
}

// TestPrefillLengths: prompts of lengths 1, 3, 8 and 13 (the model is
// compiled for 3 at Load; the others at first use) on 1, 2 and 4
// threaded workers, each followed by two decode steps, against the
// float64 reference; with a cache of two lengths, the least recently
// used is released and compiled again when it comes back.
func TestPrefillLengths(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			leaktest.Check(t)
			ctx := bg(t)
			s := newSession(t, ctx, "threaded", n, nil)
			if n > 1 {
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
			}
			c := decoder.Small(tensor.Float32)
			w, err := decoder.RandomWeights(ctx, s, c, seed)
			if err != nil {
				t.Fatal(err)
			}
			defer decoder.ReleaseWeights(w)
			m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{PrefillLen: 3, PrefillCache: 2}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			for _, tc := range []struct {
				len    int
				cached []int // PrefillLengths after the prompt
			}{{1, nil}, {3, nil}, {8, []int{8}}, {13, []int{8, 13}}, {8, []int{13, 8}}, {5, []int{8, 5}}, {13, []int{5, 13}}} {
				m.Reset()
				ref, err := decoder.NewRandomReference(c, seed)
				if err != nil {
					t.Fatal(err)
				}
				prompt, pos := make([]int32, tc.len), make([]int32, tc.len)
				for i := range prompt {
					prompt[i], pos[i] = int32((i*37+tc.len)%c.Vocab), int32(i)
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
					compare(t, ctx, m, st, want, fmt.Sprintf("prompt of %d, step %d", tc.len, step))
					st.Release()
					if step == 2 {
						break
					}
					next := int32(decoder.Argmax(want[len(want)-1]))
					if st, err = m.Decode(ctx, next); err != nil {
						t.Fatal(err)
					}
					if want, err = ref.Step([]int32{next}, []int32{int32(m.Pos() - 1)}); err != nil {
						t.Fatal(err)
					}
				}
				if got := m.PrefillLengths(); fmt.Sprint(got) != fmt.Sprint(tc.cached) && !(len(got) == 0 && len(tc.cached) == 0) {
					t.Errorf("after a prompt of %d: compiled lengths %v, want %v", tc.len, got, tc.cached)
				}
			}
			// A prompt in two chunks continues the cache: the second
			// chunk's logits are the last rows of the whole prompt's.
			m.Reset()
			ref, _ := decoder.NewRandomReference(c, seed)
			prompt, pos := make([]int32, 13), make([]int32, 13)
			for i := range prompt {
				prompt[i], pos[i] = int32((i*11+5)%c.Vocab), int32(i)
			}
			want, err := ref.Step(prompt, pos)
			if err != nil {
				t.Fatal(err)
			}
			st, err := m.Prefill(ctx, prompt[:8])
			if err != nil {
				t.Fatal(err)
			}
			st.Release()
			if st, err = m.Prefill(ctx, prompt[8:]); err != nil {
				t.Fatal(err)
			}
			compare(t, ctx, m, st, want[8:], "second chunk")
			st.Release()
		})
	}
}

func TestLoadAndStepErrors(t *testing.T) {
	leaktest.Check(t)
	ctx := bg(t)
	s := newSession(t, ctx, "threaded", 2, nil)
	if err := s.InitCCL(ctx, "cpu", 0); err != nil {
		t.Fatal(err)
	}
	c := decoder.Small(tensor.Float32)
	w, err := decoder.RandomWeights(ctx, s, c, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer decoder.ReleaseWeights(w)

	missing := map[string]*session.DRef{}
	for k, v := range w {
		if k != decoder.LayerParam(1, decoder.AttnWO) {
			missing[k] = v
		}
	}
	missing["layers.9.attn.wq"] = w[decoder.ParamEmbed]
	_, err = decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{}, missing)
	if !errors.Is(err, decoder.ErrWeights) || !strings.Contains(err.Error(), "layers.1.attn.wo") || !strings.Contains(err.Error(), "layers.9.attn.wq") {
		t.Errorf("missing and unknown weights: %v", err)
	}

	// A shard of the wrong shape fails at the first step, naming the
	// parameter.
	swapped := map[string]*session.DRef{}
	for k, v := range w {
		swapped[k] = v
	}
	swapped[decoder.LayerParam(0, decoder.AttnWQ)] = w[decoder.LayerParam(0, decoder.AttnWO)]
	m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{}, swapped)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Decode(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	st.Release()
	if err := s.Sync(ctx); err == nil || !strings.Contains(err.Error(), "layers.0.attn.wq") {
		t.Errorf("wrong shard shape: %v", err)
	}
	m.Release()

	m, err = decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{PrefillLen: 4}, w)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if _, err := m.Prefill(ctx, nil); !errors.Is(err, decoder.ErrSeq) {
		t.Errorf("empty prefill: %v", err)
	}
	if _, err := m.Prefill(ctx, make([]int32, c.MaxSeq+1)); !errors.Is(err, decoder.ErrSeq) {
		t.Errorf("prefill longer than the cache: %v", err)
	}
	if _, err := m.Prefill(ctx, []int32{1, int32(c.Vocab)}); !errors.Is(err, decoder.ErrSeq) {
		t.Errorf("prefill with a token outside the vocabulary: %v", err)
	}
	if len(m.PrefillLengths()) != 0 || m.Pos() != 0 {
		t.Errorf("refused prefills compiled %v, position %d", m.PrefillLengths(), m.Pos())
	}
	if _, err := m.Decode(ctx, int32(c.Vocab)); !errors.Is(err, decoder.ErrSeq) {
		t.Errorf("token outside the vocabulary: %v", err)
	}
	// Fill the cache, then one more step is refused before anything is
	// sent; Reset starts over.
	for range c.MaxSeq {
		st, err := m.Decode(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		st.Release()
	}
	if _, err := m.Decode(ctx, 1); !errors.Is(err, decoder.ErrSeq) {
		t.Errorf("step past the cache: %v", err)
	}
	m.Reset()
	g, err := m.Generate(ctx, []int32{1, 2, 3, 4}, 3, false)
	if err != nil || len(g.Tokens) != 4 || len(g.Steps) != 3 || m.Pos() != 7 {
		t.Errorf("generate after reset: %+v, %v, position %d", g, err, m.Pos())
	}
	// CPU workers cannot capture graphs.
	if err := m.CaptureDecode(ctx); err == nil {
		t.Error("CaptureDecode on CPU workers succeeded")
	}
	if err := s.Sync(ctx); err != nil {
		t.Logf("after the refused capture: %v", err)
	}
}

// TestDecoderGPU runs the decoder on GPUs (cuBLAS matmuls, the NVRTC
// decoder kernels, custom all-reduces): one worker, two and four workers
// (a GPU each over NCCL, or processes sharing GPUs through the "ipc"
// backend), float16, bfloat16 and float32 (four workers: float16 only),
// and float16 with weights in the HF layout ([out, in], matmul_nt),
// then a 13-token prompt (a @prefill compiled at first use) and every
// worker's peak memory; eagerly and then with the
// decode step captured as a CUDA graph and replayed with new ids and
// positions; logits of every step on every worker against the float64
// reference with the CPU tolerances.
func TestDecoderGPU(t *testing.T) {
	gpus := gpuCount(t)
	for _, n := range []int{1, 2, 4} {
		// Worker i on GPU i mod #GPUs: NCCL with a GPU each, else the
		// "ipc" backend (NCCL refuses two ranks on one GPU).
		ids, backend := make([]int, n), "nccl"
		for i := range ids {
			ids[i] = i % gpus
		}
		if gpus < n {
			backend = "ipc"
		}
		variants := []struct {
			dt     tensor.DType
			layout string
		}{{tensor.Float16, ""}, {tensor.BFloat16, ""}, {tensor.Float32, ""}, {tensor.Float16, decoder.LayoutHF}}
		if n == 4 {
			variants = []struct {
				dt     tensor.DType
				layout string
			}{{tensor.Float16, ""}, {tensor.Float16, decoder.LayoutHF}}
		}
		for _, v := range variants {
			dt := v.dt
			name := fmt.Sprintf("%d/%s", n, dt)
			if v.layout != "" {
				name += "/" + v.layout
			}
			t.Run(name, func(t *testing.T) {
				ctx := bg(t)
				s := newSession(t, ctx, "process", n, ids)
				if n > 1 {
					if err := s.InitCCL(ctx, backend, 0); err != nil {
						t.Fatal(err)
					}
				}
				c := decoder.Small(dt)
				c.Hidden, c.Heads, c.KVHeads, c.FFN, c.Vocab = 256, 4, max(2, n), 512, 300 // head dim 64
				c.Layout = v.layout                                                        // the HF layout runs every matrix through matmul_nt (cuBLAS op T)
				w, err := decoder.RandomWeights(ctx, s, c, seed)
				if err != nil {
					t.Fatal(err)
				}
				defer decoder.ReleaseWeights(w)
				m, err := decoder.Load(ctx, s, c, tensor.CUDADevice(0), decoder.Options{PrefillLen: 3, Strategy: "auto"}, w)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Release()
				eager := generate(t, ctx, m, false)
				m.Reset()
				graph := generate(t, ctx, m, true)
				t.Logf("largest logit error / largest logit: eager %.2g, graph %.2g", eager, graph)

				// A prompt of another length: @prefill compiled and loaded
				// (with its own IPC buffers) at first use.
				m.Reset()
				ref, _ := decoder.NewRandomReference(c, seed)
				prompt, pos := make([]int32, 13), make([]int32, 13)
				for i := range prompt {
					prompt[i], pos[i] = int32((i*37+1)%c.Vocab), int32(i)
				}
				want, err := ref.Step(prompt, pos)
				if err != nil {
					t.Fatal(err)
				}
				st, err := m.Prefill(ctx, prompt)
				if err != nil {
					t.Fatal(err)
				}
				compare(t, ctx, m, st, want, "prefill of 13")
				st.Release()

				mem, err := m.PeakMemory(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range mem {
					if !r.HasDevice || r.DevicePeakBytes <= 0 || (n > 1 && backend == "ipc" && r.IPCBytes <= 0) || r.HostPeakBytes <= 0 {
						t.Errorf("memory of worker %d: %+v", r.Worker, r)
					}
					t.Logf("worker %d: host peak %d B, GPU peak %d B + %d B IPC", r.Worker, r.HostPeakBytes, r.DevicePeakBytes, r.IPCBytes)
				}
			})
		}
	}
}

// gpuCount is the number of GPUs, or skips the test.
func gpuCount(t *testing.T) int {
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "cuInit: %v", err)
	}
	n, err := d.DeviceCount()
	if err != nil || n < 1 {
		gputest.Skipf(t, "no GPU: %d, %v", n, err)
	}
	return n
}

func TestConfigJSON(t *testing.T) {
	c := decoder.Small(tensor.BFloat16)
	c.Norm = decoder.NormLayer
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"dtype":"bfloat16"`) || !strings.Contains(string(b), `"activation":"silu"`) {
		t.Errorf("config JSON %s", b)
	}
	var back decoder.Config
	if err := json.Unmarshal(b, &back); err != nil || back.String() != c.String() {
		t.Errorf("round trip: %v, %v", back, err)
	}
	hf := hfVariant(decoder.Small(tensor.Float16))
	if b, err = json.Marshal(hf); err != nil {
		t.Fatal(err)
	}
	back = decoder.Config{}
	if err := json.Unmarshal(b, &back); err != nil || back.String() != hf.String() || back.Rope != hf.Rope {
		t.Errorf("round trip of %s: %+v, %v", b, back, err)
	}
	for _, bad := range []string{`{"vocab": 1, "hiden": 2}`, `{"dtype": "float8"}`, `[]`} {
		if err := json.Unmarshal([]byte(bad), &back); !errors.Is(err, decoder.ErrConfig) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// FuzzConfigJSON: decoding never panics, and what decodes and validates
// encodes to JSON that decodes to the same configuration.
func FuzzConfigJSON(f *testing.F) {
	b, _ := json.Marshal(decoder.Small(tensor.Float16))
	f.Add(string(b))
	f.Add(`{"vocab": -1, "dtype": "float32"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var c decoder.Config
		if json.Unmarshal([]byte(s), &c) != nil || c.Validate(1) != nil {
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var d decoder.Config
		if err := json.Unmarshal(b, &d); err != nil || d.String() != c.String() {
			t.Fatalf("%s -> %s -> %v, %v", s, b, d, err)
		}
	})
}

// TestAgainstPyTorch compares the decoder with bench/decoder_ref.py's
// output when CHORUS_DECODER_REF names it (the script run with --random
// SEED): the chorus decoder runs the script's prompt and feeds it the
// script's tokens on CHORUS_DECODER_WORKERS workers (default 1; GPUs when
// present, shared when there are fewer than the workers, else CPU
// workers over the cpu backend), and every
// step's last-row logits must match the script's within the tolerance of
// the dtype (the same as against the float64 reference).
func TestAgainstPyTorch(t *testing.T) {
	path := os.Getenv("CHORUS_DECODER_REF")
	if path == "" {
		t.Skip("CHORUS_DECODER_REF is not set (bench/decoder_ref.py --random SEED --out FILE)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Config json.RawMessage
		Seed   *uint64
		World  int
		Prompt []int32
		Tokens []int32
		Logits [][]float64
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if ref.Seed == nil {
		t.Skip("the reference ran on checkpoint files (--model); this test makes the random model (--random)")
	}
	var c decoder.Config
	if err := json.Unmarshal(ref.Config, &c); err != nil {
		t.Fatal(err)
	}
	n := 1
	if v := os.Getenv("CHORUS_DECODER_WORKERS"); v != "" {
		fmt.Sscan(v, &n)
	}
	ctx := bg(t)
	// GPUs when present: worker i on GPU i mod #GPUs, over NCCL with a GPU
	// each, else through the "ipc" backend (NCCL refuses two ranks on
	// one GPU). CHORUS_DECODER_DEVICE=cpu forces CPU workers.
	dev, ids, backend := tensor.CPUDevice, []int(nil), "cpu"
	if d, err := cuda.Load(); err == nil && d.Init() == nil && os.Getenv("CHORUS_DECODER_DEVICE") != "cpu" {
		if g, err := d.DeviceCount(); err == nil && g >= 1 {
			dev, backend = tensor.CUDADevice(0), "nccl"
			if g < n {
				backend = "ipc"
			}
			for i := range n {
				ids = append(ids, i%g)
			}
		}
	}
	s := newSession(t, ctx, "process", n, ids)
	if n > 1 {
		if err := s.InitCCL(ctx, backend, 0); err != nil {
			t.Fatal(err)
		}
	}
	w, err := decoder.RandomWeights(ctx, s, c, *ref.Seed)
	if err != nil {
		t.Fatal(err)
	}
	defer decoder.ReleaseWeights(w)
	m, err := decoder.Load(ctx, s, c, dev, decoder.Options{PrefillLen: len(ref.Prompt)}, w)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	st, err := m.Prefill(ctx, ref.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range ref.Logits {
		got, err := m.Logits(ctx, st, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = got[len(got)-c.Vocab:]
		maxRef := 0.0
		for _, v := range want {
			maxRef = math.Max(maxRef, math.Abs(v))
		}
		rtol, atol := tolerance(c.DType, maxRef)
		worst := 0.0
		for j, v := range want {
			e := math.Abs(got[j] - v)
			worst = math.Max(worst, e/maxRef)
			if !(e <= atol+rtol*math.Abs(v)) {
				t.Fatalf("step %d logit %d: chorus %v, PyTorch %v (rtol %g, atol %g)", i, j, got[j], v, rtol, atol)
			}
		}
		t.Logf("step %d: largest error / largest logit %.2g (chorus %d workers on %v, PyTorch world %d)", i, worst, n, dev, ref.World)
		st.Release()
		if i+1 < len(ref.Logits) {
			if st, err = m.Decode(ctx, ref.Tokens[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
}
