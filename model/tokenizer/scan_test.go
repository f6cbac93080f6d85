package tokenizer

import (
	"fmt"
	"testing"
)

func scanAll(scan func(string, func(int, int)), s string) []string {
	var out []string
	scan(s, func(a, b int) { out = append(out, s[a:b]) })
	return out
}

// The expected splits are those of tokenizers 0.23 (Split, Isolated).
func TestScanners(t *testing.T) {
	gpt2, llama3, qwen2 := knownScanner(patGPT2), knownScanner(patLlama3), knownScanner(patQwen2)
	cases := []struct {
		in                  string
		gpt2, llama3, qwen2 []string
	}{
		{"Hello world", []string{"Hello", " world"}, nil, nil},
		// \s+(?!\S): a run followed by a non-space gives all but its last char.
		{"a  b", []string{"a", " ", " b"}, nil, nil},
		{"a   b", []string{"a", "  ", " b"}, nil, nil},
		{"trailing   ", []string{"trailing", "   "}, nil, nil},
		{"   ", []string{"   "}, nil, nil},
		{"  \t x", []string{"  \t", " x"}, nil, nil},
		{"x \n y", []string{"x", " \n", " y"}, nil, nil},
		// \s*[\r\n]+ (Llama 3, Qwen2) takes white space up to the last line break.
		{"x\n\ny", []string{"x", "\n", "\n", "y"}, []string{"x", "\n\n", "y"}, nil},
		{"  \n\n  hello", []string{"  \n\n ", " hello"}, []string{"  \n\n", " ", " hello"}, nil},
		{"\r\n\r\nx", []string{"\r\n\r", "\n", "x"}, []string{"\r\n\r\n", "x"}, nil},
		{"x \r\n y", []string{"x", " \r\n", " y"}, nil, nil},
		{"!!!\n\nfoo", []string{"!!!", "\n", "\n", "foo"}, []string{"!!!\n\n", "foo"}, nil},
		// [^\r\n\p{L}\p{N}]?\p{L}+ takes one leading non-letter.
		{"\t\tx", []string{"\t", "\t", "x"}, []string{"\t", "\tx"}, nil},
		{"a\tb", []string{"a", "\t", "b"}, []string{"a", "\tb"}, nil},
		{"(word", []string{"(", "word"}, []string{"(word"}, nil},
		{" ((x", []string{" ((", "x"}, nil, nil},
		{" \u00a0x", []string{" ", "\u00a0", "x"}, []string{" ", "\u00a0x"}, nil},
		{"\u3000日本語", []string{"\u3000", "日本語"}, []string{"\u3000日本語"}, nil},
		{"a\u200bb", []string{"a", "\u200b", "b"}, []string{"a", "\u200bb"}, nil},
		// Contractions: GPT-2 lower case only; Llama 3 any case, and ſ is s.
		{"she's", []string{"she", "'s"}, nil, nil},
		{"SHE'S", []string{"SHE", "'", "S"}, []string{"SHE", "'S"}, nil},
		{"I'LL go", []string{"I", "'", "LL", " go"}, []string{"I", "'LL", " go"}, nil},
		{"we'Re", []string{"we", "'", "Re"}, []string{"we", "'Re"}, nil},
		{"'\u017f", []string{"'", "\u017f"}, []string{"'\u017f"}, nil},
		{"'''s", []string{"'''", "s"}, []string{"'''", "s"}, nil},
		// Digits: GPT-2 runs, Llama 3 groups of three, Qwen2 one by one.
		{"1234567", []string{"1234567"}, []string{"123", "456", "7"}, []string{"1", "2", "3", "4", "5", "6", "7"}},
		{" 12345", []string{" 12345"}, []string{" ", "123", "45"}, []string{" ", "1", "2", "3", "4", "5"}},
		{"abc123def", []string{"abc", "123", "def"}, nil, []string{"abc", "1", "2", "3", "def"}},
		{"٣٤٥٦", []string{"٣٤٥٦"}, []string{"٣٤٥", "٦"}, []string{"٣", "٤", "٥", "٦"}},
		{"¹²³⁴", []string{"¹²³⁴"}, []string{"¹²³", "⁴"}, []string{"¹", "²", "³", "⁴"}},
		// Emoji and marks are neither letters nor numbers.
		{"😀😀 hi", []string{"😀😀", " hi"}, nil, nil},
		{" 👍🏽!", []string{" 👍🏽!"}, nil, nil},
		{"e\u0301", []string{"e", "\u0301"}, nil, nil},
		{"", nil, nil, nil},
	}
	for _, c := range cases {
		want := map[string][]string{"gpt2": c.gpt2, "llama3": c.llama3, "qwen2": c.qwen2}
		if want["llama3"] == nil {
			want["llama3"] = c.gpt2
		}
		if want["qwen2"] == nil {
			want["qwen2"] = want["llama3"]
		}
		for name, scan := range map[string]func(string, func(int, int)){"gpt2": gpt2, "llama3": llama3, "qwen2": qwen2} {
			got := scanAll(scan, c.in)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want[name]) {
				t.Errorf("%s(%q) = %q, want %q", name, c.in, got, want[name])
			}
		}
	}
}

func TestSplitBehaviors(t *testing.T) {
	// NormalizedString::split's own test: "The-final--countdown" on '-'.
	cases := map[behavior][]string{
		removed:            {"The", "final", "countdown"},
		isolated:           {"The", "-", "final", "-", "-", "countdown"},
		mergedWithPrevious: {"The-", "final-", "-", "countdown"},
		mergedWithNext:     {"The", "-final", "-", "-countdown"},
		contiguous:         {"The", "-", "final", "--", "countdown"},
	}
	for b, want := range cases {
		for _, invert := range []bool{false} {
			var got []string
			out, _ := splitBy(nil, piece{"The-final--countdown", -1, true}, nil,
				runeMatcher(func(r rune) bool { return r == '-' }), b, invert)
			for _, p := range out {
				got = append(got, p.text)
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Errorf("behavior %d: got %q, want %q", b, got, want)
			}
		}
	}
}

func TestOnigToGo(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`\s+`, `[` + wsClassBody + `]+`},
		{`[^\s\p{L}]`, `[^` + wsClassBody + `\p{L}]`},
		{`\d+|\w`, `\p{Nd}+|[` + wordBody + `]`},
		{`[]a]`, `[]a]`},
		{`[[:alpha:]\s]`, `[[:alpha:]` + wsClassBody + `]`},
		{`\.\\`, `\.\\`},
	} {
		got, err := onigToGo(c.in)
		if err != nil || got != c.want {
			t.Errorf("onigToGo(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := onigToGo(`[\S]`); err == nil {
		t.Error(`onigToGo([\S]) should fail`)
	}
}
