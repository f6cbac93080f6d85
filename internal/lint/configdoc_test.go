package lint

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/internal/config"
)

// envName matches a chorus environment variable's name in a Go string
// literal.
var envName = regexp.MustCompile(`"(CHORUS_[A-Z0-9_]*[A-Z0-9])"`)

// envRead matches a call that reads the process environment.
var envRead = regexp.MustCompile(`\bos\.(Getenv|LookupEnv|Environ)\(`)

// goFiles calls fn with every Go file of the module (its path relative
// to the root), leaving out hidden folders and testdata.
func goFiles(t *testing.T, root string, fn func(rel string, data []byte)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
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
		rel, _ := filepath.Rel(root, p)
		fn(filepath.ToSlash(rel), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConfigurationTableListsEnv fails when a CHORUS_ variable that Go
// code (tests included) names is missing from internal/config's table,
// the one list of them.
func TestConfigurationTableListsEnv(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	goFiles(t, root, func(rel string, data []byte) {
		for _, m := range envName.FindAllSubmatch(data, -1) {
			if _, ok := where[string(m[1])]; !ok {
				where[string(m[1])] = rel
			}
		}
	})
	if len(where) == 0 {
		t.Fatal("no CHORUS_ variables found in the code")
	}
	var missing []string
	for name, file := range where {
		if _, ok := config.Lookup(name); !ok {
			missing = append(missing, name+" ("+file+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("%s: not in internal/config's table; add a Var (name, default, meaning, reader) to internal/config/vars.go and run go run ./cmd/confdoc", m)
	}
}

// TestEnvironmentReadAtTheEdge fails when library code reads the
// environment itself: only internal/config does, for every program;
// the commands under cmd/ read their launchers' variables (torchrun's,
// Slurm's); tests and test helpers read theirs.
func TestEnvironmentReadAtTheEdge(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goFiles(t, root, func(rel string, data []byte) {
		switch {
		case strings.HasSuffix(rel, "_test.go"), strings.HasPrefix(rel, "internal/config/"),
			strings.HasPrefix(rel, "internal/testutil/"), strings.HasPrefix(rel, "cmd/"), strings.HasPrefix(rel, "examples/"):
			return
		}
		for i, line := range strings.Split(string(data), "\n") {
			if envRead.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d: reads the environment (%s); take an option instead, decoded by internal/config at the program's edge", rel, i+1, strings.TrimSpace(line))
			}
		}
	})
}

// TestConfigurationDocCurrent fails when docs/configuration.md is not
// what internal/config's table renders.
func TestConfigurationDocCurrent(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(page, config.Markdown()) {
		t.Error("docs/configuration.md is stale: run go run ./cmd/confdoc")
	}
}
