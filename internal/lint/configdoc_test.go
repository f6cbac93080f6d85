package lint

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// envName matches a chorus environment variable's name in a Go string
// literal.
var envName = regexp.MustCompile(`"(CHORUS_[A-Z0-9_]*[A-Z0-9])"`)

// TestConfigurationDocListsEnv fails when a CHORUS_ variable that Go code
// (tests included) names is missing from docs/configuration.md, the one
// page that lists them.
func TestConfigurationDocListsEnv(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range envName.FindAllSubmatch(data, -1) {
			if _, ok := where[string(m[1])]; !ok {
				rel, _ := filepath.Rel(root, p)
				where[string(m[1])] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(where) == 0 {
		t.Fatal("no CHORUS_ variables found in the code")
	}
	var missing []string
	for name, file := range where {
		if !strings.Contains(string(page), "`"+name+"`") {
			missing = append(missing, name+" ("+file+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("%s: not in docs/configuration.md; add a row (name, default, meaning, who reads it)", m)
	}
}
