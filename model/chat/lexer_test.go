package chat

import (
	"errors"
	"reflect"
	"testing"
)

func kinds(toks []token) []tokenKind {
	out := make([]tokenKind, len(toks))
	for i, t := range toks {
		out[i] = t.kind
	}
	return out
}

func TestLexTokens(t *testing.T) {
	cases := []struct {
		src   string
		kinds []tokenKind
		vals  []string
	}{
		{"hi", []tokenKind{tokData, tokEOF}, []string{"hi", ""}},
		{"a{{ x }}b", []tokenKind{tokData, tokVarBegin, tokName, tokVarEnd, tokData, tokEOF}, []string{"a", "", "x", "", "b", ""}},
		{"{% if a == 'b' %}", []tokenKind{tokBlockBegin, tokName, tokName, tokOp, tokString, tokBlockEnd, tokEOF}, []string{"", "if", "a", "==", "b", "", ""}},
		{"{{ a//b**c }}", []tokenKind{tokVarBegin, tokName, tokOp, tokName, tokOp, tokName, tokVarEnd, tokEOF}, []string{"", "a", "//", "b", "**", "c", "", ""}},
		{"{{ {'a': 1} }}", []tokenKind{tokVarBegin, tokOp, tokString, tokOp, tokInt, tokOp, tokVarEnd, tokEOF}, []string{"", "{", "a", ":", "1", "}", "", ""}},
		{"{{ x[1:] }}", []tokenKind{tokVarBegin, tokName, tokOp, tokInt, tokOp, tokOp, tokVarEnd, tokEOF}, []string{"", "x", "[", "1", ":", "]", "", ""}},
		{"{# comment #}x", []tokenKind{tokData, tokEOF}, []string{"x", ""}},
		{"{{ 1.5 }}{{ 2 }}", []tokenKind{tokVarBegin, tokFloat, tokVarEnd, tokVarBegin, tokInt, tokVarEnd, tokEOF}, []string{"", "1.5", "", "", "2", "", ""}},
		{"{{ x.0.1 }}", []tokenKind{tokVarBegin, tokName, tokOp, tokInt, tokOp, tokInt, tokVarEnd, tokEOF}, []string{"", "x", ".", "0", ".", "1", "", ""}},
	}
	for _, c := range cases {
		toks, err := lex(c.src)
		if err != nil {
			t.Errorf("lex(%q): %v", c.src, err)
			continue
		}
		if !reflect.DeepEqual(kinds(toks), c.kinds) {
			t.Errorf("lex(%q) kinds = %v, want %v", c.src, kinds(toks), c.kinds)
			continue
		}
		for i, tk := range toks {
			if tk.val != c.vals[i] {
				t.Errorf("lex(%q) token %d = %q, want %q", c.src, i, tk.val, c.vals[i])
			}
		}
	}
}

func TestLexNumbers(t *testing.T) {
	cases := map[string]Value{
		"0": int64(0), "42": int64(42), "1_000": int64(1000), "0x1F": int64(31), "0o17": int64(15),
		"0b101": int64(5), "1.5": 1.5, "1e3": 1000.0, "1.5E-2": 0.015, "1_0.2_5": 10.25,
	}
	for src, want := range cases {
		toks, err := lex("{{ " + src + " }}")
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if len(toks) != 4 || toks[1].num != want {
			t.Errorf("%s: got %+v, want %v", src, toks[1], want)
		}
	}
}

func TestLexLines(t *testing.T) {
	src := "a\n{# two\nlines #}\n{% if x %}\n{{ y\n }}{% endif %}"
	toks, err := lex(src)
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, tk := range toks {
		if tk.kind == tokName {
			lines = append(lines, tk.line)
		}
	}
	// if, x on line 4; y on line 5; endif on line 6.
	if want := []int{4, 4, 5, 6}; !reflect.DeepEqual(lines, want) {
		t.Fatalf("name lines = %v, want %v", lines, want)
	}
}

func TestUnescapeString(t *testing.T) {
	cases := map[string]string{
		`plain`:           "plain",
		`a\nb\tc`:         "a\nb\tc",
		`\'\"\\`:          `'"\`,
		`\x41\u00e9\101`:  "AéA",
		`\U0001F600`:      "😀",
		`\d`:              `\d`,
		"line\\\ncont":    "linecont",
		`é\n`:             "é\n",
		`\é`:              `\xe9`, // jinja2's backslashreplace/unicode-escape round trip
		`\a\b\f\v\r\0\07`: "\a\b\f\v\r\x00\x07",
	}
	for in, want := range cases {
		got, err := unescapeString(in)
		if err != nil || got != want {
			t.Errorf("unescapeString(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`\x4`, `\u12`, `\U00110000`} {
		if _, err := unescapeString(bad); err == nil {
			t.Errorf("unescapeString(%q): want error", bad)
		}
	}
	if _, err := unescapeString(`\N{BULLET}`); !errors.Is(err, ErrUnsupported) {
		t.Errorf(`\N{...}: got %v, want ErrUnsupported`, err)
	}
}

func TestLexErrors(t *testing.T) {
	cases := map[string]int{ // source -> line of the error
		"a\n{# never closed":         2,
		"{{ 'unterminated }}":        1,
		"\n\n{{ x ! y }}":            3,
		"{{ (1 }}":                   1,
		"{{ ] }}":                    1,
		"{% raw %}no end":            1,
		"{{ 99999999999999999999 }}": 1,
	}
	for src, line := range cases {
		_, err := lex(src)
		var se *SyntaxError
		var ue *UnsupportedError
		switch {
		case errors.As(err, &se):
			if se.Line != line {
				t.Errorf("lex(%q): error %v at line %d, want line %d", src, err, se.Line, line)
			}
		case errors.As(err, &ue):
			if ue.Line != line {
				t.Errorf("lex(%q): error %v at line %d, want line %d", src, err, ue.Line, line)
			}
		default:
			t.Errorf("lex(%q): got %v, want a syntax error", src, err)
		}
	}
}
