package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/chorus-rt/chorus/model/hf"
	"github.com/chorus-rt/chorus/model/shardload"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

const benchDecodeSynopsis = "chorus bench decode [--preset llama3-8b | --model DIR] [--layers N --hidden N --heads N --kv-heads N --head-dim N --ffn N --vocab N] [--workers 1 | --rank-of N] [--dtype bfloat16] [--batch 1] [--ctx 128,4096] [--steps 32] [--prefill 512] [--modes eager,graph] [--kernels gemv,cublas] [--lm-head replicated,split] [--launch 1000] [--shapes] [--anchor FILE.jsonl] [--json FILE]"

// rankShapes is the model one rank of c over n GPUs holds, as a model of
// its own (--rank-of): its share of the heads, kv heads, MLP and (split)
// LM head, the head size kept. Per step it reads what that rank reads
// (TestDecodeRankShapes); the all-reduces are what it leaves out.
func rankShapes(c decoder.Config, n int) (decoder.Config, error) {
	if n < 1 {
		return c, fmt.Errorf("--rank-of %d: at least 1", n)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"heads", c.Heads}, {"kv heads", c.KVHeads}, {"ffn", c.FFN}, {"vocab", c.Vocab}} {
		if f.v%n != 0 {
			return c, fmt.Errorf("--rank-of %d: %s %d is not a multiple of %d", n, f.name, f.v, n)
		}
	}
	c.HeadSize = c.HeadDim()
	c.Heads, c.KVHeads, c.FFN, c.Vocab = c.Heads/n, c.KVHeads/n, c.FFN/n, c.Vocab/n
	return c, nil
}

// decodePresets are model shapes by name (--preset).
var decodePresets = map[string]decoder.Config{
	// Llama-3-8B: 32 layers, hidden 4096, 32 heads over 8 kv heads, ffn
	// 14336, vocab 128256, rope theta 500000.
	"llama3-8b": {Vocab: 128256, Hidden: 4096, Layers: 32, Heads: 32, KVHeads: 8, FFN: 14336, NormEps: 1e-5, RopeTheta: 500000},
}

// decodeRow is one JSON line of chorus bench decode.
type decodeRow struct {
	Bench   string `json:"bench"` // "decode"
	What    string `json:"what"`  // bound, gemm, decode, prefill, launch, shape, anchor
	Device  string `json:"device,omitempty"`
	Workers int    `json:"workers,omitempty"`
	DType   string `json:"dtype,omitempty"`
	Config  string `json:"config,omitempty"`
	Mode    string `json:"mode,omitempty"`    // eager, graph (decode); torch-eager, ... (anchor)
	Kernels string `json:"kernels,omitempty"` // gemv (skinny-matrix kernels for a few rows) or cublas
	LMHead  string `json:"lm_head,omitempty"` // replicated or split (by vocabulary)
	Batch   int    `json:"batch,omitempty"`
	Ctx     int    `json:"ctx,omitempty"`
	Tokens  int    `json:"tokens,omitempty"` // prefill length

	MS         float64 `json:"ms,omitempty"`
	TokensPerS float64 `json:"tokens_per_s,omitempty"`
	GBPerStep  float64 `json:"gb_per_step,omitempty"` // per GPU: weights + KV cache read
	GBs        float64 `json:"gbs,omitempty"`
	OfBound    float64 `json:"of_bound,omitempty"` // GB/s over the streaming bound
	TFLOPs     float64 `json:"tflops,omitempty"`
	OfPeak     float64 `json:"of_gemm_peak,omitempty"`
	HostMS     float64 `json:"host_ms_per_step,omitempty"` // VM issue time per step (eager)
	HostOps    float64 `json:"ops_per_step,omitempty"`
	Fused      int     `json:"fused,omitempty"` // instructions the VM fused at load
	Fixed      int     `json:"fixed,omitempty"` // instructions whose fixed operands (weights, cache rows) are read before the PDL wait

	BoundGBs   float64 `json:"bound_gbs,omitempty"`
	GemmTFLOPs float64 `json:"gemm_tflops,omitempty"`

	// launch: ns per empty-kernel launch
	RawNS, IssueNS, WallNS, GraphNS float64 `json:",omitempty"`
	// shape: x[m,k]·w[n,k]ᵀ
	M, N, K int     `json:",omitempty"`
	US      float64 `json:"us,omitempty"`
}

func benchDecode(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("bench decode", benchDecodeSynopsis, out)
	preset := fs.String("preset", "", "model shapes by name: llama3-8b (explicit size flags override it)")
	layers := fs.Int("layers", 8, "decoder layers")
	hidden := fs.Int("hidden", 4096, "hidden size")
	heads := fs.Int("heads", 32, "attention heads")
	kvHeads := fs.Int("kv-heads", 8, "key/value heads")
	headDim := fs.Int("head-dim", 0, "head dimension (0: hidden / heads); with --heads and --kv-heads, e.g. one rank's shapes of a tensor-parallel model on one GPU")
	ffn := fs.Int("ffn", 14336, "MLP inner size")
	vocab := fs.Int("vocab", 32000, "vocabulary size")
	n := fs.Int("workers", 1, "tensor-parallel workers, one process per GPU")
	rankOf := fs.Int("rank-of", 1, "time on one GPU what one rank of a tensor-parallel model over N GPUs reads and computes (its heads, kv heads, MLP and LM head split N ways; no all-reduces)")
	dtype := fs.String("dtype", "bfloat16", "bfloat16 or float16")
	batches := fs.String("batch", "1", "sequences decoded together per step (comma-separated; up to vm.GemvMaxM run the skinny-matrix kernels); the prefill row is batch 1")
	ctxs := fs.String("ctx", "128,4096", "context lengths (comma-separated): tokens in the KV cache when the timed steps start")
	steps := fs.Int("steps", 32, "timed decode steps per row")
	warmup := fs.Int("warmup", 4, "untimed steps before them")
	prefill := fs.Int("prefill", 512, "prompt length of the prefill row (0: none)")
	modes := fs.String("modes", "eager,graph", "eager (a VM call per step), graph (a CUDA graph replay per step)")
	kernels := fs.String("kernels", "gemv", "matrix paths for decode rows: gemv (the default: CUDA-core skinny kernels for 1 row, tensor-core ones for every product at 2-8 and for q/k/v and small weights at 9-16, cuBLAS for the rest), cublas (cuBLAS for every product)")
	launches := fs.Int("launch", 1000, "launch-cost rows: this many empty kernels back to back (0: none)")
	shapes := fs.Bool("shapes", false, "per-shape rows: every projection of a worker through cuBLAS and the skinny-matrix kernels at 1, 2, 4, 8, 16 and 32 rows")
	streamBytes := fs.Int64("stream-bytes", 2<<30, "buffer of the streaming-read bound (much larger than L2)")
	gemmN := fs.Int64("gemm", 8192, "size of the cuBLAS n×n×n product of the GEMM peak")
	anchor := fs.String("anchor", "", "JSON lines of bench/decoder_ref.py --bench-decode (PyTorch anchors of the same shapes), printed next to chorus's rows")
	jsonOut := fs.String("json", "", "also write every row as a JSON line to this file (must not exist)")
	seed := fs.Int64("seed", 1, "seed of the random weights")
	modelDir := fs.String("model", "", "a Hugging Face folder (model/hf) to time instead of random weights of the given shapes")
	kind := fs.String("session", "process", "session kind: process (one process per rank) or threaded (workers are goroutines of this process, so a profiler that follows one process, such as ncu, sees every kernel)")
	lmHeads := fs.String("lm-head", decoder.DefaultLMHead, "LM head placements (comma-separated): replicated (every worker all of it), split (by vocabulary, the logits gathered)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkSession("bench decode", *kind); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c := decoder.Config{Vocab: *vocab, Hidden: *hidden, Layers: *layers, Heads: *heads, KVHeads: *kvHeads, HeadSize: *headDim, FFN: *ffn, NormEps: 1e-5, RopeTheta: 500000}
	if *preset != "" {
		p, ok := decodePresets[*preset]
		if !ok {
			return usageError{fmt.Sprintf("bench decode: --preset %q (llama3-8b)", *preset)}
		}
		sizes := []struct {
			flag     string
			dst, val *int
		}{{"layers", &p.Layers, layers}, {"hidden", &p.Hidden, hidden}, {"heads", &p.Heads, heads}, {"kv-heads", &p.KVHeads, kvHeads}, {"head-dim", &p.HeadSize, headDim}, {"ffn", &p.FFN, ffn}, {"vocab", &p.Vocab, vocab}}
		for _, f := range sizes {
			if set[f.flag] {
				*f.dst = *f.val
			}
		}
		c = p
	}
	c.Layout = decoder.LayoutHF
	dt, err := tensor.ParseDType(*dtype)
	if err != nil || (dt != tensor.BFloat16 && dt != tensor.Float16) {
		return usageError{fmt.Sprintf("bench decode: --dtype %q (bfloat16 or float16)", *dtype)}
	}
	c.DType = dt
	bs, err := parseInts(*batches)
	if err != nil {
		return usageError{"bench decode: --batch: " + err.Error()}
	}
	for _, b := range bs {
		if b < 1 {
			return usageError{fmt.Sprintf("bench decode: --batch %d: at least 1", b)}
		}
	}
	cs, err := parseInts(*ctxs)
	if err != nil {
		return usageError{"bench decode: --ctx: " + err.Error()}
	}
	if *steps < 1 || *warmup < 0 || *prefill < 0 || *launches < 0 {
		return usageError{"bench decode: need --steps >= 1, --warmup >= 0, --prefill >= 0, --launch >= 0"}
	}
	ms := strings.Split(*modes, ",")
	for _, m := range ms {
		if m != "eager" && m != "graph" {
			return usageError{fmt.Sprintf("bench decode: --modes: %q (eager, graph)", m)}
		}
	}
	ks := strings.Split(*kernels, ",")
	for _, k := range ks {
		if k != "gemv" && k != "cublas" {
			return usageError{fmt.Sprintf("bench decode: --kernels: %q (gemv, cublas)", k)}
		}
	}
	lmHeadList := strings.Split(*lmHeads, ",")
	for _, h := range lmHeadList {
		if h != decoder.LMHeadReplicated && h != decoder.LMHeadSplit {
			return usageError{fmt.Sprintf("bench decode: --lm-head: %q (%s, %s)", h, decoder.LMHeadReplicated, decoder.LMHeadSplit)}
		}
	}
	if *rankOf != 1 && (*modelDir != "" || *n != 1 || slices.Contains(lmHeadList, decoder.LMHeadReplicated)) {
		return usageError{"bench decode: --rank-of: random weights on one worker (no --model, --workers 1) with --lm-head split"}
	}
	c.MaxSeq = max(slices.Max(cs)+*warmup+*steps+1, *prefill, 1)
	var ck *hf.Checkpoint
	if *modelDir != "" {
		for _, f := range []string{"preset", "layers", "hidden", "heads", "kv-heads", "head-dim", "ffn", "vocab", "seed"} {
			if set[f] {
				return usageError{fmt.Sprintf("bench decode: --%s and --model: the folder's config gives the shapes and weights", f)}
			}
		}
		if ck, err = hf.Open(*modelDir, hf.Options{Workers: *n, MaxSeq: c.MaxSeq, DType: dt}); err != nil {
			return fmt.Errorf("bench decode: --model: %w", err)
		}
		c = ck.Decoder
	}
	if *rankOf != 1 {
		if c, err = rankShapes(c, *rankOf); err != nil {
			return usageError{"bench decode: " + err.Error()}
		}
	}
	if err := c.Validate(*n); err != nil {
		return usageError{"bench decode: " + err.Error()}
	}
	var anchors []decodeRow
	if *anchor != "" {
		if anchors, err = readDecodeAnchors(*anchor); err != nil {
			return err
		}
	}
	var jw io.Writer
	if *jsonOut != "" {
		f, err := os.OpenFile(*jsonOut, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("bench decode: --json: %w", err)
		}
		defer f.Close()
		jw = f
	}
	gpus := gpuCount()
	if gpus == 0 {
		return fmt.Errorf("bench decode: needs a GPU, and the CUDA driver sees none")
	}
	b := &decodeBench{c: c, ck: ck, n: *n, out: out, jw: jw, device: gpuName(), anchors: anchors}
	ids := make([]int, *n)
	for i := range ids {
		ids[i] = i % gpus
	}
	var s *session.Session
	if *kind == "threaded" {
		s, err = session.NewThreaded(session.Options{NumWorkers: *n, DeviceIDs: ids})
	} else {
		po := processOptions("shm")
		po.NumWorkers, po.DeviceIDs = *n, ids
		s, err = session.NewProcess(ctx, po)
	}
	if err != nil {
		return err
	}
	b.s = s
	rerr := func() error {
		if *n > 1 {
			backend := "nccl"
			if gpus < *n {
				backend = "ipc"
			}
			if err := s.InitCCL(ctx, backend, 0); err != nil {
				return err
			}
		}
		if err := b.bounds(ctx, *streamBytes, *gemmN); err != nil {
			return err
		}
		if *launches > 0 {
			if err := b.launchCost(ctx, *launches); err != nil {
				return err
			}
		}
		if *shapes {
			if err := b.shapes(ctx); err != nil {
				return err
			}
		}
		for _, h := range lmHeadList {
			b.c.LMHead = h
			if ck != nil {
				if b.ck, err = hf.Open(*modelDir, hf.Options{Workers: *n, MaxSeq: c.MaxSeq, DType: dt, LMHead: h}); err != nil {
					return fmt.Errorf("--model: %w", err)
				}
				b.c = b.ck.Decoder
			}
			fmt.Fprintf(b.out, "# LM head: %s\n", h)
			if err := b.model(ctx, *seed, bs, cs, ms, ks, *warmup, *steps, *prefill); err != nil {
				return err
			}
		}
		return nil
	}()
	if rerr != nil {
		rerr = fmt.Errorf("bench decode: %w", rerr)
	}
	return errors.Join(rerr, s.Shutdown())
}

// decodeBench holds one run's session, model shape and results.
type decodeBench struct {
	s       *session.Session
	c       decoder.Config
	ck      *hf.Checkpoint // --model, else nil: random weights
	n       int
	out, jw io.Writer
	device  string
	bound   float64 // GB/s, streaming read
	peak    float64 // TFLOP/s, cuBLAS
	anchors []decodeRow
}

func gpuName() string {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		return "unknown GPU"
	}
	dev, err := d.DeviceGet(0)
	if err != nil {
		return "unknown GPU"
	}
	name, err := d.DeviceName(dev)
	if err != nil {
		return "unknown GPU"
	}
	return name
}

func (b *decodeBench) emit(r decodeRow) error {
	r.Bench, r.Device, r.Workers, r.DType = "decode", b.device, b.n, b.c.DType.String()
	if b.jw == nil {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(b.jw, "%s\n", line)
	return err
}

// call runs worker function name with args on every worker and returns
// worker 0's float64 results.
func (b *decodeBench) call(ctx context.Context, name string, args ...any) ([]float64, error) {
	f, err := b.s.GetGlobalFunc(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	r, err := b.s.CallPacked(f, args...)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	v, err := b.s.DebugGetFromRemote(ctx, r, 0)
	if err != nil {
		return nil, err
	}
	t, ok := v.(*tensor.Tensor)
	if !ok {
		return nil, fmt.Errorf("%s returned a %T", name, v)
	}
	return tensor.ToFloat64(t)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// bounds measures the streaming-read bandwidth and the GEMM peak on
// every worker's GPU (worker 0's are the bounds).
func (b *decodeBench) bounds(ctx context.Context, streamBytes, gemmN int64) error {
	gbs, err := b.call(ctx, vm.BenchStreamFunc, streamBytes, 20)
	if err != nil {
		return fmt.Errorf("streaming bound: %w", err)
	}
	b.bound = median(gbs)
	tf, err := b.call(ctx, vm.BenchGemmFunc, gemmN, b.c.DType, 10)
	if err != nil {
		return fmt.Errorf("GEMM peak: %w", err)
	}
	b.peak = median(tf)
	fmt.Fprintf(b.out, "# %s, %d worker(s); model: %v\n", b.device, b.n, b.c)
	fmt.Fprintf(b.out, "# bound: read-only streaming kernel over %d MiB, 16-byte loads: %.0f GB/s (median of %d; best %.0f); cuBLAS %d^3 %s: %.0f TFLOP/s (median of %d)\n",
		streamBytes>>20, b.bound, len(gbs), slices.Max(gbs), gemmN, b.c.DType, b.peak, len(tf))
	return b.emit(decodeRow{What: "bound", BoundGBs: b.bound, GemmTFLOPs: b.peak})
}

func (b *decodeBench) launchCost(ctx context.Context, n int) error {
	v, err := b.call(ctx, vm.BenchLaunchFunc, n)
	if err != nil {
		return fmt.Errorf("launch cost: %w", err)
	}
	fmt.Fprintf(b.out, "# launch of an empty kernel, %d back to back: driver call %.2f us, through device.Do %.2f us issued / %.2f us until done; in a CUDA graph %.2f us per kernel\n",
		n, v[0]/1e3, v[1]/1e3, v[2]/1e3, v[3]/1e3)
	return b.emit(decodeRow{What: "launch", RawNS: v[0], IssueNS: v[1], WallNS: v[2], GraphNS: v[3]})
}

// projections are a worker's distinct weight shapes [n, k] by name.
func (b *decodeBench) projections() []struct {
	name string
	n, k int
} {
	c, w := b.c, b.n
	d := c.HeadDim()
	return []struct {
		name string
		n, k int
	}{
		{"q", c.Heads / w * d, c.Hidden}, {"k,v", c.KVHeads / w * d, c.Hidden}, {"o", c.Hidden, c.Heads / w * d},
		{"gate,up", c.FFN / w, c.Hidden}, {"down", c.Hidden, c.FFN / w}, {"lm_head", c.Vocab, c.Hidden},
	}
}

func (b *decodeBench) shapes(ctx context.Context) error {
	fmt.Fprintf(b.out, "%-8s %4s %7s %6s %10s %10s %8s %10s %8s %10s\n", "weight", "m", "n", "k", "cublas_us", "GB/s", "of_bound", "gemv_us", "of_bound", "gated_us")
	es := float64(b.c.DType.Size())
	var sweep []string
	for _, p := range b.projections() {
		for _, m := range []int{1, 2, 4, 8, 16, 32} {
			var rowKS func(path string, ks int) (float64, error)
			row := func(path string) (float64, error) {
				return rowKS(path, 0)
			}
			rowKS = func(path string, ks int) (float64, error) {
				v, err := b.call(ctx, vm.BenchMatmulNTFunc, int64(m), int64(p.n), int64(p.k), b.c.DType, 20, path, ks)
				if err != nil {
					return 0, fmt.Errorf("%s %d×%d×%d through %s: %w", p.name, m, p.k, p.n, path, err)
				}
				return median(v), nil
			}
			gb := (float64(p.n)*float64(p.k) + float64(m)*float64(p.k+p.n)) * es / 1e9
			blas, err := row("cublas")
			if err != nil {
				return err
			}
			line := fmt.Sprintf("%-8s %4d %7d %6d %10.1f %10.0f %8.2f", p.name, m, p.n, p.k, blas, gb/blas*1e6, gb/blas*1e6/b.bound)
			if err := b.emit(decodeRow{What: "shape", Mode: p.name, Kernels: "cublas", M: m, N: p.n, K: p.k, US: blas, GBs: gb / blas * 1e6, OfBound: gb / blas * 1e6 / b.bound}); err != nil {
				return err
			}
			if m <= vm.GemvMaxM {
				g, err := row("gemv")
				if err != nil {
					return err
				}
				line += fmt.Sprintf(" %10.1f %8.2f", g, gb/g*1e6/b.bound)
				if err := b.emit(decodeRow{What: "shape", Mode: p.name, Kernels: "gemv", M: m, N: p.n, K: p.k, US: g, GBs: gb / g * 1e6, OfBound: gb / g * 1e6 / b.bound}); err != nil {
					return err
				}
				if p.name == "gate,up" {
					gd, err := row("gated")
					if err != nil {
						return err
					}
					line += fmt.Sprintf(" %10.1f", gd)
					if err := b.emit(decodeRow{What: "shape", Mode: p.name, Kernels: "gated", M: m, N: p.n, K: p.k, US: gd, GBs: 2 * gb / gd * 1e6, OfBound: 2 * gb / gd * 1e6 / b.bound}); err != nil {
						return err
					}
				}
			}
			fmt.Fprintln(b.out, line)
			if m == 1 {
				sl := fmt.Sprintf("# %-8s m=1 gemv us by warps per row:", p.name)
				for _, ks := range []int{1, 2, 4, 8} {
					us, err := rowKS("gemv", ks)
					if err != nil {
						return err
					}
					sl += fmt.Sprintf(" ks%d %.1f", ks, us)
				}
				us, err := row("tc")
				if err != nil {
					return err
				}
				sweep = append(sweep, sl+fmt.Sprintf("; tensor-core kernel %.1f", us))
			}
			if m == 8 || m == 16 || m == 32 {
				sl := fmt.Sprintf("# %-8s m=%d tensor-core us by splits of k:", p.name, m)
				for _, sp := range []int{1, 2, 4, 8, 16} {
					us, err := rowKS("tc", sp)
					if err != nil {
						return err
					}
					sl += fmt.Sprintf(" s%d %.1f", sp, us)
				}
				sweep = append(sweep, sl)
			}
		}
	}
	for _, l := range sweep {
		fmt.Fprintln(b.out, l)
	}
	return nil
}

// stepBytes is what one decode step of batch sequences reads on one
// worker at position pos (the token's own row included): every weight
// shard once (the embedding one row a sequence), and every sequence's KV
// cache rows 0..pos of every layer.
func (b *decodeBench) stepBytes(pos, batch int) float64 {
	es := float64(b.c.DType.Size())
	var w float64
	for _, p := range b.c.Params() {
		s := p.ShardShape(b.n)
		k, _ := s.NumElements()
		if p.Name == decoder.ParamEmbed {
			k = s[1] * int64(batch)
		}
		w += float64(k)
	}
	kv := float64(batch) * float64(b.c.Layers) * float64(pos+1) * float64(b.c.KVHeads/b.n*b.c.HeadDim()) * 2
	return (w + kv) * es
}

// prefillFLOPs is one prefill of t tokens on one worker: the products
// (2 per weight per token; the LM head for every row) and causal
// attention (q·k and p·v over rows 0..i for token i).
func (b *decodeBench) prefillFLOPs(t int) float64 {
	var w float64
	for _, p := range b.c.Params() {
		if len(p.Shape) == 2 && p.Name != decoder.ParamEmbed {
			s := p.ShardShape(b.n)
			k, _ := s.NumElements()
			w += float64(k)
		}
	}
	att := 4 * float64(b.c.Layers) * float64(b.c.Heads/b.n*b.c.HeadDim()) * float64(t) * float64(t+1) / 2
	return 2*w*float64(t) + att
}

// randomWeights makes every worker's shards on its GPU, filled there:
// norms near 1, matrices uniform within ±1/sqrt(fan-in), the embedding
// within ±1.
func (b *decodeBench) randomWeights(ctx context.Context, seed int64) (map[string]*session.DRef, error) {
	empty, err := b.s.GetGlobalFunc(ctx, "chorus.empty")
	if err != nil {
		return nil, err
	}
	defer empty.Release()
	fill, err := b.s.GetGlobalFunc(ctx, vm.FillUniformFunc)
	if err != nil {
		return nil, err
	}
	defer fill.Release()
	w := map[string]*session.DRef{}
	for i, p := range b.c.Params() {
		r, err := b.s.CallPacked(empty, p.ShardShape(b.n), b.c.DType, nil, false, false)
		if err != nil {
			decoder.ReleaseWeights(w)
			return nil, err
		}
		w[p.Name] = r
		lo, hi := -1.0, 1.0
		switch {
		case strings.HasSuffix(p.Name, ".weight"):
			lo, hi = 0.9, 1.1
		case strings.HasSuffix(p.Name, ".bias"):
			lo, hi = -0.1, 0.1
		case len(p.Shape) == 2 && p.Name != decoder.ParamEmbed:
			in := p.Canonical().Shape[0]
			hi = 1 / math.Sqrt(float64(in))
			lo = -hi
		}
		if err := b.s.CallPackedDiscard(fill, r, seed*1000003+int64(i), lo, hi); err != nil {
			decoder.ReleaseWeights(w)
			return nil, err
		}
	}
	if err := b.s.Sync(ctx); err != nil {
		decoder.ReleaseWeights(w)
		return nil, fmt.Errorf("random weights: %w", err)
	}
	return w, nil
}

// setGemv switches every worker's products between the skinny-matrix
// kernels and cuBLAS.
func (b *decodeBench) setGemv(ctx context.Context, kernels string) error {
	f, err := b.s.GetGlobalFunc(ctx, vm.GemvFunc)
	if err != nil {
		return err
	}
	defer f.Release()
	rows := vm.GemvDefaultRows
	if kernels == "cublas" {
		rows = 0
	}
	if err := b.s.CallPackedDiscard(f, rows); err != nil {
		return err
	}
	return b.s.Sync(ctx)
}

// fillTo resets the model and prefills ctx tokens of every sequence (in
// prompts of at most chunk tokens in all), so the next step runs at
// position ctx. It waits for each prompt (s.Sync): a long context in a
// batch queues seconds of prefill, and one wait for all of it would
// trip the session's hang report (a batch of 32 at context 4096 took
// over 10 s on an H200).
func fillTo(ctx context.Context, s *session.Session, m *decoder.Model, n, chunk int) error {
	m.Reset()
	if chunk <= 0 {
		chunk = 512
	}
	batch := max(m.Opts.Batch, 1)
	chunk = max(chunk/batch, 1)
	for m.Pos() < n {
		t := min(chunk, n-m.Pos())
		ids := make([]int32, t*batch)
		for i := range ids {
			ids[i] = int32((m.Pos() + i%t + i/t) * 7919 % m.Config.Vocab)
		}
		st, err := m.Prefill(ctx, ids)
		if err != nil {
			return err
		}
		st.Release()
		if err := s.Sync(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (b *decodeBench) model(ctx context.Context, seed int64, batches, ctxs []int, modes, kernels []string, warmup, steps, prefill int) error {
	t0 := time.Now()
	var w map[string]*session.DRef
	var err error
	what := "random weights on the workers"
	if b.ck != nil {
		what = "weights of " + b.ck.Dir
		w, _, err = hf.LoadWeights(ctx, b.s, b.ck, shardload.Options{})
	} else {
		w, err = b.randomWeights(ctx, seed)
	}
	if err != nil {
		return err
	}
	defer decoder.ReleaseWeights(w)
	batch := batches[0]
	load := func() (*decoder.Model, error) {
		// A batch fills its caches in prompts of prefill/batch tokens a
		// sequence (fillTo), compiled at first use.
		pl := prefill
		if batch > 1 {
			pl = 0
		}
		return decoder.Load(ctx, b.s, b.c, tensor.CUDADevice(0), decoder.Options{PrefillLen: pl, Strategy: "auto", Batch: batch}, w)
	}
	m, err := load()
	if err != nil {
		return err
	}
	defer func() { m.Release() }()
	fmt.Fprintf(b.out, "# %s and the model loaded in %v; per GPU a step reads %.2f GB of weights\n", what, time.Since(t0).Round(time.Millisecond), b.stepBytes(-1, 1)/1e9)
	fmt.Fprintf(b.out, "%-8s %-7s %5s %6s %9s %9s %8s %8s %8s %9s %8s %5s %5s\n", "mode", "kernels", "batch", "ctx", "ms/step", "tokens/s", "GB/step", "GB/s", "of_bound", "host_ms", "ops", "fused", "fixed")
	for bi, bt := range batches {
		for i, k := range kernels {
			if err := b.setGemv(ctx, k); err != nil {
				return err
			}
			if i > 0 || bi > 0 {
				// A model captures its decode graph once, and has the caches
				// of its batch: a fresh one, so the graph rows run this path's
				// kernels.
				m.Release()
				batch = bt
				if m, err = load(); err != nil {
					return err
				}
			}
			ids := make([]int32, bt)
			for j := range ids {
				ids[j] = 1
			}
			for _, cx := range ctxs {
				for _, mode := range modes {
					if err := fillTo(ctx, b.s, m, cx, prefill); err != nil {
						return err
					}
					if mode == "graph" {
						if err := m.CaptureDecode(ctx); err != nil {
							return err
						}
					}
					step := func() error {
						var st *decoder.Step
						var err error
						if mode == "graph" {
							st, err = m.ReplayDecodeBatch(ctx, ids)
						} else {
							st, err = m.DecodeBatch(ctx, ids)
						}
						if err == nil {
							st.Release()
						}
						return err
					}
					for range warmup {
						if err := step(); err != nil {
							return err
						}
					}
					if err := b.s.Sync(ctx); err != nil {
						return err
					}
					if _, err := m.Program.RunStats(ctx); err != nil {
						return err
					}
					p0 := m.Pos()
					t0 := time.Now()
					for range steps {
						if err := step(); err != nil {
							return err
						}
					}
					if err := b.s.Sync(ctx); err != nil {
						return err
					}
					el := time.Since(t0)
					rs, err := m.Program.RunStats(ctx)
					if err != nil {
						return err
					}
					perStep := el.Seconds() / float64(steps)
					var gb float64
					for p := p0; p < p0+steps; p++ {
						gb += b.stepBytes(p, bt)
					}
					gb /= float64(steps) * 1e9
					r := decodeRow{What: "decode", Config: b.c.String(), Mode: mode, Kernels: k, LMHead: b.c.LMHeadMode(), Batch: bt, Ctx: cx,
						MS: perStep * 1e3, TokensPerS: float64(bt) / perStep, GBPerStep: gb, GBs: gb / perStep, OfBound: gb / perStep / b.bound}
					r.Fused, r.Fixed = rs[0].Fused, rs[0].Fixed
					if mode == "eager" && rs[0].Calls > 0 {
						r.HostMS = rs[0].Host.Seconds() * 1e3 / float64(rs[0].Calls)
						r.HostOps = float64(rs[0].Ops) / float64(rs[0].Calls)
					}
					fmt.Fprintf(b.out, "%-8s %-7s %5d %6d %9.3f %9.1f %8.2f %8.0f %8.2f %9.3f %8.0f %5d %5d\n", mode, k, bt, cx, r.MS, r.TokensPerS, gb, r.GBs, r.OfBound, r.HostMS, r.HostOps, r.Fused, r.Fixed)
					if err := b.emit(r); err != nil {
						return err
					}
				}
			}
		}
	}
	if prefill > 0 {
		if err := b.setGemv(ctx, kernels[0]); err != nil {
			return err
		}
		if batch != 1 {
			m.Release()
			batch = 1
			if m, err = load(); err != nil {
				return err
			}
		}
		ids := make([]int32, prefill)
		for i := range ids {
			ids[i] = int32(i * 7919 % b.c.Vocab)
		}
		run := func() error {
			m.Reset()
			st, err := m.Prefill(ctx, ids)
			if err != nil {
				return err
			}
			st.Release()
			return nil
		}
		if err := run(); err != nil {
			return err
		}
		if err := b.s.Sync(ctx); err != nil {
			return err
		}
		const reps = 5
		t0 := time.Now()
		for range reps {
			if err := run(); err != nil {
				return err
			}
		}
		if err := b.s.Sync(ctx); err != nil {
			return err
		}
		per := time.Since(t0).Seconds() / reps
		tf := b.prefillFLOPs(prefill) / per / 1e12
		fmt.Fprintf(b.out, "# prefill of %d tokens (eager, cuBLAS): %.2f ms, %.0f tokens/s, %.0f TFLOP/s per GPU = %.2f of the GEMM peak\n", prefill, per*1e3, float64(prefill)/per, tf, tf/b.peak)
		if err := b.emit(decodeRow{What: "prefill", Config: b.c.String(), Mode: "eager", Batch: 1, Tokens: prefill, MS: per * 1e3, TokensPerS: float64(prefill) / per, TFLOPs: tf, OfPeak: tf / b.peak}); err != nil {
			return err
		}
	}
	return b.printAnchors()
}

// readDecodeAnchors reads the JSON lines bench/decoder_ref.py
// --bench-decode prints (other lines are skipped).
func readDecodeAnchors(path string) ([]decodeRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench decode: --anchor: %w", err)
	}
	defer f.Close()
	var rows []decodeRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		// decoder_ref.py's lines carry more than a decodeRow (its config
		// as an object): only these fields are read.
		var a struct {
			What, Mode, Device, DType string
			Batch, Ctx                int
			MS                        float64
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil || a.What != "anchor" {
			continue
		}
		r := decodeRow{What: "anchor", Mode: a.Mode, Batch: a.Batch, Ctx: a.Ctx, MS: a.MS}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench decode: --anchor %s: %w", path, err)
	}
	return rows, nil
}

func (b *decodeBench) printAnchors() error {
	if len(b.anchors) == 0 {
		return nil
	}
	fmt.Fprintf(b.out, "# anchors (PyTorch, same shapes and dtype, from --anchor)\n%-16s %5s %6s %9s %8s\n", "anchor", "batch", "ctx", "ms/step", "of_bound")
	for _, a := range b.anchors {
		if a.MS <= 0 {
			continue
		}
		of := 0.0
		if a.Ctx > 0 {
			of = b.stepBytes(a.Ctx, max(a.Batch, 1)) / 1e9 / (a.MS / 1e3) / b.bound
		}
		fmt.Fprintf(b.out, "%-16s %5d %6d %9.3f %8.2f\n", a.Mode, a.Batch, a.Ctx, a.MS, of)
		a.OfBound = of
		if err := b.emit(a); err != nil {
			return err
		}
	}
	return nil
}
