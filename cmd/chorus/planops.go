package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/chorus-rt/chorus/algo/handplan"
	planrun "github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/session"
)

// planOpsRow is one row of chorus bench planops.
type planOpsRow struct {
	Bench     string  `json:"bench"` // "planops"
	Plan      string  `json:"plan"`
	Ops       int     `json:"ops"`
	TBs       int     `json:"tbs"`
	DType     string  `json:"dtype"`
	Bytes     int64   `json:"bytes"`
	Iters     int     `json:"iters"`
	CopyUs    float64 `json:"copy_us"`       // device copy of the same bytes, eager
	PlanUs    float64 `json:"plan_us"`       // the plan, eager
	OpUs      float64 `json:"per_op_us"`     // (plan - copy) / ops, eager
	CopyGraph float64 `json:"copy_graph_us"` // the same, replayed from CUDA graphs
	PlanGraph float64 `json:"plan_graph_us"`
	OpGraphUs float64 `json:"per_op_graph_us"`
	Wrong     int64   `json:"wrong"`
}

// benchPlanOps: what one op of the GPU executor costs, on one GPU. A
// 1-rank plan of K copy ops (handplan.CopyOps: op i copies chunk i of K,
// so the plan moves the bytes of one copy) is timed next to a plain
// device copy of the same bytes (registry.CopyTensor, cuMemcpyDtoDAsync),
// eager and replayed from CUDA graphs, in one worker process; the cost
// per op is (plan - copy) / K. Every plan result is checked.
func benchPlanOps(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("bench planops", "chorus bench planops [--ops 1,8,64] [--tbs 1] [--device-id 0] [--dtype float32] [--min 1K] [--max 16M] [--step 4] [--iters N] [--json]", out)
	opsS := fs.String("ops", "1,8,64", "comma-separated copy-op counts K")
	tbs := fs.Int("tbs", 1, "thread blocks each op is split over")
	devID := fs.Int("device-id", 0, "the GPU")
	dtype := fs.String("dtype", "float32", "element type")
	minS := fs.String("min", "1K", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max", "16M", "largest size")
	step := fs.Int64("step", 4, "size multiplier between rows")
	iters := fs.Int("iters", 0, "timed calls per measurement (0: as many as fit in 0.5 s after 3 probe calls)")
	asJSON := fs.Bool("json", false, "print one JSON object per line instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	const cmd = "bench planops"
	ks, err := parseCounts(cmd, "ops", *opsS)
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
	if *tbs < 1 {
		return badFlag(cmd, "tbs", *tbs, "want 1 or more")
	}
	if *devID < 0 {
		return badFlag(cmd, "device-id", *devID, "want a GPU ordinal >= 0")
	}
	po := processOptions("shm")
	po.NumWorkers, po.DeviceIDs = 1, []int{*devID}
	s, err := session.NewProcess(ctx, po)
	if err != nil {
		return err
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "ipc", 60*time.Second); err != nil {
		return err
	}
	type loadedPlan struct {
		k int
		c *planrun.GPUCollective
	}
	var plans []loadedPlan
	for _, k := range ks {
		p, err := handplan.CopyOps(k, handplan.Options{TBs: *tbs})
		if err != nil {
			return err
		}
		c, err := planrun.LoadGPU(ctx, s, p, planrun.GPUOptions{})
		if err != nil {
			return err
		}
		defer c.Close()
		plans = append(plans, loadedPlan{k, c})
	}
	if !*asJSON {
		fmt.Fprintf(out, "# chorus bench planops: 1-rank plans of K copy ops (%d thread block(s) each) next to a device copy of the same bytes, cuda:%d, %s, timed inside the worker\n", *tbs, *devID, dt)
		fmt.Fprintf(out, "# per-op = (plan - copy) / K; graph: replays of a CUDA graph of one call\n")
		fmt.Fprintf(out, "#%11s %5s %7s %10s %10s %10s %10s %10s %10s %7s\n", "size(B)", "K", "iters", "copy(us)", "plan(us)", "per-op", "copy-g", "plan-g", "per-op-g", "#wrong")
	}
	es := int64(dt.Size())
	var failed int64
	for b := lo; b <= hi; b *= *step {
		for _, lp := range plans {
			count, _ := planrun.Counts(lp.c.Plan(), dt, b)
			if count == 0 {
				fmt.Fprintf(errOut, "planops: no size up to %d bytes fits %d ops; row skipped\n", b, lp.k)
				continue
			}
			bytes := count * es
			it, warm := *iters, max(1, *iters/10)
			row := planOpsRow{Bench: "planops", Plan: lp.c.Plan().Name, Ops: lp.k, TBs: *tbs, DType: dt.String(), Bytes: bytes}
			if it <= 0 {
				pr, err := lp.c.Bench(ctx, dt, count, count, gpuProbeIters, 1, reduce.Sum, false, b)
				if err != nil {
					return err
				}
				row.Wrong += pr.Wrong
				it, warm = gpuIters(pr.TimeUs, bytes, 0)
			}
			row.Iters = it
			for _, graph := range []bool{false, true} {
				cu, err := planrun.GPUCopyBench(ctx, s, dt, count, it, warm, graph)
				if err != nil {
					return err
				}
				r, err := lp.c.Bench(ctx, dt, count, count, it, warm, reduce.Sum, graph, b)
				if err != nil {
					return err
				}
				row.Wrong += r.Wrong
				per := (r.TimeUs - cu) / float64(lp.k)
				if graph {
					row.CopyGraph, row.PlanGraph, row.OpGraphUs = cu, r.TimeUs, per
				} else {
					row.CopyUs, row.PlanUs, row.OpUs = cu, r.TimeUs, per
				}
			}
			failed += row.Wrong
			if *asJSON {
				if err := json.NewEncoder(out).Encode(row); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, " %11d %5d %7d %10.2f %10.2f %10.3f %10.2f %10.2f %10.3f %7d\n", row.Bytes, row.Ops, row.Iters,
					row.CopyUs, row.PlanUs, row.OpUs, row.CopyGraph, row.PlanGraph, row.OpGraphUs, row.Wrong)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("planops: %d wrong elements", failed)
	}
	return nil
}
