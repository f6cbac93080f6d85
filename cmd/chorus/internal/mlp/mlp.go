package mlp

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// ParamFunc is the worker function that makes a worker's shard of a
// parameter: (name string, seed, batch, hidden, ffn int64, dtype) ->
// tensor on the worker's device. Names: x, w1, b1, w2, b2.
const ParamFunc = "mlp.param"

// Config is the MLP's size, dtype and seed.
type Config struct {
	Batch, Hidden, FFN int64 // x is [Batch, Hidden], W1 [Hidden, FFN]
	DType              tensor.DType
	Seed               uint64
}

func (c Config) String() string {
	return fmt.Sprintf("batch %d, hidden %d, ffn %d, %s", c.Batch, c.Hidden, c.FFN, c.DType)
}

// Validate checks sizes for n workers (FFN must split evenly).
func (c Config) Validate(n int) error {
	switch {
	case c.Batch < 1 || c.Hidden < 1 || c.FFN < 1:
		return fmt.Errorf("mlp: sizes must be positive (%v)", c)
	case n < 1 || c.FFN%int64(n) != 0:
		return fmt.Errorf("mlp: ffn %d does not split over %d workers", c.FFN, n)
	case c.DType != tensor.Float32 && c.DType != tensor.Float16 && c.DType != tensor.BFloat16:
		return fmt.Errorf("mlp: dtype %s (want float32, float16 or bfloat16)", c.DType)
	}
	return nil
}

// Build returns the module one worker runs for n workers: func @mlp(x,
// w1, b1, w2, b2) -> y, with devices left to the pipeline (x and the
// weights are parameters; every intermediate is an alloc_tensor in
// "global" memory, the all-reduce a plain allreduce(sum)).
func Build(c Config, n int) (*ir.Module, error) {
	if err := c.Validate(n); err != nil {
		return nil, err
	}
	f := c.FFN / int64(n)
	dt, any := c.DType, vdevice.Unconstrained
	b := ir.NewFunc("mlp")
	x := b.Param("x", ir.Tensor(tensor.Shape{c.Batch, c.Hidden}, dt, any))
	w1 := b.Param("w1", ir.Tensor(tensor.Shape{c.Hidden, f}, dt, any))
	b1 := b.Param("b1", ir.Tensor(tensor.Shape{f}, dt, any))
	w2 := b.Param("w2", ir.Tensor(tensor.Shape{f, c.Hidden}, dt, any))
	b2 := b.Param("b2", ir.Tensor(tensor.Shape{c.Hidden}, dt, any))
	h := b.AllocTensor("h", tensor.Shape{c.Batch, f}, dt, any, "")
	b.Matmul(x, w1, h)
	hb := b.AllocTensor("hb", tensor.Shape{c.Batch, f}, dt, any, "")
	b.Add(h, b1, hb)
	a := b.AllocTensor("a", tensor.Shape{c.Batch, f}, dt, any, "")
	b.Gelu(hb, a)
	p := b.AllocTensor("partial", tensor.Shape{c.Batch, c.Hidden}, dt, any, "")
	b.Matmul(a, w2, p)
	r := b.AllocTensor("reduced", tensor.Shape{c.Batch, c.Hidden}, dt, any, "")
	b.Allreduce(p, "sum", r)
	y := b.AllocTensor("y", tensor.Shape{c.Batch, c.Hidden}, dt, any, "")
	b.Add(r, b2, y)
	b.Return(y)
	fn, err := b.Finish()
	if err != nil {
		return nil, err
	}
	return &ir.Module{Name: "tp_mlp", Funcs: []*ir.Function{fn}}, nil
}

// Compiled is the MLP after a pipeline, with what memory planning saved.
type Compiled struct {
	Source, Module        *ir.Module
	Pipeline              passes.Pipeline
	PeakBefore, PeakAfter passes.MemoryUsage // passes.PeakMemory of @mlp
}

// Compile builds the MLP for n workers on dev (cpu, or cuda for GPU
// workers) and runs vm.Pipeline(dev, strategy) on it; with printAfter
// set, the IR after every pass goes there.
func Compile(c Config, n int, dev tensor.Device, strategy string, printAfter io.Writer) (*Compiled, error) {
	src, err := Build(c, n)
	if err != nil {
		return nil, err
	}
	p, err := vm.Pipeline(dev, strategy)
	if err != nil {
		return nil, err
	}
	out, err := p.Run(src, passes.RunOptions{PrintAfterEach: printAfter})
	if err != nil {
		return nil, fmt.Errorf("mlp: compile: %w", err)
	}
	cc := &Compiled{Source: src, Module: out, Pipeline: p}
	if cc.PeakBefore, err = passes.PeakMemory(src.Func("mlp")); err != nil {
		return nil, err
	}
	if cc.PeakAfter, err = passes.PeakMemory(out.Func("mlp")); err != nil {
		return nil, err
	}
	return cc, nil
}

// Parameter generation: element (i, j) of a full parameter (cols columns)
// is a hash of (seed, parameter, i*cols + j) mapped to [-1, 1), scaled so
// activations stay near unit size.

var paramSalt = map[string]uint64{"x": 1, "w1": 2, "b1": 3, "w2": 4, "b2": 5}

func splitmix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (c Config) scale(name string) float64 {
	switch name {
	case "w1":
		return 1 / math.Sqrt(float64(c.Hidden))
	case "w2":
		return 1 / math.Sqrt(float64(c.FFN))
	case "b1", "b2":
		return 0.1
	}
	return 1
}

// fullShape is a parameter's unsharded shape (1-D parameters have one row).
func (c Config) fullShape(name string) (rows, cols int64) {
	switch name {
	case "x":
		return c.Batch, c.Hidden
	case "w1":
		return c.Hidden, c.FFN
	case "b1":
		return 1, c.FFN
	case "w2":
		return c.FFN, c.Hidden
	}
	return 1, c.Hidden // b2
}

// value is element (i, j) of the full parameter, rounded to the dtype.
func (c Config) value(name string, i, j int64) float64 {
	_, cols := c.fullShape(name)
	u := splitmix(c.Seed*0x100000001b3 ^ paramSalt[name]<<56 ^ uint64(i*cols+j))
	v := (float64(u>>11)/(1<<53)*2 - 1) * c.scale(name)
	return round(c.DType, v)
}

func round(dt tensor.DType, v float64) float64 {
	switch dt {
	case tensor.Float16:
		return tensor.F16FromFloat64(v).Float64()
	case tensor.BFloat16:
		return tensor.BF16FromFloat64(v).Float64()
	case tensor.Float32:
		return float64(float32(v))
	}
	return v
}

// Shard is worker r of n's part of parameter name, on the host.
func (c Config) Shard(name string, r, n int) (*tensor.Tensor, error) {
	if _, ok := paramSalt[name]; !ok {
		return nil, fmt.Errorf("mlp: unknown parameter %q (x, w1, b1, w2, b2)", name)
	}
	if err := c.Validate(n); err != nil {
		return nil, err
	}
	if r < 0 || r >= n {
		return nil, fmt.Errorf("mlp: worker %d of %d", r, n)
	}
	rows, cols := c.fullShape(name)
	f := c.FFN / int64(n)
	r0, r1, c0, c1 := int64(0), rows, int64(0), cols
	switch name {
	case "w1", "b1":
		c0, c1 = int64(r)*f, int64(r+1)*f
	case "w2":
		r0, r1 = int64(r)*f, int64(r+1)*f
	}
	shape := tensor.Shape{r1 - r0, c1 - c0}
	if name[0] == 'b' {
		shape = tensor.Shape{c1 - c0}
	}
	t, err := tensor.New(c.DType, shape)
	if err != nil {
		return nil, err
	}
	vals := make([]float64, 0, t.NumElements())
	for i := r0; i < r1; i++ {
		for j := c0; j < c1; j++ {
			vals = append(vals, c.value(name, i, j))
		}
	}
	return t, tensor.SetFromFloat64(t, vals)
}

func init() {
	registry.MustRegisterTyped(ParamFunc, func(env registry.Env, name string, seed, batch, hidden, ffn int64, dt tensor.DType) (*tensor.Tensor, error) {
		c := Config{Batch: batch, Hidden: hidden, FFN: ffn, DType: dt, Seed: uint64(seed)}
		h, err := c.Shard(name, env.WorkerID(), env.NumWorkers())
		if err != nil {
			return nil, err
		}
		if env.Device().Kind == tensor.CPU {
			return h, nil
		}
		t, err := env.Alloc(dt, h.Shape(), env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
}

// Reference is y = gelu(x·W1 + b1)·W2 + b2 in float64 from the full
// (dtype-rounded) parameters, row-major [Batch, Hidden].
func Reference(c Config) []float64 {
	B, H, F := c.Batch, c.Hidden, c.FFN
	get := func(name string) []float64 {
		rows, cols := c.fullShape(name)
		v := make([]float64, 0, rows*cols)
		for i := range rows {
			for j := range cols {
				v = append(v, c.value(name, i, j))
			}
		}
		return v
	}
	x, w1, b1, w2, b2 := get("x"), get("w1"), get("b1"), get("w2"), get("b2")
	a := make([]float64, B*F)
	for i := range B {
		for j := range F {
			s := b1[j]
			for k := range H {
				s += x[i*H+k] * w1[k*F+j]
			}
			a[i*F+j] = vm.Gelu(s)
		}
	}
	y := make([]float64, B*H)
	for i := range B {
		for j := range H {
			s := b2[j]
			for k := range F {
				s += a[i*F+k] * w2[k*H+j]
			}
			y[i*H+j] = s
		}
	}
	return y
}

// Tolerance is what a result may differ from Reference by: |got - want|
// <= atol + rtol·|want|. The VM rounds every intermediate to the dtype.
func Tolerance(dt tensor.DType) (rtol, atol float64) {
	switch dt {
	case tensor.Float16:
		return 1e-2, 1e-2
	case tensor.BFloat16:
		return 5e-2, 5e-2
	}
	return 1e-4, 1e-4
}

// Setup is the MLP loaded on a session: the program and every worker's
// parameter shards.
type Setup struct {
	Config   Config
	Device   tensor.Device
	Compiled *Compiled
	Program  *vm.Program
	Params   []*session.DRef // x, w1, b1, w2, b2
	s        *session.Session
}

// Load compiles the MLP for s's workers (whose device is dev), loads it
// and makes the parameter shards on every worker. The session must have
// a communicator (InitCCL: "cpu" for CPU workers, "nccl" for GPUs).
func Load(ctx context.Context, s *session.Session, c Config, dev tensor.Device, strategy string) (*Setup, error) {
	n := s.NumWorkers()
	cc, err := Compile(c, n, dev, strategy, nil)
	if err != nil {
		return nil, err
	}
	prog, err := vm.Load(ctx, s, cc.Module)
	if err != nil {
		return nil, err
	}
	st := &Setup{Config: c, Device: dev, Compiled: cc, Program: prog, s: s}
	pf, err := s.GetGlobalFunc(ctx, ParamFunc)
	if err != nil {
		st.Release()
		return nil, err
	}
	defer pf.Release()
	for _, name := range []string{"x", "w1", "b1", "w2", "b2"} {
		r, err := s.CallPacked(pf, name, int64(c.Seed), c.Batch, c.Hidden, c.FFN, c.DType)
		if err != nil {
			st.Release()
			return nil, err
		}
		st.Params = append(st.Params, r)
	}
	if err := s.Sync(ctx); err != nil {
		st.Release()
		return nil, fmt.Errorf("mlp: parameters: %w", err)
	}
	return st, nil
}

// Step calls @mlp once (asynchronously); the result is y on every worker.
func (st *Setup) Step(ctx context.Context) (*session.DRef, error) {
	return st.Program.Call(ctx, "mlp", st.args()...)
}

// args are the parameters as @mlp's arguments.
func (st *Setup) args() []any {
	args := make([]any, len(st.Params))
	for i, p := range st.Params {
		args[i] = p
	}
	return args
}

// Release drops the program and the parameters.
func (st *Setup) Release() {
	for _, p := range st.Params {
		p.Release()
	}
	st.Params = nil
	st.Program.Release()
}

// Check is the outcome of comparing every worker's y with Reference.
type Check struct {
	MaxAbsErr  float64 // over all workers and elements
	MaxRef     float64 // largest |reference| element
	RTol, ATol float64
	Identical  bool  // every worker has the same bits
	Err        error // nil when every worker is within tolerance
}

// CheckResult fetches y from every worker and compares.
func (st *Setup) CheckResult(ctx context.Context, y *session.DRef) (Check, error) {
	want := Reference(st.Config)
	ck := Check{Identical: true}
	ck.RTol, ck.ATol = Tolerance(st.Config.DType)
	for _, v := range want {
		ck.MaxRef = max(ck.MaxRef, math.Abs(v))
	}
	var first *tensor.Tensor
	for w := range st.s.NumWorkers() {
		v, err := st.s.DebugGetFromRemote(ctx, y, w)
		if err != nil {
			return ck, err
		}
		got, ok := v.(*tensor.Tensor)
		if !ok {
			return ck, fmt.Errorf("mlp: worker %d returned a %T", w, v)
		}
		gf, err := tensor.ToFloat64(got)
		if err != nil {
			return ck, err
		}
		for i, g := range gf {
			ck.MaxAbsErr = max(ck.MaxAbsErr, math.Abs(g-want[i]))
		}
		if err := tensor.CloseTo(got, want, ck.RTol, ck.ATol); err != nil && ck.Err == nil {
			ck.Err = fmt.Errorf("worker %d: %w", w, err)
		}
		if first == nil {
			first = got
		} else if tensor.Equal(got, first) != nil {
			ck.Identical = false
		}
	}
	return ck, nil
}

// Run loads the MLP, runs one step and checks it.
func Run(ctx context.Context, s *session.Session, c Config, dev tensor.Device, strategy string) (*Setup, Check, error) {
	st, err := Load(ctx, s, c, dev, strategy)
	if err != nil {
		return nil, Check{}, err
	}
	y, err := st.Step(ctx)
	if err != nil {
		st.Release()
		return nil, Check{}, err
	}
	defer y.Release()
	if err := s.Sync(ctx); err != nil {
		st.Release()
		return nil, Check{}, err
	}
	ck, err := st.CheckResult(ctx, y)
	if err != nil {
		st.Release()
		return nil, Check{}, err
	}
	return st, ck, nil
}

// Timing is the time of Iters steps, each a Call (or a graph replay) plus
// a session Sync.
type Timing struct {
	Iters            int
	Median, Min, Max time.Duration
}

// CaptureStep captures @mlp as a CUDA graph on every worker
// (vm.Program.Capture: GPU workers only); ReplayStep runs it.
func (st *Setup) CaptureStep(ctx context.Context) (*session.DRef, error) {
	return st.Program.Capture(ctx, "mlp", st.args()...)
}

// ReplayStep replays a graph made by CaptureStep (asynchronously); the
// result is y on every worker, the same tensor at every replay.
func (st *Setup) ReplayStep(ctx context.Context, graph *session.DRef) (*session.DRef, error) {
	return st.Program.Replay(ctx, graph)
}

// Time runs warmup untimed steps, then iters timed ones.
func (st *Setup) Time(ctx context.Context, warmup, iters int) (Timing, error) {
	return st.time(ctx, warmup, iters, func() (*session.DRef, error) { return st.Step(ctx) })
}

// TimeReplay is Time for replays of a graph made by CaptureStep.
func (st *Setup) TimeReplay(ctx context.Context, graph *session.DRef, warmup, iters int) (Timing, error) {
	return st.time(ctx, warmup, iters, func() (*session.DRef, error) { return st.ReplayStep(ctx, graph) })
}

func (st *Setup) time(ctx context.Context, warmup, iters int, run func() (*session.DRef, error)) (Timing, error) {
	step := func() (time.Duration, error) {
		t0 := time.Now()
		y, err := run()
		if err != nil {
			return 0, err
		}
		err = st.s.Sync(ctx)
		d := time.Since(t0)
		y.Release()
		return d, err
	}
	for range warmup {
		if _, err := step(); err != nil {
			return Timing{}, err
		}
	}
	ds := make([]time.Duration, 0, iters)
	for range iters {
		d, err := step()
		if err != nil {
			return Timing{}, err
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return Timing{}, nil
	}
	slices.Sort(ds)
	return Timing{Iters: iters, Median: ds[len(ds)/2], Min: ds[0], Max: ds[len(ds)-1]}, nil
}
