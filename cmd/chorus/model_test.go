package main

import (
	"bytes"
	"strings"
	"testing"
)

// chorus model on CPU workers: written, loaded sharded, generated, and
// every token checked against the float64 reference.
func TestModelCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"model", "--device", "cpu", "--session", "threaded", "--workers", "2", "--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--ffn", "256", "--vocab", "512", "--prompt", "4", "--steps", "5", "--check"}
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"loaded: ", "tokens: [", "prefill: 4 tokens", "decode: 5 steps (eager)", "check: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, bad := range [][]string{
		{"model", "--device", "cpu", "--graph"},
		{"model", "--device", "cpu", "--workers", "3"}, // 8 heads do not split over 3
		{"model", "--device", "tpu"},
		{"model", "--device", "cpu", "--dtype", "int8"},
	} {
		if code := run(bad, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0, want an error", bad)
		}
	}
}
