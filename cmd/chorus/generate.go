package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/chorus-rt/chorus/model/chat"
	"github.com/chorus-rt/chorus/model/tokenizer"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/hf"
	"github.com/chorus-rt/chorus/tensor"
)

const generateSynopsis = "chorus generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens 64] [--workers 1] [--device auto|cpu|cuda] [--session process|threaded] [--graph] [--temperature 0 --top-k 0 --top-p 1 --seed 1] [--json] [--chat] [--dtype auto|float32|float16|bfloat16]"

// textCodec is the tokenizer generate uses (tokenizer.json of the model
// folder): Encode with or without the special tokens the tokenizer adds
// (BOS), Decode skipping special tokens or not.
type textCodec interface {
	Encode(text string, addSpecial bool) ([]int, error)
	Decode(ids []int, skipSpecial bool) (string, error)
}

// loadTokenizer reads DIR/tokenizer.json (model/tokenizer); renderChat
// applies the folder's chat template (chat_template.jinja, else
// tokenizer_config.json's chat_template: model/chat) to one user message
// with the generation prompt. Variables, so tests can replace them.
var (
	loadTokenizer = func(path string) (textCodec, error) {
		t, err := tokenizer.Load(path)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	renderChat = func(dir, user string) (string, error) {
		c, err := chat.LoadFolder(dir)
		if err != nil {
			return "", err
		}
		return c.Render([]chat.Message{{Role: "user", Content: user}}, chat.Options{AddGenerationPrompt: true})
	}
)

// generateResult is generate's --json line.
type generateResult struct {
	What              string  `json:"what"` // "generate"
	Model             string  `json:"model"`
	Config            string  `json:"config"`
	Workers           int     `json:"workers"`
	Device            string  `json:"device"`
	PromptIDs         []int   `json:"prompt_ids"`
	NewIDs            []int   `json:"new_ids"`
	Text              string  `json:"text"`
	Stop              string  `json:"stop"` // "eos" or "max_tokens"
	LoadS             float64 `json:"load_s"`
	LoadBytes         int64   `json:"load_bytes"` // bytes read by all workers
	LoadGBPerS        float64 `json:"load_gb_per_s"`
	BytesRead         []int64 `json:"bytes_read"` // by worker
	CheckpointBytes   int64   `json:"checkpoint_bytes"`
	PrefillMS         float64 `json:"prefill_ms"`
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	DecodeMSPerToken  float64 `json:"decode_ms_per_token,omitempty"`
	DecodeTokensPerS  float64 `json:"decode_tokens_per_s,omitempty"`
	Graph             bool    `json:"graph"`
	Temperature       float64 `json:"temperature"`
}

// cmdGenerate loads a Hugging Face folder sharded over the workers and
// generates from a prompt, streaming the text to out as tokens arrive.
func cmdGenerate(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("generate", generateSynopsis, out)
	dir := fs.String("model", "", "a Hugging Face model folder (config.json, safetensors, tokenizer.json)")
	prompt := fs.String("prompt", "", "the prompt text")
	promptIDs := fs.String("prompt-ids", "", "the prompt as token ids, comma-separated (instead of --prompt)")
	maxTokens := fs.Int("max-tokens", 64, "the most new tokens (generation stops earlier at an eos token)")
	n := fs.Int("workers", 1, "workers (tensor-parallel ranks)")
	kind := fs.String("session", "process", "session kind on CPUs: process or threaded")
	dev := fs.String("device", "auto", "auto (GPUs when present), cpu or cuda")
	graph := fs.Bool("graph", false, "GPUs: replay the decode step as a CUDA graph")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 0, "sample among the k most likely tokens (0: all)")
	topP := fs.Float64("top-p", 1, "sample among the most likely tokens whose probability reaches p (1: all)")
	seed := fs.Uint64("seed", 1, "seed of the sampler")
	asJSON := fs.Bool("json", false, "print one JSON line (prompt_ids, new_ids, text, timings) instead of streaming the text")
	chat := fs.Bool("chat", false, "apply the chat template of tokenizer_config.json to the prompt (one user message)")
	dtype := fs.String("dtype", "auto", "dtype to load the weights as: auto (the checkpoint's), float32, float16 or bfloat16")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return usageError{"generate: --model DIR is required (a Hugging Face model folder)"}
	case (*prompt == "") == (*promptIDs == ""):
		return usageError{"generate: give the prompt as --prompt TEXT or as --prompt-ids 1,2,3 (one of them)"}
	case *maxTokens < 1:
		return usageError{fmt.Sprintf("generate: --max-tokens %d: want >= 1", *maxTokens)}
	case *n < 1:
		return usageError{fmt.Sprintf("generate: --workers %d: want >= 1", *n)}
	case *kind != "process" && *kind != "threaded":
		return usageError{fmt.Sprintf("generate: --session %q: want process or threaded", *kind)}
	case *chat && *promptIDs != "":
		return usageError{"generate: --chat applies a template to --prompt text, not to --prompt-ids"}
	}
	smp, err := newSampler(*temp, *topK, *topP, *seed)
	if err != nil {
		return err
	}
	dt := tensor.Invalid
	if *dtype != "auto" {
		if dt, err = tensor.ParseDType(*dtype); err != nil || (dt != tensor.Float32 && dt != tensor.Float16 && dt != tensor.BFloat16) {
			return usageError{fmt.Sprintf("generate: --dtype %q: want auto, float32, float16 or bfloat16", *dtype)}
		}
	}
	gpus, err := gpusFor("generate", *dev)
	if err != nil {
		return err
	}
	if *graph && gpus == 0 {
		return usageError{"generate: --graph needs GPUs (--device cuda)"}
	}

	// The folder's config first: a folder that is not a model is named as
	// such, not by the first file the prompt needs.
	if _, err := hf.ReadConfig(*dir); err != nil {
		return fmt.Errorf("generate: --model %s: %w", *dir, err)
	}

	// The prompt's ids.
	var codec textCodec
	var ids []int
	if *promptIDs != "" {
		for _, f := range strings.Split(*promptIDs, ",") {
			id, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || id < 0 {
				return usageError{fmt.Sprintf("generate: --prompt-ids: %q is not a token id", f)}
			}
			ids = append(ids, id)
		}
		if c, err := loadTokenizer(filepath.Join(*dir, "tokenizer.json")); err == nil {
			codec = c // for the text of the new tokens, when there is one
		}
	} else {
		if codec, err = loadTokenizer(filepath.Join(*dir, "tokenizer.json")); err != nil {
			return fmt.Errorf("generate: --prompt: %w", err)
		}
		text, addSpecial := *prompt, true
		if *chat {
			if text, err = renderChat(*dir, *prompt); err != nil {
				return fmt.Errorf("generate: --chat: %w", err)
			}
			addSpecial = false // the template writes the BOS itself
		}
		if ids, err = codec.Encode(text, addSpecial); err != nil {
			return fmt.Errorf("generate: encode the prompt: %w", err)
		}
	}
	if len(ids) == 0 {
		return usageError{"generate: the prompt has no tokens"}
	}

	ck, err := hf.Open(*dir, hf.Options{Workers: *n, MaxSeq: len(ids) + *maxTokens, DType: dt})
	if err != nil {
		return err
	}
	for i, id := range ids {
		if id >= ck.Decoder.Vocab {
			return usageError{fmt.Sprintf("generate: prompt token %d (index %d) is outside the vocabulary of %d", id, i, ck.Decoder.Vocab)}
		}
	}
	s, device, strategy, err := modelSession(ctx, *kind, *n, gpus)
	if err != nil {
		return err
	}
	rerr := func() error {
		t0 := time.Now()
		m, err := hf.Load(ctx, s, ck, device, hf.LoadOptions{Decoder: decoder.Options{PrefillLen: len(ids), Strategy: strategy}})
		if err != nil {
			return err
		}
		defer m.Release()
		load := time.Since(t0)
		res := generateResult{What: "generate", Model: *dir, Config: ck.Decoder.String(), Workers: *n, Device: device.String(),
			PromptIDs: ids, LoadS: load.Seconds(), BytesRead: m.Stats.BytesRead, CheckpointBytes: ck.Bytes, Graph: *graph, Temperature: *temp}
		for _, b := range m.Stats.BytesRead {
			res.LoadBytes += b
		}
		res.LoadGBPerS = float64(res.LoadBytes) / 1e9 / load.Seconds()
		fmt.Fprintf(errOut, "loaded %s (%s) on %d workers (%s) in %.2f s: %.2f GB read (%.2f GB/s), checkpoint %.2f GB\n",
			*dir, ck.HF.Architecture, *n, device, load.Seconds(), float64(res.LoadBytes)/1e9, res.LoadGBPerS, float64(ck.Bytes)/1e9)
		stream := &textStream{codec: codec, out: out}
		if *asJSON {
			stream.out = io.Discard
		}
		if *graph {
			if err := m.CaptureDecode(ctx); err != nil {
				return err
			}
		}
		eos := ck.HF.EOS
		prompt32 := make([]int32, len(ids))
		for i, id := range ids {
			prompt32[i] = int32(id)
		}
		next := func(st *decoder.Step) (int, error) {
			defer st.Release()
			if smp.greedy() {
				toks, err := m.Tokens(ctx, st, 0)
				if err != nil {
					return 0, err
				}
				return int(toks[len(toks)-1]), nil
			}
			lg, err := m.Logits(ctx, st, 0)
			if err != nil {
				return 0, err
			}
			return smp.next(lg[len(lg)-ck.Decoder.Vocab:]), nil
		}
		t0 = time.Now()
		st, err := m.Prefill(ctx, prompt32)
		if err != nil {
			return err
		}
		tok, err := next(st)
		if err != nil {
			return err
		}
		prefill := time.Since(t0)
		res.PrefillMS, res.PrefillTokensPerS = ms(prefill), float64(len(ids))/prefill.Seconds()
		res.Stop = "max_tokens"
		t1 := time.Now()
		for {
			res.NewIDs = append(res.NewIDs, tok)
			if slices.Contains(eos, tok) {
				res.Stop = "eos"
				break
			}
			if err := stream.add(res.NewIDs); err != nil {
				return err
			}
			if len(res.NewIDs) == *maxTokens {
				break
			}
			if *graph {
				st, err = m.ReplayDecode(ctx, int32(tok))
			} else {
				st, err = m.Decode(ctx, int32(tok))
			}
			if err != nil {
				return err
			}
			if tok, err = next(st); err != nil {
				return err
			}
		}
		decode := time.Since(t1)
		if err := stream.flush(res.NewIDs); err != nil {
			return err
		}
		res.Text = stream.text
		if steps := len(res.NewIDs) - 1; steps > 0 {
			res.DecodeMSPerToken = ms(decode) / float64(steps)
			res.DecodeTokensPerS = float64(steps) / decode.Seconds()
		}
		fmt.Fprintf(errOut, "prefill: %d tokens in %.1f ms (%.0f tokens/s); decode: %d tokens, %.2f ms per token (%.1f tokens/s); stop: %s\n",
			len(ids), res.PrefillMS, res.PrefillTokensPerS, len(res.NewIDs), res.DecodeMSPerToken, res.DecodeTokensPerS, res.Stop)
		if *asJSON {
			line, err := json.Marshal(res)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s\n", line)
		}
		return nil
	}()
	return errors.Join(rerr, s.Shutdown())
}

// textStream prints the text of the new tokens as they arrive: each
// step decodes all of them and prints what is new, holding back an
// incomplete UTF-8 sequence at the end (a byte-level token may carry part
// of a character; the decoder shows it as U+FFFD until the rest comes).
// Without a tokenizer it prints the ids.
type textStream struct {
	codec   textCodec
	out     io.Writer
	printed int // bytes of text printed
	text    string
}

func (s *textStream) add(ids []int) error { return s.emit(ids, false) }

func (s *textStream) flush(ids []int) error {
	if err := s.emit(ids, true); err != nil {
		return err
	}
	_, err := fmt.Fprintln(s.out)
	return err
}

func (s *textStream) emit(ids []int, final bool) error {
	if s.codec == nil {
		if !final {
			_, err := fmt.Fprintf(s.out, "%d ", ids[len(ids)-1])
			return err
		}
		return nil
	}
	text, err := s.codec.Decode(ids, true)
	if err != nil {
		return err
	}
	s.text = text
	show := text
	if !final {
		show = strings.TrimRight(show, "\uFFFD")
		for !utf8.ValidString(show) && len(show) > 0 {
			show = show[:len(show)-1]
		}
	}
	if len(show) <= s.printed || !strings.HasPrefix(show, text[:min(s.printed, len(text))]) {
		return nil
	}
	_, err = io.WriteString(s.out, show[s.printed:])
	s.printed = len(show)
	return err
}
