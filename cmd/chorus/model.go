package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/hf"
	"github.com/chorus-rt/chorus/model/shardload"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

const modelSynopsis = "chorus model [--workers 2] [--session process|threaded] [--device auto|cpu|cuda] [--layers 4] [--hidden 512] [--heads 8] [--kv-heads 8] [--head-dim 0] [--ffn 1408] [--vocab 4096] [--dtype auto] [--layout chorus|hf] [--hf] [--prompt 8] [--steps 32] [--graph] [--check] [--dir DIR] [--write-only]"

// cmdModel runs a small random transformer decoder end to end: written as
// safetensors, loaded shard by shard by the workers, a prefill and greedy
// decode steps, with the time per token (and, with --check, every step's
// logits against the float64 reference).
func cmdModel(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("model", modelSynopsis, out)
	n := fs.Int("workers", 2, "workers (tensor-parallel ranks)")
	kind := fs.String("session", "process", "session kind: process or threaded")
	dev := fs.String("device", "auto", "auto (GPUs when present), cpu or cuda")
	layers := fs.Int("layers", 4, "decoder layers")
	hidden := fs.Int("hidden", 512, "hidden size")
	heads := fs.Int("heads", 8, "attention heads")
	kvHeads := fs.Int("kv-heads", 8, "key/value heads (grouped-query attention when fewer than --heads)")
	ffn := fs.Int("ffn", 1408, "MLP inner size")
	vocab := fs.Int("vocab", 4096, "vocabulary size")
	dtype := fs.String("dtype", "auto", "float32, float16, bfloat16 or auto (float16 on GPUs, float32 on CPUs)")
	layout := fs.String("layout", decoder.LayoutChorus, "matrix layout of the checkpoint: chorus ([in, out]) or hf ([out, in], as nn.Linear and Hugging Face store them)")
	promptLen := fs.Int("prompt", 8, "prompt length (the prefill)")
	steps := fs.Int("steps", 32, "decode steps")
	graph := fs.Bool("graph", false, "GPUs: replay the decode step as a CUDA graph")
	check := fs.Bool("check", false, "compare every step's logits with the float64 reference (slow for large models)")
	dir := fs.String("dir", "", "folder for the checkpoint (default: a temporary one, removed at the end); it may exist without a checkpoint in it, and its parent must exist")
	hfFolder := fs.Bool("hf", false, "write a Hugging Face folder (config.json with transformers' keys, Hugging Face tensor names; implies --layout hf) and load it through model/hf")
	writeOnly := fs.Bool("write-only", false, "write the checkpoint into --dir and stop")
	headDim := fs.Int("head-dim", 0, "head dimension (0: hidden / heads)")
	seed := fs.Uint64("seed", 1, "seed of the random weights and prompt")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	gpus, err := gpusFor("model", *dev)
	if err != nil {
		return err
	}
	if *graph && gpus == 0 {
		return usageError{"model: --graph needs GPUs"}
	}
	if *n < 1 || *promptLen < 1 || *steps < 0 {
		return usageError{"model: need --workers >= 1, --prompt >= 1 and --steps >= 0"}
	}
	dt := tensor.Float32
	if gpus > 0 {
		dt = tensor.Float16
	}
	if *dtype != "auto" {
		var err error
		if dt, err = tensor.ParseDType(*dtype); err != nil {
			return usageError{"model: --dtype: " + err.Error()}
		}
	}
	c := decoder.Small(dt)
	c.Layers, c.Hidden, c.Heads, c.KVHeads, c.FFN, c.Vocab = *layers, *hidden, *heads, *kvHeads, *ffn, *vocab
	c.Layout, c.HeadSize = *layout, *headDim
	if *hfFolder {
		c.Layout = decoder.LayoutHF
	}
	c.MaxSeq = max(c.MaxSeq, *promptLen+*steps+1)
	if *writeOnly && *dir == "" {
		return usageError{"model: --write-only needs --dir"}
	}
	if err := c.Validate(*n); err != nil {
		return usageError{"model: " + err.Error()}
	}
	folder := *dir
	if folder == "" {
		tmp, err := os.MkdirTemp("", "chorus-model-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		folder = filepath.Join(tmp, "m")
	}
	t0 := time.Now()
	var err2 error
	if *hfFolder {
		err2 = hf.WriteRandom(folder, c, *seed, hf.WriteOptions{})
	} else {
		err2 = writeChorusCheckpoint(folder, c, *seed)
	}
	if err2 != nil {
		return fmt.Errorf("model: --dir: %w", err2)
	}
	took := time.Since(t0)
	size := paramCount(c) * int64(c.DType.Size())
	fmt.Fprintf(out, "model: %s, %d parameters, written to %s in %v (%.2f GB, %.2f GB/s)\n", c, paramCount(c), folder, took.Round(time.Millisecond),
		float64(size)/1e9, float64(size)/1e9/took.Seconds())
	if *writeOnly {
		return nil
	}

	s, device, strategy, err := modelSession(ctx, *kind, *n, gpus)
	if err != nil {
		return err
	}
	rerr := func() error {
		t0 := time.Now()
		var w map[string]*session.DRef
		if *hfFolder {
			ck, err := hf.Open(folder, hf.Options{Workers: *n, MaxSeq: c.MaxSeq})
			if err != nil {
				return err
			}
			refs, err := shardload.LoadSharded(ctx, s, folder, ck.Spec())
			if err != nil {
				return err
			}
			w = map[string]*session.DRef{}
			for _, t := range ck.Tensors {
				w[t.Param] = refs[t.Name]
			}
		} else {
			w, err = shardload.LoadSharded(ctx, s, folder, c.ShardSpec())
			if err != nil {
				return err
			}
		}
		defer releaseUnique(w)
		// A split head's shards before the model loads, so no short last
		// block stays beside its padded copy.
		if err := decoder.ShardLMHead(ctx, s, c, w); err != nil {
			return err
		}
		fmt.Fprintf(out, "loaded: %d tensors sharded over %d workers (%s) in %v\n", len(w), *n, device, time.Since(t0).Round(time.Millisecond))
		m, err := decoder.Load(ctx, s, c, device, decoder.Options{PrefillLen: *promptLen, Strategy: strategy}, w)
		if err != nil {
			return err
		}
		defer m.Release()
		prompt := make([]int32, *promptLen)
		for i := range prompt {
			prompt[i] = int32((uint64(i)*2654435761 + *seed) % uint64(c.Vocab))
		}
		g, err := m.Generate(ctx, prompt, *steps, *graph)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "prompt: %v\ntokens: %v\n", prompt, g.Tokens)
		fmt.Fprintf(out, "prefill: %d tokens in %v (%.0f tokens/s)\n", len(prompt), g.Prefill.Round(time.Microsecond), float64(len(prompt))/g.Prefill.Seconds())
		res := modelResult{What: "model", Workers: *n, Session: *kind, Device: device.String(), Config: c.String(), Params: paramCount(c),
			Prompt: len(prompt), Steps: len(g.Steps), Graph: *graph, Tokens: g.Tokens,
			PrefillMS: ms(g.Prefill), PrefillTokensPerS: float64(len(prompt)) / g.Prefill.Seconds()}
		if gpus > 0 {
			res.Session = "process"
		}
		if len(g.Steps) > 0 {
			d := slices.Clone(g.Steps)
			slices.Sort(d)
			what := "eager"
			if *graph {
				what = "CUDA graph"
			}
			fmt.Fprintf(out, "decode: %d steps (%s), per token p50 %v, min %v, max %v\n", len(d), what, d[len(d)/2].Round(time.Microsecond), d[0].Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond))
			res.DecodeMSP50, res.DecodeMSMin, res.DecodeMSMax = ms(d[len(d)/2]), ms(d[0]), ms(d[len(d)-1])
		}
		if res.Memory, err = m.PeakMemory(ctx); err != nil {
			return err
		}
		printMemory(out, res.Memory)
		if *check {
			if err := checkTokens(c, *seed, prompt, g.Tokens, out); err != nil {
				return err
			}
			res.Checked = true
		}
		line, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\n", line)
		return nil
	}()
	return errors.Join(rerr, s.Shutdown())
}

// releaseUnique drops every register of a weight map once (tied
// embeddings share one).
func releaseUnique(w map[string]*session.DRef) {
	done := map[*session.DRef]bool{}
	for _, r := range w {
		if !done[r] {
			done[r] = true
			r.Release()
		}
	}
}

// writeChorusCheckpoint writes decoder.WriteRandom's checkpoint into dir
// (made if missing; its parent must exist), refusing a folder that
// already holds one, naming the file.
func writeChorusCheckpoint(dir string, c decoder.Config, seed uint64) error {
	if _, err := os.Stat(filepath.Dir(filepath.Clean(dir))); err != nil {
		return fmt.Errorf("%s: the parent folder must exist: %w", dir, err)
	}
	for _, name := range []string{decoder.CheckpointFile, decoder.ConfigFile, "model.safetensors.index.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("%w: %s (chorus never overwrites a checkpoint)", hf.ErrExists, filepath.Join(dir, name))
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return decoder.WriteRandom(dir, c, seed)
}

// modelResult is chorus model's JSON line (the last line of its output).
type modelResult struct {
	What              string               `json:"what"` // "model"
	Workers           int                  `json:"workers"`
	Session           string               `json:"session"`
	Device            string               `json:"device"`
	Config            string               `json:"config"`
	Params            int64                `json:"params"`
	Prompt            int                  `json:"prompt"`
	Steps             int                  `json:"steps"`
	Graph             bool                 `json:"graph"`
	Tokens            []int32              `json:"tokens"`
	PrefillMS         float64              `json:"prefill_ms"`
	PrefillTokensPerS float64              `json:"prefill_tokens_per_s"`
	DecodeMSP50       float64              `json:"decode_ms_p50,omitempty"`
	DecodeMSMin       float64              `json:"decode_ms_min,omitempty"`
	DecodeMSMax       float64              `json:"decode_ms_max,omitempty"`
	Memory            []worker.MemoryStats `json:"memory"`
	Checked           bool                 `json:"checked"` // --check passed
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// printMemory prints every worker's peak host and GPU memory.
func printMemory(out io.Writer, ms []worker.MemoryStats) {
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	for _, m := range ms {
		host := "unknown (" + m.HostError + ")"
		if m.HostPeakBytes >= 0 {
			host = mb(m.HostPeakBytes)
			if m.HostShared {
				host += " (process-wide: the process is shared with the controller or other workers)"
			}
		}
		dev := ""
		if m.HasDevice {
			dev = fmt.Sprintf(", GPU peak %s allocated + %s IPC memory", mb(m.DevicePeakBytes), mb(m.IPCBytes))
		}
		fmt.Fprintf(out, "memory: worker %d (pid %d): host peak %s%s\n", m.Worker, m.PID, host, dev)
	}
}

// paramCount is the number of weights of c.
func paramCount(c decoder.Config) int64 {
	var n int64
	for _, p := range c.Params() {
		k, _ := p.Shape.NumElements()
		n += k
	}
	return n
}

// checkTokens runs the float64 reference greedily on the same prompt and
// reports where its tokens and the run's part, with the reference's
// margin there (a tie within rounding may flip a greedy choice).
func checkTokens(c decoder.Config, seed uint64, prompt, got []int32, out io.Writer) error {
	ref, err := decoder.NewRandomReference(c, seed)
	if err != nil {
		return err
	}
	pos := make([]int32, len(prompt))
	for i := range pos {
		pos[i] = int32(i)
	}
	logits, err := ref.Step(prompt, pos)
	if err != nil {
		return err
	}
	// A greedy choice between logits closer than the dtype's rounding
	// may go either way: a tie, not a failure.
	rel := map[tensor.DType]float64{tensor.Float32: 1e-4, tensor.Float16: 2e-2, tensor.BFloat16: 8e-2}[c.DType]
	ties := 0
	for i, tok := range got {
		row := logits[len(logits)-1]
		want := int32(decoder.Argmax(row))
		if tok != want {
			top := 0.0
			for _, v := range row {
				top = max(top, math.Abs(v))
			}
			if gap := row[want] - row[tok]; gap > rel*top {
				return fmt.Errorf("model: --check: token %d is %d, the float64 reference's is %d (logit gap %.3g, %.2g of the largest logit)", i, tok, want, gap, gap/top)
			}
			ties++
		}
		if i == len(got)-1 {
			break
		}
		if logits, err = ref.Step([]int32{tok}, []int32{int32(len(prompt) + i)}); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "check: %d tokens equal the float64 reference's greedy choice, %d within rounding of it (the run's token fed on)\n", len(got)-ties, ties)
	return nil
}

// modelSession starts the session a model runs on: n CPU workers of the
// given kind, or (gpus > 0) one process per worker bound to GPU i % gpus,
// several sharing one when there are fewer GPUs than workers; with n > 1
// its communicator is joined: cpu, nccl, or ipc where ranks share a GPU
// (NCCL refuses two ranks on one GPU). It returns the workers' device and
// the custom all-reduce strategy for the decoder ("" on CPUs).
func modelSession(ctx context.Context, kind string, n, gpus int) (*session.Session, tensor.Device, string, error) {
	var (
		s   *session.Session
		err error
	)
	device, backend, strategy := tensor.CPUDevice, "cpu", ""
	if gpus > 0 {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i % gpus
		}
		po := processOptions("shm")
		po.NumWorkers, po.DeviceIDs = n, ids
		s, err = session.NewProcess(ctx, po)
		device, backend, strategy = tensor.CUDADevice(0), "nccl", "auto"
		if gpus < n {
			backend = "ipc"
		}
	} else {
		s, err = newSession(ctx, kind, "shm", n)
	}
	if err != nil {
		return nil, device, "", err
	}
	if n > 1 {
		if err := s.InitCCL(ctx, backend, 0); err != nil {
			s.Shutdown()
			return nil, device, "", err
		}
	}
	return s, device, strategy, nil
}
