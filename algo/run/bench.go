package run

import (
	"context"
	"fmt"
	"time"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// benchValue is element i of rank r's input: small integers, exact in
// every dtype and in sums over 8 ranks (the same values `chorus bench`
// uses for the hand-written collectives).
func benchValue(r, i int) float64 { return float64(r+1) + float64(i%5) }

// Counts returns the input and output element counts of one call of p
// for a message of bytes (input bytes; output bytes for allgather) on n
// ranks, rounded down to the largest message the plan's layout accepts on
// every rank (0, 0 when none fits).
func Counts(p *plan.Plan, dt tensor.DType, bytes int64) (in, out int64) {
	n := int64(p.NumRanks())
	es := int64(max(1, dt.Size()))
	al := int64(max(1, p.BufferAlignment))
	step := max(es, al)
	for b := bytes / step * step; b > 0; b -= step {
		var ib, ob int64
		switch p.Collective {
		case plan.AllGather:
			if b%n != 0 {
				continue
			}
			ib, ob = b/n, b
		case plan.ReduceScatter:
			if b%n != 0 {
				continue
			}
			ib, ob = b, b/n
		default:
			// Other collectives: the chunk counts of rank 0 give the
			// ratio of output to input (equal when either is zero).
			ib, ob = b, b
			if g := p.GPUs[0]; g.InputChunks > 0 && g.OutputChunks > 0 && g.InputChunks != g.OutputChunks {
				if b*int64(g.OutputChunks)%int64(g.InputChunks) != 0 {
					continue
				}
				ob = b * int64(g.OutputChunks) / int64(g.InputChunks)
			}
		}
		if ib%es != 0 || ob%es != 0 {
			continue
		}
		ok := true
		for g := range p.NumRanks() {
			lay, err := p.Layout(g, ib, ob)
			if err != nil || lay.ChunkBytes%es != 0 || (p.Protocol == plan.LL && lay.ChunkBytes%4 != 0) {
				ok = false
				break
			}
		}
		if ok {
			return ib / es, ob / es
		}
	}
	return 0, 0
}

// benchWorker runs inside every worker: warmup calls, one more call as a
// start line, then iters timed calls; it checks the last result and
// returns [mean time per call in us, wrong elements].
func benchWorker(env registry.Env, h any, dt tensor.DType, inN, outN int64, iters, warmup int) (*tensor.Tensor, error) {
	x, err := executor(h)
	if err != nil {
		return nil, err
	}
	p := x.Plan()
	ctx := env.Context()
	r := x.Rank()
	want, err := expectation(p, h.(*handle).movement, r, inN, outN, int64(dt.Size()))
	if err != nil {
		return nil, err
	}
	send, err := tensor.New(dt, tensor.Shape{inN})
	if err != nil {
		return nil, err
	}
	recv, err := tensor.New(dt, tensor.Shape{outN})
	if err != nil {
		return nil, err
	}
	vals := make([]float64, inN)
	for i := range vals {
		vals[i] = benchValue(r, i)
	}
	if err := tensor.SetFromFloat64(send, vals); err != nil {
		return nil, err
	}
	for range warmup + 1 {
		if err := x.Run(ctx, send, recv, reduce.Sum); err != nil {
			return nil, err
		}
	}
	tensor.Poison(recv)
	t0 := time.Now()
	comm, backend := "plan "+p.Name, "plan/"+p.Name
	for range iters {
		span := registry.BeginCollective(env, string(p.Collective), comm, backend, send.NumBytes())
		err := x.Run(ctx, send, recv, reduce.Sum)
		span.End(err)
		if err != nil {
			return nil, err
		}
	}
	el := time.Since(t0)
	got, err := tensor.ToFloat64(recv)
	if err != nil {
		return nil, err
	}
	if corruptForTest != nil {
		corruptForTest(r, got)
	}
	return tensor.FromSlice([]float64{float64(el.Nanoseconds()) / 1e3 / float64(max(iters, 1)), float64(countWrong(got, want))}), nil
}

// countWrong counts the elements of got that differ from the expectation
// (elements the call does not write are not checked).
func countWrong(got []float64, want func(int64) (float64, bool)) int64 {
	var wrong int64
	for i, g := range got {
		if w, ok := want(int64(i)); ok && g != w {
			wrong++
		}
	}
	return wrong
}

// corruptForTest, when set (only by this package's tests, before any
// session starts), changes a worker's output after the timed calls and
// before it is checked: the check must count what it changed.
var corruptForTest func(rank int, got []float64)

// BenchResult is one timed size.
type BenchResult struct {
	InCount, OutCount int64
	TimeUs            float64 // slowest worker's mean time per call
	Wrong             int64   // wrong elements, summed over workers
}

// Bench times iters calls of the loaded plan with inN input and outN
// output elements of dt (sum) inside every worker, after warmup calls,
// and checks the last result against exact values.
func (c *Collective) Bench(ctx context.Context, dt tensor.DType, inN, outN int64, iters, warmup int) (BenchResult, error) {
	res := BenchResult{InCount: inN, OutCount: outN}
	f, err := c.s.GetGlobalFunc(ctx, FuncBench)
	if err != nil {
		return res, err
	}
	defer f.Release()
	out, err := c.s.CallPacked(f, c.h, dt, inN, outN, iters, warmup)
	if err != nil {
		return res, err
	}
	defer out.Release()
	for w := range c.s.NumWorkers() {
		v, err := c.s.DebugGetFromRemote(ctx, out, w)
		if err != nil {
			return res, fmt.Errorf("run: bench plan %q: %w", c.p.Name, err)
		}
		d, err := tensor.Data[float64](v.(*tensor.Tensor))
		if err != nil {
			return res, err
		}
		res.TimeUs = max(res.TimeUs, d[0])
		res.Wrong += int64(d[1])
	}
	return res, nil
}
