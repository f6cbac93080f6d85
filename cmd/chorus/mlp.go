package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/chorus-rt/chorus/cmd/chorus/internal/mlp"
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Commands of the compiler and the VM: compile, the MLP part of demo,
// bench mlp.

const compileSynopsis = "chorus compile FILE [--pipeline NAME|SPEC] [--print-after-all]"

// cmdCompile parses a text IR file, runs a pipeline and prints the IR.
func cmdCompile(args []string, out io.Writer) error {
	fs := newFlags("compile", compileSynopsis, out)
	pipe := fs.String("pipeline", "default", "default (GPU workers: passes.Default on cuda:0), cpu (CPU workers), or passes: plan-devices={cuda:0},ipc-allreduce-rewrite=one_shot,plan-memory,lower-gpu-ipc-alloc-storage")
	all := fs.Bool("print-after-all", false, "print the IR after every pass (each preceded by // after pass NAME)")
	// FILE may come before or after the flags.
	files, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return usageError{fmt.Sprintf("compile: want one IR file, got %d %q (%s)", len(files), files, compileSynopsis)}
	}
	p, err := pipelineByName(*pipe)
	if err != nil {
		return badFlag("compile", "pipeline", *pipe, fmt.Sprintf("want a named pipeline (%s) or a comma-separated pass list such as plan-devices={cuda:0},plan-memory (%v)", strings.Join(pipelineNames, ", "), err))
	}
	src, err := os.ReadFile(files[0])
	if err != nil {
		return err
	}
	m, err := ir.Parse(string(src))
	if err != nil {
		return fmt.Errorf("%s:%w", files[0], err)
	}
	opts := passes.RunOptions{}
	if *all {
		opts.PrintAfterEach = out
		fmt.Fprintf(out, "// input %s\n", files[0])
		if err := ir.Print(out, m); err != nil {
			return err
		}
	}
	res, err := p.Run(m, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}
	if !*all {
		if err := ir.Print(out, res); err != nil {
			return err
		}
	}
	// What memory planning did, as comments (the output still parses).
	for _, f := range res.Funcs {
		before, err1 := passes.PeakMemory(m.Func(f.Name))
		after, err2 := passes.PeakMemory(f)
		if err1 == nil && err2 == nil {
			fmt.Fprintf(out, "// @%s: peak bytes per call %d before the pipeline, %d after\n", f.Name, before.Total, after.Total)
		}
	}
	return nil
}

// pipelineNames are the named pipelines of compile --pipeline.
var pipelineNames = []string{"default", "gpu", "cpu"}

// pipelineByName: "default" and "gpu" are vm.Pipeline for GPU workers
// (passes.Default on cuda:0, strategy auto), "cpu" for CPU workers;
// anything else is a pass list for passes.ParsePipeline.
func pipelineByName(name string) (passes.Pipeline, error) {
	switch name {
	case "default", "gpu":
		return vm.Pipeline(tensor.CUDADevice(0), "auto")
	case "cpu":
		return vm.Pipeline(tensor.CPUDevice, "")
	}
	return passes.ParsePipeline("custom", name)
}

// gpuCount is how many GPUs the CUDA driver sees (0 without a driver).
func gpuCount() int {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		return 0
	}
	n, err := d.DeviceCount()
	if err != nil {
		return 0
	}
	return n
}

// gpusFor is how many GPUs a command's --device value (auto, cpu or
// cuda) gives it: auto takes what the driver sees, cuda needs at least one.
func gpusFor(cmd, device string) (int, error) {
	switch device {
	case "auto":
		return gpuCount(), nil
	case "cuda":
		if n := gpuCount(); n > 0 {
			return n, nil
		}
		return 0, fmt.Errorf("%s: --device cuda, but no GPU was found", cmd)
	case "cpu":
		return 0, nil
	}
	return 0, badFlag(cmd, "device", device, "want auto, cpu or cuda")
}

// demoConfig is the demo's MLP for n workers (FFN rounded up to split evenly).
func demoConfig(n int, dt tensor.DType) mlp.Config {
	ffn := (256 + int64(n) - 1) / int64(n) * int64(n)
	return mlp.Config{Batch: 8, Hidden: 64, FFN: ffn, DType: dt, Seed: 1}
}

// demoMLP runs the MLP part of the demo: on GPUs when the machine has
// them (a new process session, one worker per GPU up to n, the nccl
// backend and the custom IPC all-reduce), else on s's CPU workers.
func demoMLP(ctx context.Context, out io.Writer, s *session.Session, n int, device string) error {
	fmt.Fprintln(out, "4. a program built with the compiler/ir builder, compiled by a pass pipeline, run by the VM on every worker:")
	gpus, err := gpusFor("demo", device)
	if err != nil {
		return err
	}
	if gpus == 0 {
		if err := s.InitCCL(ctx, "cpu", 0); err != nil {
			return err
		}
		return mlp.Demo(ctx, out, s, demoConfig(n, tensor.Float32), tensor.CPUDevice, "")
	}
	n = min(n, gpus)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	po := processOptions("shm")
	po.NumWorkers, po.DeviceIDs = n, ids
	gs, err := session.NewProcess(ctx, po)
	if err != nil {
		return err
	}
	derr := func() error {
		if err := gs.InitCCL(ctx, "nccl", 0); err != nil {
			return err
		}
		return mlp.Demo(ctx, out, gs, demoConfig(n, tensor.Float16), tensor.CUDADevice(0), "auto")
	}()
	return errors.Join(derr, gs.Shutdown())
}

const benchMLPSynopsis = "chorus bench mlp [--workers 1,2,4] [--sessions threaded,process] [--device cpu|cuda] [--batch 16] [--hidden 512] [--ffn 2048] [--dtype float32] [--iters 20] [--warmup 3]"

// benchMLP times the MLP per step and prints a table with the peak
// memory before and after planning.
func benchMLP(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("bench mlp", benchMLPSynopsis, out)
	workers := fs.String("workers", "1,2,4", "comma-separated worker counts")
	kinds := fs.String("sessions", "threaded,process", "comma-separated: threaded, process")
	dev := fs.String("device", "cpu", "cpu, or cuda (one worker per GPU, nccl backend, custom all-reduce)")
	batch := fs.Int64("batch", 16, "rows of x")
	hidden := fs.Int64("hidden", 512, "model width")
	ffn := fs.Int64("ffn", 2048, "hidden layer width (split over the workers)")
	dtype := fs.String("dtype", "float32", "float32, float16 or bfloat16")
	strategy := fs.String("strategy", "auto", "custom all-reduce strategy on GPUs: auto, one_shot, two_shot, or plan:NAME (an execution plan on the GPU executor: library algorithm or plan file)")
	iters := fs.Int("iters", 20, "timed steps per row")
	warmup := fs.Int("warmup", 3, "untimed steps per row")
	graph := fs.Bool("graph", false, "GPUs: capture the step as a CUDA graph per worker and time its replays (each still a call + sync)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	const cmd = "bench mlp"
	if *graph && *dev != "cuda" {
		return usageError{cmd + ": --graph needs --device cuda"}
	}
	ns, err := parseCounts(cmd, "workers", *workers)
	if err != nil {
		return err
	}
	dt, err := tensor.ParseDType(*dtype)
	if err != nil || (dt != tensor.Float32 && dt != tensor.Float16 && dt != tensor.BFloat16) {
		return badFlag(cmd, "dtype", *dtype, "want float32, float16 or bfloat16")
	}
	device := tensor.CPUDevice
	switch *dev {
	case "cpu":
	case "cuda":
		device = tensor.CUDADevice(0)
	default:
		return badFlag(cmd, "device", *dev, "want cpu or cuda")
	}
	if *iters < 1 {
		return badFlag(cmd, "iters", *iters, "want 1 or more")
	}
	if *warmup < 0 {
		return badFlag(cmd, "warmup", *warmup, "want 0 or more")
	}
	for _, k := range strings.Split(*kinds, ",") {
		k = strings.TrimSpace(k)
		if err := checkSession(cmd, k); err != nil {
			return badFlag(cmd, "sessions", k, "want a comma-separated list of threaded, process")
		}
		for _, n := range ns {
			if err := checkWorkers(cmd, n, k); err != nil {
				return err
			}
		}
	}
	cfg := mlp.Config{Batch: *batch, Hidden: *hidden, FFN: *ffn, DType: dt, Seed: 1}
	for _, n := range ns {
		if err := cfg.Validate(n); err != nil {
			return usageError{fmt.Sprintf("%s: --batch %d --hidden %d --ffn %d on %d workers: %v", cmd, *batch, *hidden, *ffn, n, err)}
		}
	}
	what := "one call"
	if *graph {
		what = "one replay of the step captured as a CUDA graph"
	}
	fmt.Fprintf(out, "# tensor-parallel MLP on the VM: %v on %v; a step is %s + a sync of every worker\n", cfg, *dev, what)
	fmt.Fprintf(out, "# peak bytes: passes.PeakMemory per worker and call, before and after the pipeline (memory planning)\n")
	fmt.Fprintf(out, "%-9s %7s %12s %12s %10s %10s %10s %6s\n", "session", "workers", "peak_before", "peak_after", "p50_us", "min_us", "max_us", "check")
	for _, k := range strings.Split(*kinds, ",") {
		k = strings.TrimSpace(k)
		if k == "threaded" && device.Kind == tensor.CUDA {
			fmt.Fprintf(errOut, "skipping threaded sessions on GPUs (the custom all-reduce needs one process per GPU)\n")
			continue
		}
		for _, n := range ns {
			row, err := benchMLPRow(ctx, k, n, cfg, device, *strategy, *warmup, *iters, *graph)
			if err != nil {
				return fmt.Errorf("bench mlp %s with %d workers: %w", k, n, err)
			}
			fmt.Fprintln(out, row)
		}
	}
	return nil
}

func benchMLPRow(ctx context.Context, kind string, n int, cfg mlp.Config, dev tensor.Device, strategy string, warmup, iters int, graph bool) (string, error) {
	var s *session.Session
	var err error
	backend := "cpu"
	if kind == "threaded" {
		s, err = session.NewThreaded(session.Options{NumWorkers: n})
	} else {
		po := processOptions("shm")
		po.NumWorkers = n
		if dev.Kind == tensor.CUDA {
			backend = "nccl"
			for i := range n {
				po.DeviceIDs = append(po.DeviceIDs, i)
			}
		}
		s, err = session.NewProcess(ctx, po)
	}
	if err != nil {
		return "", err
	}
	row, rerr := func() (string, error) {
		if err := s.InitCCL(ctx, backend, 0); err != nil {
			return "", err
		}
		st, ck, err := mlp.Run(ctx, s, cfg, dev, strategy)
		if err != nil {
			return "", err
		}
		defer st.Release()
		if ck.Err != nil {
			return "", ck.Err
		}
		var tm mlp.Timing
		if graph {
			g, err := st.CaptureStep(ctx)
			if err != nil {
				return "", err
			}
			defer g.Release()
			tm, err = st.TimeReplay(ctx, g, warmup, iters)
			if err != nil {
				return "", err
			}
		} else if tm, err = st.Time(ctx, warmup, iters); err != nil {
			return "", err
		}
		return fmt.Sprintf("%-9s %7d %12d %12d %10.1f %10.1f %10.1f %6s", kind, n, st.Compiled.PeakBefore.Total, st.Compiled.PeakAfter.Total,
			float64(tm.Median.Nanoseconds())/1e3, float64(tm.Min.Nanoseconds())/1e3, float64(tm.Max.Nanoseconds())/1e3, "ok"), nil
	}()
	return row, errors.Join(rerr, s.Shutdown())
}
