package chat

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFromTokenizerConfigString(t *testing.T) {
	cfg, err := FromTokenizerConfig([]byte(`{
		"bos_token": "<s>",
		"eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false},
		"chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}"
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BOS != "<s>" || cfg.EOS != "</s>" || cfg.Named != nil {
		t.Fatalf("got %+v", cfg)
	}
	got, err := cfg.Render([]Message{{Role: "user", Content: "hi"}}, Options{})
	if err != nil || got != "<s>[hi]</s>" {
		t.Fatalf("got %q, %v", got, err)
	}
	if o := cfg.Options(); o.BOS != "<s>" || o.EOS != "</s>" {
		t.Fatalf("Options() = %+v", o)
	}
}

func TestFromTokenizerConfigList(t *testing.T) {
	cfg, err := FromTokenizerConfig([]byte(`{
		"bos_token": null,
		"eos_token": "<|im_end|>",
		"chat_template": [
			{"name": "tool_use", "template": "tools"},
			{"name": "default", "template": "default {{ eos_token }}"}
		]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source != "default {{ eos_token }}" || cfg.Named["tool_use"] != "tools" || cfg.BOS != "" {
		t.Fatalf("got %+v", cfg)
	}
	got, err := cfg.Render(nil, Options{})
	if err != nil || got != "default <|im_end|>" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestFromTokenizerConfigErrors(t *testing.T) {
	bad := map[string]string{
		"not json":         `{`,
		"no template":      `{"bos_token": "<s>"}`,
		"no default":       `{"chat_template": [{"name": "tool_use", "template": "x"}]}`,
		"bad list entry":   `{"chat_template": [{"name": "default"}]}`,
		"template type":    `{"chat_template": 5}`,
		"token type":       `{"chat_template": "x", "bos_token": 5}`,
		"token no content": `{"chat_template": "x", "eos_token": {"lstrip": true}}`,
	}
	for name, src := range bad {
		if _, err := FromTokenizerConfig([]byte(src)); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	_, err := FromTokenizerConfig([]byte(`{"chat_template": "{% macro m() %}{% endmacro %}"}`))
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("unsupported template: got %v", err)
	}
}

func TestLoadTokenizerConfig(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "llama3.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer_config.json")
	data := []byte(`{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": ` + jsonQuote(string(src)) + `}`)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadTokenizerConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.Render([]Message{{Role: "user", Content: " Hello! "}}, Options{AddGenerationPrompt: true})
	want := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if err != nil || got != want {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := LoadTokenizerConfig(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("missing file: want an error")
	}
}

func jsonQuote(s string) string {
	out, _ := pyJSONDumps(s, jsonOptions{itemSep: ", ", keySep: ": "})
	return out
}
