package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chorus model on CPU workers: written, loaded sharded, generated, and
// every token checked against the float64 reference; 2 and 4 workers,
// threaded and process sessions, prompts of several lengths, both weight
// layouts; the peak memory of every worker printed and in the JSON line.
func TestModelCommand(t *testing.T) {
	small := []string{"--device", "cpu", "--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "4", "--ffn", "256", "--vocab", "512", "--check"}
	for _, tc := range []struct {
		session string
		workers int
		prompt  int
		layout  string
	}{
		{"threaded", 2, 4, "chorus"},
		{"threaded", 4, 13, "hf"},
		{"process", 4, 1, "chorus"},
		{"process", 2, 7, "hf"},
	} {
		t.Run(fmt.Sprintf("%s/%d/%d/%s", tc.session, tc.workers, tc.prompt, tc.layout), func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"model", "--session", tc.session, "--workers", fmt.Sprint(tc.workers), "--prompt", fmt.Sprint(tc.prompt),
				"--layout", tc.layout, "--steps", "5"}, small...)
			if code := run(args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
			}
			text := out.String()
			for _, want := range []string{"loaded: ", "tokens: [", fmt.Sprintf("prefill: %d tokens", tc.prompt), "decode: 5 steps (eager)", "check: ",
				tc.layout + " layout", fmt.Sprintf("memory: worker %d (pid ", tc.workers-1)} {
				if !strings.Contains(text, want) {
					t.Errorf("output lacks %q:\n%s", want, text)
				}
			}
			lines := strings.Split(strings.TrimSpace(text), "\n")
			var res modelResult
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
				t.Fatalf("last line is not the JSON result: %v\n%s", err, text)
			}
			if res.What != "model" || res.Workers != tc.workers || res.Prompt != tc.prompt || len(res.Tokens) != 6 || !res.Checked || len(res.Memory) != tc.workers {
				t.Errorf("JSON result %+v", res)
			}
			pids := map[int]bool{}
			for w, m := range res.Memory {
				pids[m.PID] = true
				if m.Worker != w || m.HostPeakBytes <= 0 || m.HasDevice || m.HostShared != (tc.session == "threaded") {
					t.Errorf("memory of worker %d: %+v", w, m)
				}
			}
			if tc.session == "process" && len(pids) != tc.workers {
				t.Errorf("%d workers in %d processes", tc.workers, len(pids))
			}
		})
	}
	var out, errOut bytes.Buffer
	for _, bad := range [][]string{
		{"model", "--device", "cpu", "--graph"},
		{"model", "--device", "cpu", "--workers", "3"}, // 8 heads do not split over 3
		{"model", "--device", "tpu"},
		{"model", "--device", "cpu", "--dtype", "int8"},
		{"model", "--device", "cpu", "--layout", "tf"},
	} {
		if code := run(bad, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0, want an error", bad)
		}
	}
}

// TestModelHFFolder: --hf writes a Hugging Face folder (head dim apart
// from hidden/heads) that loads through model/hf and passes --check;
// writing into it again is refused naming the file, and a missing parent
// folder is not made.
func TestModelHFFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	args := []string{"model", "--hf", "--device", "cpu", "--session", "threaded", "--workers", "2", "--layers", "2", "--hidden", "64",
		"--heads", "4", "--kv-heads", "2", "--head-dim", "24", "--ffn", "128", "--vocab", "256", "--steps", "4", "--check", "--dir", dir}
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 0 || !strings.Contains(out.String(), "check: 5 tokens equal") {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	for _, f := range []string{"config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	out.Reset()
	errOut.Reset()
	if code := run(args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), filepath.Join(dir, "config.json")) {
		t.Errorf("second write: exit %d, %s", code, errOut.String())
	}
	errOut.Reset()
	missing := filepath.Join(t.TempDir(), "no", "m")
	if code := run([]string{"model", "--device", "cpu", "--write-only", "--dir", missing}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "parent folder must exist") {
		t.Errorf("missing parent: exit %d, %s", code, errOut.String())
	}
}
