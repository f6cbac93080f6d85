package hf_test

import (
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/chorus-rt/chorus/model/chat"
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

// TestGoldenChatIDs checks model/chat and model/tokenizer together
// against transformers' apply_chat_template(tokenize=True) of one
// conversation with the generation prompt (golden chat_ids): the
// template of the folder rendered, then encoded without added specials.
func TestGoldenChatIDs(t *testing.T) {
	g := readGolden(t)
	msgs := []chat.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Hello, world!"}}
	for name, m := range g.Models {
		dir := filepath.Join("testdata", name)
		c, err := chat.LoadFolder(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		text, err := c.Render(msgs, chat.Options{AddGenerationPrompt: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := tok.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]int, len(m.ChatIDs))
		for i, id := range m.ChatIDs {
			want[i] = int(id)
		}
		if len(want) == 0 || !slices.Equal(ids, want) {
			t.Errorf("%s: chat ids %v, transformers %v (text %q)", name, ids, want, text)
		}
	}
}
