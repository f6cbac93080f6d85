package run

import (
	"context"
	"fmt"
	"time"

	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/gpuworker"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Worker functions of plans on GPUs (package algo/gpuexec).
const (
	FuncGPULoad  = "chorus.plan.gpu_load"  // (plan_json []byte, timeout_ms int, force bool) -> handle
	FuncGPURun   = "chorus.plan.gpu_run"   // (handle, send, recv *tensor.Tensor (GPU), op string)
	FuncGPUClose = "chorus.plan.gpu_close" // (handle)
	// (handle, dtype, in_count, out_count, iters, warmup, op, graph, seed) -> float64 [time_us, wrong]
	FuncGPUBench = "chorus.plan.gpu_bench"
)

func gpuExecutor(v any) (*gpuexec.Executor, error) {
	h, ok := v.(*gpuworker.Executor)
	if !ok || h == nil {
		return nil, fmt.Errorf("%w: got %T", ErrBadHandle, v)
	}
	if h.X == nil {
		return nil, fmt.Errorf("%w: the plan was closed", ErrBadHandle)
	}
	return h.X, nil
}

func gpuLoad(env registry.Env, planJSON []byte, timeoutMs int64, force bool) (any, error) {
	p, err := plan.Parse(planJSON)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
	}
	return gpuworker.Load(env, p, gpuworker.Options{Timeout: time.Duration(timeoutMs) * time.Millisecond, Force: force})
}

func init() {
	registry.MustRegisterTyped(FuncGPULoad, gpuLoad)
	registry.MustRegisterTyped(FuncGPURun, func(env registry.Env, h any, send, recv *tensor.Tensor, op string) error {
		x, err := gpuExecutor(h)
		if err != nil {
			return err
		}
		o, err := reduce.ParseOp(op)
		if err != nil {
			return fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
		}
		span := traceRun(env, x.Plan(), "gpuplan/", send)
		g := registry.BeginGPU(env)
		err = x.Run(env.Context(), send, recv, o)
		g.End(string(x.Plan().Collective)+" gpuplan/"+x.Plan().Name, send.NumBytes())
		span.End(err)
		return err
	})
	registry.MustRegisterTyped(FuncGPUClose, func(env registry.Env, h any) error {
		hd, ok := h.(*gpuworker.Executor)
		if !ok || hd == nil {
			return fmt.Errorf("%w: got %T", ErrBadHandle, h)
		}
		if err := registry.SyncDevice(env); err != nil {
			hd.Close()
			return err
		}
		return hd.Close()
	})
	registry.MustRegisterTyped(FuncGPUBench, gpuBenchWorker)
}

// GPUOptions tune LoadGPU.
type GPUOptions struct {
	Timeout time.Duration // a kernel's wait for a peer (0: 30 s)
	Force   bool          // run a plan the verifier rejects
}

// GPUCollective is a plan loaded on every GPU worker of a session.
type GPUCollective struct {
	loaded
	// IPCTensors makes Bench allocate each worker's input and output in
	// IPC memory (as chorus bench allreduce --backend ipc times the
	// ccl/ipc kernels), where the executor lets peers reach them
	// directly instead of staging them (gpuexec.DirectProposal).
	IPCTensors bool
}

// LoadGPU makes p a collective of s on the workers' GPUs (package
// algo/gpuexec): the session must have GPU workers and InitCCL with a GPU
// backend ("ipc" lets several worker processes share a GPU; "nccl" one
// GPU per worker). A plan that does not fit (rank count, switch channels)
// or that the verifier rejects (unless opts.Force) fails on every worker
// before anything is allocated.
func LoadGPU(ctx context.Context, s *session.Session, p *plan.Plan, opts GPUOptions) (*GPUCollective, error) {
	if p == nil {
		return nil, fmt.Errorf("run: LoadGPU: nil plan")
	}
	if err := gpuexec.CheckPlan(p, s.NumWorkers(), opts.Force); err != nil {
		return nil, fmt.Errorf("run: LoadGPU: %w", err)
	}
	raw, err := p.Marshal()
	if err != nil {
		return nil, err
	}
	c := &GPUCollective{loaded: loaded{s: s, p: p}}
	if err := c.load(ctx, "LoadGPU", [3]string{FuncGPULoad, FuncGPURun, FuncGPUClose}, raw, opts.Timeout.Milliseconds(), opts.Force); err != nil {
		return nil, err
	}
	return c, nil
}

// GPUBenchResult is one timed size on GPUs.
type GPUBenchResult struct {
	TimeUs float64 // slowest worker's mean time per call
	Wrong  int64   // wrong elements, summed over workers
}

// Bench runs iters calls (after warmup) of the plan with in/out element
// counts of dt and op inside every worker, eager or replayed from a CUDA
// graph of one call, checks the last result exactly and returns the
// slowest worker's time per call.
func (c *GPUCollective) Bench(ctx context.Context, dt tensor.DType, inN, outN int64, iters, warmup int, op reduce.Op, graph bool, seed int64) (GPUBenchResult, error) {
	var res GPUBenchResult
	f, err := c.s.GetGlobalFunc(ctx, FuncGPUBench)
	if err != nil {
		return res, err
	}
	defer f.Release()
	out, err := c.s.CallPacked(f, c.h, dt, inN, outN, iters, warmup, op.String(), graph, seed, c.IPCTensors)
	if err != nil {
		return res, err
	}
	defer out.Release()
	for w := range c.s.NumWorkers() {
		v, err := c.s.DebugGetFromRemote(ctx, out, w)
		if err != nil {
			return res, fmt.Errorf("run: bench plan %q on GPUs: %w", c.p.Name, err)
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

// gpuValue is element i of rank r's input for a seed: small integers,
// exact in every dtype and in sums over 8 ranks, varied by the seed so
// that stale results from an earlier call never pass.
func gpuValue(r, i int, seed int64) float64 {
	return float64((r*7+i*3+int(seed%11))%9) - 3
}

// graphCalls is the most calls one captured graph of gpuBenchWorker holds.
const graphCalls = 100

func gpuBenchWorker(env registry.Env, h any, dt tensor.DType, inN, outN int64, iters, warmup int, opName string, graph bool, seed int64, ipcTensors bool) (*tensor.Tensor, error) {
	x, err := gpuExecutor(h)
	if err != nil {
		return nil, err
	}
	op, err := reduce.ParseOp(opName)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
	}
	p := x.Plan()
	ctx := env.Context()
	r, n := x.Rank(), x.Size()
	scope := tensor.ScopeGlobal
	if ipcTensors {
		scope = registry.ScopeIPC
	}
	send, err := env.Alloc(dt, tensor.Shape{inN}, env.Device(), scope)
	if err != nil {
		return nil, err
	}
	recv, err := env.Alloc(dt, tensor.Shape{outN}, env.Device(), scope)
	if err != nil {
		return nil, err
	}
	host, err := tensor.New(dt, tensor.Shape{inN})
	if err != nil {
		return nil, err
	}
	vals := make([]float64, inN)
	for i := range vals {
		vals[i] = gpuValue(r, i, seed)
	}
	if err := tensor.SetFromFloat64(host, vals); err != nil {
		return nil, err
	}
	if err := registry.FromHost(env, send, host); err != nil {
		return nil, err
	}
	for range warmup + 1 {
		if err := x.Run(ctx, send, recv, op); err != nil {
			return nil, err
		}
	}
	if err := registry.SyncDevice(env); err != nil {
		return nil, err
	}
	poison, err := tensor.New(dt, tensor.Shape{outN})
	if err != nil {
		return nil, err
	}
	tensor.Poison(poison)
	if err := registry.FromHost(env, recv, poison); err != nil {
		return nil, err
	}
	call := func() error { return x.Run(ctx, send, recv, op) }
	// A graph holds up to graphCalls calls, so replays time the device's
	// work rather than one host launch per call (as chorus bench
	// allreduce's strategies are timed, which the plan rows are compared
	// with).
	perLaunch := 1
	if graph {
		perLaunch = min(max(iters, 1), graphCalls)
		one := call
		g, err := registry.Capture(env, func() error {
			for range perLaunch {
				if err := one(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		defer g.Close()
		call = g.Launch
		// The first replay uploads the graph: keep it out of the timing.
		if err := call(); err != nil {
			return nil, err
		}
		if err := registry.SyncDevice(env); err != nil {
			return nil, err
		}
	}
	// Every rank starts its clock together with nothing of its own still
	// queued: the poisoning copy above (32 MB of pageable host memory
	// takes milliseconds) would otherwise run inside the first timed call,
	// and a rank that starts late makes its peers wait in the first
	// handshake (docs/gpu-executor.md, "Benchmarks": eager rows from 4 MB
	// were up to 11x too slow without it).
	if err := registry.SyncDevice(env); err != nil {
		return nil, err
	}
	if err := startLine(env); err != nil {
		return nil, err
	}
	launches := (max(iters, 1) + perLaunch - 1) / perLaunch
	t0 := time.Now()
	for range launches {
		if err := call(); err != nil {
			return nil, err
		}
	}
	if err := registry.SyncDevice(env); err != nil {
		return nil, err
	}
	el := time.Since(t0)
	got, err := registry.ToHost(env, recv)
	if err != nil {
		return nil, err
	}
	gv, err := tensor.ToFloat64(got)
	if err != nil {
		return nil, err
	}
	fold := func(acc, v float64, first bool) float64 {
		switch {
		case first:
			return v
		case op == reduce.Min:
			return min(acc, v)
		case op == reduce.Max:
			return max(acc, v)
		}
		return acc + v
	}
	var wrong int64
	for i, g := range gv {
		var want float64
		switch p.Collective {
		case plan.AllGather:
			want = gpuValue(i/int(inN), i%int(inN), seed)
		case plan.ReduceScatter:
			for q := range n {
				want = fold(want, gpuValue(q, r*int(outN)+i, seed), q == 0)
			}
		default:
			for q := range n {
				want = fold(want, gpuValue(q, i, seed), q == 0)
			}
		}
		if g != want {
			wrong++
		}
	}
	return tensor.FromSlice([]float64{float64(el.Nanoseconds()) / 1e3 / float64(launches*perLaunch), float64(wrong)}), nil
}

// startLine is a barrier of the workers over the control communicator of
// their IPC memory (the one the executors exchange call descriptors on).
func startLine(env registry.Env) error {
	ipcm, err := registry.IPCOf(env)
	if err != nil {
		return err
	}
	_, control, err := ipcm.IPCMemory()
	if err != nil {
		return err
	}
	return control.Barrier(env.Context())
}
