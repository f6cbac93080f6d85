package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The expected strings in the table tests below were produced by jinja2
// 3.1.6 configured as transformers configures it (testdata/gen.py's
// JinjaBackend), with testMessages as messages, bos_token "<s>" and
// eos_token "</s>". wantErr records the Python exception; the tests check
// that rendering fails, and for TemplateError that it is a RaiseError.

var testMessages = []Message{
	{Role: "system", Content: "Be brief."},
	{Role: "user", Content: "Hi there"},
	{Role: "assistant", Content: " Hello! "},
	{Role: "user", Content: "Bye"},
}

type renderCase struct {
	name    string
	src     string
	vars    string // JSON object of extra variables
	want    string
	wantErr string
}

func renderSource(t *testing.T, src, vars string) (string, error) {
	t.Helper()
	tmpl, err := Parse(src)
	if err != nil {
		return "", err
	}
	opts := Options{BOS: "<s>", EOS: "</s>"}
	if vars != "" {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(vars), &raw); err != nil {
			t.Fatalf("bad vars: %v", err)
		}
		opts.Vars = map[string]any{}
		for k, v := range raw {
			opts.Vars[k] = v
		}
	}
	return tmpl.Render(testMessages, opts)
}

func runCases(t *testing.T, cases []renderCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := renderSource(t, c.src, c.vars)
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("got %q, want error %s", got, c.wantErr)
				}
				if strings.HasPrefix(c.wantErr, "TemplateError: ") {
					var re *RaiseError
					if !errors.As(err, &re) || re.Message != strings.TrimPrefix(c.wantErr, "TemplateError: ") {
						t.Fatalf("got error %v, want %s", err, c.wantErr)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if got != c.want {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}
