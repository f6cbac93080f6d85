package hf_test

import (
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/chorus-rt/chorus/model/tokenizer"
)

// TestGoldenPromptIDs checks that model/tokenizer turns each golden
// prompt into the ids transformers' tokenizer gave (with the special
// tokens the tokenizer adds, as generation does), and back into the text.
func TestGoldenPromptIDs(t *testing.T) {
	g := readGolden(t)
	var names []string
	for name := range g.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		tok, err := tokenizer.Load(filepath.Join("testdata", name, "tokenizer.json"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range g.Models[name].Prompts {
			ids, err := tok.Encode(p.Text, true)
			if err != nil {
				t.Fatalf("%s %q: %v", name, p.Text, err)
			}
			want := make([]int, len(p.IDs))
			for i, id := range p.IDs {
				want[i] = int(id)
			}
			if !slices.Equal(ids, want) {
				t.Errorf("%s %q: ids %v, transformers %v", name, p.Text, ids, want)
			}
			text, err := tok.Decode(want, true)
			if err != nil || text != p.Text {
				t.Errorf("%s: decode %v = %q, %v; want %q", name, want, text, err, p.Text)
			}
		}
	}
}
