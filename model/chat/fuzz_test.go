package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fuzzSeeds are the testdata templates plus the table-test sources.
func fuzzSeeds(t testing.TB) []string {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.jinja"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no testdata templates: %v", err)
	}
	var seeds []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, string(b))
	}
	extra := []string{
		"", "{", "{{", "{%", "{#", "}}", "%}", "{{ }}", "{% %}", "{{-", "-}}", "{%- raw -%}",
		"{{ 'a' ~ }}", "{{ x[1:2:3] }}", "{{ ((((1)))) }}", "{{ a.b.c(d)[e] | f(g=h) is i j }}",
		"{% for a, b in c if d recursive %}", "{% set ns.x %}{% endset %}", "{{ '\\u12' }}",
		"{{ 0x }}{{ 1e }}{{ 1_ }}{{ 0b2 }}", "{{ {1: [2, (3,)]} | tojson(indent=-1) }}",
		"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}", "{{ range(-5) }}",
		"{{ 'abc'[9223372036854775807:] }}{{ [1][-9223372036854775807:] }}{{ 'x'[::-1] }}",
		"{{ 1 // 0 }}{{ 1.0 % 0 }}", "{{ loop.cycle() }}", "{% for x in 'ab' %}{{ loop.cycle() }}{% endfor %}",
		"{{ messages | map(attribute='role.0') | list }}", "{{ messages | sort(attribute='x.y') }}",
		"{{ 'a'.split('') }}", "{{ 'a'.startswith(1) }}", "{{ 'a' | indent(width=99999) }}",
	}
	for _, cases := range [][]renderCase{whitespaceCases, loopCases, namespaceCases, filterCases, exprCases} {
		for _, c := range cases {
			extra = append(extra, c.src)
		}
	}
	return append(seeds, extra...)
}

// checkNoInternalError fails on errors that come from a recovered panic.
func checkNoInternalError(t *testing.T, err error) {
	if err != nil && strings.Contains(err.Error(), "internal error") {
		t.Fatalf("internal error: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src)
		checkNoInternalError(t, err)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Parse error of unexpected kind: %v", err)
			}
			return
		}
		if tmpl == nil {
			t.Fatal("nil template without error")
		}
	})
}

func FuzzRender(f *testing.F) {
	savedStr, savedList := maxStringLen, maxListLen
	maxStringLen, maxListLen = 1<<20, 1<<16
	defer func() { maxStringLen, maxListLen = savedStr, savedList }()
	for _, s := range fuzzSeeds(f) {
		f.Add(s, "Hello {{ x }} \n\t é", false)
		f.Add(s, "", true)
	}
	f.Fuzz(func(t *testing.T, src, content string, gen bool) {
		tmpl, err := Parse(src)
		checkNoInternalError(t, err)
		if err != nil {
			return
		}
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("render took %v", d)
			}
		}()
		tmpl.maxSteps = 20000
		tmpl.maxOutput = 1 << 20
		msgs := []Message{
			{Role: "system", Content: content},
			{Role: "user", Content: content},
			{Role: "assistant", Content: content},
			{Role: "user", Content: "ok"},
		}
		_, err = tmpl.Render(msgs, Options{AddGenerationPrompt: gen, BOS: "<s>", EOS: "</s>", Vars: map[string]any{"date_string": "26 Jul 2024"}})
		checkNoInternalError(t, err)
		_, err = tmpl.Render(msgs[:1], Options{Vars: map[string]any{"tools": nil}})
		_ = err // "tools" is reserved: an error, never a panic
	})
}
