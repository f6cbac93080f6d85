package lint

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docLinkRe matches the target of a markdown link or image.
var docLinkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks checks every relative link of README.md and docs/*.md
// (bench/results' notes through docs/benchmarks.md, whose generator
// rewrites their links): the file exists, and a #fragment names a
// heading of the target page (as GitHub makes heading anchors), so pages
// can be merged and renamed without leaving dead links behind.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages := []string{filepath.Join(root, "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, docs...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, m := range docLinkRe.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s: %v", rel, target, err)
					continue
				}
			}
			checked++
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s links to %s: %v", rel, target, err)
				continue
			}
			if !a[frag] {
				t.Errorf("%s links to %s: no heading of %s has the anchor #%s", rel, target, filepath.Base(path), frag)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative link found: the pattern of this test no longer matches the pages")
	}
}

// stripCode blanks fenced code blocks and inline code, whose brackets
// are not links.
func stripCode(md string) string {
	var b strings.Builder
	fence := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			b.WriteString("\n")
			continue
		}
		if fence {
			b.WriteString("\n")
			continue
		}
		parts := strings.Split(l, "`")
		for i, p := range parts {
			if i%2 == 0 {
				b.WriteString(p)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// headingAnchors returns the anchors GitHub gives the headings of md:
// lower case, letters, digits, '-' and '_' kept, spaces to '-', other
// characters dropped; a repeated anchor gets -1, -2, ...
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

func TestHeadingAnchors(t *testing.T) {
	a := headingAnchors("# The CPU executor (`algo/cpuexec`, `algo/run`)\n```\n# not a heading\n```\n## Model\n### Model\n## Llama-3-8B decode: 0.71 of the bound\n")
	for _, want := range []string{"the-cpu-executor-algocpuexec-algorun", "model", "model-1", "llama-3-8b-decode-071-of-the-bound"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block made an anchor")
	}
}
