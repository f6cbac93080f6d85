package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/registry"
	"github.com/chorus-rt/chorus/session"
	"github.com/chorus-rt/chorus/tensor"
	"github.com/chorus-rt/chorus/worker"
)

// Collectives that `chorus bench` measures, with nccl-tests' bus-bandwidth
// factors: busbw = algbw * factor(n).
var collectives = map[string]func(n int) float64{
	"allreduce":     func(n int) float64 { return 2 * float64(n-1) / float64(n) },
	"allgather":     func(n int) float64 { return float64(n-1) / float64(n) },
	"reducescatter": func(n int) float64 { return float64(n-1) / float64(n) },
	"broadcast":     func(int) float64 { return 1 },
}

// IsCollective reports whether name is a collective benchmark.
func IsCollective(name string) bool { _, ok := collectives[name]; return ok }

// CollectiveConfig selects one collective benchmark run.
type CollectiveConfig struct {
	Bench   string // allreduce, allgather, reducescatter, broadcast
	Backend string
	// Strategy, for allreduce on GPUs, runs the custom IPC all-reduce
	// (oneshot, twoshot, auto, nccl) instead of the backend's allreduce.
	Strategy string
	Session  string // threaded or process
	Workers  int
	DType    tensor.DType
	MinBytes int64
	MaxBytes int64
	Step     int64 // size multiplier between rows
	Iters    int   // 0: chosen per size
	IterCap  int   // with Iters 0: at most this many per size (0: no cap)
	Warmup   int
	// Graph captures each size's timed calls (at most MaxGraphCalls)
	// into a CUDA graph and replays it until Iters calls ran, like
	// nccl-tests' -G: the time is the GPU's alone, without the host's
	// per-call work (checks, launches). GPU workers only.
	Graph bool
	// DeviceIDs binds worker i to cuda:DeviceIDs[i] (GPU backends).
	DeviceIDs []int
	Process   session.ProcessOptions
	// Open, when set, makes the session instead (multi-host sessions:
	// Session names it, Workers is taken from it).
	Open func(ctx context.Context) (*session.Session, error)
}

// CollectiveResult is one row, in the JSON shape scripts expect.
type CollectiveResult struct {
	Bench   string  `json:"bench"`
	Backend string  `json:"backend"`
	Session string  `json:"session"`
	Workers int     `json:"workers"`
	DType   string  `json:"dtype"`
	Bytes   int64   `json:"bytes"`
	TimeUs  float64 `json:"time_us"`
	AlgBW   float64 `json:"algbw_gbs"`
	BusBW   float64 `json:"busbw_gbs"`
	Wrong   int64   `json:"wrong"`
	Graph   bool    `json:"graph,omitempty"` // timed as CUDA graph replays
}

// MaxGraphCalls bounds the calls captured in one benchmark graph (a
// graph of 200,000 small all-reduces takes long to instantiate).
const MaxGraphCalls = 1000

// value of element i on rank r: small integers, exact in every dtype
// (bfloat16 holds integers up to 256 exactly; sums over 8 ranks stay below).
func benchValue(r, i int) float64 { return float64(r+1) + float64(i%5) }

func init() {
	registry.MustRegisterTyped("chorus.bench_collective", benchCollective)
}

// benchCollective runs inside every worker: it times iters calls of the
// collective (after warmup and a barrier) and checks the last result.
// With graph set it captures min(iters, MaxGraphCalls) calls into a CUDA
// graph and times replays of it instead. It returns [mean time per call
// in us, wrong elements].
func benchCollective(env registry.Env, name string, dt tensor.DType, bytes int64, iters, warmup int, graph bool) (*tensor.Tensor, error) {
	c, err := worker.Comm(env, false)
	if err != nil {
		return nil, err
	}
	ctx := env.Context()
	n, r := c.Size(), c.Rank()
	// "allreduce:STRATEGY" is the custom all-reduce on IPC memory.
	name, strategy, custom := strings.Cut(name, ":")
	scope := ""
	if custom {
		if name != "allreduce" {
			return nil, fmt.Errorf("%w: a strategy applies to allreduce only, not %q", registry.ErrBadArgs, name)
		}
		scope = worker.ScopeIPC
	}
	es := int64(dt.Size())
	count := bytes / es // elements of the buffer that "size" refers to
	var sendN, recvN int64
	switch name {
	case "allreduce", "broadcast":
		sendN, recvN = count, count
	case "allgather": // size = output
		count -= count % int64(n)
		sendN, recvN = count/int64(n), count
	case "reducescatter": // size = input
		count -= count % int64(n)
		sendN, recvN = count, count/int64(n)
	default:
		return nil, fmt.Errorf("%w: unknown collective %q", registry.ErrBadArgs, name)
	}
	// Buffers live on the worker's device (host memory, or its GPU).
	send, err := env.Alloc(dt, tensor.Shape{sendN}, env.Device(), scope)
	if err != nil {
		return nil, err
	}
	recv, err := env.Alloc(dt, tensor.Shape{recvN}, env.Device(), "")
	if err != nil {
		return nil, err
	}
	vals := make([]float64, sendN)
	for i := range vals {
		vals[i] = benchValue(r, i)
	}
	hostSend, err := tensor.New(dt, tensor.Shape{sendN})
	if err != nil {
		return nil, err
	}
	if err := tensor.SetFromFloat64(hostSend, vals); err != nil {
		return nil, err
	}
	if err := worker.FromHost(env, send, hostSend); err != nil {
		return nil, err
	}
	run := func() error {
		switch name {
		case "allreduce":
			if custom {
				return worker.CustomAllReduce(env, send, recv, "sum", strategy)
			}
			return c.AllReduce(ctx, send, recv, reduce.Sum)
		case "allgather":
			return c.AllGather(ctx, send, recv)
		case "reducescatter":
			return c.ReduceScatter(ctx, send, recv, reduce.Sum)
		default:
			return c.Broadcast(ctx, send, recv, 0)
		}
	}
	for range warmup {
		if err := run(); err != nil {
			return nil, err
		}
	}
	timed := iters // calls of run that are timed
	if graph {
		if env.Device().Kind != tensor.CUDA {
			return nil, fmt.Errorf("%w: graph timing needs GPU workers", registry.ErrBadArgs)
		}
		calls := min(iters, MaxGraphCalls)
		launches := max(1, (iters+calls-1)/calls)
		g, err := worker.Capture(env, func() error {
			for range calls {
				if err := run(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("bench %s: capture: %w", name, err)
		}
		defer g.Close()
		// One untimed replay: the first launch uploads the graph.
		if err := g.Launch(); err != nil {
			return nil, err
		}
		run = g.Launch
		timed, iters = launches, calls*launches
	}
	if err := c.Barrier(ctx); err != nil {
		return nil, err
	}
	if recv.IsHost() {
		tensor.Poison(recv)
	}
	if err := worker.SyncDevice(env); err != nil {
		return nil, err
	}
	t0 := time.Now()
	for range timed {
		if err := run(); err != nil {
			return nil, err
		}
	}
	// GPU collectives are asynchronous: the time includes draining them.
	if err := worker.SyncDevice(env); err != nil {
		return nil, err
	}
	el := time.Since(t0)
	hostRecv, err := worker.ToHost(env, recv)
	if err != nil {
		return nil, err
	}
	got, err := tensor.ToFloat64(hostRecv)
	if err != nil {
		return nil, err
	}
	var wrong int64
	for i, g := range got {
		var want float64
		switch name {
		case "allreduce":
			for q := range n {
				want += benchValue(q, i)
			}
		case "allgather":
			want = benchValue(i/int(sendN), i%int(sendN))
		case "reducescatter":
			for q := range n {
				want += benchValue(q, r*int(recvN)+i)
			}
		default:
			want = benchValue(0, i)
		}
		if dt == tensor.Bool {
			want = min(want, 1)
		}
		if g != want && !(dt.IsInt() && wraps(dt, want, g)) {
			wrong++
		}
	}
	out := tensor.FromSlice([]float64{float64(el.Nanoseconds()) / 1e3 / float64(max(iters, 1)), float64(wrong)})
	return out, nil
}

// wraps accepts integer results that equal want modulo the dtype's range.
func wraps(dt tensor.DType, want, got float64) bool {
	m := float64(uint64(1) << (8 * dt.Size()))
	d := want - got
	return d == float64(int64(d/m))*m
}

// itersFor picks an iteration count that keeps each size near 0.05-0.2 s
// (small sizes are latency-bound: many iterations, so that the timer and
// scheduler noise average out).
func itersFor(bytes int64) int {
	return int(min(200_000, max(5, (1<<29)/max(bytes, 1))))
}

// Collective runs a sweep and calls emit for each row.
func Collective(ctx context.Context, cfg CollectiveConfig, emit func(CollectiveResult)) error {
	factor, ok := collectives[cfg.Bench]
	if !ok {
		return fmt.Errorf("unknown collective %q", cfg.Bench)
	}
	if _, err := ccl.Lookup(cfg.Backend); err != nil {
		return err
	}
	var s *session.Session
	var err error
	switch {
	case cfg.Open != nil:
		if s, err = cfg.Open(ctx); err == nil {
			cfg.Workers = s.NumWorkers()
		}
	case cfg.Session == "threaded":
		s, err = session.NewThreaded(session.Options{NumWorkers: cfg.Workers, DeviceIDs: cfg.DeviceIDs})
	case cfg.Session == "process":
		po := cfg.Process
		po.NumWorkers = cfg.Workers
		po.DeviceIDs = cfg.DeviceIDs
		s, err = session.NewProcess(ctx, po)
	default:
		err = fmt.Errorf("unknown session kind %q", cfg.Session)
	}
	if err != nil {
		return err
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, cfg.Backend, 0); err != nil {
		return err
	}
	f, err := s.GetGlobalFunc(ctx, "chorus.bench_collective")
	if err != nil {
		return err
	}
	step := max(cfg.Step, 2)
	for b := cfg.MinBytes; b <= cfg.MaxBytes; b *= step {
		iters := cfg.Iters
		if iters <= 0 {
			iters = itersFor(b)
			if cfg.IterCap > 0 {
				iters = min(iters, cfg.IterCap)
			}
		}
		warm := cfg.Warmup
		if warm <= 0 {
			warm = max(2, iters/10)
		}
		name := cfg.Bench
		if cfg.Strategy != "" {
			name += ":" + cfg.Strategy
		}
		res, err := s.CallPacked(f, name, cfg.DType, b, iters, warm, cfg.Graph)
		if err != nil {
			return err
		}
		backend := cfg.Backend
		if cfg.Strategy != "" {
			backend = "ipc-" + cfg.Strategy
		}
		row := CollectiveResult{Bench: cfg.Bench, Backend: backend, Session: cfg.Session, Workers: cfg.Workers, DType: cfg.DType.String(), Bytes: b, Graph: cfg.Graph}
		for w := range cfg.Workers {
			v, err := s.DebugGetFromRemote(ctx, res, w)
			if err != nil {
				return err
			}
			d, err := tensor.Data[float64](v.(*tensor.Tensor))
			if err != nil {
				return err
			}
			row.TimeUs = max(row.TimeUs, d[0])
			row.Wrong += int64(d[1])
		}
		if err := res.Release(); err != nil {
			return err
		}
		if row.TimeUs > 0 {
			row.AlgBW = float64(b) / row.TimeUs / 1e3
			row.BusBW = row.AlgBW * factor(cfg.Workers)
		}
		emit(row)
	}
	return s.Shutdown()
}

// CollectiveHeader and CollectiveRow print nccl-tests style tables.
func CollectiveHeader(w io.Writer, cfg CollectiveConfig) {
	how := "timed inside the workers"
	if cfg.Graph {
		how += fmt.Sprintf(", as CUDA graph replays (up to %d calls per graph)", MaxGraphCalls)
	}
	fmt.Fprintf(w, "# chorus bench %s: backend %s, %s session, %d workers, %s\n", cfg.Bench, cfg.Backend, cfg.Session, cfg.Workers, how)
	fmt.Fprintf(w, "#%12s %12s %9s %11s %11s %11s %8s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong")
}

func CollectiveRow(w io.Writer, r CollectiveResult) {
	dt, _ := tensor.ParseDType(r.DType)
	fmt.Fprintf(w, " %12d %12d %9s %11.2f %11.3f %11.3f %8d\n", r.Bytes, r.Bytes/int64(max(1, dt.Size())), r.DType, r.TimeUs, r.AlgBW, r.BusBW, r.Wrong)
}

// ParseSize reads 1K, 64M, 1G (powers of two) or plain bytes.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	v, err := strconv.ParseInt(strings.TrimSuffix(s, "B"), 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return v * mult, nil
}
