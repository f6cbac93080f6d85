package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/runtime/session"
)

// TestTraceFlag: --trace on a benchmark writes a valid trace that
// `chorus trace check` accepts and `chorus trace summary` explains; the
// flag does not outlive the command.
func TestTraceFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.json")
	code, _, errOut := runCLI(t, "bench", "allreduce", "--workers", "2", "--min", "1K", "--max", "4K", "--iters", "5", "--json", "--trace", path)
	if code != 0 {
		t.Fatalf("bench: %d %s", code, errOut)
	}
	if v, ok := os.LookupEnv(session.EnvTrace); ok {
		t.Fatalf("%s=%q left set after the command", session.EnvTrace, v)
	}
	code, out, errOut := runCLI(t, "trace", "check", path)
	if code != 0 || !strings.Contains(out, "valid") || !strings.Contains(out, "3 processes") {
		t.Fatalf("trace check: %d %q %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "trace", "summary", path, "--top", "3")
	if code != 0 {
		t.Fatalf("trace summary: %d %s", code, errOut)
	}
	for _, want := range []string{"allreduce", "chorus.bench_collective", "collectives matched across ranks", "last to arrive, per worker", "cpu"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"traceEvents":[{"name":"f","ph":"B","ts":1,"pid":1,"tid":1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "trace", "check", bad); code != 1 || !strings.Contains(errOut, "never end") {
		t.Fatalf("trace check of an unbalanced file: %d %s", code, errOut)
	}
	for _, args := range [][]string{{"info", "--trace", path}, {"bench", "membw", "--trace", path}, {"trace"}, {"trace", "frobnicate"}, {"trace", "summary"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
