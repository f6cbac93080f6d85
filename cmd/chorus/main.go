package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/ipc"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/bench"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/demo"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/gpuprobe"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/progress"
	"github.com/chorus-rt/chorus/internal/config"
	_ "github.com/chorus-rt/chorus/model/shardload" // chorus.shard.* on the CLI's workers
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// version is set by the linker (-X main.version=...) for releases.
var version = "dev"

const usage = `chorus drives many workers in lock-step from one controller.

Usage:
  chorus <command> [flags]

Commands:
  info            version, CPU, and which GPU libraries were found
  demo            run a session of workers and print what each computed, then
                  a tensor-parallel MLP compiled and run on the VM (GPUs if present)
  generate        load a Hugging Face model folder sharded over the workers and generate
                  from a prompt, streaming the text (--model DIR --prompt TEXT)
  model           a random transformer decoder written as safetensors, loaded sharded
                  over the workers, prefill + greedy decode, time per token (--check)
  compile FILE    run a compiler pipeline on a text IR file and print the IR
                  (--pipeline NAME|SPEC, --print-after-all)
  bench session   latency of a no-op call + sync, per session kind
  bench membw     the host's memory bandwidth (STREAM-like copy and triad)
  bench allreduce|allgather|reducescatter|broadcast
                  collective sweeps in the style of nccl-tests (mean, p50, p99, max)
  bench peercopy  copy-engine transfers into a peer GPU's IPC memory (the link's bound)
  bench mlp       time per step and peak memory of the MLP on the VM
  bench planops   cost per op of the GPU plan executor next to a device copy (GPU)
                  (benches with size rows take --plot FILE.svg [--anchor FILE.jsonl]...)
  plot FILE.jsonl...
                  draw saved JSON lines as an SVG: bus bandwidth and time against size
  funcs           list the functions workers can call
  plan show|run|build|verify
                  execution plans: list, run on the CPU executor, build, verify
  node            a node agent of a multi-host session (--connect HOST:PORT)
  cluster         a multi-host controller: check, bench (docs/multi-host.md)
  cert            cluster credentials: CA, node certificates, tokens
  trace summary|check|svg FILE
                  what a trace holds (per-op times, stragglers, faults), whether it is
                  valid, or a timeline picture of it (SVG)

Every command that runs a session takes --trace FILE (or set CHORUS_TRACE=FILE):
a timeline of commands, collectives and faults for ui.perfetto.dev (docs/observability.md).

Run 'chorus <command> --help' for a command's flags.
`

func main() {
	// A process started by a session becomes a worker here and never returns.
	worker.Main()
	warnUnknownEnv(os.Stderr)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// warnUnknownEnv names the CHORUS_ variables that chorus does not read:
// a misspelt name, or a setting that was removed because its measured
// choice is now the code (docs/configuration.md lists the variables).
func warnUnknownEnv(w io.Writer) {
	for _, name := range config.Unknown(config.Inherited()) {
		fmt.Fprintf(w, "chorus: %s is not a chorus variable (misspelt, or removed: docs/configuration.md lists them); ignored\n", name)
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "chorus: which command? %s (chorus --help)\n", strings.Join(commands, ", "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	defer restoreEnv(session.EnvTrace)()
	var err error
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "info":
		err = cmdInfo(args[1:], stdout)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout)
	case "generate":
		err = cmdGenerate(ctx, args[1:], stdout, stderr)
	case "model":
		err = cmdModel(ctx, args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	case "funcs":
		err = cmdFuncs(args[1:], stdout)
	case "compile":
		err = cmdCompile(args[1:], stdout)
	case "plot":
		err = cmdPlot(args[1:], stdout, stderr)
	case "plan":
		err = cmdPlan(ctx, args[1:], stdout, stderr)
	case "node":
		err = cmdNode(ctx, args[1:], stdout, stderr)
	case "cluster":
		err = cmdCluster(ctx, args[1:], stdout, stderr)
	case "cert":
		err = cmdCert(args[1:], stdout)
	case "trace":
		err = cmdTrace(args[1:], stdout)
	case "worker":
		// Hidden: the worker entry point, for sessions that start this
		// binary with an explicit argument. It needs the environment a
		// session sets.
		if !worker.IsWorkerProcess() {
			fmt.Fprintf(stderr, "chorus worker: %s is not set; workers are started by a process session\n", worker.EnvSpec)
			return 2
		}
		return worker.Run()
	default:
		fmt.Fprintf(stderr, "chorus: unknown command %q: want one of %s (chorus --help)\n", args[0], strings.Join(commands, ", "))
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "chorus:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// commands are the commands run knows, for its one-line complaints.
var commands = []string{"info", "demo", "generate", "model", "compile", "bench", "plot", "funcs", "plan", "node", "cluster", "cert", "trace"}

func cmdInfo(args []string, out io.Writer) error {
	fs := newFlags("info", "chorus info", out)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v += " (" + s.Value[:min(12, len(s.Value))] + ")"
			}
		}
	}
	fmt.Fprintf(out, "chorus %s\n", v)
	fmt.Fprintf(out, "  go:          %s %s/%s, %d CPUs\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(out, "  sessions:    threaded, process (transports: shm, stream)\n")
	fmt.Fprintf(out, "GPU libraries:\n%s", gpuprobe.Probe().Summary())
	return nil
}

func cmdFuncs(args []string, out io.Writer) error {
	fs := newFlags("funcs", "chorus funcs", out)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, r := range []*registry.Registry{worker.Builtins, registry.Global} {
		for _, f := range r.List() {
			fmt.Fprintf(out, "%-28s %s\n", f.Name, f.Signature)
		}
	}
	return nil
}

func processOptions(transport string) session.ProcessOptions {
	return session.ProcessOptions{Transport: transport, Args: []string{"worker"}}
}

func cmdDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("demo", "chorus demo [--workers 4] [--session process|threaded] [--transport shm|stream] [--device auto|cpu|cuda]", out)
	n := fs.Int("workers", 4, "number of workers")
	kind := fs.String("session", "process", "session kind: process or threaded")
	tr := fs.String("transport", "shm", "process transport: shm or stream")
	device := fs.String("device", "auto", "where the MLP part runs: auto (GPUs when present), cpu or cuda")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkSession("demo", *kind); err != nil {
		return err
	}
	if err := checkTransport("demo", *tr); err != nil {
		return err
	}
	if err := checkWorkers("demo", *n, *kind); err != nil {
		return err
	}
	if _, err := gpusFor("demo", *device); err != nil {
		return err
	}
	s, err := newSession(ctx, *kind, *tr, *n)
	if err != nil {
		return err
	}
	derr := demo.Run(ctx, out, s)
	if derr == nil {
		fmt.Fprintln(out)
		derr = demoMLP(ctx, out, s, *n, *device)
	}
	serr := s.Shutdown()
	return errors.Join(derr, serr)
}

func newSession(ctx context.Context, kind, tr string, n int) (*session.Session, error) {
	switch kind {
	case "threaded":
		return session.NewThreaded(session.Options{NumWorkers: n})
	case "process":
		po := processOptions(tr)
		po.NumWorkers = n
		return session.NewProcess(ctx, po)
	}
	return nil, usageError{fmt.Sprintf("unknown session kind %q (want process or threaded)", kind)}
}

func cmdBench(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usageError{"bench: which benchmark? " + strings.Join(benchNames, ", ") + " (chorus bench --help)"}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, benchUsage)
		return nil
	}
	switch {
	case args[0] == "membw":
		return benchMemBW(args[1:], out)
	case args[0] == "session":
		return benchSession(ctx, args[1:], out, errOut)
	case args[0] == "mlp":
		return benchMLP(ctx, args[1:], out, errOut)
	case args[0] == "decode":
		return benchDecode(ctx, args[1:], out, errOut)
	case args[0] == "hostpoll":
		return benchHostPoll(args[1:], out)
	case args[0] == "planops":
		return benchPlanOps(ctx, args[1:], out, errOut)
	case bench.IsCollective(args[0]) && benchPlanFlagged(args[1:]):
		return benchPlan(ctx, args[0], args[1:], out, errOut)
	case bench.IsCollective(args[0]):
		return benchCollective(ctx, args[0], args[1:], out, errOut)
	}
	return usageError{fmt.Sprintf("bench: unknown benchmark %q: want one of %s (chorus bench --help)", args[0], strings.Join(benchNames, ", "))}
}

// benchNames are the benchmarks of chorus bench.
var benchNames = []string{"session", "membw", "allreduce", "allgather", "reducescatter", "broadcast", "hostpoll", "peercopy", "mlp", "planops", "decode"}

const benchUsage = `Usage: chorus bench <benchmark> [flags]

Benchmarks:
  session         no-op CallPacked + sync of every worker
  membw           host memory bandwidth (STREAM-like copy, triad)
  allreduce       collective bandwidth sweeps (nccl-tests style); with --plan FILE or
  allgather       --algorithm NAME, an execution plan on the CPU executor next to the
  reducescatter   cpu backend
  broadcast
  hostpoll        latency of a GPU thread's load from mapped host memory vs device memory
  peercopy        copy-engine transfers to a peer GPU, one way and both ways (GPUs)
  mlp             the tensor-parallel MLP on the VM: time per step, peak memory
  planops         cost per op of the GPU plan executor: 1-rank plans of K copy ops next to a device copy (GPU)
  decode          decode steps of the transformer decoder

Run 'chorus bench <benchmark> --help' for its flags.
`

func benchSession(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("bench session", "chorus bench session [--workers 1,2,4,8] [--sessions threaded,process-shm,process-stream] [--iters N] [--idle D] [--json]", out)
	workers := fs.String("workers", "1,2,4,8", "comma-separated worker counts")
	kinds := fs.String("sessions", "threaded,process-shm,process-stream", "comma-separated: threaded, process-shm, process-stream")
	iters := fs.Int("iters", 20000, "timed iterations per row")
	warmup := fs.Int("warmup", 2000, "untimed iterations per row")
	idle := fs.Duration("idle", 0, "untimed sleep of the controller before each round (e.g. 200us: every round wakes parked workers)")
	asJSON := fs.Bool("json", false, "print one JSON object per line instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	const cmd = "bench session"
	if *idle < 0 {
		return badFlag(cmd, "idle", *idle, "want a duration >= 0")
	}
	if *iters < 1 {
		return badFlag(cmd, "iters", *iters, "want 1 or more")
	}
	if *warmup < 0 {
		return badFlag(cmd, "warmup", *warmup, "want 0 or more")
	}
	ns, err := parseCounts(cmd, "workers", *workers)
	if err != nil {
		return err
	}
	sessionKinds := []string{"threaded", "process-shm", "process-stream"}
	for _, k := range strings.Split(*kinds, ",") {
		if k = strings.TrimSpace(k); !slices.Contains(sessionKinds, k) {
			return badFlag(cmd, "sessions", k, "want a comma-separated list of "+strings.Join(sessionKinds, ", "))
		}
		kind, _, _ := strings.Cut(k, "-")
		for _, n := range ns {
			if err := checkWorkers(cmd, n, kind); err != nil {
				return err
			}
		}
	}
	var events int64
	for range strings.Split(*kinds, ",") {
		for _, n := range ns {
			events += int64(n) * int64(*iters+*warmup)
		}
	}
	traced := announceTrace(errOut, cmd, events)
	var rows []bench.SessionResult
	var steps []progress.Step
	for _, k := range strings.Split(*kinds, ",") {
		for _, n := range ns {
			steps = append(steps, progress.Step{Label: fmt.Sprintf("%s, %d workers", strings.TrimSpace(k), n)})
		}
	}
	prog := newProgress(errOut)
	prog.Begin("bench session", steps)
	defer prog.End()
	for _, k := range strings.Split(*kinds, ",") {
		var sess, tr string
		switch strings.TrimSpace(k) {
		case "threaded":
			sess, tr = "threaded", "inproc"
		case "process-shm":
			sess, tr = "process", "shm"
		case "process-stream":
			sess, tr = "process", "stream"
		}
		for _, n := range ns {
			prog.Step(len(rows))
			r, err := bench.Session(ctx, bench.SessionConfig{Session: sess, Transport: tr, Workers: n, Iters: *iters, Warmup: *warmup, Idle: *idle, Process: processOptions(tr)})
			if err != nil {
				return fmt.Errorf("bench session %s/%s with %d workers: %w", sess, tr, n, err)
			}
			prog.Clear()
			if *asJSON {
				if err := bench.WriteJSON(out, []bench.SessionResult{r}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(errOut, "done: %s/%s workers=%d\n", sess, tr, n)
			}
			rows = append(rows, r)
		}
	}
	if !*asJSON {
		bench.WriteSessionTable(out, rows)
	}
	traced()
	return nil
}

// membwArrayBytes is the size of each array of the host bandwidth
// measurement (0: bench.MemBW's default, four times the last-level
// caches); tests make it small, as three arrays of the default are
// gigabytes on hosts with large caches.
var membwArrayBytes int64

func benchMemBW(args []string, out io.Writer) error {
	fs := newFlags("bench membw", "chorus bench membw [--threads N] [--json]", out)
	threads := fs.Int("threads", 0, "threads (0: one per CPU)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a line of text")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *threads < 0 || *threads > 4096 {
		return badFlag("bench membw", "threads", *threads, "want 0 (one per CPU) to 4096")
	}
	m := bench.MemBW(*threads, membwArrayBytes)
	if *asJSON {
		return bench.WriteJSON(out, []bench.MemBWResult{m})
	}
	bench.WriteMemBW(out, m)
	return nil
}

func benchCollective(ctx context.Context, name string, args []string, out, errOut io.Writer) error {
	fs := newFlags("bench "+name, "chorus bench "+name+" [--backend cpu] [--workers N] [--session threaded|process] [--dtype float32] [--min 1K] [--max 64M] [--step 4] [--json] [--plot FILE.svg [--anchor FILE.jsonl]...]", out)
	backend := fs.String("backend", "cpu", "collective backend")
	workers := fs.Int("workers", 2, "number of workers")
	kind := fs.String("session", "process", "session kind: process or threaded")
	tr := fs.String("transport", "shm", "process transport for commands: shm or stream")
	dtype := fs.String("dtype", "float32", "element type")
	minS := fs.String("min", "1K", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max", "64M", "largest size")
	step := fs.Int64("step", 4, "size multiplier between rows")
	iters := fs.Int("iters", 0, "timed iterations per size (0: by size)")
	warmup := fs.Int("warmup", 0, "untimed iterations per size (0: iters/10)")
	asJSON := fs.Bool("json", false, "print one JSON object per line instead of a table")
	devices := fs.String("devices", "", "GPU ids for the workers, comma-separated (GPU backends; worker i uses id i mod n)")
	strategy := fs.String("strategy", "", "allreduce only: run the custom IPC all-reduce with these strategies, comma-separated, interleaved (oneshot, twoshot, auto, nccl; needs GPUs)")
	rounds := fs.Int("rounds", 3, "interleaved rounds; each row reports the medians")
	graph := fs.Bool("graph", false, "GPU workers: capture each size's timed calls in a CUDA graph and time its replays (like nccl-tests -G)")
	membw := fs.Float64("membw", 0, "cpu backend: host memory bandwidth in GB/s for the bound column (0: measure it in this run, <0: no bound)")
	// --plan and --algorithm send the command to benchPlan (cmdBench);
	// they are here so that --help lists them.
	fs.String("plan", "", "time an execution plan (JSON file) on the CPU executor next to the cpu backend ('chorus bench "+name+" --plan FILE --help' for its flags)")
	fs.String("algorithm", "", "like --plan, with an algorithm of the library by name (chorus plan build --list), e.g. allreduce_oneshot")
	inst := fs.Int("instances", 1, "with --algorithm: instances of the library algorithm")
	pf := addPlotFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cmd := "bench " + name
	if *inst != 1 {
		return usageError{cmd + ": --instances needs --algorithm NAME"}
	}
	if err := pf.prepare(commandLine(append([]string{"bench", name}, args...)...), errOut); err != nil {
		return err
	}
	deviceIDs, err := parseDevices(cmd, *devices)
	if err != nil {
		return err
	}
	dt, err := parseNumericDType(cmd, "dtype", *dtype)
	if err != nil {
		return err
	}
	lo, err := parseSizeFlag(cmd, "min", *minS)
	if err != nil {
		return err
	}
	hi, err := parseSizeFlag(cmd, "max", *maxS)
	if err != nil {
		return err
	}
	if err := checkSweep(cmd, lo, hi, *step); err != nil {
		return err
	}
	if *rounds < 1 {
		return badFlag(cmd, "rounds", *rounds, "want 1 or more")
	}
	if *graph && len(deviceIDs) == 0 {
		return badFlag(cmd, "graph", true, "graph timing needs GPU workers (--devices)")
	}
	if err := checkSession(cmd, *kind); err != nil {
		return err
	}
	if err := checkTransport(cmd, *tr); err != nil {
		return err
	}
	if err := checkWorkers(cmd, *workers, *kind); err != nil {
		return err
	}
	var strategies []string
	if *strategy != "" {
		for _, st := range strings.Split(*strategy, ",") {
			st = strings.TrimSpace(st)
			if name == "peercopy" {
				if !slices.Contains(bench.PeerCopyModes, st) {
					return badFlag(cmd, "strategy", st, "want "+strings.Join(bench.PeerCopyModes, " or "))
				}
			} else if _, err := ipc.ParseStrategy(st); err != nil {
				return badFlag(cmd, "strategy", st, "want a comma-separated list of oneshot, twoshot, auto, nccl")
			}
			strategies = append(strategies, st)
		}
	}
	if _, err := ccl.Lookup(*backend); err != nil {
		return badFlag(cmd, "backend", *backend, "want one of "+strings.Join(ccl.Backends(), ", "))
	}
	if err := checkMemory(cmd, *maxS, bench.MemCheck{Bench: name, Workers: *workers, DType: dt, Lo: lo, Hi: hi, Step: *step, DeviceIDs: deviceIDs}); err != nil {
		return err
	}
	if name == "peercopy" && len(strategies) == 0 {
		strategies = bench.PeerCopyModes
	}
	cfg := bench.CollectiveConfig{Bench: name, Backend: *backend, Strategies: strategies, Rounds: *rounds, Session: *kind, Workers: *workers, DType: dt,
		MinBytes: lo, MaxBytes: hi, Step: *step, Iters: *iters, Warmup: *warmup, Process: processOptions(*tr), DeviceIDs: deviceIDs, Graph: *graph}
	if *backend == "cpu" && *membw >= 0 {
		// JSON rows carry the bandwidth (membw_gbs) themselves, so that
		// every line stays a row for the scripts that read them.
		cfg.MemBWGBs = *membw
		if *membw == 0 {
			m := bench.MemBW(0, membwArrayBytes)
			cfg.MemBWGBs = m.Bound()
			if !*asJSON {
				bench.WriteMemBW(out, m)
			}
		}
	}
	if !*asJSON {
		bench.CollectiveHeader(out, cfg)
	}
	traced := announceTrace(errOut, cmd, bench.MinCalls(cfg)*int64(*workers))
	cfg.Progress = newProgress(errOut)
	err = bench.Collective(ctx, cfg, func(r bench.CollectiveResult) {
		pf.add(r)
		if *asJSON {
			_ = bench.WriteJSON(out, []bench.CollectiveResult{r})
		} else {
			bench.CollectiveRow(out, r)
		}
	})
	if err != nil {
		return err
	}
	traced()
	return pf.write(errOut)
}

func benchHostPoll(args []string, out io.Writer) error {
	fs := newFlags("bench hostpoll", "chorus bench hostpoll [--device 0] [--loads 2000] [--json]", out)
	dev := fs.Int("device", 0, "GPU id")
	loads := fs.Int("loads", 2000, "samples (chains of dependent loads) per memory kind")
	asJSON := fs.Bool("json", false, "print one JSON object per line instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *loads < 1 || *loads > 1<<20 {
		return badFlag("bench hostpoll", "loads", *loads, "want 1 to 1048576")
	}
	if *dev < 0 {
		return badFlag("bench hostpoll", "device", *dev, "want a GPU ordinal >= 0")
	}
	if !*asJSON {
		fmt.Fprintf(out, "# chorus bench hostpoll: cuda:%d, one GPU thread's chains of %d dependent loads (globaltimer), ns per load\n#%11s %9s %6s %10s %10s %10s\n", *dev, bench.HostPollChain, "memory", "host", "samples", "p50(ns)", "p99(ns)", "max(ns)")
	}
	return bench.HostPoll(*dev, *loads, func(r bench.HostPollResult) {
		if *asJSON {
			_ = bench.WriteJSON(out, []bench.HostPollResult{r})
		} else {
			bench.HostPollTable(out, r)
		}
	})
}
