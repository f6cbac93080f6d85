package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// golden.json is written by testdata/gen.py with Hugging Face transformers
// (see doc.go). Each case renders one template over one conversation.
type goldenFile struct {
	Backend             string       `json:"backend"`
	RenderPath          string       `json:"render_path"`
	TransformersVersion *string      `json:"transformers_version"`
	Jinja2Version       string       `json:"jinja2_version"`
	Cases               []goldenCase `json:"cases"`
}

type goldenCase struct {
	Name                string                     `json:"name"`
	Template            string                     `json:"template"`
	BOS                 *string                    `json:"bos_token"`
	EOS                 *string                    `json:"eos_token"`
	Messages            []goldenMessage            `json:"messages"`
	AddGenerationPrompt bool                       `json:"add_generation_prompt"`
	Vars                map[string]json.RawMessage `json:"vars"`
	Now                 string                     `json:"now"`
	Expected            *string                    `json:"expected"`
	ErrorType           string                     `json:"error_type"`
	Error               string                     `json:"error"`
}

type goldenMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func loadGolden(t *testing.T) *goldenFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatalf("golden data missing (regenerate with testdata/gen.py): %v", err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("golden.json: %v", err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("golden.json has no cases")
	}
	return &g
}

func (c *goldenCase) options(t *testing.T) Options {
	t.Helper()
	opts := Options{AddGenerationPrompt: c.AddGenerationPrompt}
	if c.BOS != nil {
		opts.BOS = *c.BOS
	}
	if c.EOS != nil {
		opts.EOS = *c.EOS
	}
	for k, raw := range c.Vars {
		if k == "tools" {
			if err := json.Unmarshal(raw, &opts.Tools); err != nil {
				t.Fatalf("tools: %v", err)
			}
			continue
		}
		if opts.Vars == nil {
			opts.Vars = map[string]any{}
		}
		opts.Vars[k] = raw
	}
	now, err := time.ParseInLocation("2006-01-02T15:04:05", c.Now, time.Local)
	if err != nil {
		t.Fatalf("now %q: %v", c.Now, err)
	}
	opts.Now = func() time.Time { return now }
	return opts
}

func (c *goldenCase) messages() []Message {
	out := make([]Message, len(c.Messages))
	for i, m := range c.Messages {
		out[i] = Message(m)
	}
	return out
}

func TestGolden(t *testing.T) {
	g := loadGolden(t)
	if !strings.HasPrefix(g.Backend, "transformers") {
		t.Errorf("golden.json was generated with backend %q, not transformers", g.Backend)
	}
	version := "?"
	if g.TransformersVersion != nil {
		version = *g.TransformersVersion
	}
	t.Logf("golden: %d cases from transformers %s (jinja2 %s) via %s", len(g.Cases), version, g.Jinja2Version, g.RenderPath)

	parsed := map[string]*Template{}
	jinjas, _ := filepath.Glob(filepath.Join("testdata", "*.jinja"))
	for _, path := range jinjas {
		name := strings.TrimSuffix(filepath.Base(path), ".jinja")
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := Parse(string(src))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		parsed[name] = tmpl
	}
	covered := map[string]int{}
	mismatches := 0
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			tmpl, ok := parsed[c.Template]
			if !ok {
				t.Fatalf("template %s.jinja missing or unparsable", c.Template)
			}
			covered[c.Template]++
			got, err := tmpl.Render(c.messages(), c.options(t))
			switch {
			case c.Expected != nil:
				if err != nil {
					mismatches++
					t.Fatalf("render error %v, want\n%q", err, *c.Expected)
				}
				if got != *c.Expected {
					mismatches++
					t.Fatalf("mismatch\n got %q\nwant %q", got, *c.Expected)
				}
			case c.ErrorType == "TemplateError":
				var re *RaiseError
				if !errors.As(err, &re) || re.Message != c.Error {
					mismatches++
					t.Fatalf("got (%q, %v), want raise_exception(%q)", got, err, c.Error)
				}
			default:
				if err == nil {
					mismatches++
					t.Fatalf("got %q, want a %s error: %s", got, c.ErrorType, c.Error)
				}
			}
		})
	}
	for name := range parsed {
		if covered[name] == 0 {
			t.Errorf("template %s.jinja has no golden cases", name)
		}
	}
	t.Logf("golden: %d cases, %d mismatches", len(g.Cases), mismatches)
}
