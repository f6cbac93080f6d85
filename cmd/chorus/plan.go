package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	planrun "github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/algo/verify"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/bench"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/progress"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

const planUsage = `Usage: chorus plan <command> [flags]

Commands:
  show FILE               list a plan's ops, one per line
  run FILE --workers N    run a plan on the CPU executor over a sweep of sizes,
                          check every result and time it (nccl-tests style);
                          --device cuda [--devices 0,1] [--graph] runs it on GPUs
  build ALGORITHM --ranks N [-o FILE]
                          build a plan from the algorithm library (or a
                          hand-built one: ` + "allpairs-*" + `); --list lists them
  verify FILE             check that a plan computes its collective, with no
                          races or deadlocks
  compile FILE            compile each rank's GPU kernel with this machine's
                          NVRTC and print ptxas's report: registers, shared
                          memory, stack frame, spills (--source DIR keeps
                          the CUDA sources)
`

func cmdPlan(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usageError{"plan: which command? show, run, build, verify or compile (chorus plan --help)"}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, planUsage)
		return nil
	}
	switch args[0] {
	case "show":
		return planShow(args[1:], out)
	case "run":
		return planRun(ctx, args[1:], out, errOut)
	case "build":
		return planBuild(args[1:], out)
	case "verify":
		return planVerify(args[1:], out)
	case "compile":
		return planCompile(args[1:], out)
	}
	return usageError{fmt.Sprintf("plan: unknown command %q: want show, run, build, verify or compile (chorus plan --help)", args[0])}
}

// splitFile takes the one positional argument (a file or name) from args,
// wherever it is among the flags.
func splitFile(fs *flag.FlagSet, args []string, what string) (string, error) {
	var pos string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			if pos != "" {
				return "", usageError{fmt.Sprintf("%s: more than one %s (%q, %q)", fs.Name(), what, pos, a)}
			}
			pos = a
			continue
		}
		rest = append(rest, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") {
			if f := fs.Lookup(name); f != nil {
				if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
					if i+1 < len(args) {
						i++
						rest = append(rest, args[i])
					}
				}
			}
		}
	}
	if err := parseFlags(fs, rest); err != nil {
		return "", err
	}
	if pos == "" {
		return "", usageError{fmt.Sprintf("%s: which %s?", fs.Name(), what)}
	}
	return pos, nil
}

func readPlan(path string) (*plan.Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := plan.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

func planShow(args []string, out io.Writer) error {
	fs := newFlags("plan show", "chorus plan show FILE [--bytes SIZE]", out)
	size := fs.String("bytes", "", "also print each rank's traffic (plan.Traffic) in a call of this size (bytes; K, M, G suffixes), rounded down to a size the plan takes")
	path, err := splitFile(fs, args, "plan file")
	if err != nil {
		return err
	}
	var bytes int64
	if *size != "" {
		if bytes, err = parseSizeFlag(fs.Name(), "bytes", *size); err != nil {
			return err
		}
	}
	p, err := readPlan(path)
	if err != nil {
		return err
	}
	if err := p.Show(out); err != nil || bytes == 0 {
		return err
	}
	return showTraffic(p, bytes, out)
}

// showTraffic prints each rank's traffic in a call of about bytes (the
// message size: the input, or an allgather's output).
func showTraffic(p *plan.Plan, bytes int64, out io.Writer) error {
	inN, outN := planrun.Counts(p, tensor.Float32, bytes)
	if inN == 0 {
		return fmt.Errorf("plan show: --bytes %d: no message size up to it fits plan %q (alignment %d, its chunk counts)", bytes, p.Name, p.BufferAlignment)
	}
	in, o := 4*inN, 4*outN
	fmt.Fprintf(out, "# traffic of a call with %d input and %d output bytes a rank (MB; packets at twice their data):\n", in, o)
	fmt.Fprintf(out, "# %-6s %12s %12s %12s %12s %12s\n", "rank", "local read", "local write", "peer read", "peer write", "all")
	mb := func(b int64) float64 { return float64(b) / 1e6 }
	for r := range p.NumRanks() {
		t, err := p.Traffic(r, in, o)
		if err != nil {
			return fmt.Errorf("plan show: rank %d: %w", r, err)
		}
		fmt.Fprintf(out, "  %-6d %12.3f %12.3f %12.3f %12.3f %12.3f\n", r, mb(t.LocalRead), mb(t.LocalWrite), mb(t.PeerRead), mb(t.PeerWrite), mb(t.Total()))
	}
	return nil
}

// buildPlan makes a library algorithm, or a hand-built plan.
func buildPlan(name string, ranks, instances int) (*plan.Plan, error) {
	if slices.Contains(handplan.Names(), name) {
		return handplan.Build(name, ranks, handplan.Options{TBs: instances})
	}
	return library.Build(name, ranks, library.Options{Instances: instances})
}

func planBuild(args []string, out io.Writer) error {
	fs := newFlags("plan build", "chorus plan build ALGORITHM --ranks N [--instances K] [-o FILE] | --list", out)
	ranks := fs.Int("ranks", 2, "number of ranks")
	inst := fs.Int("instances", 1, "instances (library) or thread blocks (hand-built plans)")
	output := fs.String("o", "", "write the plan here instead of standard output")
	fs.Bool("list", false, "list the algorithms (alone)")
	if len(args) > 0 && (args[0] == "--list" || args[0] == "-list") {
		for _, n := range library.Names() {
			coll, doc, _ := library.Describe(n)
			fmt.Fprintf(out, "%-24s %-14s %s\n", n, coll, doc)
		}
		for _, n := range handplan.Names() {
			fmt.Fprintf(out, "%-24s %-14s %s\n", n, "(hand-built)", "package algo/handplan")
		}
		return nil
	}
	name, err := splitFile(fs, args, "algorithm")
	if err != nil {
		return err
	}
	p, err := buildPlan(name, *ranks, *inst)
	if err != nil {
		return err
	}
	if *output == "" {
		return p.Write(out)
	}
	f, err := os.Create(*output)
	if err != nil {
		return err
	}
	if err := p.Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func planVerify(args []string, out io.Writer) error {
	fs := newFlags("plan verify", "chorus plan verify FILE", out)
	path, err := splitFile(fs, args, "plan file")
	if err != nil {
		return err
	}
	p, err := readPlan(path)
	if err != nil {
		return err
	}
	rep, err := verify.Verify(p)
	if rep != nil {
		fmt.Fprintln(out, rep)
	}
	if err != nil {
		return fmt.Errorf("plan %q: %w", p.Name, err)
	}
	if rep.Custom {
		fmt.Fprintf(out, "plan %q: ok (no deadlock, race or undefined read); collective %q has no fixed result, the plan computes:\n%s", p.Name, p.Collective, rep.Movement)
		return nil
	}
	fmt.Fprintf(out, "plan %q: ok\n", p.Name)
	return nil
}

// planItersFor keeps a size near 0.1 s (many iterations for small sizes,
// so that timer and scheduler noise average out).
func planItersFor(bytes int64) int { return int(min(20_000, max(5, (1<<27)/max(bytes, 1)))) }

// On GPUs (--device cuda without --iters) every size is calibrated with
// gpuProbeIters timed calls and then gets as many calls as fit in
// gpuSizeBudget (at least gpuMinIters, at most gpuMaxIters): processes
// sharing one GPU time-slice it, so a call costs milliseconds there and
// the CPU executor's counts (up to 20,000 calls) would take minutes. The
// CPU executor's size floor (planItersFor: 5 calls from 32 MB) does not
// apply: an eager loop of a plan starts with a fixed 0.07-0.26 ms (the
// ranks' first exchange and launches after the start line), which 5 or
// 32 calls do not amortize. One H200, 2 ranks under MPS, IPC tensors,
// eager, 2026-11-29: the one-shot plan at 32 MB took 57.7 and 89.7 us a
// call over 5 calls and 44.7-44.8 over 512 (the ccl/ipc kernel 47.5 in
// both), at 4 MB 13.1-16.1 over 32 calls and 7.9 over 512.
const (
	gpuSizeBudget = 500 * time.Millisecond
	gpuProbeIters = 3
	gpuMinIters   = 3
	gpuMaxIters   = 20_000
)

// gpuIters returns the timed and warm-up calls of a size whose probe took
// probeUs per call (without one: planItersFor); warmup > 0 is the user's
// --warmup.
func gpuIters(probeUs float64, bytes int64, warmup int) (int, int) {
	it := planItersFor(bytes)
	if probeUs > 0 {
		it = min(gpuMaxIters, max(gpuMinIters, int(float64(gpuSizeBudget.Microseconds())/probeUs)))
	}
	w := warmup
	if w <= 0 {
		w = max(1, it/10)
	}
	return it, w
}

type planRow struct {
	Bench string `json:"bench"`
	// Backend names GPU rows for bench/summarize.py next to the other
	// GPU backends: chorus-plan-NAME[-graph].
	Backend string  `json:"backend,omitempty"`
	Plan    string  `json:"plan"`
	Session string  `json:"session"`
	Workers int     `json:"workers"`
	DType   string  `json:"dtype"`
	Bytes   int64   `json:"bytes"`
	TimeUs  float64 `json:"time_us"`
	AlgBW   float64 `json:"algbw_gbs"`
	BusBW   float64 `json:"busbw_gbs"`
	Wrong   int64   `json:"wrong"`
	// With --compare (bench): the hand-written cpu backend's time.
	CPUTimeUs float64 `json:"cpu_time_us,omitempty"`
	Ratio     float64 `json:"ratio,omitempty"`
	// PeerBytes and MemBytes: the plan's traffic at this size, of the
	// rank that moves the most (plan.Traffic): the bytes its ops read from
	// and write to peers' memory, and every byte they read or write.
	PeerBytes int64 `json:"peer_bytes"`
	MemBytes  int64 `json:"mem_bytes"`
}

func busFactor(coll plan.Collective, n int) float64 {
	switch coll {
	case plan.AllReduce:
		return 2 * float64(n-1) / float64(n)
	case plan.AllGather, plan.ReduceScatter:
		return float64(n-1) / float64(n)
	}
	return 1
}

type sweep struct {
	kind, tr      string
	workers       int
	dt            tensor.DType
	lo, hi, step  int64
	iters, warmup int
	json          bool
	// device "cuda": the plan runs on the workers' GPUs (algo/gpuexec);
	// devices are their ordinals (worker i on devices[i % len]).
	device  string
	devices []int
	graph   bool
	ipc     bool // --ipc-tensors
	force   bool
	plot    *plotFlags
}

func sweepFlags(fs *flag.FlagSet) func() (sweep, error) {
	workers := fs.Int("workers", 2, "number of workers (the plan's rank count)")
	kind := fs.String("session", "process", "session kind: process or threaded")
	tr := fs.String("transport", "shm", "process transport for commands: shm or stream")
	dtype := fs.String("dtype", "float32", "element type")
	minS := fs.String("min", "1K", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max", "64M", "largest size")
	step := fs.Int64("step", 4, "size multiplier between rows")
	iters := fs.Int("iters", 0, "timed iterations per size (0: by size; with --device cuda, as many as fit in 0.5 s after 3 probe calls)")
	warmup := fs.Int("warmup", 0, "untimed iterations per size (0: iters/10)")
	asJSON := fs.Bool("json", false, "print one JSON object per line instead of a table")
	dev := fs.String("device", "cpu", "where the plan runs: cpu (CPU executor) or cuda (GPU executor)")
	devs := fs.String("devices", "0", "with --device cuda: GPU ordinals, comma-separated (worker i on the (i mod len)-th; several workers may share one)")
	graph := fs.Bool("graph", false, "with --device cuda: time replays of a CUDA graph of one call")
	force := fs.Bool("force", false, "run a plan the verifier rejects (CPU and GPU executors)")
	ipcT := fs.Bool("ipc-tensors", false, "with --device cuda: each worker's input and output in IPC memory (as bench allreduce --backend ipc), which the executor's peers reach directly instead of staging them")
	pf := addPlotFlags(fs)
	return func() (sweep, error) {
		sw := sweep{kind: *kind, tr: *tr, workers: *workers, step: *step, iters: *iters, warmup: *warmup, json: *asJSON,
			device: *dev, graph: *graph, ipc: *ipcT, force: *force, plot: pf}
		cmd := fs.Name()
		var err error
		if sw.device != "cpu" && sw.device != "cuda" {
			return sw, badFlag(cmd, "device", sw.device, "want cpu or cuda")
		}
		if sw.devices, err = parseDevices(cmd, *devs); err != nil {
			return sw, err
		}
		if len(sw.devices) == 0 {
			return sw, badFlag(cmd, "devices", *devs, "want GPU ordinals like 0,1")
		}
		if err := checkSession(cmd, sw.kind); err != nil {
			return sw, err
		}
		if err := checkTransport(cmd, sw.tr); err != nil {
			return sw, err
		}
		if sw.device == "cuda" && sw.kind != "process" {
			return sw, usageError{cmd + ": --device cuda needs --session process (one process per rank; ranks may share a GPU)"}
		}
		if err := checkWorkers(cmd, sw.workers, sw.kind); err != nil {
			return sw, err
		}
		if sw.dt, err = parseNumericDType(cmd, "dtype", *dtype); err != nil {
			return sw, err
		}
		if sw.lo, err = parseSizeFlag(cmd, "min", *minS); err != nil {
			return sw, err
		}
		if sw.hi, err = parseSizeFlag(cmd, "max", *maxS); err != nil {
			return sw, err
		}
		if err := checkSweep(cmd, sw.lo, sw.hi, sw.step); err != nil {
			return sw, err
		}
		return sw, nil
	}
}

// check refuses, before any session starts, a plan the verifier
// rejects (unless --force; the CPU and the GPU executor alike) and a
// largest size that does not fit the memory there is.
func (sw sweep) check(cmd string, p *plan.Plan) error {
	if !sw.force {
		if _, err := verify.Verify(p); err != nil {
			return fmt.Errorf("%s: plan %q: the verifier rejects it: %w (--force runs it anyway)", cmd, p.Name, err)
		}
	}
	mc := bench.MemCheck{Bench: string(p.Collective), Workers: sw.workers, DType: sw.dt, Lo: sw.lo, Hi: sw.hi, Step: sw.step}
	if sw.device == "cuda" {
		mc.DeviceIDs = sw.devices
	}
	return checkMemory(cmd, bench.FormatSize(sw.hi), mc)
}

func (sw sweep) session(ctx context.Context) (*session.Session, error) {
	return newSession(ctx, sw.kind, sw.tr, sw.workers)
}

// progress begins the progress line of a sweep over the sizes (plan run
// and plan benches); the caller ends it.
func (sw sweep) progress(task string, errOut io.Writer) *progress.Reporter {
	var steps []progress.Step
	for b := sw.lo; b <= sw.hi; b *= sw.step {
		// planItersFor keeps a size near the same time until its floor
		// of 5 calls (about 26 MiB), like bench's sweeps.
		steps = append(steps, progress.Step{Label: progress.FormatBytes(b), Weight: progress.SizeWeight(b, 32<<20)})
	}
	prog := newProgress(errOut)
	prog.Begin(task, steps)
	return prog
}

func (sw sweep) itersWarm(bytes int64) (int, int) {
	it := sw.iters
	if it <= 0 {
		it = planItersFor(bytes)
	}
	w := sw.warmup
	if w <= 0 {
		w = max(2, it/10)
	}
	return it, w
}

func planRun(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("plan run", "chorus plan run FILE --workers N [--session process|threaded] [--dtype float32] [--min 1K] [--max 64M] [--step 4] [--json]", out)
	get := sweepFlags(fs)
	path, err := splitFile(fs, args, "plan file")
	if err != nil {
		return err
	}
	sw, err := get()
	if err != nil {
		return err
	}
	p, err := readPlan(path)
	if err != nil {
		return err
	}
	if p.NumRanks() != sw.workers {
		return usageError{fmt.Sprintf("plan run: plan %q has %d ranks; run it with --workers %d", p.Name, p.NumRanks(), p.NumRanks())}
	}
	if err := sw.check(fs.Name(), p); err != nil {
		return err
	}
	if err := sw.plot.prepare(commandLine(append([]string{"plan", "run"}, args...)...), errOut); err != nil {
		return err
	}
	return planSweep(ctx, p, sw, false, out, errOut)
}

// planSweep loads p on a new session and times it over the sizes; with
// compare, the hand-written cpu backend runs the same collective at the
// same sizes in the same session, row by row.
func planSweep(ctx context.Context, p *plan.Plan, sw sweep, compare bool, out, errOut io.Writer) error {
	if sw.device == "cuda" {
		return gpuSweep(ctx, p, sw, out, errOut)
	}
	s, err := sw.session(ctx)
	if err != nil {
		return err
	}
	defer s.Shutdown()
	c, err := planrun.Load(ctx, s, p, 0)
	if err != nil {
		return err
	}
	var cpuBench *session.DRef
	if compare {
		if err := s.InitCCL(ctx, "cpu", 0); err != nil {
			return err
		}
		if cpuBench, err = s.GetGlobalFunc(ctx, "chorus.bench_collective"); err != nil {
			return err
		}
	}
	if !sw.json {
		what := "plan " + p.Name
		fmt.Fprintf(out, "# chorus %s: %s (%s, %s), CPU executor, %s session, %d workers, timed inside the workers\n",
			map[bool]string{false: "plan run", true: "bench"}[compare], what, p.Collective, p.Protocol, sw.kind, sw.workers)
		if compare {
			fmt.Fprintf(out, "#%12s %12s %9s %11s %11s %11s %7s %8s\n", "size(B)", "count", "type", "cpu(us)", "plan(us)", "busbw(GB/s)", "ratio", "#wrong")
		} else {
			fmt.Fprintf(out, "#%12s %12s %9s %11s %11s %11s %8s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong")
		}
	}
	es := int64(sw.dt.Size())
	var events int64
	for b := sw.lo; b <= sw.hi; b *= sw.step {
		it, w := sw.itersWarm(b)
		events += int64(sw.workers) * int64(it+w)
	}
	if compare {
		events *= 2
	}
	traced := announceTrace(errOut, "plan "+p.Name, events)
	failed, err := sw.drive(p, out, errOut, func(b, inN, outN, msg int64) (planRow, error) {
		iters, warm := sw.itersWarm(msg)
		row := planRow{Bench: string(p.Collective), Plan: p.Name, Session: sw.kind, Workers: sw.workers, DType: sw.dt.String(), Bytes: msg}
		if compare {
			v, err := benchHandWritten(ctx, s, cpuBench, string(p.Collective), sw.dt, msg, iters, warm)
			if err != nil {
				return row, err
			}
			row.CPUTimeUs = v.TimeUs
			row.Wrong += v.Wrong
		}
		r, err := c.Bench(ctx, sw.dt, inN, outN, iters, warm)
		if err != nil {
			return row, err
		}
		row.TimeUs, row.Wrong = r.TimeUs, row.Wrong+r.Wrong
		if row.CPUTimeUs > 0 {
			row.Ratio = row.TimeUs / row.CPUTimeUs
		}
		return row, nil
	}, func(row planRow) {
		if compare {
			fmt.Fprintf(out, " %12d %12d %9s %11.2f %11.2f %11.3f %7.2f %8d\n", row.Bytes, row.Bytes/es, row.DType, row.CPUTimeUs, row.TimeUs, row.BusBW, row.Ratio, row.Wrong)
		} else {
			fmt.Fprintf(out, " %12d %12d %9s %11.2f %11.3f %11.3f %8d\n", row.Bytes, row.Bytes/es, row.DType, row.TimeUs, row.AlgBW, row.BusBW, row.Wrong)
		}
	})
	if err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err := s.Shutdown(); err != nil {
		return err
	}
	traced()
	if failed > 0 {
		return fmt.Errorf("plan %q: %d wrong elements", p.Name, failed)
	}
	return sw.plot.write(errOut)
}

// drive is the sweep loop of plan run and bench --plan on either
// executor: for every size of the sweep that fits p it calls measure with
// the element counts and the message bytes, completes the row's
// bandwidths, adds it to the plot and prints it (a JSON line, or the
// table line printRow writes), with the progress line in between. It
// returns the wrong elements of all rows.
func (sw sweep) drive(p *plan.Plan, out, errOut io.Writer, measure func(b, inN, outN, msg int64) (planRow, error), printRow func(planRow)) (int64, error) {
	es := int64(sw.dt.Size())
	var failed int64
	prog := sw.progress(p.Name, errOut)
	defer prog.End()
	for i, b := 0, sw.lo; b <= sw.hi; i, b = i+1, b*sw.step {
		prog.Step(i)
		inN, outN := planrun.Counts(p, sw.dt, b)
		if inN == 0 {
			prog.Clear()
			fmt.Fprintf(errOut, "plan %q: no message size up to %d bytes fits the plan; row skipped\n", p.Name, b)
			continue
		}
		msg := inN * es
		if p.Collective == plan.AllGather {
			msg = outN * es
		}
		row, err := measure(b, inN, outN, msg)
		if err != nil {
			return failed, err
		}
		tr, err := p.MaxTraffic(inN*es, outN*es)
		if err != nil {
			return failed, fmt.Errorf("plan %q: traffic at %d bytes: %w", p.Name, msg, err)
		}
		row.PeerBytes, row.MemBytes = tr.Peer(), tr.Total()
		if row.TimeUs > 0 {
			row.AlgBW = float64(msg) / row.TimeUs / 1e3
			row.BusBW = row.AlgBW * busFactor(p.Collective, sw.workers)
		}
		failed += row.Wrong
		prog.Clear()
		sw.plot.add(row)
		if sw.json {
			if err := json.NewEncoder(out).Encode(row); err != nil {
				return failed, err
			}
		} else {
			printRow(row)
		}
	}
	return failed, nil
}

// benchHandWritten times the cpu backend's collective through the bench
// function of cmd/chorus/internal/bench.
func benchHandWritten(ctx context.Context, s *session.Session, f *session.DRef, coll string, dt tensor.DType, bytes int64, iters, warm int) (planrun.BenchResult, error) {
	var res planrun.BenchResult
	v, err := s.CallPacked(f, coll, dt, bytes, iters, warm, false)
	if err != nil {
		return res, err
	}
	defer v.Release()
	for w := range s.NumWorkers() {
		x, err := s.DebugGetFromRemote(ctx, v, w)
		if err != nil {
			return res, err
		}
		d, err := tensor.Data[float64](x.(*tensor.Tensor))
		if err != nil {
			return res, err
		}
		res.TimeUs = max(res.TimeUs, d[bench.ResultMean])
		res.Wrong += int64(d[bench.ResultWrong])
	}
	return res, nil
}

// benchPlanFlagged reports whether a collective bench names a plan, so
// that cmdBench hands it to benchPlan.
func benchPlanFlagged(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "plan" || name == "algorithm") {
			return true
		}
	}
	return false
}

// benchPlan: chorus bench allreduce --plan FILE | --algorithm NAME times
// the plan on the CPU executor next to the hand-written cpu backend.
func benchPlan(ctx context.Context, name string, args []string, out, errOut io.Writer) error {
	fs := newFlags("bench "+name, "chorus bench "+name+" --plan FILE | --algorithm NAME [--instances K] [--workers N] [--session process|threaded] [--dtype float32] [--min 1K] [--max 64M] [--step 4] [--json]", out)
	file := fs.String("plan", "", "plan file (JSON)")
	algo := fs.String("algorithm", "", "algorithm of the library (chorus plan build --list)")
	inst := fs.Int("instances", 1, "instances of a library algorithm")
	get := sweepFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	sw, err := get()
	if err != nil {
		return err
	}
	var p *plan.Plan
	switch {
	case (*file == "") == (*algo == ""):
		return usageError{"bench: give one of --plan and --algorithm"}
	case *file != "":
		p, err = readPlan(*file)
	default:
		p, err = buildPlan(*algo, sw.workers, *inst)
	}
	if err != nil {
		return err
	}
	if p.NumRanks() != sw.workers {
		return usageError{fmt.Sprintf("bench: plan %q has %d ranks, --workers is %d", p.Name, p.NumRanks(), sw.workers)}
	}
	want := strings.ReplaceAll(name, "_", "")
	if string(p.Collective) != want {
		return usageError{fmt.Sprintf("bench %s: plan %q is a %s", name, p.Name, p.Collective)}
	}
	if err := sw.check(fs.Name(), p); err != nil {
		return err
	}
	if err := sw.plot.prepare(commandLine(append([]string{"bench", name}, args...)...), errOut); err != nil {
		return err
	}
	start := time.Now()
	err = planSweep(ctx, p, sw, true, out, errOut)
	if err == nil && !sw.json {
		fmt.Fprintf(out, "# ratio = plan / cpu; %s\n", time.Since(start).Round(time.Second))
	}
	return err
}

// gpuSweep runs p on the workers' GPUs (algo/gpuexec) over the sizes:
// one process per rank bound to --devices, the "ipc" backend (ranks may
// share a GPU), every result checked exactly.
func gpuSweep(ctx context.Context, p *plan.Plan, sw sweep, out, errOut io.Writer) error {
	ids := make([]int, sw.workers)
	for i := range ids {
		ids[i] = sw.devices[i%len(sw.devices)]
	}
	po := processOptions(sw.tr)
	po.NumWorkers, po.DeviceIDs = sw.workers, ids
	s, err := session.NewProcess(ctx, po)
	if err != nil {
		return err
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "ipc", 60*time.Second); err != nil {
		return err
	}
	c, err := planrun.LoadGPU(ctx, s, p, planrun.GPUOptions{Force: sw.force})
	if err != nil {
		return err
	}
	c.IPCTensors = sw.ipc
	mode := "eager"
	if sw.graph {
		mode = "CUDA graph replays"
	}
	if !sw.json {
		calls := fmt.Sprintf("%d calls per size", sw.iters)
		if sw.iters <= 0 {
			calls = fmt.Sprintf("calls per size: as many as fit in %v", gpuSizeBudget)
		}
		fmt.Fprintf(out, "# chorus plan on GPUs: %s (%s, %s), GPU executor, %d workers on cuda %v, %s, %s, timed inside the workers\n",
			p.Name, p.Collective, p.Protocol, sw.workers, ids, mode, calls)
		fmt.Fprintf(out, "# peer, mem: the busiest rank's traffic (chorus plan show --bytes) over the time: its bytes through peers' memory, and all its bytes\n")
		fmt.Fprintf(out, "#%12s %12s %9s %11s %11s %11s %8s %11s %11s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "peer(GB/s)", "mem(GB/s)")
	}
	es := int64(sw.dt.Size())
	failed, err := sw.drive(p, out, errOut, func(b, inN, outN, msg int64) (planRow, error) {
		iters, warm := sw.itersWarm(msg)
		row := planRow{Bench: string(p.Collective), Plan: p.Name, Session: "process-cuda", Workers: sw.workers, DType: sw.dt.String(), Bytes: msg}
		if sw.iters <= 0 {
			// Calibrate: a few calls (also checked) give the time per call,
			// and the size gets what fits in gpuSizeBudget.
			pr, err := c.Bench(ctx, sw.dt, inN, outN, gpuProbeIters, 1, reduce.Sum, sw.graph, b)
			if err != nil {
				return row, err
			}
			row.Wrong = pr.Wrong
			iters, warm = gpuIters(pr.TimeUs, msg, sw.warmup)
		}
		r, err := c.Bench(ctx, sw.dt, inN, outN, iters, warm, reduce.Sum, sw.graph, b)
		if err != nil {
			return row, err
		}
		row.TimeUs, row.Wrong = r.TimeUs, row.Wrong+r.Wrong
		row.Backend = "chorus-plan-" + p.Name
		if sw.graph {
			row.Session = "process-cuda-graph"
			row.Backend += "-graph"
		}
		return row, nil
	}, func(row planRow) {
		var peer, mem float64
		if row.TimeUs > 0 {
			peer, mem = float64(row.PeerBytes)/row.TimeUs/1e3, float64(row.MemBytes)/row.TimeUs/1e3
		}
		fmt.Fprintf(out, " %12d %12d %9s %11.2f %11.3f %11.3f %8d %11.1f %11.1f\n", row.Bytes, row.Bytes/es, row.DType, row.TimeUs, row.AlgBW, row.BusBW, row.Wrong, peer, mem)
	})
	if err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err := s.Shutdown(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("plan %q: %d wrong elements", p.Name, failed)
	}
	return sw.plot.write(errOut)
}
