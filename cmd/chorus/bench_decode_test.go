package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/tensor"
)

// TestBenchDecodeFlags checks that bad flags are refused before any GPU
// is looked for, naming the flag.
func TestBenchDecodeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "gpt2"}, "--preset"},
		{[]string{"--dtype", "float32"}, "--dtype"},
		{[]string{"--batch", "8,0"}, "--batch"},
		{[]string{"--ctx", "0"}, "--ctx"},
		{[]string{"--modes", "lazy"}, "--modes"},
		{[]string{"--kernels", "cutlass"}, "--kernels"},
		{[]string{"--steps", "0"}, "--steps"},
		{[]string{"--heads", "32", "--kv-heads", "6"}, "kv heads"},
		{[]string{"--preset", "llama3-8b", "--head-dim", "7"}, "head dim 7"},
		{[]string{"--model", "../../model/hf/testdata/llama3", "--head-dim", "64"}, "--head-dim and --model"},
		{[]string{"--model", "../../model/hf/testdata/llama3", "--preset", "llama3-8b"}, "--preset and --model"},
		{[]string{"--model", "../../model/hf/testdata/llama3", "--layers", "2"}, "--layers and --model"},
		{[]string{"--model", "../../model/hf/testdata/llama3", "--ctx", "16", "--prefill", "8", "--workers", "3"}, "kv heads"},
		{[]string{"--lm-head", "split,vocab"}, "--lm-head"},
		{[]string{"--preset", "llama3-8b", "--rank-of", "3"}, "--rank-of 3: heads 32"},
		{[]string{"--preset", "llama3-8b", "--rank-of", "2", "--workers", "2"}, "--rank-of"},
		{[]string{"--preset", "llama3-8b", "--rank-of", "2", "--lm-head", "replicated"}, "--rank-of"},
		{[]string{"--model", "../../model/hf/testdata/llama3", "--rank-of", "2"}, "--rank-of"},
		{[]string{"--model", "../../model/hf/testdata/llama3"}, "max_position_embeddings"},
		{[]string{"--model", "no/such/folder"}, "--model"},
	} {
		var out bytes.Buffer
		err := benchDecode(context.Background(), c.args, &out, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench decode %v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}

// TestDecodeBytes checks the bytes a Llama-3-8B decode step reads and
// the FLOPs of a prefill, against sums written out by hand.
func TestDecodeBytes(t *testing.T) {
	c := decodePresets["llama3-8b"]
	c.DType, c.MaxSeq = tensor.BFloat16, 8192
	// per layer: q, o 4096², k, v 1024·4096, gate, up, down 14336·4096,
	// two norms; then the final norm, the LM head and one embedding row.
	layer := 2.0*4096*4096 + 2*1024*4096 + 3*14336*4096 + 2*4096
	weights := 32*layer + 4096 + 128256*4096 + 4096
	kvRow := 32 * 2 * 1024.0 // K and V of every layer, per position
	for _, head := range []string{decoder.LMHeadReplicated, decoder.LMHeadSplit} {
		c.LMHead = head
		for _, n := range []int{1, 2} {
			b := &decodeBench{c: c, n: n}
			shard := weights
			if n == 2 {
				lm := 128256 * 4096.0
				if head == decoder.LMHeadSplit {
					lm /= 2
				}
				shard = 32*(layer-2*4096)/2 + 32*2*4096 + 4096 + lm + 4096
			}
			for _, pos := range []int{0, 127, 4095} {
				want := 2 * (shard + kvRow/float64(n)*float64(pos+1))
				if got := b.stepBytes(pos, 1); math.Abs(got-want) > 1 {
					t.Errorf("%s LM head, %d workers, pos %d: %v bytes, want %v", head, n, pos, got, want)
				}
			}
		}
	}
	// A batch reads the weights once, an embedding row and the cache
	// rows of every sequence.
	for _, batch := range []int{8, 32} {
		c.LMHead = decoder.LMHeadReplicated
		b := &decodeBench{c: c, n: 1}
		want := 2 * (weights + float64(batch-1)*4096 + float64(batch)*kvRow*128)
		if got := b.stepBytes(127, batch); math.Abs(got-want) > 1 {
			t.Errorf("batch %d: %v bytes, want %v", batch, got, want)
		}
	}
	b := &decodeBench{c: c, n: 1}
	mat := 32*(layer-2*4096) + 128256*4096
	want := 2*mat*512 + 4*32*4096*512*513/2
	if got := b.prefillFLOPs(512); math.Abs(got-want) > 1e3 {
		t.Errorf("prefill FLOPs %v, want %v", got, want)
	}
}

// TestDecodeRankShapes: one GPU running a model of one rank's shapes
// (--heads 16 --kv-heads 4 --head-dim 128 --ffn 7168 --vocab 64128)
// reads what a rank of Llama-3-8B over 2 GPUs with the LM head split
// reads, so the tensor-parallel step's products can be studied on one
// GPU (docs/performance.md).
func TestDecodeRankShapes(t *testing.T) {
	tp := decodePresets["llama3-8b"]
	tp.DType, tp.MaxSeq, tp.LMHead = tensor.BFloat16, 8192, decoder.LMHeadSplit
	rank := tp
	rank.Heads, rank.KVHeads, rank.HeadSize, rank.FFN, rank.Vocab = 16, 4, 128, 7168, 128256/2
	if err := rank.Validate(1); err != nil {
		t.Fatal(err)
	}
	if got, err := rankShapes(tp, 2); err != nil || got != rank {
		t.Errorf("rankShapes(llama3-8b, 2) = %+v, %v; want %+v", got, err, rank)
	}
	for _, n := range []int{3, 0} {
		if _, err := rankShapes(tp, n); err == nil || !strings.Contains(err.Error(), "--rank-of") {
			t.Errorf("rankShapes(llama3-8b, %d): %v", n, err)
		}
	}
	for _, batch := range []int{1, 8} {
		for _, pos := range []int{127, 4095} {
			want := (&decodeBench{c: tp, n: 2}).stepBytes(pos, batch)
			if got := (&decodeBench{c: rank, n: 1}).stepBytes(pos, batch); got != want {
				t.Errorf("batch %d, pos %d: the rank's shapes read %v bytes on one GPU, a rank of 2 reads %v", batch, pos, got, want)
			}
		}
	}
}

// TestReadDecodeAnchors reads lines as bench/decoder_ref.py
// --bench-decode prints them (the config as an object) and skips the
// rest.
func TestReadDecodeAnchors(t *testing.T) {
	path := t.TempDir() + "/anchors.jsonl"
	lines := `W1128 a warning of torch
{"bench": "decode", "what": "anchor", "mode": "torch-graph", "batch": 1, "ctx": 128, "ms": 9.37, "tokens_per_s": 106.7, "dtype": "bfloat16", "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "config": {"vocab": 128256, "hidden": 4096}}
{"bench": "decode", "what": "other", "ms": 1}
{"bench": "decode", "what": "anchor", "mode": "torch-compile", "batch": 1, "ctx": 4096, "ms": 5.99, "compile_s": 120.5, "config": {}}
`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := readDecodeAnchors(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Mode != "torch-graph" || rows[0].Ctx != 128 || rows[0].MS != 9.37 || rows[1].Mode != "torch-compile" || rows[1].Ctx != 4096 {
		t.Errorf("read %+v", rows)
	}
	if _, err := readDecodeAnchors(path + ".missing"); err == nil || !strings.Contains(err.Error(), "--anchor") {
		t.Errorf("missing file: %v", err)
	}
}
