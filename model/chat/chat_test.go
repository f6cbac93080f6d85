package chat

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

func TestRenderChatML(t *testing.T) {
	tmpl, err := Parse("{{ bos_token }}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "Hi"}}
	got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true, BOS: "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestEmptyTokensAreUndefined(t *testing.T) {
	tmpl, err := Parse("{{ bos_token is defined }} {{ eos_token is defined }} [{{ bos_token }}]")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(nil, Options{EOS: "</s>"})
	if err != nil || got != "False True []" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestVarsConversion(t *testing.T) {
	tmpl, err := Parse("{{ i }} {{ u }} {{ f }} {{ s }} {{ b }} {{ n }} {{ l }} {{ m }} {{ raw }} {{ msgs[0].role }} {{ strs }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(nil, Options{Vars: map[string]any{
		"i":    int32(-3),
		"u":    uint16(7),
		"f":    float32(0.5),
		"s":    "str",
		"b":    true,
		"n":    nil,
		"l":    []any{1, "a", []any{}},
		"m":    map[string]any{"z": 1, "a": 2},
		"raw":  json.RawMessage(`{"z": 1, "a": [1.0, 2e0, 3]}`),
		"msgs": []Message{{Role: "tool", Content: "x"}},
		"strs": []string{"p", "q"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "-3 7 0.5 str True None [1, 'a', []] {'a': 2, 'z': 1} {'z': 1, 'a': [1.0, 2.0, 3]} tool ['p', 'q']"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestVarsErrors(t *testing.T) {
	tmpl, err := Parse("x")
	if err != nil {
		t.Fatal(err)
	}
	bad := []Options{
		{Vars: map[string]any{"messages": "x"}},
		{Vars: map[string]any{"ch": make(chan int)}},
		{Vars: map[string]any{"raw": json.RawMessage(`{bad`)}},
		{Vars: map[string]any{"big": uint64(1) << 63}},
		{Tools: []json.RawMessage{json.RawMessage(`[1,`)}},
	}
	for i, o := range bad {
		if _, err := tmpl.Render(nil, o); err == nil {
			t.Errorf("case %d: want an error", i)
		}
	}
}

func TestToolsKeepKeyOrder(t *testing.T) {
	tmpl, err := Parse("{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}|{{ tools is none }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(nil, Options{Tools: []json.RawMessage{json.RawMessage(`{"z": {"y": 1, "b": [true, null]}, "a": "é"}`)}})
	if err != nil || got != `{"z": {"y": 1, "b": [true, null]}, "a": "é"}|False` {
		t.Fatalf("got %q, %v", got, err)
	}
	got, err = tmpl.Render(nil, Options{})
	if err != nil || got != "|True" {
		t.Fatalf("without tools: got %q, %v", got, err)
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl, err := Parse("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content }}{% endfor %}{{ ns.n }}")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			content := strings.Repeat("x", i)
			got, err := tmpl.Render([]Message{{Role: "user", Content: content}}, Options{})
			if err != nil || got != content+"1" {
				errs <- got
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("bad concurrent render %q", e)
	}
}

func TestGenerationTag(t *testing.T) {
	tmpl, err := Parse("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endif %}{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(testMessages, Options{})
	if err != nil || got != "[ Hello! ]" {
		t.Fatalf("got %q, %v", got, err)
	}
}
