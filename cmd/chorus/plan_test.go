package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlanCommands(t *testing.T) {
	dir := t.TempDir()
	golden := filepath.Join("..", "..", "algo", "plan", "testdata", "allreduce_allpairs_2.json")
	built := filepath.Join(dir, "p.json")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plan"}, 2, "which command"},
		{[]string{"plan", "--help"}, 0, "verify FILE"},
		{[]string{"plan", "nope"}, 2, "unknown command"},
		{[]string{"plan", "show"}, 2, "which plan file"},
		{[]string{"plan", "show", golden}, 0, "rank 1 tb 0  #8  res"},
		{[]string{"plan", "show", filepath.Join(dir, "missing.json")}, 1, "no such file"},
		{[]string{"plan", "show", golden, "--bytes", "4K"}, 0, "peer write"},
		{[]string{"plan", "show", golden, "--bytes", "1"}, 1, "no message size up to it fits"},
		{[]string{"plan", "show", golden, "--bytes", "4X"}, 2, `--bytes "4X"`},
		{[]string{"plan", "build", "--list"}, 0, "allreduce_twoshot"},
		{[]string{"plan", "build", "no_such_algorithm", "--ranks", "2"}, 1, "unknown algorithm"},
		{[]string{"plan", "build", "allreduce_ring", "--ranks", "3", "-o", built}, 0, ""},
		{[]string{"plan", "verify", built}, 0, "ok"},
		{[]string{"plan", "verify", golden}, 0, "ok"},
		{[]string{"plan", "run", golden, "--workers", "3"}, 2, "--workers 2"},
		{[]string{"plan", "run", golden, "--workers", "2", "--session", "quantum"}, 2, `plan run: --session "quantum": want process or threaded`},
		{[]string{"plan", "run", golden, "--workers", "2", "--session", "threaded", "--min", "1K", "--max", "64K", "--step", "8", "--iters", "3"}, 0, "#wrong"},
		{[]string{"plan", "run", built, "--workers", "3", "--session", "threaded", "--dtype", "bfloat16", "--min", "1K", "--max", "4K", "--iters", "3"}, 0, "bfloat16"},
		{[]string{"bench", "allreduce", "--plan", golden, "--algorithm", "x"}, 2, "one of --plan and --algorithm"},
		{[]string{"bench", "planops", "--ops", "0"}, 2, "--ops"},
		{[]string{"bench", "planops", "--tbs", "0"}, 2, "--tbs 0: want 1 or more"},
		{[]string{"bench", "planops", "--min", "4K", "--max", "1K"}, 2, "--min <= --max"},
		{[]string{"bench", "allgather", "--plan", golden, "--workers", "2"}, 2, "is a allreduce"},
		{[]string{"bench", "allreduce", "--algorithm", "allpairs-allreduce", "--workers", "3", "--session", "threaded", "--min", "1K", "--max", "16K", "--step", "4", "--iters", "3"}, 0, "ratio"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("chorus %v: code %d, output %q; want code %d containing %q", c.args, code, out+errOut, c.code, c.want)
		}
	}
}

func TestPlanRunJSON(t *testing.T) {
	golden := filepath.Join("..", "..", "algo", "plan", "testdata", "allreduce_allpairs_2.json")
	var row struct {
		Bench  string  `json:"bench"`
		Bytes  int64   `json:"bytes"`
		TimeUs float64 `json:"time_us"`
		Wrong  int64   `json:"wrong"`
	}
	jsonRow(t, &row, "plan", "run", golden, "--workers", "2", "--session", "process", "--min", "4K", "--max", "4K", "--iters", "3", "--json")
	if row.Bench != "allreduce" || row.Bytes != 4096 || row.TimeUs <= 0 || row.Wrong != 0 {
		t.Errorf("row %+v", row)
	}
}

// gpuIters keeps a GPU size near gpuSizeBudget from its probe's time per
// call, within [gpuMinIters, gpuMaxIters] and honouring --warmup.
func TestGPUIters(t *testing.T) {
	cases := []struct {
		probeUs          float64
		bytes            int64
		warmup           int
		wantIt, wantWarm int
	}{
		{4500, 1024, 0, 111, 11},               // processes sharing a GPU: ~4.5 ms a call
		{10, 1024, 0, gpuMaxIters, 2000},       // fast calls: the cap
		{90, 64 << 20, 0, 5555, 555},           // big sizes: the budget, not planItersFor's 5
		{1e6, 1024, 0, gpuMinIters, 1},         // one call over budget: the minimum
		{4500, 1024, 7, 111, 7},                // --warmup kept
		{0, 1024, 0, planItersFor(1024), 2000}, // no probe time: by size
	}
	for _, c := range cases {
		it, w := gpuIters(c.probeUs, c.bytes, c.warmup)
		if it != c.wantIt || w != c.wantWarm {
			t.Errorf("gpuIters(%v us, %d B, warmup %d) = %d, %d; want %d, %d", c.probeUs, c.bytes, c.warmup, it, w, c.wantIt, c.wantWarm)
		}
	}
}

// A plan row carries the plan's traffic at its size: the one-shot plan
// over 2 ranks reads the peer's 4 KB and moves 12 KB in all (its input,
// the peer's, its output).
func TestPlanBenchTraffic(t *testing.T) {
	var row struct {
		Bytes     int64 `json:"bytes"`
		PeerBytes int64 `json:"peer_bytes"`
		MemBytes  int64 `json:"mem_bytes"`
	}
	jsonRow(t, &row, "bench", "allreduce", "--algorithm", "allreduce_oneshot", "--workers", "2", "--session", "threaded", "--min", "4K", "--max", "4K", "--iters", "3", "--json")
	if row.Bytes != 4096 || row.PeerBytes != 4096 || row.MemBytes != 3*4096 {
		t.Errorf("row %+v, want 4096 bytes, 4096 peer bytes, 12288 in all", row)
	}
}

// jsonRow runs chorus with args, which must succeed and print one JSON
// line, and decodes that line into row.
func jsonRow(t *testing.T, row any, args ...string) {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("chorus %v: code %d: %s%s", args, code, out, errOut)
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), row); err != nil {
		t.Fatalf("chorus %v: %v: %q", args, err, out)
	}
}
