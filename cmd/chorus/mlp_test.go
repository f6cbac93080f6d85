package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
)

func TestCompile(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "mlp.ir")
	cases := []struct {
		args  []string
		has   []string
		lacks []string
	}{
		{[]string{"compile", example}, []string{"custom_allreduce(%partial, auto, %reduced)", `call_packed("chorus.ipc.alloc_storage", 1024, 64)`,
			"// @mlp: peak bytes per call 9216 before the pipeline, 6144 after"}, []string{"// after pass"}},
		{[]string{"compile", "--pipeline", "cpu", example}, []string{"allreduce(%partial, sum, %reduced)", "{cpu:0}", "5120 after"}, []string{"custom_allreduce", "ipc_memory"}},
		{[]string{"compile", example, "--pipeline", "plan-devices={cuda:0},ipc-allreduce-rewrite=two_shot"}, []string{"custom_allreduce(%partial, two_shot, %reduced)", `"ipc_memory"`}, []string{"alloc_storage"}},
		{[]string{"compile", example, "--print-after-all"}, []string{"// input ", "// after pass plan-devices", "// after pass ipc-allreduce-rewrite",
			"// after pass plan-memory", "// after pass lower-gpu-ipc-alloc-storage"}, nil},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != 0 {
			t.Fatalf("chorus %v: code %d: %s", c.args, code, errOut)
		}
		for _, s := range c.has {
			if !strings.Contains(out, s) {
				t.Errorf("chorus %v: output lacks %q:\n%s", c.args, s, out)
			}
		}
		for _, s := range c.lacks {
			if strings.Contains(out, s) {
				t.Errorf("chorus %v: output has %q:\n%s", c.args, s, out)
			}
		}
		// Every printed module parses and verifies.
		for i, part := range strings.Split(out, "\n// after pass ") {
			if i > 0 {
				part = part[strings.Index(part, "\n")+1:]
			}
			m, err := ir.Parse(part)
			if err != nil {
				t.Errorf("chorus %v: stage %d does not parse: %v\n%s", c.args, i, err, part)
				continue
			}
			if err := ir.Verify(m); err != nil {
				t.Errorf("chorus %v: stage %d does not verify: %v", c.args, i, err)
			}
		}
	}
}

func TestCompileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.ir")
	if err := os.WriteFile(bad, []byte("module @m\nfunc @f( {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conflict := filepath.Join(dir, "conflict.ir")
	src := "module @m\nfunc @f(%x: tensor<[4], float32, {cpu:0}>) {\n  block {\n    %y = %x : tensor<[4], float32, {cpu:0}>\n    device_copy(%x, {cuda:0}, {cpu:0}, %y)\n  }\n  return %y\n}\n"
	if err := os.WriteFile(conflict, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	example := filepath.Join("..", "..", "examples", "mlp.ir")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"compile"}, 2, "want one IR file, got 0"},
		{[]string{"compile", example, example}, 2, "want one IR file, got 2"},
		{[]string{"compile", "--pipeline", "nope", example}, 2, `unknown pass "nope"`},
		{[]string{"compile", filepath.Join(dir, "missing.ir")}, 1, "no such file"},
		{[]string{"compile", bad}, 1, "bad.ir:2:"},
		{[]string{"compile", conflict}, 1, "conflict.ir: pipeline default: pass plan-devices"},
		{[]string{"compile", "--help"}, 0, "--print-after-all"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("chorus %v: code %d, output %q; want code %d containing %q", c.args, code, out+errOut, c.code, c.want)
		}
	}
}

func TestDemoMLP(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--session", "threaded", "--workers", "3", "--device", "cpu")
	if code != 0 {
		t.Fatalf("code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"match=true", "4. a program built", "3 workers on cpu", "W1 [64, 258] split by columns",
		`pipeline "cpu": plan-devices, plan-memory`, "peak bytes per worker and call:", ": ok", "identical bits on every worker: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if code, out, errOut := runCLI(t, "demo", "--session", "threaded", "--workers", "1", "--device", "tpu"); code != 2 || !strings.Contains(errOut, `--device "tpu": want auto, cpu or cuda`) {
		t.Errorf("--device tpu: code %d\n%s%s", code, out, errOut)
	}
}

func TestBenchMLP(t *testing.T) {
	code, out, errOut := runCLI(t, "bench", "mlp", "--workers", "1,2", "--sessions", "threaded,process", "--batch", "2", "--hidden", "8", "--ffn", "16", "--iters", "2", "--warmup", "1")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "threaded") || strings.HasPrefix(l, "process") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 4 || !strings.Contains(out, "peak_before") {
		t.Fatalf("want 4 rows and a header:\n%s", out)
	}
	for _, r := range rows {
		f := strings.Fields(r)
		if len(f) != 8 || f[7] != "ok" {
			t.Errorf("bad row %q", r)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "mlp", "--workers", "3", "--ffn", "16"}, "does not split over 3 workers"},
		{[]string{"bench", "mlp", "--device", "tpu"}, `--device "tpu": want cpu or cuda`},
		{[]string{"bench", "mlp", "--sessions", "carrier"}, `--sessions "carrier": want a comma-separated list of threaded, process`},
		{[]string{"bench", "mlp", "--dtype", "int7"}, "--dtype"},
	} {
		if code, out, errOut := runCLI(t, c.args...); code != 2 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("chorus %v: code %d, %q; want 2 and %q", c.args, code, out+errOut, c.want)
		}
	}
}
