package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// goldenNames are the tokenizers testdata/gen.py makes.
var goldenNames = []string{"llama3", "qwen2", "gpt2", "flags", "llama2", "mistral"}

// readJSONLines decodes every line of a gzip-compressed JSON-lines file.
func readJSONLines(t testing.TB, path string, each func(line []byte) error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("golden data missing (regenerate with testdata/gen.py, see doc.go): %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if err := each(sc.Bytes()); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// loadCorpus reads testdata/corpus.jsonl.gz: one JSON string per document.
func loadCorpus(t testing.TB) []string {
	t.Helper()
	var docs []string
	readJSONLines(t, filepath.Join("testdata", "corpus.jsonl.gz"), func(line []byte) error {
		var s string
		if err := json.Unmarshal(line, &s); err != nil {
			return err
		}
		docs = append(docs, s)
		return nil
	})
	if len(docs) == 0 {
		t.Fatal("empty corpus")
	}
	return docs
}

func loadGolden(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tok, err := Load(filepath.Join("testdata", name, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type goldenRecord struct {
	Name string  `json:"name"`
	I    *int    `json:"i"`
	R    *int    `json:"r"`
	IDs  []int   `json:"ids"`
	IDsS []int   `json:"ids_s"`
	D    *string `json:"d"`
	DS   *string `json:"ds"`
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) == len(b) {
		return -1
	}
	return min(len(a), len(b))
}

// describe explains an id mismatch: where in the text it starts, and the
// tokens on both sides.
func describe(tok *Tokenizer, doc string, want, got []int) string {
	k := firstDiff(want, got)
	prefix, _ := tok.Decode(want[:k], false)
	off := min(len(prefix), len(doc))
	lo, hi := max(0, off-40), min(len(doc), off+40)
	for lo > 0 && !utf8.RuneStart(doc[lo]) {
		lo--
	}
	for hi < len(doc) && !utf8.RuneStart(doc[hi]) {
		hi++
	}
	toks := func(ids []int) string {
		var b strings.Builder
		for _, id := range ids[max(0, k-3):min(len(ids), k+6)] {
			s, _ := tok.Token(id)
			fmt.Fprintf(&b, " %d:%q", id, s)
		}
		return b.String()
	}
	return fmt.Sprintf("first difference at token %d (text offset ~%d), text window %q\n  want (%d ids):%s\n  got  (%d ids):%s",
		k, off, doc[lo:hi], len(want), toks(want), len(got), toks(got))
}

func TestGolden(t *testing.T) {
	docs := loadCorpus(t)
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tok := loadGolden(t, name)
			var ndocs, ntokens, nrand, bad int
			fail := func(format string, args ...any) {
				bad++
				if bad <= 5 {
					t.Errorf(format, args...)
				}
			}
			readJSONLines(t, filepath.Join("testdata", name, "golden.jsonl.gz"), func(line []byte) error {
				var r goldenRecord
				if err := json.Unmarshal(line, &r); err != nil {
					return err
				}
				if r.Name != "" {
					return nil // header
				}
				doc := ""
				if r.I != nil {
					if *r.I >= len(docs) {
						return fmt.Errorf("document %d is not in the corpus", *r.I)
					}
					if *r.I%goldenStride != 0 {
						return nil
					}
					doc = docs[*r.I]
					ndocs++
					ntokens += len(r.IDs)
					got, err := tok.Encode(doc, false)
					if err != nil {
						fail("doc %d: Encode: %v", *r.I, err)
					} else if firstDiff(r.IDs, got) >= 0 {
						fail("doc %d: Encode(addSpecial=false): %s", *r.I, describe(tok, doc, r.IDs, got))
					}
					if r.IDsS != nil {
						got, err := tok.Encode(doc, true)
						if err != nil || firstDiff(r.IDsS, got) >= 0 {
							fail("doc %d: Encode(addSpecial=true): err %v\n  want %v\n  got  %v", *r.I, err, head(r.IDsS), head(got))
						}
					}
				} else {
					nrand++
				}
				want := doc
				if r.D != nil {
					want = *r.D
				}
				wantS := want
				if r.DS != nil {
					wantS = *r.DS
				}
				where := fmt.Sprintf("doc %v", deref(r.I))
				if r.R != nil {
					where = fmt.Sprintf("random ids %d %v", *r.R, r.IDs)
				}
				for _, skip := range []bool{false, true} {
					w := want
					if skip {
						w = wantS
					}
					got, err := tok.Decode(r.IDs, skip)
					if err != nil || got != w {
						fail("%s: Decode(skipSpecial=%v): err %v\n  want %q\n  got  %q", where, skip, err, clip(w), clip(got))
					}
				}
				return nil
			})
			if ndocs == 0 {
				t.Fatal("no documents in the golden file")
			}
			t.Logf("%s: %d documents, %d tokens, %d random decodes, %d mismatches", name, ndocs, ntokens, nrand, bad)
		})
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func head(ids []int) []int { return ids[:min(len(ids), 24)] }

func clip(s string) string {
	if len(s) <= 300 {
		return s
	}
	return s[:300] + "…"
}

// TestPretokGolden checks the hand-written regex scanners against the splits
// tokenizers made of random short strings.
func TestPretokGolden(t *testing.T) {
	scanners := map[string]func(string, func(int, int)){
		"gpt2":   knownScanner(patGPT2),
		"llama3": knownScanner(patLlama3),
		"qwen2":  knownScanner(patQwen2),
	}
	n, bad := 0, 0
	readJSONLines(t, filepath.Join("testdata", "pretok.jsonl.gz"), func(line []byte) error {
		var r struct {
			P   string   `json:"p"`
			S   string   `json:"s"`
			Out []string `json:"out"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		n++
		var got []string
		scanners[r.P](r.S, func(a, b int) { got = append(got, r.S[a:b]) })
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", r.Out) {
			bad++
			if bad <= 10 {
				t.Errorf("%s %q:\n  want %q\n  got  %q", r.P, r.S, r.Out, got)
			}
		}
		return nil
	})
	if n == 0 {
		t.Fatal("no cases")
	}
	t.Logf("%d cases, %d mismatches", n, bad)
}
