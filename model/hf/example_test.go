package hf_test

import (
	"context"
	"fmt"
	"log"
	"path/filepath"

	"github.com/chorus-rt/chorus/model/hf"
	"github.com/chorus-rt/chorus/model/tokenizer"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Greedy generation from a Hugging Face folder (a tiny random Llama 3 of
// the package's testdata) on two workers: the config and the tensor
// headers are checked by Open, Load shards the weights over the workers
// (each reads its own byte ranges), Generate runs the prefill and the
// decode steps. The ids are transformers' greedy continuation.
func Example() {
	ctx := context.Background()
	dir := filepath.Join("testdata", "llama3")
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tok.Encode("The quick brown fox", true) // with the BOS
	if err != nil {
		log.Fatal(err)
	}
	const workers, newTokens = 2, 8
	ck, err := hf.Open(dir, hf.Options{Workers: workers, MaxSeq: len(ids) + newTokens})
	if err != nil {
		log.Fatal(err)
	}
	s, err := session.NewThreaded(session.Options{NumWorkers: workers})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "cpu", 0); err != nil {
		log.Fatal(err)
	}
	m, err := hf.Load(ctx, s, ck, tensor.CPUDevice, hf.LoadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Release()
	prompt := make([]int32, len(ids))
	for i, id := range ids {
		prompt[i] = int32(id)
	}
	g, err := m.Generate(ctx, prompt, newTokens-1, false) // the prefill gives the first
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ck.HF.Architecture, len(ids), "prompt tokens")
	fmt.Println(g.Tokens)
	// Output:
	// LlamaForCausalLM 13 prompt tokens
	// [11 86 63 209 268 242 299 285]
}
