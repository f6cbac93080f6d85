package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"text/tabwriter"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/tensor"
)

// archRE matches the targets NVRTC takes as -arch: sm_ and the compute
// capability's digits.
var archRE = regexp.MustCompile(`^sm_([1-9][0-9]{1,2})$`)

// kernelRow is one rank's line of `chorus plan compile --json`.
type kernelRow struct {
	Plan        string `json:"plan"`
	Rank        int    `json:"rank"`
	DType       string `json:"dtype"`
	Op          string `json:"op"`
	Arch        string `json:"arch"`
	Blocks      int    `json:"blocks"`
	Threads     int    `json:"threads"`
	Registers   int    `json:"registers"`
	Resident    int    `json:"resident_blocks_per_sm"`
	Shared      int    `json:"shared_bytes"`
	StackFrame  int    `json:"stack_bytes"`
	SpillStores int    `json:"spill_store_bytes"`
	SpillLoads  int    `json:"spill_load_bytes"`
	Source      string `json:"source,omitempty"`
}

// residentBlocks is how many blocks of threads a multiprocessor of
// compute capability 7.0-9.0 holds by registers and threads alone (2048
// threads): what the GPU executor's occupancy query answers where shared
// memory does not bind (a plan kernel's few words).
func residentBlocks(r nvrtc.Resources, threads int) int {
	if threads <= 0 {
		return 0
	}
	return min(2048/threads, r.BlocksByRegisters(threads))
}

// planCompile generates the GPU executor's kernel of every rank of a plan
// and compiles each with this machine's NVRTC, printing what ptxas
// reports: registers, shared memory, stack frame and spills. A spill or
// a stack frame is local memory, which the executor's loops would pay for
// at every op.
func planCompile(args []string, out io.Writer) error {
	fs := newFlags("plan compile", "chorus plan compile FILE [--dtype bfloat16] [--op sum] [--arch sm_90] [--source DIR] [--json]", out)
	dtype := fs.String("dtype", "bfloat16", "element type: float32, float16 or bfloat16 (the GPU executor's)")
	opName := fs.String("op", "sum", "reduction: sum, min or max (the GPU executor's)")
	arch := fs.String("arch", "sm_90", "target architecture, sm_XY (compute capability X.Y, at least sm_70)")
	srcDir := fs.String("source", "", "also write each rank's CUDA source into this folder (chorus_plan_NAME_rR.cu; existing files are left alone and refused)")
	asJSON := fs.Bool("json", false, "print one JSON line per rank instead of the table")
	path, err := splitFile(fs, args, "plan file")
	if err != nil {
		return err
	}
	dt, err := tensor.ParseDType(*dtype)
	if err == nil {
		_, err = gpuexec.DTypeCode(dt)
	}
	if err != nil {
		return badFlag(fs.Name(), "dtype", *dtype, "want float32, float16 or bfloat16")
	}
	op, err := reduce.ParseOp(*opName)
	if err == nil {
		_, err = gpuexec.OpCode(op)
	}
	if err != nil {
		return badFlag(fs.Name(), "op", *opName, "want sum, min or max")
	}
	if m := archRE.FindStringSubmatch(*arch); m == nil || m[1] < "70" && len(m[1]) == 2 {
		return badFlag(fs.Name(), "arch", *arch, "want sm_XY for compute capability X.Y of at least 7.0, e.g. sm_80, sm_90 or sm_100")
	}
	p, err := readPlan(path)
	if err != nil {
		return err
	}
	kernels := make([]*gpuexec.Kernel, p.NumRanks())
	for r := range kernels {
		if kernels[r], err = gpuexec.Generate(p, r, dt, op); err != nil {
			return fmt.Errorf("plan %q: rank %d: %w", p.Name, r, err)
		}
	}
	var files []string
	if *srcDir != "" {
		if files, err = writeKernelSources(*srcDir, p, kernels); err != nil {
			return err
		}
	}
	c, err := nvrtc.Load()
	if err != nil {
		if errors.Is(err, nvrtc.ErrNotLoaded) {
			err = fmt.Errorf("%w (Debian: apt install libnvrtc11.2 from non-free; or a CUDA toolkit's libnvrtc)", err)
		}
		return fmt.Errorf("plan compile: %w", err)
	}
	rows := make([]kernelRow, len(kernels))
	for r, k := range kernels {
		name := fmt.Sprintf("chorus_plan_%s_r%d.cu", p.Name, r)
		rep, err := c.Report(name, k.Source, *arch)
		if err != nil {
			return fmt.Errorf("plan %q: rank %d: %w", p.Name, r, err)
		}
		res, ok := rep[gpuexec.KernelName]
		if !ok {
			return fmt.Errorf("plan %q: rank %d: NVRTC's report has no kernel %s", p.Name, r, gpuexec.KernelName)
		}
		rows[r] = kernelRow{Plan: p.Name, Rank: r, DType: dt.String(), Op: op.String(), Arch: *arch,
			Blocks: k.Blocks, Threads: k.Threads, Registers: res.Registers, Resident: residentBlocks(res, k.Threads),
			Shared: res.Shared, StackFrame: res.StackFrame, SpillStores: res.SpillStores, SpillLoads: res.SpillLoads}
		if files != nil {
			rows[r].Source = files[r]
		}
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		for _, row := range rows {
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		return nil
	}
	maj, mnr := c.Version()
	fmt.Fprintf(out, "plan %q, %d ranks, %s %s, %s, NVRTC %d.%d\n", p.Name, p.NumRanks(), dt, op, *arch, maj, mnr)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tblocks\tthreads\tregisters\tresident/SM\tshared B\tstack B\tspill stores B\tspill loads B\t")
	spills, stacks := 0, 0
	for _, row := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", row.Rank, row.Blocks, row.Threads, row.Registers, row.Resident,
			row.Shared, row.StackFrame, row.SpillStores, row.SpillLoads)
		if row.SpillStores > 0 || row.SpillLoads > 0 {
			spills++
		}
		if row.StackFrame > 0 {
			stacks++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case spills > 0:
		fmt.Fprintf(out, "%d of %d ranks' kernels spill registers to local memory (a thread's bytes, per op that touches them)\n", spills, len(rows))
	case stacks > 0:
		fmt.Fprintf(out, "no spills; %d of %d ranks' kernels keep a stack frame in local memory (arrays indexed at run time)\n", stacks, len(rows))
	default:
		fmt.Fprintf(out, "no local memory in any rank's kernel\n")
	}
	for _, f := range files {
		fmt.Fprintf(out, "wrote %s\n", f)
	}
	return nil
}

// writeKernelSources writes each rank's source into dir, refusing any
// file that already exists (and writing none then).
func writeKernelSources(dir string, p *plan.Plan, kernels []*gpuexec.Kernel) ([]string, error) {
	files := make([]string, len(kernels))
	for r := range kernels {
		files[r] = filepath.Join(dir, fmt.Sprintf("chorus_plan_%s_r%d.cu", p.Name, r))
		if _, err := os.Lstat(files[r]); err == nil {
			return nil, fmt.Errorf("plan compile: --source: %s exists; it is left alone (remove it or pick another folder)", files[r])
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plan compile: --source: %w", err)
	}
	for r, k := range kernels {
		f, err := os.OpenFile(files[r], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, err = io.WriteString(f, k.Source)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return nil, fmt.Errorf("plan compile: --source: %w", err)
		}
	}
	return files, nil
}
