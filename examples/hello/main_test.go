package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// envRunMain makes this test binary the program: TestMain runs main,
// which the session's workers (this binary re-executed, the variable
// inherited) run too, and they become workers in worker.Main.
const envRunMain = "CHORUS_HELLO_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The getting-started guide's first program is this program, byte for
// byte: the guide's code is compiled and run by these tests.
func TestGuideIsThisProgram(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	block, err := usageBlock(string(guide))
	if err != nil {
		t.Fatal(err)
	}
	if block != string(prog) {
		t.Fatalf("docs/getting-started.md's first program differs from examples/hello/main.go at line %d:\nguide:   %q\nmain.go: %q\n(keep them the same: copy main.go into the block)",
			firstDiff(block, string(prog)), lineAt(block, firstDiff(block, string(prog))), lineAt(string(prog), firstDiff(block, string(prog))))
	}
}

// usageBlock is the first ```go block after the "## A first program"
// heading, with its final newline.
func usageBlock(guide string) (string, error) {
	_, after, ok := strings.Cut(guide, "\n## A first program\n")
	if !ok {
		return "", errors.New(`docs/getting-started.md has no "## A first program" section`)
	}
	_, code, ok := strings.Cut(after, "```go\n")
	if !ok {
		return "", errors.New("docs/getting-started.md's first-program section has no ```go block")
	}
	code, _, ok = strings.Cut(code, "```\n")
	if !ok {
		return "", errors.New("docs/getting-started.md's first-program block does not end")
	}
	return code, nil
}

// firstDiff is the first line (1-based) where a and b differ.
func firstDiff(a, b string) int {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(la), len(lb)) {
		if i >= len(la) || i >= len(lb) || la[i] != lb[i] {
			return i + 1
		}
	}
	return 0
}

func lineAt(s string, n int) string {
	ls := strings.Split(s, "\n")
	if n < 1 || n > len(ls) {
		return "(none)"
	}
	return ls[n-1]
}

// The program runs: a process session of 4 workers, each one this
// binary running main again, and prints what each computed.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hello: %v\n%s", err, out)
	}
	want := "worker 0: 2.5\nworker 1: 5\nworker 2: 7.5\nworker 3: 10\n"
	if string(out) != want {
		t.Errorf("hello printed %q, want %q", out, want)
	}
}
