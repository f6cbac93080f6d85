package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// smallSeed shrinks a golden tokenizer.json to its first ids, keeping every
// other section, so that fuzzing starts from each real configuration.
func smallSeed(t testing.TB, name string, keep int) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", name, "tokenizer.json"))
	if err != nil {
		t.Fatalf("golden data missing: %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	model := doc["model"].(map[string]any)
	vocab := map[string]any{}
	for tok, id := range model["vocab"].(map[string]any) {
		if id.(float64) < float64(keep) {
			vocab[tok] = id
		}
	}
	var merges []any
	for _, m := range model["merges"].([]any) {
		var a, b string
		switch m := m.(type) {
		case string:
			for i := 0; i < len(m); i++ {
				if m[i] == ' ' {
					a, b = m[:i], m[i+1:]
					break
				}
			}
		case []any:
			a, b = m[0].(string), m[1].(string)
		}
		_, okA := vocab[a]
		_, okB := vocab[b]
		_, okAB := vocab[a+b]
		if okA && okB && okAB {
			merges = append(merges, m)
		}
	}
	model["vocab"], model["merges"] = vocab, merges
	out, _ := json.Marshal(doc)
	return out
}

func FuzzParse(f *testing.F) {
	for _, name := range goldenNames {
		f.Add(smallSeed(f, name, 400))
	}
	f.Add(tinyJSON(f))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[]},"decoder":{"type":"Strip","content":"a","start":9,"stop":9}}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]},"normalizer":{"type":"Replace","pattern":{"Regex":""},"content":"x"}}`))
	f.Add([]byte(`{"added_tokens":[{"content":""},{"id":-5,"content":"x"}],"model":{"vocab":{"x":2147483646},"merges":[]}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "Hello world's 123 <s>[INST]", "日本 \n\n x  ", "\u3000\u00a0😀\r\n"} {
			for _, add := range []bool{false, true} {
				ids, err := tok.Encode(s, add)
				if err != nil {
					continue
				}
				_, _ = tok.Decode(ids, false)
				_, _ = tok.Decode(ids, true)
			}
		}
		_, _ = tok.Decode([]int{0, 1, 2, 3, 255, 1000, 1 << 40}, false)
		tok.AddedTokens()
		tok.VocabSize()
	})
}

func FuzzEncode(f *testing.F) {
	docs := loadCorpus(f)
	for i := 0; i < len(docs) && i < 80; i++ {
		f.Add(docs[i])
	}
	for _, s := range []string{"", " ", "a\xffb", "'S'LL  \n\n\t x", "<|begin_of_text|>hi<|eot_id|>", "1234567890", "\u0301\u0301"} {
		f.Add(s)
	}
	llama3 := loadGolden(f, "llama3")
	others := []*Tokenizer{loadGolden(f, "qwen2"), loadGolden(f, "flags"), loadGolden(f, "llama2"), loadGolden(f, "mistral")}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := llama3.Encode(s, false)
		if !utf8.ValidString(s) {
			if err != ErrInvalidUTF8 {
				t.Fatalf("invalid UTF-8 %q: err = %v", s, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		// Byte-level BPE with no normalizer round-trips exactly.
		if got, err := llama3.Decode(ids, false); err != nil || got != s {
			t.Fatalf("round trip of %q gave %q (%v)", s, got, err)
		}
		for _, tok := range others {
			ids, err := tok.Encode(s, true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tok.Decode(ids, true); err != nil {
				t.Fatal(err)
			}
		}
	})
}
