package chat

import (
	"errors"
	"strings"
	"testing"
)

// Constructs outside the subset are refused at Parse where the parser can
// see them, naming the construct and its line.
func TestRefusedAtParse(t *testing.T) {
	cases := []struct {
		src, construct string
		line           int
	}{
		{"x\n{% macro m() %}{% endmacro %}", "tag 'macro'", 2},
		{"{% include 'other.jinja' %}", "tag 'include'", 1},
		{"{% import 'm.jinja' as m %}", "tag 'import'", 1},
		{"{% from 'm.jinja' import f %}", "tag 'from'", 1},
		{"{% extends 'base.jinja' %}", "tag 'extends'", 1},
		{"{% block b %}{% endblock %}", "tag 'block'", 1},
		{"{% call m() %}{% endcall %}", "tag 'call'", 1},
		{"{% filter upper %}x{% endfilter %}", "tag 'filter'", 1},
		{"{% with a = 1 %}{% endwith %}", "tag 'with'", 1},
		{"{% do x.append(1) %}", "tag 'do'", 1},
		{"\n\n{{ x | nope }}", "filter 'nope'", 3},
		{"{{ x | safe }}", "filter 'safe'", 1},
		{"{{ '%s' | format(x) }}", "filter 'format'", 1},
		{"{% if x is nope %}{% endif %}", "test 'nope'", 1},
		{"{{ x is escaped }}", "test 'escaped'", 1},
		{"{% for x in y recursive %}{% endfor %}", "recursive for loop", 1},
		{"{{ f(*args) }}", "*args/**kwargs", 1},
		{"{{ f(**kw) }}", "*args/**kwargs", 1},
		{"\n{{ '\\N{BULLET}' }}", `\N{...}`, 2},
		{"{{ " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300) + " }}", "nesting deeper", 1},
		{strings.Repeat("{% if true %}", 300), "nesting deeper", 1},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		var ue *UnsupportedError
		if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ue) {
			t.Errorf("Parse(%.40q): got %v, want an unsupported-construct error", c.src, err)
			continue
		}
		if !strings.Contains(ue.Construct, c.construct) || ue.Line != c.line {
			t.Errorf("Parse(%.40q): got %q at line %d, want %q at line %d", c.src, ue.Construct, ue.Line, c.construct, c.line)
		}
		if !strings.Contains(err.Error(), "line ") {
			t.Errorf("Parse(%.40q): error %q does not name the line", c.src, err)
		}
	}
}

// What the parser cannot see (method names, functions, dynamic filter
// names, values beyond the model) is refused when rendered.
func TestRefusedAtRender(t *testing.T) {
	cases := []struct {
		src, construct string
		line           int
	}{
		{"\n{{ 'x'.zfill(3) }}", "method str.zfill()", 2},
		{"{{ 'a'.format(1) }}", "method str.format()", 1},
		{"{{ {}.fromkeys([1]) }}", "method dict.fromkeys()", 1},
		{"{{ cycler('a', 'b') }}", "function cycler()", 1},
		{"{{ joiner() }}", "function joiner()", 1},
		{"{{ lipsum() }}", "function lipsum()", 1},
		{"{{ '%s' % 1 }}", "string formatting", 1},
		{"{{ 2 ** 100 }}", "integer beyond 64 bits", 1},
		{"{{ [1] | map('nope') | list }}", "filter 'nope'", 1},
		{"{{ [1] | select('nope') | list }}", "test 'nope'", 1},
		{"{% for x in [1] %}\n{{ loop(x) }}{% endfor %}", "recursive loops", 2},
	}
	for _, c := range cases {
		tmpl, err := Parse(c.src)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.src, err)
			continue
		}
		_, err = tmpl.Render(testMessages, Options{})
		var ue *UnsupportedError
		if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ue) {
			t.Errorf("Render(%q): got %v, want an unsupported-construct error", c.src, err)
			continue
		}
		if !strings.Contains(ue.Construct, c.construct) || ue.Line != c.line {
			t.Errorf("Render(%q): got %q at line %d, want %q at line %d", c.src, ue.Construct, ue.Line, c.construct, c.line)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	cases := []struct {
		src  string
		line int
	}{
		{"{% if x %}never closed", 1},
		{"a\n{% endif %}", 2},
		{"{% for x in [1] %}{% endif %}", 1},
		{"{{ }}", 1},
		{"\n{{ 1 + }}", 2},
		{"{% for x in %}{% endfor %}", 1},
		{"{% set 1 = 2 %}", 1},
		{"{% break %}", 1},
		{"{% for x in [1] %}{% endfor %}{% continue %}", 1},
		{"{{ x is defined is none }}", 1},
		{"{{ f(a=1, 2) }}", 1},
		{"{% if x %}{% else %}{% else %}{% endif %}", 1},
		{"{{ x.(1) }}", 1},
		{"{% %}", 1},
		{"{{ a b }}", 1},
		{"{% endfor extra %}", 1},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q): got %v, want *SyntaxError", c.src, err)
			continue
		}
		if se.Line != c.line {
			t.Errorf("Parse(%q): %v at line %d, want line %d", c.src, err, se.Line, c.line)
		}
	}
}

func TestRaiseError(t *testing.T) {
	tmpl, err := Parse("{% if messages[0].role != 'user' %}\n{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(testMessages, Options{})
	var re *RaiseError
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want *RaiseError", err)
	}
	if re.Message != "Conversation roles must alternate user/assistant/user/assistant/..." || re.Line != 2 {
		t.Fatalf("got %+v", re)
	}
	if errors.Is(err, ErrUnsupported) {
		t.Fatal("a raise_exception is not an unsupported construct")
	}
}

func TestRenderErrorsCarryLines(t *testing.T) {
	tmpl, err := Parse("ok\n\n{{ messages[0].missing.deeper }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(testMessages, Options{})
	var re *RenderError
	if !errors.As(err, &re) || re.Line != 3 {
		t.Fatalf("got %v, want a RenderError at line 3", err)
	}
	if !strings.Contains(err.Error(), "has no attribute 'missing'") {
		t.Fatalf("error %q does not say what is undefined", err)
	}
}

func TestLimits(t *testing.T) {
	tmpl, err := Parse("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	tmpl.maxSteps = 100000
	if _, err := tmpl.Render(nil, Options{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("steps: got %v, want ErrLimit", err)
	}
	tmpl, err = Parse("{{ 'x' * 100000000 }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(nil, Options{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("string size: got %v, want ErrLimit", err)
	}
}
