package lint

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// workWords are the shapes of references to work items rather than to the
// project: numbered work sessions, helpers, issues and tasks. The project's
// files speak of what the code does and why; who worked on it when lives
// in git. "session" is also a chorus word (a controller's session of
// workers), so only numbered mentions count, and two numbered forms are
// the project's own: "session 2: worker 1" (how a merged trace names the
// processes of its second session) and a shell redirection after the
// bench subcommand ("bench session 2>/dev/null").
var workWords = []struct {
	name string
	re   *regexp.Regexp
	// okAfter: a match directly followed by one of these bytes is not a
	// work reference.
	okAfter string
}{
	{"numbered session", regexp.MustCompile(`(?i)\bsessions?[ _-]?\d+(?:-\d+)?\b`), ":>"},
	{"numbered helper", regexp.MustCompile(`(?i)\bhelpers?[ _-]?\d+[a-z]?\b`), ""},
	{"numbered issue", regexp.MustCompile(`(?i)\bissues?[ _-]?#?\d+[a-z]?\b`), ""},
	{"numbered task", regexp.MustCompile(`(?i)\btasks?[ _-]?#?\d+\b`), ""},
}

// workWord returns the name of the first work reference in s and its
// text, or "" when there is none.
func workWord(s string) (name, text string) {
	if !mayHoldWorkWord(s) {
		return "", ""
	}
	for _, w := range workWords {
		for _, m := range w.re.FindAllStringIndex(s, -1) {
			if m[1] < len(s) && strings.IndexByte(w.okAfter, s[m[1]]) >= 0 {
				continue
			}
			return w.name, s[m[0]:m[1]]
		}
	}
	return "", ""
}

// mayHoldWorkWord is a cheap test that s names one of the words at all
// (the regular expressions are case-insensitive and slow, and most lines
// name none; under the race detector the scan of the tree took 45 s).
func mayHoldWorkWord(s string) bool {
	for i := 0; i+4 <= len(s); i++ {
		switch s[i] | 0x20 {
		case 's', 'h', 'i', 't':
			l := strings.ToLower(s[i:min(i+7, len(s))])
			if strings.HasPrefix(l, "session") || strings.HasPrefix(l, "helper") || strings.HasPrefix(l, "issue") || strings.HasPrefix(l, "task") {
				return true
			}
		}
	}
	return false
}

func TestWorkWordPatterns(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // the matched text; "" for no match
	}{
		{"measured in session 17 on the host", "session 17"},
		{"(Session 4, helper 16d)", "Session 4"},
		{"results of sessions 9-11", "sessions 9-11"},
		{"bench/results/2026-11-25-host16-session8/", "session8"},
		{"netns16-session7-default", "session7"},
		{"as helper 16f found", "helper 16f"},
		{"helper-3's runs", "helper-3"},
		{"Helper3", "Helper3"},
		{"the target of issue 17", "issue 17"},
		{"see issue #5", "issue #5"},
		{"the merge of issue-16d", "issue-16d"},
		{"Issues 4", "Issues 4"},
		{"done in task 3", "task 3"},
		{"task #12", "task #12"},

		{"a session of 4 workers", ""},
		{"session 2: worker 1", ""},
		{`prefix = fmt.Sprintf("session %d: ", n)`, ""},
		{`"$out/chorus" bench session 2>/dev/null`, ""},
		{"the session's 8 workers", ""},
		{"20 sessions of 2 workers", ""},
		{"test helpers", ""},
		{"an issue with 4 ranks", ""},
		{"the task's 3 inputs", ""},
		{"multitask 3", ""},
		{"sessionize2", ""},
	} {
		_, got := workWord(c.in)
		if got != c.want {
			t.Errorf("workWord(%q) matched %q, want %q", c.in, got, c.want)
		}
	}
}

// TestNoWorkReferences scans every tracked text file (its path and its
// lines) for references to work sessions, helpers, issues or tasks.
func TestNoWorkReferences(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := trackedFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no files found under %s", root)
	}
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 50 {
			t.Errorf(format, args...)
		}
	}
	for _, f := range files {
		if f == "internal/lint/words_test.go" {
			continue // its cases must name what they catch
		}
		if name, text := workWord(f); name != "" {
			report("%s: path has a %s (%q): name it after what it holds", f, name, text)
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		if isBinary(data) {
			continue
		}
		for i, line := range strings.Split(string(data), "\n") {
			if name, text := workWord(line); name != "" {
				report("%s:%d: %s %q: say what was measured or decided, not which work item did it", f, i+1, name, text)
			}
		}
	}
	if bad > 50 {
		t.Errorf("... and %d more", bad-50)
	}
}

// trackedFiles lists the repository's tracked files (git ls-files), or,
// where git or the repository's .git is missing, every file under root
// outside dot folders.
func trackedFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		return files, nil
	}
	var files []string
	werr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if werr != nil {
		return nil, fmt.Errorf("git ls-files: %v; walking %s: %w", err, root, werr)
	}
	return files, nil
}

// isBinary reports whether data looks like a binary file: a NUL byte in
// its first 8000 bytes, as git decides.
func isBinary(data []byte) bool {
	if len(data) > 8000 {
		data = data[:8000]
	}
	return bytes.IndexByte(data, 0) >= 0
}
