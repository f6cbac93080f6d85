package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/runtime/session"
)

// A bad command line is one line on stderr, naming the command, the flag,
// the value and what is valid, with exit status 2 and nothing on stdout
// (where --json rows go); none of these starts a session.
func TestFlagErrorsAreOneLine(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "allreduce", "--workers", "0"}, `bench allreduce: --workers 0: want 1 to 4096 for a process session`},
		{[]string{"bench", "allreduce", "--workers", "100000", "--session", "threaded"}, `--workers 100000: want 1 to 4096 for a threaded session`},
		{[]string{"bench", "allreduce", "--workers", "100000"}, `--workers 100000: want 1 to 4096 for a process session`},
		{[]string{"bench", "allreduce", "--step", "1"}, `--step 1: want 2 or more`},
		{[]string{"bench", "allreduce", "--rounds", "0"}, `--rounds 0: want 1 or more`},
		{[]string{"bench", "allreduce", "--min", "4K", "--max", "1K"}, `--min 4096 is above --max 1024: want --min <= --max`},
		{[]string{"bench", "allreduce", "--dtype", "float8"}, `--dtype "float8": want one of int8, int16, int32, int64, uint8, float16, bfloat16, float32, float64`},
		{[]string{"bench", "allreduce", "--dtype", "bool"}, `--dtype "bool": want one of int8`},
		{[]string{"bench", "allreduce", "--max", "1P"}, `--max "1P": want a byte count with an optional suffix K, M or G`},
		{[]string{"bench", "allreduce", "--min", "-3"}, `--min "-3": want a byte count`},
		{[]string{"bench", "allreduce", "--workers", "x", "--json"}, `bench allreduce: --workers "x": want an integer (number of workers)`},
		{[]string{"bench", "allreduce", "--workers"}, `bench allreduce: --workers needs a value (number of workers)`},
		{[]string{"bench", "allreduce", "--json=maybe"}, `bench allreduce: --json="maybe": want true or false`},
		{[]string{"bench", "allreduce", "--session", "fiber"}, `--session "fiber": want process or threaded`},
		{[]string{"bench", "allreduce", "--transport", "pigeon"}, `--transport "pigeon": want shm or stream`},
		{[]string{"bench", "allreduce", "--devices", "0,x"}, `--devices "0,x": want GPU ordinals like 0,1`},
		{[]string{"bench", "allreduce", "--strategy", "threeshot"}, `--strategy "threeshot": want a comma-separated list of oneshot, twoshot, auto, nccl`},
		{[]string{"bench", "allreduce", "--instances", "2"}, `--instances needs --algorithm NAME`},
		{[]string{"bench", "session", "--idle", "x"}, `bench session: --idle "x": want a duration such as 200us, 500ms or 2s`},
		{[]string{"bench", "session", "--workers", "1,0"}, `bench session: --workers "1,0": bad count "0"`},
		{[]string{"bench", "session", "--workers", "5000", "--sessions", "threaded"}, `--workers 5000: want 1 to 4096 for a threaded session`},
		{[]string{"bench", "membw", "--threads", "-1"}, `--threads -1: want 0 (one per CPU) to 4096`},
		{[]string{"bench", "hostpoll", "--loads", "0"}, `--loads 0: want 1 to 1048576`},
		{[]string{"bench", "mlp", "--dtype", "int8"}, `--dtype "int8": want float32, float16 or bfloat16`},
		{[]string{"bench", "mlp", "--iters", "0"}, `--iters 0: want 1 or more`},
		{[]string{"demo", "--workers", "0"}, `demo: --workers 0: want 1 to 4096 for a process session`},
		{[]string{"demo", "--workers", "100000", "--session", "threaded"}, `demo: --workers 100000: want 1 to 4096 for a threaded session`},
		{[]string{"demo", "--transport", "tcp"}, `demo: --transport "tcp": want shm or stream`},
		{[]string{"demo", "--device", "tpu"}, `demo: --device "tpu": want auto, cpu or cuda`},
		{[]string{"demo", "--no-such-flag"}, `demo: unknown flag --no-such-flag (flags: --device, --session, --trace, --transport, --workers; chorus demo --help)`},
		{[]string{"compile", "--pipeline", "bogus", "../../examples/mlp.ir"}, `compile: --pipeline "bogus": want a named pipeline (default, gpu, cpu) or a comma-separated pass list`},
		{[]string{"plan", "run", "x.json", "--dtype", "float8"}, `plan run: --dtype "float8": want one of`},
		{[]string{"plan", "run", "x.json", "--device", "tpu"}, `plan run: --device "tpu": want cpu or cuda`},
		{[]string{"plan", "run", "x.json", "--workers", "0"}, `plan run: --workers 0: want 1 to 4096`},
		{[]string{"plan", "run", "x.json", "--max", "9Q"}, `plan run: --max "9Q": want a byte count`},
		{[]string{"plan", "run", "x.json", "--bogus"}, `plan run: unknown flag --bogus`},
		{[]string{"bench", "planops", "--device-id", "-1"}, `--device-id -1: want a GPU ordinal >= 0`},
		{[]string{"cluster", "bench", "allreduce", "--dtype", "float8"}, `cluster bench allreduce: --dtype "float8": want one of`},
		{[]string{"cluster", "bench", "allreduce", "--max", "1P"}, `cluster bench allreduce: --max "1P": want a byte count`},
		{[]string{"cluster", "bench", "stream", "--bytes", "lots"}, `cluster bench stream: --bytes "lots": want a byte count`},
		{[]string{"node", "--connect", "127.0.0.1:1", "--workers", "0"}, `node: --workers 0: want 1 to 4096 worker processes`},
		{[]string{"cert", "ca", "--days", "0"}, `cert ca: --days 0: want 1 or more`},
		{[]string{"cert", "node", "--name", "../x"}, `cert node: --name "../x": want a plain file name`},
		{[]string{"trace", "summary", "--top", "x", "f.json"}, `trace summary: --top "x": want an integer`},
		{[]string{"plot", "a.jsonl", "--colour", "red"}, `plot: unknown flag --colour`},
		{[]string{"info", "--verbose"}, `info: unknown flag --verbose`},
		{[]string{"bench"}, `bench: which benchmark? session, membw, allreduce`},
		{[]string{"bench", "nope"}, `bench: unknown benchmark "nope": want one of session, membw, allreduce`},
		{[]string{"plan"}, `plan: which command? show, run, build, verify or compile`},
		{[]string{"cluster"}, `cluster: which command? check or bench`},
		{[]string{"cluster", "bench"}, `cluster bench: which benchmark? allreduce`},
		{[]string{"cert"}, `cert: which? ca, node or token`},
		{[]string{"cert", "bogus"}, `cert: unknown "bogus": want ca, node or token`},
		{[]string{"trace"}, `trace: which? summary, check or svg`},
		{[]string{"trace", "bogus"}, `trace: unknown subcommand "bogus": want summary, check or svg`},
		{nil, `chorus: which command? info, demo`},
		{[]string{"bogus"}, `chorus: unknown command "bogus": want one of info, demo`},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("chorus %q: code %d, stdout %q, stderr %q;\nwant code 2, nothing on stdout, one line on stderr containing %q", c.args, code, out, errOut, c.want)
		}
	}
}

// The usage is printed for -h/--help only, on stdout, with status 0.
func TestHelpOnStdout(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "trace summary|check|svg FILE"},
		{[]string{"bench", "--help"}, "planops"},
		{[]string{"bench", "allreduce", "--help"}, "-algorithm string"},
		{[]string{"bench", "allreduce", "-h"}, "-plan string"},
		{[]string{"bench", "allreduce", "--algorithm", "allreduce_oneshot", "--help"}, "-force"},
		{[]string{"demo", "--help"}, "-workers int"},
		{[]string{"cluster", "--help"}, "bench session"},
		{[]string{"cluster", "bench", "--help"}, "bench allreduce|allgather|reducescatter|broadcast"},
		{[]string{"cluster", "bench", "allreduce", "--help"}, "-listen string"},
		{[]string{"cert", "--help"}, "never overwritten"},
		{[]string{"cert", "ca", "--help"}, "-dir string"},
		{[]string{"trace", "--help"}, "chorus trace svg FILE"},
		{[]string{"trace", "svg", "--help"}, "-from float"},
		{[]string{"plan", "run", "--help"}, "-force"},
		{[]string{"compile", "--help"}, "-pipeline string"},
		{[]string{"plot", "--help"}, "-anchor value"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != 0 || errOut != "" || !strings.Contains(out, c.want) {
			t.Errorf("chorus %q: code %d, stderr %q, stdout %q; want code 0, usage on stdout containing %q", c.args, code, errOut, out, c.want)
		}
	}
}

// fakeMem is a machine for the size checks.
type fakeMem struct {
	host int64
	gpus map[int]int64
}

func (f fakeMem) HostAvailable() (int64, error) { return f.host, nil }
func (f fakeMem) DeviceFree(id int) (int64, error) {
	if v, ok := f.gpus[id]; ok {
		return v, nil
	}
	return 0, errors.New("no such GPU")
}

// A size that cannot fit is refused before any session starts, naming
// --max, the size, the need and the memory there is (on a 24 GB
// machine, --min 64G --max 64G killed both workers in the Go runtime).
func TestSizeAgainstMemory(t *testing.T) {
	old := memProbe
	t.Cleanup(func() { memProbe = old })
	small := fakeMem{host: 22 << 30}
	gpus := fakeMem{host: 1 << 40, gpus: map[int]int64{0: 10 << 30, 1: 70 << 30}}
	cases := []struct {
		mem  fakeMem
		args []string
		want []string
	}{
		{small, []string{"bench", "allreduce", "--min", "64G", "--max", "64G"},
			[]string{`bench allreduce: --max "64G": not enough memory: allreduce float32 at 64G needs about 896.0 GiB of host memory (MemAvailable) (448.0 GiB for each of 2 workers), and there is 22.0 GiB; no size of the sweep fits`}},
		{small, []string{"bench", "allgather", "--session", "threaded", "--workers", "4", "--min", "1K", "--max", "16G"},
			[]string{`--max "16G": not enough memory: allgather float32 at 16G`, "each of 4 workers", "the largest size of the sweep that fits is 1G"}},
		// GPU workers stage on the host too (1 TiB here): the GPU is short.
		{gpus, []string{"bench", "allreduce", "--backend", "nccl", "--devices", "0,1", "--workers", "2", "--min", "8G", "--max", "8G"},
			[]string{`--max "8G": not enough memory: allreduce float32 at 8G needs about 16.0 GiB of free memory of cuda:0 (16.0 GiB for its 1 worker), and there is 10.0 GiB`}},
		{small, []string{"plan", "run", "../../algo/plan/testdata/allreduce_allpairs_2.json", "--workers", "2", "--min", "32G", "--max", "32G"},
			[]string{`plan run: --max "32G": not enough memory: allreduce float32 at 32G`}},
	}
	for _, c := range cases {
		memProbe = c.mem
		code, out, errOut := runCLI(t, c.args...)
		ok := code == 2 && out == "" && strings.Count(errOut, "\n") == 1
		for _, w := range c.want {
			ok = ok && strings.Contains(errOut, w)
		}
		if !ok {
			t.Errorf("chorus %q: code %d, stdout %q, stderr %q; want code 2 and one line with %q", c.args, code, out, errOut, c.want)
		}
	}
	// What fits runs.
	memProbe = small
	if code, _, errOut := runCLI(t, "bench", "allreduce", "--session", "threaded", "--min", "1K", "--max", "1K", "--iters", "3", "--rounds", "1", "--membw", "-1", "--json"); code != 0 {
		t.Errorf("1K on the fake machine: code %d: %s", code, errOut)
	}
}

// racyPlan is allreduce_twoshot on 2 ranks without its waits: valid
// JSON the verifier rejects.
func racyPlan(t *testing.T) string {
	p, err := library.Build("allreduce_twoshot", 2, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for gi := range p.GPUs {
		for ti := range p.GPUs[gi].ThreadBlocks {
			tb := &p.GPUs[gi].ThreadBlocks[ti]
			var keep []plan.Op
			for _, op := range tb.Ops {
				if op.Name != plan.OpWait {
					keep = append(keep, op)
				}
			}
			tb.Ops = keep
		}
	}
	path := filepath.Join(t.TempDir(), "racy.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	return path
}

// A plan the verifier rejects is refused on the CPU executor as on the
// GPU one, with one message and one flag (--force), before any session
// starts; --force runs it.
func TestRejectedPlanRefused(t *testing.T) {
	racy := racyPlan(t)
	want := `plan "allreduce_twoshot": the verifier rejects it: verify: `
	for _, args := range [][]string{
		{"plan", "run", racy, "--workers", "2", "--session", "threaded", "--max", "4K"},
		{"plan", "run", racy, "--workers", "2", "--device", "cuda", "--max", "4K"},
		{"bench", "allreduce", "--plan", racy, "--workers", "2", "--session", "threaded", "--max", "4K"},
		{"bench", "allreduce", "--plan", racy, "--workers", "2", "--device", "cuda", "--max", "4K"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != 1 || out != "" || !strings.Contains(errOut, want) || !strings.Contains(errOut, "(--force runs it anyway)") {
			t.Errorf("chorus %q: code %d, stdout %q, stderr %q; want code 1 and %q ... (--force runs it anyway)", args, code, out, errOut, want)
		}
	}
	code, _, errOut := runCLI(t, "plan", "run", racy, "--workers", "2", "--session", "threaded", "--min", "1K", "--max", "1K", "--iters", "2", "--force")
	if strings.Contains(errOut, "verifier rejects") {
		t.Errorf("--force: code %d, still refused: %s", code, errOut)
	}
}

// Tracing a bench says how large the trace will be at least, and how
// large it was.
func TestTraceAnnounced(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "bench.json")
	code, out, errOut := runCLI(t, "bench", "allreduce", "--session", "threaded", "--min", "1K", "--max", "4K", "--iters", "20", "--rounds", "1", "--membw", "-1", "--json", "--trace", tr)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	// 2 sizes of 20 timed calls and a warm-up batch of 2, on 2 workers.
	want := fmt.Sprintf("bench allreduce: tracing to %s: every call of every worker is an event (about 170 bytes): the timed calls alone make 88 events", tr)
	if !strings.Contains(errOut, want) || !regexp.MustCompile(`trace .*bench\.json: [0-9.]+ MB`).MatchString(errOut) {
		t.Errorf("stderr %q lacks %q and the trace's size", errOut, want)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("stdout has a line that is not JSON: %q", l)
		}
	}
	st, err := os.Stat(tr)
	if err != nil || st.Size() == 0 {
		t.Fatalf("trace: %v", err)
	}
	// Untraced: not a word.
	if _, _, errOut := runCLI(t, "bench", "allreduce", "--session", "threaded", "--min", "1K", "--max", "1K", "--iters", "5", "--rounds", "1", "--membw", "-1", "--json"); strings.Contains(errOut, "tracing") {
		t.Errorf("untraced bench announces a trace: %q", errOut)
	}
}

// cert ca makes its folder (0700) when the parent exists, and never
// overwrites credentials: it names the file that is in the way.
func TestCertFolderAndNoOverwrite(t *testing.T) {
	root := t.TempDir()
	creds := filepath.Join(root, "creds")
	code, out, errOut := runCLI(t, "cert", "ca", "--dir", creds)
	if code != 0 {
		t.Fatalf("cert ca --dir %s: code %d: %s", creds, code, errOut)
	}
	st, err := os.Stat(creds)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("creds folder: %v, mode %v; want 0700", err, st.Mode().Perm())
	}
	if !strings.Contains(out, "ca-key.pem") {
		t.Errorf("cert ca output %q", out)
	}
	key, _ := os.ReadFile(filepath.Join(creds, "ca-key.pem"))
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cert", "ca", "--dir", creds}, 1, filepath.Join(creds, "ca.pem") + " exists; chorus never overwrites credentials"},
		{[]string{"cert", "ca", "--dir", filepath.Join(root, "no", "creds")}, 2, "its parent folder " + filepath.Join(root, "no") + " does not exist"},
		{[]string{"cert", "node", "--dir", creds, "--name", "h1"}, 0, "h1-key.pem"},
		{[]string{"cert", "node", "--dir", creds, "--name", "h1"}, 1, filepath.Join(creds, "h1.pem") + " exists"},
		{[]string{"cert", "token", "-o", filepath.Join(creds, "token")}, 0, "wrote"},
		{[]string{"cert", "token", "-o", filepath.Join(creds, "token")}, 1, filepath.Join(creds, "token") + " exists"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("chorus %q: code %d, output %q; want code %d containing %q", c.args, code, out+errOut, c.code, c.want)
		}
	}
	// Only the key's own file is there: a cert without its key made no new key.
	if err := os.Remove(filepath.Join(creds, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runCLI(t, "cert", "ca", "--dir", creds); code != 1 {
		t.Errorf("cert ca with ca.pem in the way: code %d", code)
	}
	if _, err := os.Stat(filepath.Join(creds, "ca-key.pem")); err == nil {
		t.Error("cert ca wrote a new key next to an old certificate")
	}
	_ = key
}

// Every file the README names ships: the targets of its relative links,
// and the anchor files of its commands (which must read as JSON lines).
func TestREADMEFilesShip(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, m := range regexp.MustCompile(`--anchor (\S+\.jsonl)`).FindAllStringSubmatch(string(readme), -1) {
		if m[1] == "Y.jsonl" { // a placeholder of `chorus plot`'s synopsis
			continue
		}
		found++
		if _, err := readJSONLines([]string{filepath.Join(root, m[1])}, true, os.Stderr); err != nil {
			t.Errorf("README names --anchor %s: %v", m[1], err)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(string(readme), -1) {
		found++
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("README links to %s: %v", m[1], err)
		}
	}
	if found == 0 {
		t.Error("README names no file: the patterns of this test no longer match it")
	}
}

// The worker limits the CLI names are the session's.
func TestWorkerLimitsAreTheSessions(t *testing.T) {
	if err := checkWorkers("x", session.MaxThreadedWorkers, "threaded"); err != nil {
		t.Error(err)
	}
	if err := checkWorkers("x", session.MaxProcessWorkers+1, "process"); err == nil {
		t.Error("MaxProcessWorkers+1 accepted")
	}
}
