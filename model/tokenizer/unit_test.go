package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestByteLevelAlphabet(t *testing.T) {
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', '\t': 'ĉ', 'a': 'a', '!': '!', 0: 'Ā', 0x7F: 'ġ', 0xAD: 'Ń', 0xA0: 'ł', 0xFF: 'ÿ'} {
		if got := byteToRune[b]; got != want {
			t.Errorf("byte %#x maps to %q, want %q", b, got, want)
		}
	}
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteToRune[b]
		if seen[r] || runeToByte[r] != int16(b) {
			t.Fatalf("byte %#x: the table is not a bijection", b)
		}
		seen[r] = true
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	if got := string(byteLevelDecodeToken(nil, byteLevelEncode(string(all)))); got != string(all) {
		t.Error("byte-level round trip failed")
	}
	// A token with a character outside the alphabet stands for its own bytes.
	if got := string(byteLevelDecodeToken(nil, "Ġa€")); got != "Ġa€" {
		t.Errorf("mixed token decodes to %q", got)
	}
}

func TestLossyUTF8(t *testing.T) {
	// The same as Rust's String::from_utf8_lossy (checked through tokenizers).
	for in, want := range map[string]string{
		"Hi \xF0\x90\x80W":        "Hi \uFFFDW",
		"\xE2\x82A":               "\uFFFDA",
		"\xC0\x80":                "\uFFFD\uFFFD",
		"\xED\xA0\x80":            "\uFFFD\uFFFD\uFFFD",
		"\xF4\x90\x80\x80":        "\uFFFD\uFFFD\uFFFD\uFFFD",
		"\xF0\x9F\x98":            "\uFFFD",
		"\xFF":                    "\uFFFD",
		"\xE0\x80\x80":            "\uFFFD\uFFFD\uFFFD",
		"\xF0\x9F\x98\x80\x80":    "😀\uFFFD",
		"plain ascii and ünïcödé": "plain ascii and ünïcödé",
	} {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDecoders(t *testing.T) {
	cases := []struct {
		name string
		d    decoder
		in   []string
		want string
	}{
		{"bytefallback", byteFallbackDecoder{}, []string{"<0xE4>", "<0xBD>", "<0xA0>"}, "你"},
		{"bytefallback-invalid", byteFallbackDecoder{}, []string{"<0xE4>", "<0xBD>", "a", "<0x41>"}, "\uFFFD\uFFFDaA"},
		{"bytefallback-odd", byteFallbackDecoder{}, []string{"<0x+F>", "<0xzz>", "<0x4>"}, "\x0f<0xzz><0x4>"},
		{"bytefallback-lower", byteFallbackDecoder{}, []string{"<0xe4>", "<0xbd>", "<0xa0>"}, "你"},
		{"strip", stripDecoder{' ', 1, 0}, []string{"  a", " b", "c "}, " abc "},
		{"strip-both", stripDecoder{'x', 2, 2}, []string{"xxaxx", "xax", "axxx", "xxab"}, "aaaxab"},
		{"strip-overlap", stripDecoder{'x', 2, 2}, []string{"x", "xxx"}, ""}, // tokenizers panics here
		{"metaspace-first", metaspaceDecoder{'▁', prependFirst}, []string{"▁Hey", "▁friend▁", "!"}, "Hey friend !"},
		{"metaspace-never", metaspaceDecoder{'▁', prependNever}, []string{"▁Hey", "▁friend▁", "!"}, " Hey friend !"},
		{"replace", replaceDecoder{replaceNormalizer{m: literalMatcher("▁"), lit: "▁", content: " "}}, []string{"▁a▁", "b"}, " a b"},
		{"fuse", fuseDecoder{}, []string{"a", "b"}, "ab"},
	}
	for _, c := range cases {
		if got := strings.Join(c.d.decodeChain(c.in), ""); got != c.want {
			t.Errorf("%s: %q -> %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// withModel returns tinyJSON with some model fields changed.
func withModel(t *testing.T, change map[string]any) []byte {
	var doc map[string]any
	if err := json.Unmarshal(tinyJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc["model"].(map[string]any)
	for k, v := range change {
		m[k] = v
	}
	data, _ := json.Marshal(doc)
	return data
}

func TestUnknownAndByteFallback(t *testing.T) {
	// Expected ids from tokenizers 0.23.
	cases := []struct {
		change map[string]any
		in     string
		want   []int
	}{
		{nil, "日本", []int{231, 152, 166, 231, 157, 173}},
		{map[string]any{"byte_fallback": false}, "日本x", []int{0, 280}},
		{map[string]any{"byte_fallback": false}, "a日b本本", []int{257, 0, 258, 0}},
		{map[string]any{"byte_fallback": false, "fuse_unk": false}, "日本x", []int{0, 0, 280}},
		{map[string]any{"byte_fallback": false, "fuse_unk": false}, "a日b本本", []int{257, 0, 258, 0, 0}},
		{map[string]any{"byte_fallback": false, "unk_token": nil}, "a日b", []int{284}}, // dropped, then merged
	}
	for _, c := range cases {
		tok, err := Parse(withModel(t, c.change))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tok.Encode(c.in, false)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%v: Encode(%q) = %v, %v; want %v", c.change, c.in, got, err, c.want)
		}
	}
	// An unk_token missing from the vocab fails when it is needed, as in tokenizers.
	tok, err := Parse(withModel(t, map[string]any{"byte_fallback": false, "unk_token": "<nope>"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Encode("ab", false); err != nil {
		t.Errorf("known text: %v", err)
	}
	if _, err := tok.Encode("日", false); err == nil || !strings.Contains(err.Error(), "<nope>") {
		t.Errorf("unknown text: err = %v", err)
	}
}

func TestEncodeErrors(t *testing.T) {
	tok, err := Parse(tinyJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Encode("a\xffb", false); err != ErrInvalidUTF8 {
		t.Errorf("invalid UTF-8: err = %v", err)
	}
	if _, err := tok.Decode([]int{1, -1}, false); err == nil {
		t.Error("negative id: no error")
	}
	if s, err := tok.Decode([]int{257, 1 << 40, 99999, 258}, false); err != nil || s != "ab" {
		t.Errorf("unknown ids are skipped: %q, %v", s, err)
	}
}

func TestRefusals(t *testing.T) {
	base := func(t *testing.T, field string, value any) []byte {
		var doc map[string]any
		if err := json.Unmarshal(tinyJSON(t), &doc); err != nil {
			t.Fatal(err)
		}
		doc[field] = value
		data, _ := json.Marshal(doc)
		return data
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"pretokenizer", base(t, "pre_tokenizer", map[string]any{"type": "BertPreTokenizer"}),
			`pre_tokenizer.type "BertPreTokenizer" is not supported (supported: Sequence, Split`},
		{"nested", base(t, "pre_tokenizer", map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Digits"}, map[string]any{"type": "Whitespace"}}}),
			`pre_tokenizer.pretokenizers[1].type "Whitespace" is not supported`},
		{"normalizer", base(t, "normalizer", map[string]any{"type": "Precompiled", "precompiled_charsmap": "x"}),
			`normalizer.type "Precompiled" is not supported`},
		{"decoder", base(t, "decoder", map[string]any{"type": "WordPiece"}), `decoder.type "WordPiece" is not supported`},
		{"processor", base(t, "post_processor", map[string]any{"type": "RobertaProcessing"}),
			`post_processor.type "RobertaProcessing" is not supported`},
		{"model", withModel(t, map[string]any{"type": "Unigram"}), `model.type "Unigram" is not supported (supported: BPE)`},
		{"dropout", withModel(t, map[string]any{"dropout": 0.1}), `model.dropout "0.1" is not supported`},
		{"merge", withModel(t, map[string]any{"merges": []any{"a q9"}}), `model.merges[0]: token "q9" is not in the vocab`},
		{"merges-form", withModel(t, map[string]any{"merges": []any{"a b c"}}), `model.merges[0] "a b c"`},
		{"regex", base(t, "pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `a(?=b)`},
			"behavior": "Isolated", "invert": false}), `pre_tokenizer.pattern regex "a(?=b)" is not supported`},
		{"behavior", base(t, "pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]any{"String": "a"},
			"behavior": "Sideways", "invert": false}), `pre_tokenizer.behavior "Sideways" is not supported`},
		{"truncation", base(t, "truncation", map[string]any{"max_length": 5}), `truncation is set`},
		{"version", base(t, "version", "2.0"), `version "2.0" is not supported`},
		{"template", base(t, "post_processor", map[string]any{"type": "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<bos>", "type_id": 0}}},
			"pair":   []any{}, "special_tokens": map[string]any{}}), `special_tokens lacks <bos>`},
		{"notjson", []byte(`{"model": `), `bad tokenizer.json`},
	}
	for _, c := range cases {
		_, err := Parse(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestTemplateAndRegexFallback(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(tinyJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	doc["post_processor"] = map[string]any{"type": "TemplateProcessing",
		"single": []any{
			map[string]any{"SpecialToken": map[string]any{"id": "<mask>", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			map[string]any{"SpecialToken": map[string]any{"id": "<sep>", "type_id": 0}}},
		"pair":           []any{},
		"special_tokens": map[string]any{"<mask>": map[string]any{"id": "<mask>", "ids": []int{285}, "tokens": []string{"<mask>"}}, "<sep>": map[string]any{"id": "<sep>", "ids": []int{286, 7}, "tokens": []string{"<sep>", "x"}}},
	}
	// A regex with no hand-written scanner goes to Go's regexp, \s rewritten.
	doc["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+`}, "behavior": "Removed", "invert": false}
	data, _ := json.Marshal(doc)
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		add  bool
		want string
	}{{false, "[257 258 259]"}, {true, "[285 257 258 259 286 7]"}} {
		got, err := tok.Encode("a\u3000b c", c.add)
		if err != nil || fmt.Sprint(got) != c.want {
			t.Errorf("Encode(addSpecial=%v) = %v, %v; want %s", c.add, got, err, c.want)
		}
	}
}

// TestPrefixSuffix covers continuing_subword_prefix and end_of_word_suffix
// (none of the golden tokenizers has non-empty ones), with no decoder
// (tokens joined by spaces). Expected values from tokenizers 0.23.
func TestPrefixSuffix(t *testing.T) {
	const data = `{"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false}, "post_processor": null, "decoder": null, "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "d": 4, "##a": 5, "##b": 6, "##c": 7, "##d": 8, "a</w>": 9, "b</w>": 10, "c</w>": 11, "d</w>": 12, "##a</w>": 13, "##b</w>": 14, "##c</w>": 15, "##d</w>": 16, "ab": 17, "##b##a": 18, "a##b": 19, "ab</w>": 20, "##cd</w>": 21, "##c##d</w>": 22, "abc": 23, "##bc": 24, "##bc</w>": 25}, "merges": [["a", "##b"], ["##c", "##d</w>"], ["ab", "##c"], ["##b", "##c</w>"]]}}`
	tok, err := Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, ids, dec string }{
		{"ab", "1 14", "a ##b</w>"},
		{"abc", "17 15", "ab ##c</w>"},
		{"abcd", "17 21", "ab ##cd</w>"},
		{"acd", "1 21", "a ##cd</w>"},
		{"bcd", "2 21", "b ##cd</w>"},
		{"a", "9", "a</w>"},
		{"dcba", "4 7 6 13", "d ##c ##b ##a</w>"},
		{"abc abcd x", "17 15 17 21 0", "ab ##c</w> ab ##cd</w> <unk>"},
		{"aabbccdd", "1 5 6 6 7 7 8 16", "a ##a ##b ##b ##c ##c ##d ##d</w>"},
	} {
		ids, err := tok.Encode(c.in, false)
		if got := strings.Trim(fmt.Sprint(ids), "[]"); err != nil || got != c.ids {
			t.Errorf("Encode(%q) = %s, %v; want %s", c.in, got, err, c.ids)
		}
		if got, _ := tok.Decode(ids, false); got != c.dec {
			t.Errorf("Decode(%v) = %q, want %q", ids, got, c.dec)
		}
	}
}
