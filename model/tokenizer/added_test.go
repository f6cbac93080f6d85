package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// tinyJSON builds a small byte-fallback BPE tokenizer with added tokens of
// every flag: <mask> lstrip, <sep> rstrip, HELLO single_word and normalized
// (under a Lowercase normalizer), [x] lstrip and rstrip, [x]]
// (longest match), ab (already in the vocab, special) and zz. The ids in
// added_tokens are deliberately wrong: tokenizers assigns its own.
func tinyJSON(t testing.TB) []byte {
	t.Helper()
	vocab := map[string]int{"<unk>": 0}
	for b := 0; b < 256; b++ {
		vocab[fmt.Sprintf("<0x%02X>", b)] = len(vocab)
	}
	for c := 'a'; c <= 'z'; c++ {
		vocab[string(c)] = len(vocab)
	}
	vocab[" "] = len(vocab)
	vocab["ab"] = len(vocab)
	at := func(id int, content string, special, normalized, lstrip, rstrip, single bool) map[string]any {
		return map[string]any{"id": id, "content": content, "special": special, "normalized": normalized,
			"lstrip": lstrip, "rstrip": rstrip, "single_word": single}
	}
	doc := map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			at(300, "<mask>", true, false, true, false, false),
			at(301, "<sep>", true, false, false, true, false),
			at(302, "HELLO", false, true, false, false, true),
			at(303, "[x]", true, false, true, true, false),
			at(304, "[x]]", false, false, false, false, false),
			at(305, "ab", true, false, false, false, false),
			at(999, "zz", false, false, false, false, false),
		},
		"normalizer":    map[string]any{"type": "Lowercase"},
		"pre_tokenizer": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
			"vocab": vocab, "merges": [][]string{{"a", "b"}}},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestAddedTokens(t *testing.T) {
	tok, err := Parse(tinyJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	// Expected values from tokenizers 0.23 on the same file.
	cases := []struct {
		in       string
		ids      []int
		d, dSkip string
	}{
		{"a <mask> b", []int{257, 285, 283, 258}, "a<mask> b", "a b"},
		{"a<mask>", []int{257, 285}, "a<mask>", "a"},
		{"  <mask>", []int{285}, "<mask>", ""},
		{"x <sep>  y", []int{280, 283, 286, 281}, "x <sep>y", "x y"},
		{"<sep>\n\nz", []int{286, 282}, "<sep>z", "z"},
		{"hello world", []int{287, 283, 279, 271, 274, 268, 260}, "hello world", "hello world"},
		{"Hello!", []int{287, 34}, "hello!", "hello!"},
		{"ohello", []int{271, 264, 261, 268, 268, 271}, "ohello", "ohello"},
		{"hello_x", []int{264, 261, 268, 268, 271, 96, 280}, "hello_x", "hello_x"},
		{"HELLO", []int{287}, "hello", "hello"},
		{"say hello.", []int{275, 257, 281, 283, 287, 47}, "say hello.", "say hello."},
		{"a [x] b", []int{257, 288, 258}, "a[x]b", "ab"},
		{"[x]]", []int{289}, "[x]]", "[x]]"},
		{"[x]]]", []int{289, 94}, "[x]]]", "[x]]]"},
		{"abab", []int{284, 284}, "abab", ""},
		{"zz top", []int{290, 283, 276, 271, 272}, "zz top", "zz top"},
		{"日本", []int{231, 152, 166, 231, 157, 173}, "日本", "日本"},
		{"aéb", []int{257, 196, 170, 258}, "aéb", "aéb"},
		{"<MASK>", []int{61, 269, 257, 275, 267, 63}, "<mask>", "<mask>"},
		{"xab", []int{280, 284}, "xab", "x"},
		{"<mask><sep>  <mask>", []int{285, 286, 285}, "<mask><sep><mask>", ""},
		{"hello hello", []int{287, 283, 287}, "hello hello", "hello hello"},
		{"", []int{}, "", ""},
	}
	for _, c := range cases {
		ids, err := tok.Encode(c.in, false)
		if err != nil || fmt.Sprint(ids) != fmt.Sprint(c.ids) {
			t.Errorf("Encode(%q) = %v, %v; want %v", c.in, ids, err, c.ids)
		}
		for _, skip := range []bool{false, true} {
			want := c.d
			if skip {
				want = c.dSkip
			}
			if got, err := tok.Decode(c.ids, skip); err != nil || got != want {
				t.Errorf("Decode(%v, %v) = %q, %v; want %q", c.ids, skip, got, err, want)
			}
		}
	}
	var got []string
	for _, a := range tok.AddedTokens() {
		got = append(got, fmt.Sprintf("%d:%s:%v", a.ID, a.Content, a.Special))
	}
	want := "284:ab:true 285:<mask>:true 286:<sep>:true 287:HELLO:false 288:[x]:true 289:[x]]:false 290:zz:false"
	if strings.Join(got, " ") != want {
		t.Errorf("AddedTokens = %s\nwant          %s", strings.Join(got, " "), want)
	}
	if s, _ := tok.Token(287); s != "hello" {
		t.Errorf("Token(287) = %q, want the normalized content \"hello\"", s)
	}
	if id, ok := tok.TokenID("<sep>"); !ok || id != 286 {
		t.Errorf("TokenID(<sep>) = %d, %v", id, ok)
	}
	if n := tok.VocabSize(); n != 291 {
		t.Errorf("VocabSize = %d, want 291", n)
	}
	if !tok.IsSpecial(285) || tok.IsSpecial(287) || tok.IsSpecial(5) {
		t.Error("IsSpecial is wrong")
	}
}
