package kernels

import (
	_ "embed"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels_bench.cu
var benchKernelSource string

// Worker functions for measurements on a worker's GPU (chorus bench
// decode): the bounds a decode step is compared with, measured in the
// same run, and the costs it is made of. Each returns a float64 host
// tensor; times come from CUDA events unless said otherwise.
const (
	// FillUniformFunc (t, seed int64, lo, hi float64): t's elements
	// uniform in [lo, hi), in place, on the worker's GPU (a hash of seed
	// and the index: random weights of any size without the host).
	FillUniformFunc = "chorus.vm.fill_uniform"
	// BenchStreamFunc (bytes int64, iters int) -> GB/s of every pass of
	// the read-only streaming kernel over a buffer of bytes.
	BenchStreamFunc = "chorus.vm.bench_stream"
	// BenchGemmFunc (n int64, dtype, iters int) -> TFLOP/s of every
	// cuBLAS n×n×n product (random operands).
	BenchGemmFunc = "chorus.vm.bench_gemm"
	// BenchMatmulNTFunc (m, n, k int64, dtype, iters int, path string,
	// ks int) -> microseconds of every x[m,k]·w[n,k]ᵀ through path:
	// "cublas", "gemv" (the skinny-matrix kernel the VM picks for m rows:
	// CUDA cores up to GemvDefaultCoreRows, tensor cores above), "gated"
	// (the same over two weights, the gated projection), "tc" or
	// "tcgated" (the tensor-core kernels at any m); ks > 0 overrides the
	// CUDA-core kernel's warps per row (1, 2, 4, 8) or the tensor-core
	// kernel's split of k (1 to 64). Weights rotate over copies that
	// together exceed the L2 cache.
	BenchMatmulNTFunc = "chorus.vm.bench_matmul_nt"
	// BenchLaunchFunc (n int) -> nanoseconds per launch of an empty
	// kernel, n back to back: [driver call alone (purego +
	// cuLaunchKernel inside one device.Do), through device.Do per launch
	// (host issue time), the same until the GPU finished (wall), one
	// replay of the n launches captured as a CUDA graph (wall, per
	// kernel)], host clocks.
	BenchLaunchFunc = "chorus.vm.bench_launch"
)

var benchKernelNames = []string{"bench_stream", "bench_noop", "fill_uniform_f32", "fill_uniform_f16", "fill_uniform_bf16"}

// benchKernels loads kernels_bench.cu (and the skinny-matrix kernels).
func (g *GPU) benchKernels() error {
	if err := g.gemvKernels(); err != nil {
		return err
	}
	if g.benchMod != 0 {
		return nil
	}
	return g.dev.Do(func(cuda.Stream) (err error) {
		g.benchMod, err = g.loadModule(benchModule())
		return err
	})
}

// benchState is a GPU state of its own for one measurement (closed by
// the caller), with the measurement kernels loaded.
func benchState(env registry.Env) (*GPU, error) {
	dev, err := workerCUDA(env)
	if err != nil {
		return nil, err
	}
	g, err := newGPU(dev, nil)
	if err != nil {
		return nil, err
	}
	if err := g.benchKernels(); err != nil {
		g.Close()
		return nil, fmt.Errorf("vm: measurement kernels on cuda:%d: %w", dev.Ordinal(), err)
	}
	return g, nil
}

func float64s(v []float64) (*tensor.Tensor, error) {
	t, err := tensor.New(tensor.Float64, tensor.Shape{int64(len(v))})
	if err != nil {
		return nil, err
	}
	d, err := tensor.Data[float64](t)
	copy(d, v)
	return t, err
}

// fillBuffer fills n elements of dt at ptr with uniform values.
func (g *GPU) fillBuffer(ptr uint64, n int64, dt tensor.DType, seed uint64, lo, hi float64) error {
	suf, err := kernelSuffix(dt)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	a := &struct {
		p, n, seed uint64
		lo, hi     float32
	}{ptr, uint64(n), seed, float32(lo), float32(hi)}
	grid := uint32(min((n+kernelThreads-1)/kernelThreads, int64(max(g.sms, 1))*32))
	err = g.launchGrid("fill_uniform_"+suf, [3]uint32{grid, 1, 1}, kernelThreads,
		unsafe.Pointer(&a.p), unsafe.Pointer(&a.n), unsafe.Pointer(&a.seed), unsafe.Pointer(&a.lo), unsafe.Pointer(&a.hi))
	runtime.KeepAlive(a)
	return err
}

// timeLaps runs f iters times between stopwatch marks and returns each
// run's device time.
func (g *GPU) timeLaps(iters int, f func(i int) error) ([]time.Duration, error) {
	sw, err := g.dev.NewStopwatch(iters + 1)
	if err != nil {
		return nil, err
	}
	defer sw.Close()
	if err := sw.Mark(); err != nil {
		return nil, err
	}
	for i := range iters {
		if err := f(i); err != nil {
			return nil, err
		}
		if err := sw.Mark(); err != nil {
			return nil, err
		}
	}
	return sw.Laps()
}

// scratch allocates device buffers of the given sizes, freed by the
// returned function.
func scratch(dev *device.CUDA, sizes ...int64) ([]*device.Buffer, func(), error) {
	var bs []*device.Buffer
	free := func() {
		for _, b := range bs {
			dev.Free(b)
		}
	}
	for _, n := range sizes {
		b, err := dev.Alloc(n)
		if err != nil {
			free()
			return nil, nil, err
		}
		bs = append(bs, b)
	}
	return bs, free, nil
}

func benchStream(env registry.Env, bytes int64, iters int) (*tensor.Tensor, error) {
	if bytes < 1<<20 || bytes%16 != 0 || iters < 1 {
		return nil, fmt.Errorf("%w: %s(%d, %d): want a multiple of 16 bytes, at least 1 MiB, and iters >= 1", ErrArgs, BenchStreamFunc, bytes, iters)
	}
	g, err := benchState(env)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	blocks := uint32(max(g.sms, 1) * 8)
	bufs, free, err := scratch(g.dev, bytes, 4*int64(blocks))
	if err != nil {
		return nil, err
	}
	defer free()
	if err := g.fillBuffer(uint64(bufs[0].Ptr()), bytes/4, tensor.Float32, 1, -1, 1); err != nil {
		return nil, err
	}
	a := &struct{ p, n, out uint64 }{uint64(bufs[0].Ptr()), uint64(bytes / 16), uint64(bufs[1].Ptr())}
	laps, err := g.timeLaps(iters+1, func(int) error {
		return g.launchGrid("bench_stream", [3]uint32{blocks, 1, 1}, 256, unsafe.Pointer(&a.p), unsafe.Pointer(&a.n), unsafe.Pointer(&a.out))
	})
	runtime.KeepAlive(a)
	if err != nil {
		return nil, err
	}
	out := make([]float64, 0, iters)
	for _, d := range laps[1:] { // the first pass warms up
		out = append(out, float64(bytes)/d.Seconds()/1e9)
	}
	return float64s(out)
}

func benchGemm(env registry.Env, n int64, dt tensor.DType, iters int) (*tensor.Tensor, error) {
	if n < 1 || n > 1<<15 || iters < 1 {
		return nil, fmt.Errorf("%w: %s(%d, %d): want 1 <= n <= 32768 and iters >= 1", ErrArgs, BenchGemmFunc, n, iters)
	}
	g, err := benchState(env)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	sz := n * n * int64(dt.Size())
	bufs, free, err := scratch(g.dev, sz, sz, sz)
	if err != nil {
		return nil, err
	}
	defer free()
	for i, b := range bufs[:2] {
		if err := g.fillBuffer(uint64(b.Ptr()), n*n, dt, uint64(i+1), -1, 1); err != nil {
			return nil, err
		}
	}
	laps, err := g.timeLaps(iters+2, func(int) error {
		return g.dev.Do(func(cuda.Stream) error {
			return g.blas.MatmulRowMajor(g.h, int(n), int(n), int(n), bufs[0].Ptr(), bufs[1].Ptr(), bufs[2].Ptr(), dt)
		})
	})
	if err != nil {
		return nil, err
	}
	out := make([]float64, 0, iters)
	for _, d := range laps[2:] {
		out = append(out, 2*float64(n)*float64(n)*float64(n)/d.Seconds()/1e12)
	}
	return float64s(out)
}

// l2Rotation is how many bytes of weight copies a skinny-product
// measurement rotates over, so that no pass finds its weight in the L2
// cache (50-60 MB on Hopper).
const l2Rotation = 256 << 20

func benchMatmulNT(env registry.Env, m, n, k int64, dt tensor.DType, iters int, path string, ks int) (*tensor.Tensor, error) {
	tc := path == "tc" || path == "tcgated" || ((path == "gemv" || path == "gated") && skinnyPath(int(m), GemvMaxM) == "tc")
	okKS := ks == 0 || (!tc && (ks == 1 || ks == 2 || ks == 4 || ks == 8)) || (tc && ks >= 1 && ks <= tcMaxSplits)
	if m < 1 || n < 1 || k < 1 || iters < 1 || (path != "cublas" && path != "gemv" && path != "gated" && path != "tc" && path != "tcgated") || !okKS {
		return nil, fmt.Errorf("%w: %s(%d, %d, %d, %d, %q, %d): want positive sizes, path cublas, gemv, gated, tc or tcgated, ks 0, 1, 2, 4 or 8 (1 to %d for the tensor-core kernels)", ErrArgs, BenchMatmulNTFunc, m, n, k, iters, path, ks, tcMaxSplits)
	}
	g, err := benchState(env)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	es := int64(dt.Size())
	wBytes := n * k * es
	copies := max(2, (l2Rotation+wBytes-1)/wBytes)
	sizes := []int64{m * k * es, m * n * es}
	for range copies {
		sizes = append(sizes, wBytes)
	}
	bufs, free, err := scratch(g.dev, sizes...)
	if err != nil {
		return nil, err
	}
	defer free()
	for i, b := range bufs {
		if i == 1 {
			continue
		}
		if err := g.fillBuffer(uint64(b.Ptr()), b.Size()/es, dt, uint64(i+1), -1, 1); err != nil {
			return nil, err
		}
	}
	x, out := uint64(bufs[0].Ptr()), uint64(bufs[1].Ptr())
	w := func(i int) uint64 { return uint64(bufs[2+i%int(copies)].Ptr()) }
	if tc {
		if err := g.tcKernels(); err != nil {
			return nil, err
		}
		kind := "nt"
		if path == "gated" || path == "tcgated" {
			kind = "gated"
		}
		pl, ok := planTC(int(m), []int{int(n)}, int(k), dt, true, g.sms, tcNW(kind), ks)
		if !ok {
			return nil, fmt.Errorf("%w: %s: the tensor-core kernel does not take %d×%d×%d %s", ErrUnsupported, BenchMatmulNTFunc, m, k, n, dt)
		}
		a := &tcArgs{x: x, out: out, m: int32(m), n: int32(n), k: int32(k)}
		laps, err := g.timeLaps(iters+2, func(i int) error {
			a.w, a.w2 = w(i), w(i)
			if kind == "gated" {
				a.w, a.w2 = w(2*i), w(2*i+1)
			}
			return g.launchTC(kind, dt, pl, a)
		})
		if err != nil {
			return nil, err
		}
		return lapsUS(laps[2:])
	}
	pl, ok := planGemv(int(m), int(n), int(k), dt, true, g.sms, GemvMaxM)
	if path != "cublas" && !ok {
		return nil, fmt.Errorf("%w: %s: the skinny-matrix kernel does not take %d×%d×%d %s", ErrUnsupported, BenchMatmulNTFunc, m, k, n, dt)
	}
	if ks > 0 {
		pl.ks = ks
		pl.grid = uint32((n + int64(gemvWarps/ks) - 1) / int64(gemvWarps/ks))
	}
	a := &gemvArgs{x: x, out: out, m: int32(m), n: int32(n), k: int32(k), ks: int32(pl.ks)}
	kind := "nt"
	if path == "gated" {
		kind = "gated"
	}
	grid := pl.grid
	if path != "cublas" {
		if grid, err = g.gemvGrid(gemvName(kind, dt, pl.mt), int64(pl.grid)); err != nil {
			return nil, err
		}
	}
	laps, err := g.timeLaps(iters+2, func(i int) error {
		switch path {
		case "cublas":
			return g.dev.Do(func(cuda.Stream) error {
				return g.blas.MatmulRowMajorNT(g.h, int(m), int(n), int(k), uintptr(x), uintptr(w(i)), uintptr(out), dt)
			})
		case "gemv":
			a.w = w(i)
			return g.launchGrid(gemvName("nt", dt, pl.mt), [3]uint32{grid, 1, 1}, gemvWarps*32,
				unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.out),
				unsafe.Pointer(&a.m), unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.ks), unsafe.Pointer(&a.pre))
		}
		a.w, a.w2 = w(2*i), w(2*i+1)
		return g.launchGrid(gemvName("gated", dt, pl.mt), [3]uint32{grid, 1, 1}, gemvWarps*32,
			unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.w2), unsafe.Pointer(&a.out),
			unsafe.Pointer(&a.m), unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.ks), unsafe.Pointer(&a.pre))
	})
	runtime.KeepAlive(a)
	if err != nil {
		return nil, err
	}
	return lapsUS(laps[2:])
}

// lapsUS is laps in microseconds.
func lapsUS(laps []time.Duration) (*tensor.Tensor, error) {
	out := make([]float64, 0, len(laps))
	for _, d := range laps {
		out = append(out, float64(d.Nanoseconds())/1e3)
	}
	return float64s(out)
}

func benchLaunch(env registry.Env, n int) (*tensor.Tensor, error) {
	if n < 1 || n > 1<<20 {
		return nil, fmt.Errorf("%w: %s(%d): want 1 to 2^20 launches", ErrArgs, BenchLaunchFunc, n)
	}
	g, err := benchState(env)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	f := g.fns["bench_noop"].f
	launchAll := func() error {
		for range n {
			if err := g.launchGrid("bench_noop", [3]uint32{1, 1, 1}, 32); err != nil {
				return err
			}
		}
		return nil
	}
	// Warm up (module load, first launches), then the driver call alone.
	if err := launchAll(); err != nil {
		return nil, err
	}
	if err := g.dev.Sync(); err != nil {
		return nil, err
	}
	var raw time.Duration
	err = g.dev.Do(func(s cuda.Stream) error {
		t0 := time.Now()
		for range n {
			if err := g.drv.LaunchKernel(f, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, nil); err != nil {
				return err
			}
		}
		raw = time.Since(t0)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := g.dev.Sync(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := launchAll(); err != nil {
		return nil, err
	}
	issue := time.Since(t0)
	if err := g.dev.Sync(); err != nil {
		return nil, err
	}
	wall := time.Since(t0)
	gr, err := registry.Capture(env, launchAll)
	if err != nil {
		return nil, err
	}
	defer gr.Close()
	var graph time.Duration
	for i := range 3 { // the first replay uploads the graph
		t0 := time.Now()
		if err := gr.Launch(); err != nil {
			return nil, err
		}
		if err := g.dev.Sync(); err != nil {
			return nil, err
		}
		if d := time.Since(t0); i > 0 && (graph == 0 || d < graph) {
			graph = d
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	return float64s([]float64{per(raw), per(issue), per(wall), per(graph)})
}

// fillStates are the GPU states FillUniformFunc uses, one per device
// ordinal of the worker's process, kept for the process's life (a model's
// weights are filled one call per parameter).
var (
	fillMu     sync.Mutex
	fillStates = map[int]*GPU{}
)

func fillUniform(env registry.Env, t *tensor.Tensor, seed int64, lo, hi float64) error {
	if t.IsHost() {
		return tensor.RandomRange(t, uint64(seed), lo, hi)
	}
	dev, err := workerCUDA(env)
	if err != nil {
		return err
	}
	fillMu.Lock()
	defer fillMu.Unlock()
	g := fillStates[dev.Ordinal()]
	if g == nil {
		if g, err = benchState(env); err != nil {
			return err
		}
		fillStates[dev.Ordinal()] = g
	}
	p, err := g.devPtr("t", t)
	if err != nil {
		return err
	}
	return g.fillBuffer(p, t.NumElements(), t.DType(), uint64(seed), lo, hi)
}

func init() {
	registry.MustRegisterTyped(FillUniformFunc, fillUniform)
	registry.MustRegisterTyped(BenchStreamFunc, benchStream)
	registry.MustRegisterTyped(BenchGemmFunc, benchGemm)
	registry.MustRegisterTyped(BenchMatmulNTFunc, benchMatmulNT)
	registry.MustRegisterTyped(BenchLaunchFunc, benchLaunch)
}

// benchModule is kernels_bench.cu, the measurement kernels.
func benchModule() module {
	return module{"chorus_vm_bench.cu", cudasrc.Half + cudasrc.PDL + kernelSource + gemvKernelSource + benchKernelSource, benchKernelNames}
}
