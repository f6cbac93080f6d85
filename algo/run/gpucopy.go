package run

import (
	"context"
	"fmt"
	"time"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// FuncGPUCopyBench times a plain device copy on a worker's GPU: the
// anchor next to which `chorus bench planops` reports what a plan op costs.
// (dtype, count, iters, warmup, graph) -> float64 [time_us]
const FuncGPUCopyBench = "chorus.plan.gpu_copy_bench"

func init() {
	registry.MustRegisterTyped(FuncGPUCopyBench, gpuCopyBenchWorker)
}

// gpuCopyBenchWorker copies count elements of dt between two tensors of
// the worker's GPU with registry.CopyTensor (cuMemcpyDtoDAsync on the
// worker's stream), warmup times, then iters timed times (eager, or
// replays of a CUDA graph of one copy), and returns the mean time per
// copy. The copy is checked once (the destination must equal the source).
func gpuCopyBenchWorker(env registry.Env, dt tensor.DType, count int64, iters, warmup int, graph bool) (*tensor.Tensor, error) {
	if _, err := registry.CUDAOf(env); err != nil {
		return nil, fmt.Errorf("worker %d: %w: the copy anchor runs on GPUs", env.WorkerID(), registry.ErrNoDevice)
	}
	if count < 1 || iters < 1 || warmup < 0 {
		return nil, fmt.Errorf("%w: %s: count %d, iters %d, warmup %d", registry.ErrBadArgs, FuncGPUCopyBench, count, iters, warmup)
	}
	src, err := env.Alloc(dt, tensor.Shape{count}, env.Device(), tensor.ScopeGlobal)
	if err != nil {
		return nil, err
	}
	dst, err := env.Alloc(dt, tensor.Shape{count}, env.Device(), tensor.ScopeGlobal)
	if err != nil {
		return nil, err
	}
	host, err := tensor.New(dt, tensor.Shape{count})
	if err != nil {
		return nil, err
	}
	if err := tensor.Random(host, uint64(count)); err != nil {
		return nil, err
	}
	if err := registry.FromHost(env, src, host); err != nil {
		return nil, err
	}
	call := func() error { return registry.CopyTensor(env, dst, src) }
	for range warmup + 1 {
		if err := call(); err != nil {
			return nil, err
		}
	}
	got, err := registry.ToHost(env, dst)
	if err != nil {
		return nil, err
	}
	if err := tensor.Equal(got, host); err != nil {
		return nil, fmt.Errorf("worker %d: %s: the copy is wrong: %w", env.WorkerID(), FuncGPUCopyBench, err)
	}
	if graph {
		g, err := registry.Capture(env, call)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		call = g.Launch
		if err := call(); err != nil { // the first replay uploads the graph
			return nil, err
		}
	}
	if err := registry.SyncDevice(env); err != nil {
		return nil, err
	}
	t0 := time.Now()
	for range iters {
		if err := call(); err != nil {
			return nil, err
		}
	}
	if err := registry.SyncDevice(env); err != nil {
		return nil, err
	}
	return tensor.FromSlice([]float64{float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters)}), nil
}

// GPUCopyBench times a device copy of count elements of dt on every
// worker's GPU (FuncGPUCopyBench) and returns the slowest worker's mean
// time per copy in microseconds.
func GPUCopyBench(ctx context.Context, s *session.Session, dt tensor.DType, count int64, iters, warmup int, graph bool) (float64, error) {
	f, err := s.GetGlobalFunc(ctx, FuncGPUCopyBench)
	if err != nil {
		return 0, err
	}
	defer f.Release()
	out, err := s.CallPacked(f, dt, count, iters, warmup, graph)
	if err != nil {
		return 0, err
	}
	defer out.Release()
	var us float64
	for w := range s.NumWorkers() {
		v, err := s.DebugGetFromRemote(ctx, out, w)
		if err != nil {
			return 0, fmt.Errorf("run: GPU copy bench: %w", err)
		}
		d, err := tensor.Data[float64](v.(*tensor.Tensor))
		if err != nil {
			return 0, err
		}
		us = max(us, d[0])
	}
	return us, nil
}
