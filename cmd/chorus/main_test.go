package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/runtime/worker"
)

func TestMain(m *testing.M) {
	worker.Main() // process sessions started by these tests re-execute this binary
	membwArrayBytes = 8 << 20
	os.Exit(m.Run())
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageAndHelp(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "which command? info, demo"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"info", "--help"}, 0, "Usage: chorus info"},
		{[]string{"demo", "--help"}, 0, "--workers"},
		{[]string{"bench", "--help"}, 0, "session"},
		{[]string{"bench"}, 2, "which benchmark"},
		{[]string{"bench", "nope"}, 2, "unknown benchmark"},
		{[]string{"bench", "session", "--help"}, 0, "-json"},
		{[]string{"bench", "session", "--workers", "0"}, 2, "bad count"},
		{[]string{"bench", "session", "--sessions", "carrier"}, 2, `--sessions "carrier": want a comma-separated list of threaded, process-shm, process-stream`},
		{[]string{"bench", "allreduce", "--graph", "--session", "threaded", "--workers", "2", "--max", "1K"}, 2, "graph timing needs GPU workers (--devices)"},
		{[]string{"funcs", "--help"}, 0, "Usage: chorus funcs"},
		{[]string{"demo", "--session", "quantum"}, 2, `demo: --session "quantum": want process or threaded`},
		{[]string{"demo", "--no-such-flag"}, 2, "demo: unknown flag --no-such-flag (flags: --device, --session, --trace, --transport, --workers"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("chorus %v: code %d, output %q; want code %d containing %q", c.args, code, out+errOut, c.code, c.want)
		}
	}
}

func TestInfo(t *testing.T) {
	code, out, _ := runCLI(t, "info")
	if code != 0 || !strings.Contains(out, "chorus ") || !strings.Contains(out, "CUDA driver") {
		t.Fatalf("info: code %d\n%s", code, out)
	}
	// Either the driver is there (GPU machine) or info says plainly that
	// it is not.
	if !strings.Contains(out, "devices:") && !strings.Contains(out, "no CUDA driver found") {
		t.Errorf("info says neither devices nor 'no CUDA driver found':\n%s", out)
	}
}

func TestFuncs(t *testing.T) {
	code, out, _ := runCLI(t, "funcs")
	for _, name := range []string{"chorus.worker_id", "chorus.empty", "demo.shard_sum_squares", "chorus.shard.load"} {
		if code != 0 || !strings.Contains(out, name) {
			t.Errorf("funcs lacks %s:\n%s", name, out)
		}
	}
}

func TestDemo(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--session", "threaded"},
		{"demo"},
		{"demo", "--transport", "stream", "--workers", "3"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("chorus %v: code %d\n%s\n%s", args, code, out, errOut)
		}
		for _, want := range []string{"match=true", "CopyFromWorker0 -> [7 7 7 7]", "unknown function", "still usable"} {
			if !strings.Contains(out, want) {
				t.Errorf("chorus %v output lacks %q:\n%s", args, want, out)
			}
		}
	}
}

// --idle puts the controller to sleep before each round and says so in
// the row; a negative idle is a usage error.
func TestBenchSessionIdle(t *testing.T) {
	t.Setenv("CHORUS_SESSION_WAIT", "park")
	code, out, errOut := runCLI(t, "bench", "session", "--sessions", "threaded", "--workers", "1", "--iters", "5", "--warmup", "1", "--idle", "20us", "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &m); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if m["idle_us"] != float64(20) || m["wait"] != "park" {
		t.Fatalf("row %q: want idle_us 20 and wait park", out)
	}
	if code, _, _ := runCLI(t, "bench", "session", "--idle", "-1us"); code == 0 {
		t.Fatal("--idle -1us accepted")
	}
}

func TestBenchSessionJSON(t *testing.T) {
	code, out, errOut := runCLI(t, "bench", "session", "--workers", "2", "--iters", "50", "--warmup", "5", "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 JSON lines, got %d:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		want := []string{"bench", "session", "transport", "workers", "procs", "p50_us", "p99_us"}
		if m["session"] == "threaded" {
			want = append(want, "wait")
		}
		for _, k := range want {
			if _, ok := m[k]; !ok {
				t.Errorf("%q lacks %q", l, k)
			}
		}
		if len(m) != len(want) {
			t.Errorf("%q has extra keys", l)
		}
		if m["bench"] != "session" || m["workers"] != float64(2) {
			t.Errorf("bad row %q", l)
		}
		seen[m["session"].(string)+"/"+m["transport"].(string)] = true
	}
	for _, k := range []string{"threaded/inproc", "process/shm", "process/stream"} {
		if !seen[k] {
			t.Errorf("no row for %s", k)
		}
	}
}

func TestBenchCollectives(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "allreduce", "--workers", "2", "--min", "1K", "--max", "16K", "--iters", "20", "--json"},
		{"bench", "allgather", "--workers", "3", "--session", "threaded", "--dtype", "bfloat16", "--min", "4K", "--max", "4K", "--iters", "5", "--json", "--membw", "-1"},
		{"bench", "reducescatter", "--workers", "2", "--dtype", "int32", "--min", "1K", "--max", "1K", "--iters", "5", "--json", "--membw", "-1"},
		{"bench", "broadcast", "--workers", "2", "--dtype", "float16", "--min", "2K", "--max", "2K", "--iters", "5", "--json", "--membw", "10"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("chorus %v: code %d: %s", args, code, errOut)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			for _, k := range []string{"bench", "backend", "session", "workers", "dtype", "bytes", "time_us", "algbw_gbs", "busbw_gbs", "wrong"} {
				if _, ok := m[k]; !ok {
					t.Errorf("%q lacks %q", l, k)
				}
			}
			if m["wrong"] != float64(0) || m["bench"] != args[1] {
				t.Errorf("bad row %q", l)
			}
			// The bound: measured (no --membw), given (10), or none (-1).
			_, hasBW := m["membw_gbs"]
			_, hasFrac := m["mem_bound_frac"]
			if want := !slices.Contains(args, "-1"); hasBW != want || hasFrac != want {
				t.Errorf("%q: membw_gbs %v, mem_bound_frac %v, want %v", l, hasBW, hasFrac, want)
			}
			if slices.Contains(args, "10") && m["membw_gbs"] != float64(10) {
				t.Errorf("%q: membw_gbs is not the --membw given", l)
			}
		}
	}
	if code, _, errOut := runCLI(t, "bench", "allreduce", "--backend", "carrier-pigeon"); code != 2 || !strings.Contains(errOut, `--backend "carrier-pigeon": want one of cpu`) {
		t.Errorf("unknown backend: code %d: %s", code, errOut)
	}
}
