package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/progress"
	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Collectives that `chorus bench` measures, with nccl-tests' bus-bandwidth
// factors: busbw = algbw * factor(n).
var collectives = map[string]func(n int) float64{
	"allreduce":     func(n int) float64 { return 2 * float64(n-1) / float64(n) },
	"allgather":     func(n int) float64 { return float64(n-1) / float64(n) },
	"reducescatter": func(n int) float64 { return float64(n-1) / float64(n) },
	"broadcast":     func(int) float64 { return 1 },
	// peercopy is the link's bound: copy-engine transfers of size bytes
	// into a peer's IPC memory, "uni" (rank 0 to rank 1 only) or "bidir"
	// (every rank r to rank r+1 at once); bandwidth per direction.
	"peercopy": func(int) float64 { return 1 },
}

// PeerCopyModes are the strategies of the peercopy benchmark.
var PeerCopyModes = []string{"uni", "bidir"}

// IsCollective reports whether name is a collective benchmark.
func IsCollective(name string) bool { _, ok := collectives[name]; return ok }

// CollectiveConfig selects one collective benchmark run.
type CollectiveConfig struct {
	Bench   string // allreduce, allgather, reducescatter, broadcast
	Backend string
	// Strategies, for allreduce on GPUs, run the custom IPC all-reduce
	// (oneshot, twoshot, auto, nccl) instead of the backend's allreduce,
	// each in turn at every size of every round (interleaved, so that
	// what the machine does meanwhile hits them alike).
	Strategies []string
	// Rounds repeats the sweep (0: 3); each row reports the median over
	// the rounds of each statistic.
	Rounds   int
	Session  string // threaded or process
	Workers  int
	DType    tensor.DType
	MinBytes int64
	MaxBytes int64
	Step     int64 // size multiplier between rows
	Iters    int   // 0: chosen per size
	IterCap  int   // with Iters 0: at most this many per size (0: no cap)
	Warmup   int   // at least this many untimed calls, and at least WarmupTime of them
	// Graph captures each size's timed calls (at most MaxGraphCalls)
	// into a CUDA graph and replays it until Iters calls ran, like
	// nccl-tests' -G: the time is the GPU's alone, without the host's
	// per-call work (checks, launches). GPU workers only.
	Graph bool
	// DeviceIDs binds worker i to cuda:DeviceIDs[i] (GPU backends).
	DeviceIDs []int
	Process   session.ProcessOptions
	// MemBWGBs is the host's memory bandwidth (MemBW's Bound); when set,
	// each row says which fraction of the bound it implies it reached.
	MemBWGBs float64
	// Open, when set, makes the session instead (multi-host sessions:
	// Session names it, Workers is taken from it).
	Open func(ctx context.Context) (*session.Session, error)
	// Progress, when set, shows the sweep's progress (size, round, time
	// left); Collective begins, clears it before each row it emits, and
	// ends it.
	Progress *progress.Reporter
}

// ProgressKnee is the size past which a sweep's step is weighted by its
// size for the time-left estimate: itersFor keeps every size near the
// same time until the iteration count reaches its floor of samples (10
// calls at about 50 MiB), and the time grows with the size past it.
const ProgressKnee = 64 << 20

// CollectiveResult is one row, in the JSON shape scripts expect.
type CollectiveResult struct {
	Bench   string `json:"bench"`
	Backend string `json:"backend"`
	Session string `json:"session"`
	Workers int    `json:"workers"`
	DType   string `json:"dtype"`
	Bytes   int64  `json:"bytes"`
	// TimeUs is the mean time per call; P50Us, P99Us and MaxUs the
	// percentiles of the calls (or graph replays, divided by the calls
	// they hold), each the median over Rounds rounds of the worst worker.
	TimeUs float64 `json:"time_us"`
	P50Us  float64 `json:"p50_us"`
	P99Us  float64 `json:"p99_us"`
	MaxUs  float64 `json:"max_us"`
	// FirstUs is the first timed call (worst worker, median over the
	// rounds): near P50Us when the warm-up was enough.
	FirstUs float64 `json:"first_us,omitempty"`
	// B2BUs (eager rows) is the mean time per call of as many calls made
	// back to back between two marks, with no mark between them: the
	// host's cost of a call where it is the bound (worst worker, median
	// over the rounds). TimeUs's samples each include a mark's host cost.
	B2BUs   float64 `json:"b2b_us,omitempty"`
	AlgBW   float64 `json:"algbw_gbs"`
	BusBW   float64 `json:"busbw_gbs"`
	Wrong   int64   `json:"wrong"`
	Graph   bool    `json:"graph,omitempty"` // timed as CUDA graph replays
	Rounds  int     `json:"rounds"`
	Samples int     `json:"samples"` // timed calls (or replays) per round and worker
	// BoundFrac is BoundFrac's fraction of the memory-bandwidth bound.
	BoundFrac float64 `json:"mem_bound_frac,omitempty"`
	// MemBWGBs is the bandwidth B the fraction was computed with.
	MemBWGBs float64 `json:"membw_gbs,omitempty"`
	// Path is how the cpu backend moved a large allreduce (direct, shm,
	// mixed, cma, staged: why), or cpu-hier any allreduce (inline,
	// gathered, multi-ring or leader with ring or rhd between hosts).
	Path string `json:"path,omitempty"`
}

// MaxGraphCalls bounds the calls captured in one benchmark graph; each
// replay of it is one sample.
const MaxGraphCalls = 100

// Sampling: at most MaxSamples timed calls (or replays) per size, at
// least MinSamples; warm-up runs at least WarmupTime, so that clocks have
// ramped up and lazy set-up (kernel loading, first touches of peer
// memory) is over before anything is timed.
const (
	MaxSamples = 5000
	MinSamples = 10
	WarmupTime = 50 * time.Millisecond
)

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
	c, err := registry.Comm(env, false)
	if err != nil {
		return nil, err
	}
	b, err := newCollectiveCase(c, name, dt, bytes)
	if err != nil {
		return nil, err
	}
	send, recv, err := b.buffers(env)
	if err != nil {
		return nil, err
	}
	run := b.call(env, c, send, recv)
	if err := b.warmUp(env, c, run, warmup); err != nil {
		return nil, err
	}
	laps, perSample, err := b.time(env, c, run, recv, iters, graph)
	if err != nil {
		return nil, err
	}
	var b2b float64
	if !graph && env.Device().Kind == tensor.CUDA { // a host stopwatch's mark costs next to nothing
		if b2b, err = b.backToBack(env, c, run, len(laps)); err != nil {
			return nil, err
		}
	}
	st := summarize(laps, perSample)
	if err := writeLaps(env.WorkerID(), b.name, bytes, laps); err != nil {
		return nil, err
	}
	hostRecv, err := registry.ToHost(env, recv)
	if err != nil {
		return nil, err
	}
	got, err := tensor.ToFloat64(hostRecv)
	if err != nil {
		return nil, err
	}
	out := make([]float64, resultLen)
	out[ResultMean], out[ResultP50], out[ResultP99], out[ResultMax], out[ResultFirst] = st.mean, st.p50, st.p99, st.max, st.first
	out[ResultWrong], out[ResultSamples], out[ResultB2B] = float64(b.wrong(got)), float64(len(laps)), b2b
	if p, ok := c.(interface {
		PathFor(ccl.Kind, int) string
	}); ok && b.name == "allreduce" && !b.custom {
		out[ResultPath] = float64(pathCode(p.PathFor(ccl.KindAllReduce, int(b.sendN*int64(dt.Size())))))
	}
	return tensor.FromSlice(out), nil
}

// collectiveCase is one chorus.bench_collective call on one rank: the
// collective, its strategy, the buffers' sizes and scopes.
type collectiveCase struct {
	name     string // allreduce, allgather, reducescatter, broadcast, peercopy
	strategy string // after the colon: a custom all-reduce strategy, or the peercopy mode
	// custom: "allreduce:STRATEGY", the custom all-reduce on IPC memory.
	custom           bool
	n, r             int
	dt               tensor.DType
	sendN, recvN     int64
	scope, recvScope string
}

func newCollectiveCase(c ccl.Comm, name string, dt tensor.DType, bytes int64) (*collectiveCase, error) {
	b := &collectiveCase{n: c.Size(), r: c.Rank(), dt: dt}
	b.name, b.strategy, b.custom = strings.Cut(name, ":")
	switch {
	case b.name == "peercopy":
		// "peercopy:uni|bidir" copies send into a peer's recv (IPC memory).
		if !slices.Contains(PeerCopyModes, b.strategy) || b.n < 2 {
			return nil, fmt.Errorf("%w: peercopy needs a mode (%v) and 2 or more workers", registry.ErrBadArgs, PeerCopyModes)
		}
		b.recvScope = registry.ScopeIPC
	case b.custom && b.name != "allreduce":
		return nil, fmt.Errorf("%w: a strategy applies to allreduce only, not %q", registry.ErrBadArgs, b.name)
	case b.custom:
		b.scope = registry.ScopeIPC
	}
	count := bytes / int64(dt.Size()) // elements of the buffer that "size" refers to
	n := int64(b.n)
	switch b.name {
	case "allreduce", "broadcast", "peercopy":
		b.sendN, b.recvN = count, count
	case "allgather": // size = output
		count -= count % n
		b.sendN, b.recvN = count/n, count
	case "reducescatter": // size = input
		count -= count % n
		b.sendN, b.recvN = count, count/n
	default:
		return nil, fmt.Errorf("%w: unknown collective %q", registry.ErrBadArgs, b.name)
	}
	return b, nil
}

// buffers allocates send and recv on the worker's device (host memory,
// or its GPU) and fills send with the rank's values.
func (b *collectiveCase) buffers(env registry.Env) (send, recv *tensor.Tensor, err error) {
	if send, err = env.Alloc(b.dt, tensor.Shape{b.sendN}, env.Device(), b.scope); err != nil {
		return nil, nil, err
	}
	if recv, err = env.Alloc(b.dt, tensor.Shape{b.recvN}, env.Device(), b.recvScope); err != nil {
		return nil, nil, err
	}
	vals := make([]float64, b.sendN)
	for i := range vals {
		vals[i] = benchValue(b.r, i)
	}
	hostSend, err := tensor.New(b.dt, tensor.Shape{b.sendN})
	if err != nil {
		return nil, nil, err
	}
	if err := tensor.SetFromFloat64(hostSend, vals); err != nil {
		return nil, nil, err
	}
	return send, recv, registry.FromHost(env, send, hostSend)
}

// call returns one call of the collective.
func (b *collectiveCase) call(env registry.Env, c ccl.Comm, send, recv *tensor.Tensor) func() error {
	ctx := env.Context()
	return func() error {
		switch b.name {
		case "peercopy":
			if b.strategy == "uni" && b.r != 0 {
				return nil
			}
			ipcm, err := registry.IPCOf(env)
			if err != nil {
				return err
			}
			return ipcm.PeerCopy(recv, send, (b.r+1)%b.n)
		case "allreduce":
			if b.custom {
				return registry.CustomAllReduce(env, send, recv, "sum", b.strategy)
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
}

// warmUp runs batches of warmup calls until every rank has run for
// WarmupTime (the ranks agree after each batch, so all of them make the
// same number of calls).
func (b *collectiveCase) warmUp(env registry.Env, c ccl.Comm, run func() error, warmup int) error {
	warmStart := time.Now()
	for batch := 0; ; batch++ {
		for range max(warmup, 1) {
			if err := run(); err != nil {
				return err
			}
		}
		if err := registry.SyncDevice(env); err != nil {
			return err
		}
		done, err := allAgree(env, c, b.strategy, time.Since(warmStart) >= WarmupTime || batch >= 1000)
		if err != nil {
			return fmt.Errorf("bench %s: warm-up: %w", b.name, err)
		}
		if done {
			return nil
		}
	}
}

// time takes the samples: every call (or, with graph, every replay of a
// CUDA graph of up to MaxGraphCalls calls) between two marks of a
// stopwatch (CUDA events on GPUs, so each sample is the device's time,
// stalls included). It returns the laps and the calls per lap.
func (b *collectiveCase) time(env registry.Env, c ccl.Comm, run func() error, recv *tensor.Tensor, iters int, graph bool) ([]time.Duration, int, error) {
	perSample := 1
	samples := min(max(iters, MinSamples), MaxSamples)
	if graph {
		if env.Device().Kind != tensor.CUDA {
			return nil, 0, fmt.Errorf("%w: graph timing needs GPU workers", registry.ErrBadArgs)
		}
		perSample = min(iters, MaxGraphCalls)
		samples = min(max((iters+perSample-1)/perSample, MinSamples), MaxSamples)
		g, err := registry.Capture(env, func() error {
			for range perSample {
				if err := run(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, 0, fmt.Errorf("bench %s: capture: %w", b.name, err)
		}
		defer g.Close()
		// One untimed replay: the first launch uploads the graph.
		if err := g.Launch(); err != nil {
			return nil, 0, err
		}
		run = g.Launch
	}
	sw, err := registry.NewStopwatch(env, samples+1)
	if err != nil {
		return nil, 0, err
	}
	defer sw.Close()
	// Poison before the barrier: after it, each rank's poisoning (some
	// milliseconds for a large host tensor) would skew the ranks' starts,
	// and the first timed call would wait out the skew.
	if recv.IsHost() {
		tensor.Poison(recv)
	}
	if err := c.Barrier(env.Context()); err != nil {
		return nil, 0, err
	}
	if err := registry.SyncDevice(env); err != nil {
		return nil, 0, err
	}
	if err := sw.Mark(); err != nil {
		return nil, 0, err
	}
	for range samples {
		if err := run(); err != nil {
			return nil, 0, err
		}
		if err := sw.Mark(); err != nil {
			return nil, 0, err
		}
	}
	laps, err := sw.Laps()
	if err != nil {
		return nil, 0, err
	}
	return laps, perSample, registry.SyncDevice(env)
}

// backToBack times n calls made back to back between two marks of a
// stopwatch (after a barrier) and returns the mean in microseconds: the
// eager samples each sit between two marks (an event recorded by the
// host after every call), so where the host is the bound they count
// the mark's own host cost in every call; this is the host's cost of a
// call alone, the eager counterpart of a graph replay of many calls
// (GPU workers; MinCalls leaves these calls out, as a lower bound may).
func (b *collectiveCase) backToBack(env registry.Env, c ccl.Comm, run func() error, n int) (float64, error) {
	if n <= 0 {
		return 0, nil
	}
	sw, err := registry.NewStopwatch(env, 2)
	if err != nil {
		return 0, err
	}
	defer sw.Close()
	if err := c.Barrier(env.Context()); err != nil {
		return 0, err
	}
	if err := registry.SyncDevice(env); err != nil {
		return 0, err
	}
	if err := sw.Mark(); err != nil {
		return 0, err
	}
	for range n {
		if err := run(); err != nil {
			return 0, err
		}
	}
	if err := sw.Mark(); err != nil {
		return 0, err
	}
	laps, err := sw.Laps()
	if err != nil {
		return 0, err
	}
	if err := registry.SyncDevice(env); err != nil {
		return 0, err
	}
	var total time.Duration
	for _, l := range laps {
		total += l
	}
	return float64(total.Nanoseconds()) / 1e3 / float64(n), nil
}

// wrong counts the elements of the received buffer (as float64) that
// differ from what the collective must give.
func (b *collectiveCase) wrong(got []float64) int64 {
	var wrong int64
	n, r := b.n, b.r
	for i, g := range got {
		var want float64
		switch b.name {
		case "peercopy":
			if b.strategy == "uni" && r != 1 {
				continue // only rank 1 receives
			}
			want = benchValue((r+n-1)%n, i)
		case "allreduce":
			for q := range n {
				want += benchValue(q, i)
			}
		case "allgather":
			want = benchValue(i/int(b.sendN), i%int(b.sendN))
		case "reducescatter":
			for q := range n {
				want += benchValue(q, r*int(b.recvN)+i)
			}
		default:
			want = benchValue(0, i)
		}
		if b.dt == tensor.Bool {
			want = min(want, 1)
		}
		if g != want && !(b.dt.IsInt() && wraps(b.dt, want, g)) {
			wrong++
		}
	}
	return wrong
}

// Elements of the float64 tensor chorus.bench_collective returns on each
// worker (times in microseconds per call).
const (
	ResultMean = iota
	ResultP50
	ResultP99
	ResultMax
	ResultWrong
	ResultSamples
	ResultPath  // the cpu backend's path (paths), 0 when none
	ResultFirst // the first timed call
	ResultB2B   // eager: the mean of the same calls back to back between two marks
	resultLen
)

// allAgree reports whether ok holds on every rank: an all-reduce of one
// element with min, on the communicator's device (with the custom
// all-reduce when a strategy is benchmarked: the "ipc" backend has no
// other all-reduce).
func allAgree(env registry.Env, c ccl.Comm, strategy string, ok bool) (bool, error) {
	v := 0.0
	if ok {
		v = 1
	}
	h := tensor.FromSlice([]float32{float32(v)})
	t, err := env.Alloc(tensor.Float32, tensor.Shape{1}, env.Device(), "")
	if err != nil {
		return false, err
	}
	if err := registry.FromHost(env, t, h); err != nil {
		return false, err
	}
	if strategy != "" && env.Device().Kind == tensor.CUDA {
		err = registry.CustomAllReduce(env, t, t, "min", "oneshot")
	} else {
		err = c.AllReduce(env.Context(), t, t, reduce.Min)
	}
	if err != nil {
		return false, err
	}
	out, err := registry.ToHost(env, t)
	if err != nil {
		return false, err
	}
	d, err := tensor.Data[float32](out)
	if err != nil {
		return false, err
	}
	return d[0] == 1, nil
}

// EnvLaps (CHORUS_BENCH_LAPS) names a folder where every worker writes
// each size's laps, one per line in microseconds after a line with the
// wall-clock time of the first: to see where in a round slow calls fall.
const EnvLaps = "CHORUS_BENCH_LAPS"

// writeLaps writes one round's laps into $CHORUS_BENCH_LAPS, if set.
func writeLaps(w int, name string, bytes int64, laps []time.Duration) error {
	dir := config.Process().Get(config.BenchLaps)
	if dir == "" {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# worker %d %s %d bytes, written %s\n", w, name, bytes, time.Now().UTC().Format(time.RFC3339Nano))
	for _, l := range laps {
		fmt.Fprintf(&b, "%.1f\n", float64(l.Nanoseconds())/1e3)
	}
	f := filepath.Join(dir, fmt.Sprintf("%s-%d-w%d-%d.txt", name, bytes, w, time.Now().UnixNano()))
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("bench: %s: %w", EnvLaps, err)
	}
	return nil
}

// stats of one worker's samples, in microseconds per call.
type stats struct{ mean, p50, p99, max, first float64 }

// summarize turns laps (each covering per calls) into per-call
// statistics; percentiles are nearest-rank.
func summarize(laps []time.Duration, per int) stats {
	if len(laps) == 0 {
		return stats{}
	}
	us := make([]float64, len(laps))
	var sum float64
	for i, l := range laps {
		us[i] = float64(l.Nanoseconds()) / 1e3 / float64(per)
		sum += us[i]
	}
	first := us[0]
	slices.Sort(us)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(us)))) - 1
		return us[min(max(i, 0), len(us)-1)]
	}
	return stats{mean: sum / float64(len(us)), p50: rank(0.50), p99: rank(0.99), max: us[len(us)-1], first: first}
}

// median of xs (xs is reordered).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Paths of the cpu and cpu-hier backends, as the worker reports them in
// a float (cpu-hier: ccl/hier's PathFor, its first words: stripes and
// groups are not carried). New paths go at the end: codes stay stable.
var paths = []string{"", "direct", "cma", "staged", "shm", "mixed", "inline", "gathered", "multi-ring ring", "multi-ring rhd", "leader ring", "leader rhd", "carried"}

func pathCode(p string) int {
	for i, q := range paths[1:] {
		if strings.HasPrefix(p, q) {
			return i + 1
		}
	}
	return 0
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
	rounds := cfg.Rounds
	if rounds <= 0 {
		rounds = 3
	}
	strategies := cfg.Strategies
	if len(strategies) == 0 {
		strategies = []string{""}
	}
	var sizes []int64
	for b := cfg.MinBytes; b <= cfg.MaxBytes; b *= step {
		sizes = append(sizes, b)
	}
	// runs[size][strategy] holds one row per round.
	runs := make([][][]CollectiveResult, len(sizes))
	for i := range runs {
		runs[i] = make([][]CollectiveResult, len(strategies))
	}
	var steps []progress.Step
	for round := range rounds {
		for _, b := range sizes {
			for _, strategy := range strategies {
				label := progress.FormatBytes(b)
				if strategy != "" {
					label += " " + strategy
				}
				if rounds > 1 {
					label += fmt.Sprintf(" round %d/%d", round+1, rounds)
				}
				steps = append(steps, progress.Step{Label: label, Weight: progress.SizeWeight(b, ProgressKnee)})
			}
		}
	}
	cfg.Progress.Begin(cfg.Bench, steps)
	defer cfg.Progress.End()
	done := 0
	for round := range rounds {
		for i, b := range sizes {
			for j, strategy := range strategies {
				cfg.Progress.Step(done)
				done++
				row, err := collectiveOnce(ctx, s, f, cfg, strategy, b, factor)
				if err != nil {
					return err
				}
				runs[i][j] = append(runs[i][j], row)
			}
			if round == rounds-1 {
				cfg.Progress.Clear()
				for j := range strategies {
					emit(medianRow(runs[i][j], cfg, factor(cfg.Workers)))
				}
			}
		}
	}
	return s.Shutdown()
}

// collectiveOnce measures one size with one strategy ("" for the
// backend's own collective): a row with the worst worker's statistics.
func collectiveOnce(ctx context.Context, s *session.Session, f *session.DRef, cfg CollectiveConfig, strategy string, b int64, factor func(int) float64) (CollectiveResult, error) {
	iters := cfg.Iters
	if iters <= 0 {
		iters = itersFor(b)
		if cfg.IterCap > 0 {
			iters = min(iters, cfg.IterCap)
		}
	}
	warm := cfg.Warmup
	if warm <= 0 {
		warm = max(2, min(iters, MaxSamples)/10)
	}
	name := cfg.Bench
	backend := cfg.Backend
	if strategy != "" {
		name += ":" + strategy
		backend = "ipc-" + strategy
	}
	row := CollectiveResult{Bench: cfg.Bench, Backend: backend, Session: cfg.Session, Workers: cfg.Workers, DType: cfg.DType.String(), Bytes: b, Graph: cfg.Graph, Rounds: 1}
	res, err := s.CallPacked(f, name, cfg.DType, b, iters, warm, cfg.Graph)
	if err != nil {
		return row, err
	}
	defer res.Release()
	for w := range cfg.Workers {
		v, err := s.DebugGetFromRemote(ctx, res, w)
		if err != nil {
			return row, err
		}
		d, err := tensor.Data[float64](v.(*tensor.Tensor))
		if err != nil {
			return row, err
		}
		row.TimeUs = max(row.TimeUs, d[ResultMean])
		row.P50Us = max(row.P50Us, d[ResultP50])
		row.P99Us = max(row.P99Us, d[ResultP99])
		row.MaxUs = max(row.MaxUs, d[ResultMax])
		row.FirstUs = max(row.FirstUs, d[ResultFirst])
		row.B2BUs = max(row.B2BUs, d[ResultB2B])
		row.Wrong += int64(d[ResultWrong])
		row.Samples = int(d[ResultSamples])
		if p := int(d[ResultPath]); p > 0 && p < len(paths) {
			row.Path = paths[p]
		}
	}
	row.setBandwidth(cfg, factor(cfg.Workers))
	return row, nil
}

// setBandwidth derives the bandwidths, and the fraction of the host's
// memory-bandwidth bound when cfg has one, from the mean time.
func (r *CollectiveResult) setBandwidth(cfg CollectiveConfig, factor float64) {
	r.AlgBW, r.BusBW, r.BoundFrac, r.MemBWGBs = 0, 0, 0, 0
	if r.TimeUs > 0 {
		r.AlgBW = float64(r.Bytes) / r.TimeUs / 1e3
		r.BusBW = r.AlgBW * factor
		if cfg.MemBWGBs > 0 {
			r.BoundFrac = BoundFrac(cfg.Bench, cfg.Workers, r.Bytes, r.TimeUs, cfg.MemBWGBs)
			r.MemBWGBs = cfg.MemBWGBs
		}
	}
}

// medianRow combines the rounds of one size and strategy: the median of
// each statistic, the sum of wrong elements.
func medianRow(rows []CollectiveResult, cfg CollectiveConfig, factor float64) CollectiveResult {
	out := rows[0]
	pick := func(get func(CollectiveResult) float64) float64 {
		xs := make([]float64, len(rows))
		for i, r := range rows {
			xs[i] = get(r)
		}
		return median(xs)
	}
	out.TimeUs = pick(func(r CollectiveResult) float64 { return r.TimeUs })
	out.P50Us = pick(func(r CollectiveResult) float64 { return r.P50Us })
	out.P99Us = pick(func(r CollectiveResult) float64 { return r.P99Us })
	out.MaxUs = pick(func(r CollectiveResult) float64 { return r.MaxUs })
	out.FirstUs = pick(func(r CollectiveResult) float64 { return r.FirstUs })
	out.B2BUs = pick(func(r CollectiveResult) float64 { return r.B2BUs })
	out.Wrong = 0
	for _, r := range rows {
		out.Wrong += r.Wrong
	}
	out.Rounds = len(rows)
	out.setBandwidth(cfg, factor)
	return out
}

// CollectiveHeader and CollectiveRow print nccl-tests style tables.
func CollectiveHeader(w io.Writer, cfg CollectiveConfig) {
	how := "each call timed inside the workers (CUDA events on GPUs)"
	if cfg.Graph {
		how = fmt.Sprintf("each CUDA graph replay of up to %d calls timed with CUDA events", MaxGraphCalls)
	}
	rounds := cfg.Rounds
	if rounds <= 0 {
		rounds = 3
	}
	fmt.Fprintf(w, "# chorus bench %s: backend %s, %s session, %d workers, %s; medians of %d interleaved rounds\n", cfg.Bench, cfg.Backend, cfg.Session, cfg.Workers, how, rounds)
	fmt.Fprintf(w, "#%12s %12s %9s %10s %10s %10s %10s %11s %11s %8s %6s  %s\n", "size(B)", "count", "type", "mean(us)", "p50(us)", "p99(us)", "max(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "bound", "algorithm")
}

func CollectiveRow(w io.Writer, r CollectiveResult) {
	dt, _ := tensor.ParseDType(r.DType)
	bound := "-"
	if r.BoundFrac > 0 {
		bound = fmt.Sprintf("%.2f", r.BoundFrac)
	}
	alg := r.Backend
	if r.Path != "" {
		alg += " (" + r.Path + ")"
	}
	if r.B2BUs > 0 {
		alg += fmt.Sprintf(" [back to back %.2f us]", r.B2BUs)
	}
	fmt.Fprintf(w, " %12d %12d %9s %10.2f %10.2f %10.2f %10.2f %11.3f %11.3f %8d %6s  %s\n", r.Bytes, r.Bytes/int64(max(1, dt.Size())), r.DType, r.TimeUs, r.P50Us, r.P99Us, r.MaxUs, r.AlgBW, r.BusBW, r.Wrong, bound, alg)
}

// SizeSyntax says what ParseSize takes, for error messages.
const SizeSyntax = "want a byte count with an optional suffix K, M or G (powers of 2: 64M is 67108864 bytes)"

// ParseSize reads 1K, 64M, 1G (powers of two) or plain bytes (a B at the
// end is allowed: 1KB, 512B).
func ParseSize(s string) (int64, error) {
	in := s
	s = strings.TrimSuffix(strings.TrimSpace(strings.ToUpper(s)), "B")
	shift := 0
	switch {
	case strings.HasSuffix(s, "K"):
		shift, s = 10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		shift, s = 20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		shift, s = 30, s[:len(s)-1]
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > math.MaxInt64>>shift {
		return 0, fmt.Errorf("bad size %q: %s", in, SizeSyntax)
	}
	return v << shift, nil
}

// MinCalls is a lower bound on the collective calls each worker makes in
// a sweep of cfg: every round and size, its timed calls (or the calls of
// its timed graph replays) and one batch of warm-up calls. Warm-up goes
// on for WarmupTime per size and round, so small sizes make many more.
func MinCalls(cfg CollectiveConfig) int64 {
	rounds := int64(max(cfg.Rounds, 1))
	if cfg.Rounds <= 0 {
		rounds = 3
	}
	strategies := int64(max(len(cfg.Strategies), 1))
	step := max(cfg.Step, 2)
	var calls int64
	for b := cfg.MinBytes; b > 0 && b <= cfg.MaxBytes; b *= step {
		iters := cfg.Iters
		if iters <= 0 {
			iters = itersFor(b)
			if cfg.IterCap > 0 {
				iters = min(iters, cfg.IterCap)
			}
		}
		warm := cfg.Warmup
		if warm <= 0 {
			warm = max(2, min(iters, MaxSamples)/10)
		}
		samples := int64(min(max(iters, MinSamples), MaxSamples))
		if cfg.Graph {
			per := int64(min(iters, MaxGraphCalls))
			samples = min(max((int64(iters)+per-1)/per, MinSamples), MaxSamples) * per
		}
		calls += samples + int64(warm)
		if b > cfg.MaxBytes/step {
			break
		}
	}
	return calls * rounds * strategies
}
