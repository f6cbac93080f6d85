package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
	"github.com/chorus-rt/chorus/tensor"
)

func TestResidentBlocks(t *testing.T) {
	cases := []struct{ regs, threads, want int }{
		{32, 1024, 2}, // two 1024-thread blocks: the 2048 threads a multiprocessor holds
		{33, 1024, 1}, // 40 registers a thread after rounding
		{64, 1024, 1},
		{64, 512, 2},
		{56, 512, 2},
		{128, 512, 1},
		{0, 256, 8},
		{255, 64, 4},
		{10, 0, 0},
	}
	for _, c := range cases {
		if got := residentBlocks(nvrtc.Resources{Registers: c.regs}, c.threads); got != c.want {
			t.Errorf("residentBlocks(%d, %d) = %d, want %d", c.regs, c.threads, got, c.want)
		}
	}
}

// TestPlanCompileRefusals needs no NVRTC: every refusal comes before it.
func TestPlanCompileRefusals(t *testing.T) {
	dir := t.TempDir()
	built := filepath.Join(dir, "ring3.json")
	if code, _, errOut := runCLI(t, "plan", "build", "allreduce_ring", "--ranks", "3", "-o", built); code != 0 {
		t.Fatalf("plan build: %s", errOut)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(src, "chorus_plan_allreduce_ring_r1.cu")
	if err := os.WriteFile(mine, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plan", "compile"}, 2, "which plan file"},
		{[]string{"plan", "compile", filepath.Join(dir, "missing.json")}, 1, "no such file"},
		{[]string{"plan", "compile", built, "--dtype", "int8"}, 2, `--dtype "int8": want float32, float16 or bfloat16`},
		{[]string{"plan", "compile", built, "--dtype", "float64"}, 2, `--dtype "float64"`},
		{[]string{"plan", "compile", built, "--op", "prod"}, 2, `--op "prod": want sum, min or max`},
		{[]string{"plan", "compile", built, "--arch", "sm_9"}, 2, `--arch "sm_9"`},
		{[]string{"plan", "compile", built, "--arch", "sm_60"}, 2, "at least 7.0"},
		{[]string{"plan", "compile", built, "--arch", "compute_90"}, 2, `--arch "compute_90"`},
		{[]string{"plan", "compile", built, "--source", src}, 1, "chorus_plan_allreduce_ring_r1.cu exists"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("chorus %v: code %d, output %q; want code %d containing %q", c.args, code, out+errOut, c.code, c.want)
		}
	}
	// The refusal wrote nothing and left the user's file as it was.
	if b, err := os.ReadFile(mine); err != nil || string(b) != "mine" {
		t.Errorf("%s after the refusal: %q, %v", mine, b, err)
	}
	for _, r := range []int{0, 2} {
		if _, err := os.Stat(filepath.Join(src, fmt.Sprintf("chorus_plan_allreduce_ring_r%d.cu", r))); err == nil {
			t.Errorf("rank %d's source written although rank 1's file was refused", r)
		}
	}
}

func TestPlanCompile(t *testing.T) {
	nvrtctest.Load(t) // skips where NVRTC is missing (CI installs it)
	dir := t.TempDir()
	built := filepath.Join(dir, "ring3.json")
	if code, _, errOut := runCLI(t, "plan", "build", "allreduce_ring", "--ranks", "3", "-o", built); code != 0 {
		t.Fatalf("plan build: %s", errOut)
	}
	src := filepath.Join(dir, "src")
	code, out, errOut := runCLI(t, "plan", "compile", built, "--dtype", "float16", "--op", "max", "--source", src)
	if code != 0 {
		t.Fatalf("plan compile: code %d: %s", code, errOut)
	}
	for _, want := range []string{`plan "allreduce_ring", 3 ranks, float16 max, sm_90, NVRTC`, "registers", "resident/SM", "wrote " + src} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	p, err := readPlan(built)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		k, err := gpuexec.Generate(p, r, tensor.Float16, reduce.Max)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(src, fmt.Sprintf("chorus_plan_allreduce_ring_r%d.cu", r)))
		if err != nil || string(b) != k.Source {
			t.Errorf("rank %d's source file is not its generated kernel (%v)", r, err)
		}
	}
	code, out, errOut = runCLI(t, "plan", "compile", built, "--json", "--arch", "sm_80")
	if code != 0 {
		t.Fatalf("plan compile --json: code %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("plan compile --json: %d lines, want one a rank:\n%s", len(lines), out)
	}
	for r, l := range lines {
		var row kernelRow
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("line %d: %v: %q", r, err, l)
		}
		if row.Plan != "allreduce_ring" || row.Rank != r || row.DType != "bfloat16" || row.Op != "sum" || row.Arch != "sm_80" || row.Source != "" {
			t.Errorf("row %d: %+v", r, row)
		}
		if row.Registers <= 0 || row.Threads <= 0 || row.Blocks <= 0 || row.Resident < 1 || row.Resident != residentBlocks(nvrtc.Resources{Registers: row.Registers}, row.Threads) {
			t.Errorf("row %d's resources: %+v", r, row)
		}
	}
}
