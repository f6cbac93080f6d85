package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/chorus-rt/chorus/model/chat"
	"github.com/chorus-rt/chorus/model/tokenizer"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateCommand: chorus generate on the tiny Llama 3 checkpoint of
// model/hf's testdata gives transformers' 16 greedy tokens (golden.json,
// first prompt) on 1 and 2 workers, threaded and process sessions, in
// its --json line, from the prompt's ids and from its text (the same ids
// as transformers' tokenizer); a seeded sampler repeats itself; bad flags are usage
// errors naming the flag.
func TestGenerateCommand(t *testing.T) {
	dir := filepath.Join("..", "..", "model", "hf", "testdata")
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Models map[string]struct {
			Prompts []struct {
				Text    string `json:"text"`
				IDs     []int  `json:"ids"`
				Float32 struct {
					NewIDs []int `json:"new_ids"`
				} `json:"float32"`
			} `json:"prompts"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	p := g.Models["llama3"].Prompts[0]
	ids := strings.Trim(strings.ReplaceAll(fmt.Sprint(p.IDs), " ", ","), "[]")
	model := filepath.Join(dir, "llama3")
	for _, tc := range []struct {
		session string
		workers int
		text    bool // the prompt as text, through model/tokenizer
	}{{"threaded", 1, false}, {"process", 2, false}, {"threaded", 2, true}} {
		t.Run(fmt.Sprintf("%s/%d/text=%v", tc.session, tc.workers, tc.text), func(t *testing.T) {
			var out, errOut bytes.Buffer
			prompt := []string{"--prompt-ids", ids}
			if tc.text {
				prompt = []string{"--prompt", p.Text}
			}
			args := append([]string{"generate", "--model", model}, prompt...)
			args = append(args, "--max-tokens", "16", "--device", "cpu",
				"--session", tc.session, "--workers", fmt.Sprint(tc.workers), "--json")
			if code := run(args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
			}
			var res generateResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if fmt.Sprint(res.NewIDs) != fmt.Sprint(p.Float32.NewIDs) || res.Stop != "max_tokens" || fmt.Sprint(res.PromptIDs) != fmt.Sprint(p.IDs) {
				t.Errorf("new ids %v (stop %s), transformers' %v", res.NewIDs, res.Stop, p.Float32.NewIDs)
			}
			if len(res.BytesRead) != tc.workers || res.LoadBytes <= 0 || !strings.Contains(errOut.String(), "prefill: ") {
				t.Errorf("load stats %v, stderr %s", res.BytesRead, errOut.String())
			}
		})
	}
	// Sampling with a seed is repeatable.
	var a, b2 bytes.Buffer
	for _, o := range []*bytes.Buffer{&a, &b2} {
		if code := run([]string{"generate", "--model", model, "--prompt-ids", ids, "--max-tokens", "8", "--device", "cpu", "--session", "threaded",
			"--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--seed", "5"}, o, &bytes.Buffer{}); code != 0 {
			t.Fatalf("sampling: exit %d: %s", code, o.String())
		}
	}
	if a.String() != b2.String() || a.Len() == 0 {
		t.Errorf("the same seed gave %q and %q", a.String(), b2.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prompt-ids", "1"}, "--model"},
		{[]string{"--model", model}, "--prompt"},
		{[]string{"--model", model, "--prompt-ids", "1", "--max-tokens", "0"}, "--max-tokens"},
		{[]string{"--model", model, "--prompt-ids", "1,x"}, "--prompt-ids"},
		{[]string{"--model", model, "--prompt-ids", "1", "--temperature", "-1"}, "--temperature"},
		{[]string{"--model", model, "--prompt-ids", "1", "--top-p", "2"}, "--top-p"},
		{[]string{"--model", model, "--prompt-ids", "1", "--dtype", "int8"}, "--dtype"},
		{[]string{"--model", model, "--prompt-ids", "1", "--session", "x"}, "--session"},
		{[]string{"--model", model, "--prompt-ids", "1", "--chat"}, "--chat"},
		{[]string{"--model", model, "--prompt-ids", "1", "--device", "cpu", "--graph"}, "--graph"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"generate"}, tc.args...), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, errOut.String(), tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"generate", "--model", model, "--prompt-ids", "1", "--workers", "3", "--device", "cpu"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "num_key_value_heads") {
		t.Errorf("3 workers: exit %d, %s", code, errOut.String())
	}
}

// TestGenerateChat: --chat renders the folder's template around the
// prompt (model/chat) and encodes it without added specials, as
// transformers' apply_chat_template does; a folder that is not a model is
// named by its config.json.
func TestGenerateChat(t *testing.T) {
	dir := filepath.Join("..", "..", "model", "hf", "testdata", "llama3")
	c, err := chat.LoadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, err := c.Render([]chat.Message{{Role: "user", Content: "Hello"}}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := tok.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"generate", "--model", dir, "--prompt", "Hello", "--chat", "--max-tokens", "2", "--device", "cpu", "--session", "threaded", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	var res generateResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if fmt.Sprint(res.PromptIDs) != fmt.Sprint(want) || !strings.Contains(text, "<|start_header_id|>user") {
		t.Errorf("prompt ids %v, want %v (%q)", res.PromptIDs, want, text)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"generate", "--model", t.TempDir(), "--prompt", "Hello"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "config.json") {
		t.Errorf("a folder with no config.json: exit %d, %q", code, errOut.String())
	}
}
