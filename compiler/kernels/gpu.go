package kernels

import (
	_ "embed"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cublas"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels.cu
var kernelSource string

// GPU is the kernels of one worker's GPU (a loaded VM module holds one):
// a cuBLAS handle bound to the worker's stream and the CUDA C modules,
// loaded at their first use. It is used by its worker's goroutine only
// (the measurement functions' fill state excepted: fillMu). Every
// call runs on the worker's device executor (device.CUDA.Do), so kernels
// are ordered with the worker's copies, NCCL calls and IPC all-reduces,
// and a session Sync covers them.
type GPU struct {
	dev  *device.CUDA
	drv  *cuda.Driver
	blas *cublas.Lib
	h    cublas.Handle
	mod  cuda.Module
	fns  map[string]kernelFn
	// comp compiles the modules loaded later (loadModule) for arch, the
	// device's "sm_XY".
	comp *nvrtc.Compiler
	arch string
	// l launches the kernels (drv; a fake in tests); pdl: the device
	// takes programmatic dependent launches (pdl.go).
	l   launcher
	pdl bool
	// modelMod holds the decoder kernels (kernels_model.cu), loaded at
	// the first decoder op.
	modelMod cuda.Module
	// gemvMod holds the skinny-matrix kernels (kernels_gemv.cu), loaded
	// at the first product they take; sms is the multiprocessor count.
	gemvMod cuda.Module
	// rowOK: the one-row kernels got their dynamic shared memory.
	rowOK bool
	sms   int
	// occ is blocks a GPU holds at once, by kernel name (slots).
	occ map[string]int
	// benchMod holds the measurement kernels (kernels_bench.cu).
	benchMod cuda.Module
	// attnBufs are the split-KV attention's scratch buffers (attn.go).
	attnBufs []*device.Buffer
	// tcMod holds the tensor-core skinny kernels (kernels_tc.cu); tcBufs
	// and tcCounters their split-K partial sums and per-tile counters
	// (tc.go, tcScratch).
	tcMod              cuda.Module
	tcBufs, tcCounters []*device.Buffer
	// prefillMod holds the prefill attention kernels (kernels_prefill.cu).
	prefillMod cuda.Module
	// carveoutErr is why the decode attention's shared-memory carveout
	// preference could not be set (decodeCarveouts), nil when it was: a
	// preference only moves where blocks are placed, so the kernels run
	// without it (slower at long contexts); the GPU tests check it.
	carveoutErr error
	// fixedWeights: SetFixedWeights's promise for the products launched
	// now (their kernels' pre argument); callLaunches: kernels launched
	// since BeginCall.
	fixedWeights bool
	callLaunches int
	// activity records a compile on the worker's flight recorder (nil:
	// not recorded; newGPU).
	activity func(name string) (end func())
}

// dynamicSmem makes every launch of the loaded kernel name ask for
// bytes of dynamic shared memory, raising the kernel's limit past the
// default 48 KiB where it needs more. Call it inside g.dev.Do.
func (g *GPU) dynamicSmem(name string, bytes int) error {
	k := g.fns[name]
	if bytes > 48<<10 {
		if err := g.drv.FuncSetAttribute(k.f, cuda.FuncAttrMaxDynamicSharedSizeBytes, bytes); err != nil {
			return fmt.Errorf("%s: %d bytes of shared memory: %w", name, bytes, err)
		}
	}
	k.smem = uint32(bytes)
	g.fns[name] = k
	return nil
}

// loadModule compiles m for the device (NVRTC, cached by content),
// loads it and registers its named functions; a missing name unloads the
// module and registers none. Call it inside g.dev.Do.
func (g *GPU) loadModule(m module) (cuda.Module, error) {
	cubin, err := g.compile(m.file, m.src)
	if err != nil {
		return 0, err
	}
	mod, err := g.drv.ModuleLoadData(cubin)
	if err != nil {
		return 0, err
	}
	fns := make([]cuda.Function, len(m.names))
	for i, name := range m.names {
		if fns[i], err = g.drv.ModuleGetFunction(mod, name); err != nil {
			g.drv.ModuleUnload(mod)
			return 0, err
		}
	}
	for i, name := range m.names {
		g.addFn(name, fns[i])
	}
	return mod, nil
}

// compile compiles src for the device (NVRTC, cached by content): a
// first run's compiles take seconds each, recorded as an activity.
func (g *GPU) compile(file, src string) ([]byte, error) {
	if g.activity != nil {
		defer g.activity("NVRTC compile " + file)()
	}
	cubin, _, err := g.comp.CompileCached(file, src, g.arch)
	return cubin, err
}

// kernelThreads is the block size of the elementwise kernels.
const kernelThreads = 256

// Open makes the kernels of env's worker, on its CUDA device and stream
// (ErrUnsupported on a worker without one). Close frees them.
func Open(env registry.Env) (*GPU, error) {
	dev, err := workerCUDA(env)
	if err != nil {
		return nil, err
	}
	g, err := newGPU(dev, func(name string) func() { return registry.BeginActivity(env, name) })
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", env.WorkerID(), err)
	}
	return g, nil
}

// workerCUDA returns the CUDA device whose context and stream a worker
// runs its GPU work on, so the kernels are ordered with the worker's
// copies and collectives.
func workerCUDA(env registry.Env) (*device.CUDA, error) {
	if c, err := registry.CUDAOf(env); err == nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w: worker %d (%v) has no CUDA device", ErrUnsupported, env.WorkerID(), env.Device())
}

// newGPU makes the kernels of dev; activity (nil: none) records each
// NVRTC compile on the worker's flight recorder (registry.BeginActivity),
// so that a hang report during a first run's compiles says so.
func newGPU(dev *device.CUDA, activity func(name string) (end func())) (*GPU, error) {
	drv, err := cuda.Load()
	if err != nil {
		return nil, err
	}
	blas, err := cublas.Load()
	if err != nil {
		return nil, err
	}
	comp, err := nvrtc.Load()
	if err != nil {
		return nil, err
	}
	g := &GPU{dev: dev, drv: drv, blas: blas, fns: map[string]kernelFn{}, l: drv, comp: comp, activity: activity}
	err = dev.Do(func(s cuda.Stream) error {
		d, err := drv.DeviceGet(dev.Ordinal())
		if err != nil {
			return err
		}
		major, err := drv.DeviceAttribute(d, cuda.AttrComputeCapabilityMajor)
		if err != nil {
			return err
		}
		minor, err := drv.DeviceAttribute(d, cuda.AttrComputeCapabilityMinor)
		if err != nil {
			return err
		}
		g.pdl = pdlCapable(drv, major)
		if major < 8 {
			return fmt.Errorf("%w: the VM's GPU kernels need compute capability 8.0 (bfloat16 conversions), cuda:%d has %d.%d", ErrUnsupported, dev.Ordinal(), major, minor)
		}
		g.arch = fmt.Sprintf("sm_%d%d", major, minor)
		if g.mod, err = g.loadModule(baseModule()); err != nil {
			return err
		}
		if g.h, err = blas.Create(); err != nil {
			return err
		}
		if err := blas.SetStream(g.h, uintptr(s)); err != nil {
			return err
		}
		return blas.SetMathMode(g.h, cublas.DefaultMath)
	})
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("vm: GPU kernels on cuda:%d: %w", dev.Ordinal(), err)
	}
	return g, nil
}

// Close releases the handle and the module (on the device executor; a
// closed device has released its context already).
func (g *GPU) Close() {
	_ = g.dev.Do(func(cuda.Stream) error {
		if g.h != 0 {
			g.blas.Destroy(g.h)
			g.h = 0
		}
		if g.mod != 0 {
			g.drv.ModuleUnload(g.mod)
			g.mod = 0
		}
		if g.modelMod != 0 {
			g.drv.ModuleUnload(g.modelMod)
			g.modelMod = 0
		}
		if g.gemvMod != 0 {
			g.drv.ModuleUnload(g.gemvMod)
			g.gemvMod = 0
		}
		if g.benchMod != 0 {
			g.drv.ModuleUnload(g.benchMod)
			g.benchMod = 0
		}
		if g.tcMod != 0 {
			g.drv.ModuleUnload(g.tcMod)
			g.tcMod = 0
		}
		if g.prefillMod != 0 {
			g.drv.ModuleUnload(g.prefillMod)
			g.prefillMod = 0
		}
		return nil
	})
	for _, b := range slices.Concat(g.attnBufs, g.tcBufs, g.tcCounters) {
		g.dev.Free(b)
	}
	g.attnBufs, g.tcBufs, g.tcCounters = nil, nil, nil
}

// devPtr is the device address of t's first element on this GPU.
func (g *GPU) devPtr(what string, t *tensor.Tensor) (uint64, error) {
	b, ok := t.Storage().Buffer().(*device.Buffer)
	if !ok || b.Ordinal() != g.dev.Ordinal() {
		return 0, fmt.Errorf("%w: %s is on %v, the kernel runs on cuda:%d", ErrUnsupported, what, t.Device(), g.dev.Ordinal())
	}
	return uint64(b.Ptr()) + uint64(t.Offset()), nil
}

func kernelSuffix(dt tensor.DType) (string, error) {
	switch dt {
	case tensor.Float32:
		return "f32", nil
	case tensor.Float16:
		return "f16", nil
	case tensor.BFloat16:
		return "bf16", nil
	}
	return "", fmt.Errorf("%w: GPU kernel for %s (float32, float16, bfloat16)", ErrUnsupported, dt)
}

func (g *GPU) ptrs(names []string, ts ...*tensor.Tensor) ([]uint64, error) {
	out := make([]uint64, len(ts))
	for i, t := range ts {
		p, err := g.devPtr(names[i], t)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// Matmul computes out = a·b through cuBLAS (cublasGemmEx, float
// accumulation, no TF32).
func (g *GPU) Matmul(a, b, out *tensor.Tensor) error {
	m, k, n, err := matmulDims(a, b, out)
	if err != nil {
		return err
	}
	p, err := g.ptrs([]string{"a", "b", "out"}, a, b, out)
	if err != nil {
		return err
	}
	return g.dev.Do(func(cuda.Stream) error {
		return g.blas.MatmulRowMajor(g.h, m, n, k, uintptr(p[0]), uintptr(p[1]), uintptr(p[2]), a.DType())
	})
}

// MatmulNT is out = a·bᵀ with b [n, k]: the skinny-matrix kernel for a
// few rows of a (planGemv), else cuBLAS with op T on b (no copy).
func (g *GPU) MatmulNT(a, b, out *tensor.Tensor) error {
	m, k, n, err := matmulDimsT(a, b, out, true)
	if err != nil {
		return err
	}
	p, err := g.ptrs([]string{"a", "b", "out"}, a, b, out)
	if err != nil {
		return err
	}
	if ok, err := g.tryGemvNT(m, k, n, a.DType(), p); ok || err != nil {
		return err
	}
	return g.dev.Do(func(cuda.Stream) error {
		return g.blas.MatmulRowMajorNT(g.h, m, n, k, uintptr(p[0]), uintptr(p[1]), uintptr(p[2]), a.DType())
	})
}

// bcastArgs mirrors struct Bcast of kernels.cu.
type bcastArgs struct {
	n             int64
	rank, pad     int32
	shape, sx, sy [8]int64
}

type addArgs struct {
	x, y, out uint64
	p         bcastArgs
}

type geluArgs struct {
	x, out uint64
	n      int64
}

func blocks(n int64) uint32 {
	return uint32(min(max((n+kernelThreads-1)/kernelThreads, 1), 65535))
}

func (g *GPU) launch(name string, n int64, params []unsafe.Pointer) error {
	k := g.fns[name]
	return g.dev.Do(func(s cuda.Stream) error {
		return g.launchOn(s, name, k, [3]uint32{blocks(n), 1, 1}, [3]uint32{kernelThreads, 1, 1}, params)
	})
}

// Add computes out = x + y with broadcasting.
func (g *GPU) Add(x, y, out *tensor.Tensor) error {
	bc, err := checkAdd(x, y, out)
	if err != nil {
		return err
	}
	suf, err := kernelSuffix(x.DType())
	if err != nil {
		return err
	}
	if len(bc.shape) > len(bcastArgs{}.shape) {
		return fmt.Errorf("%w: add of rank %d (at most 8 after merging dims)", ErrUnsupported, len(bc.shape))
	}
	n := out.NumElements()
	if n == 0 {
		return nil
	}
	p, err := g.ptrs([]string{"x", "y", "out"}, x, y, out)
	if err != nil {
		return err
	}
	a := &addArgs{x: p[0], y: p[1], out: p[2], p: bcastArgs{n: n, rank: int32(len(bc.shape))}}
	copy(a.p.shape[:], bc.shape)
	copy(a.p.sx[:], bc.sx)
	copy(a.p.sy[:], bc.sy)
	err = g.launch("add_"+suf, n, []unsafe.Pointer{unsafe.Pointer(&a.x), unsafe.Pointer(&a.y), unsafe.Pointer(&a.out), unsafe.Pointer(&a.p)})
	runtime.KeepAlive(a)
	return err
}

// Gelu computes out = gelu(x) (tanh approximation).
func (g *GPU) Gelu(x, out *tensor.Tensor) error {
	if !tensor.SameLayout(x, out) {
		return fmt.Errorf("%w: gelu of %s%v into %s%v", ErrShape, x.DType(), x.Shape(), out.DType(), out.Shape())
	}
	suf, err := kernelSuffix(x.DType())
	if err != nil {
		return err
	}
	n := x.NumElements()
	if n == 0 {
		return nil
	}
	p, err := g.ptrs([]string{"x", "out"}, x, out)
	if err != nil {
		return err
	}
	a := &geluArgs{x: p[0], out: p[1], n: n}
	err = g.launch("gelu_"+suf, n, []unsafe.Pointer{unsafe.Pointer(&a.x), unsafe.Pointer(&a.out), unsafe.Pointer(&a.n)})
	runtime.KeepAlive(a)
	return err
}

// module is one NVRTC compilation unit of the package: its file name,
// its source and the kernels its loader resolves in it.
type module struct {
	file, src string
	names     []string
}

// modules lists every module the package compiles (the compile test
// builds each for the GPU architectures without a GPU).
func modules() []module {
	return []module{baseModule(), gemvModule(), modelModule(), prefillModule(), benchModule(), tcModule()}
}

// baseModule is kernels.cu alone: add and gelu, loaded by newGPU.
func baseModule() module {
	var names []string
	for _, k := range []string{"add", "gelu"} {
		for _, dt := range []string{"f32", "f16", "bf16"} {
			names = append(names, k+"_"+dt)
		}
	}
	return module{"chorus_vm_kernels.cu", cudasrc.Half + cudasrc.PDL + kernelSource, names}
}
