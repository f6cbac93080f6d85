package kernels

import (
	_ "embed"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels_gemv.cu
var gemvKernelSource string

//go:embed kernels_fused.cu
var fusedKernelSource string

// Shapes of the skinny-matrix kernels (kernels_gemv.cu).
const (
	gemvWarps = 8 // GEMV_WARPS: warps per block
	// GemvMaxM is the most rows of x the skinny-matrix kernels take (the
	// tensor-core ones above GemvDefaultCoreRows); more rows go to cuBLAS.
	GemvMaxM = TCMaxM
	// gemvCoreMaxM is the most rows the CUDA-core kernels are compiled for.
	gemvCoreMaxM = 8
)

// gemvRowBuckets are the M of the compiled CUDA-core kernels: a call
// with M rows runs the smallest bucket >= M (the kernels skip rows past
// M).
var gemvRowBuckets = []int{1, 2, 4, 8}

// GemvDefaultCoreRows is the most rows of x the CUDA-core kernels take;
// more (up to the threshold) run the tensor-core kernels and cuBLAS. At
// one row the CUDA-core kernel beats cuBLAS on every Llama-3-8B
// projection (H200: 13.1 against 16.6-20.1 us for 4096x4096, 7.1
// against 17.6 for 1024x4096, 0.97 against 0.94 of the streaming bound
// for the LM head); from 2 rows cuBLAS wins or ties on every large
// weight (H200, 2 rows: down 39.4 against 33.8 us, o 17.8 against 14.4;
// 4 rows: down 61.8 against 34.0): every 16-byte piece of w then costs a
// load of x per row from L1 and 8 conversions and FMAs per row, and the
// kernel stops being memory-bound. A Llama-3-8B step at batch 4 took
// 5.50 ms with 1 against 8.11 with 4.
const GemvDefaultCoreRows = 1

// GemvDefaultRows is the default threshold: the skinny-matrix kernels
// for up to this many rows of x, cuBLAS above. Between
// GemvDefaultCoreRows and it the tensor-core kernels take every product
// (tcMaxRows says why cuBLAS takes more).
const GemvDefaultRows = tcMaxRows

// gemvMaxRows is the worker process's threshold: matmul_nt with at most
// this many rows of x (and at most GemvMaxM) runs the skinny-matrix
// kernel, more rows cuBLAS; 0 sends every product to cuBLAS. Set by
// GemvFunc (benchmarks compare the two paths in one run).
var gemvMaxRows atomic.Int32

func init() {
	gemvMaxRows.Store(GemvDefaultRows)
	registry.MustRegisterTyped(GemvFunc, func(maxRows int) (int, error) {
		if maxRows < 0 || maxRows > GemvMaxM {
			return 0, fmt.Errorf("%w: %s(%d): want 0 (cuBLAS only) to %d rows", ErrArgs, GemvFunc, maxRows, GemvMaxM)
		}
		return int(gemvMaxRows.Swap(int32(maxRows))), nil
	})
}

// GemvFunc (max_rows int) -> the previous value: matmul_nt and the gated
// projection of up to max_rows rows of x run the skinny-matrix kernels on
// this worker's process, more rows cuBLAS (0: cuBLAS for all; default
// GemvDefaultRows); the q/k/v triple up to tcTripleRows rows where
// max_rows is at least the default.
const GemvFunc = "chorus.vm.gemv_max_rows"

// gemvPlan is one launch of a skinny-matrix kernel.
type gemvPlan struct {
	mt   int    // the kernel's row bucket (>= m)
	ks   int    // warps per row of w (split-K)
	grid uint32 // blocks
}

// planGemv decides whether out[m, n] = x[m, k]·w[n, k]ᵀ runs the
// skinny-matrix kernel on a GPU with sms multiprocessors, and how: m at
// most maxRows, float16 or bfloat16, k a multiple of 8 and every operand
// 16-byte aligned (the kernel reads 16-byte pieces of rows). The split
// ks (1, 2, 4 or 8 warps per row) is the smallest that puts at least
// 32 warps per multiprocessor in flight, as long as every warp keeps at
// least one 512-byte piece of its row: with fewer warps a small matrix
// (a 1024-row k or v projection) would leave most of HBM's bandwidth
// unused.
func planGemv(m, n, k int, dt tensor.DType, aligned bool, sms, maxRows int) (gemvPlan, bool) {
	if m < 1 || m > min(maxRows, gemvCoreMaxM) || n < 1 || k < 8 || k%8 != 0 || !aligned {
		return gemvPlan{}, false
	}
	if dt != tensor.Float16 && dt != tensor.BFloat16 {
		return gemvPlan{}, false
	}
	p := gemvPlan{ks: 1}
	for _, b := range gemvRowBuckets {
		if b >= m {
			p.mt = b
			break
		}
	}
	want := 32 * max(sms, 1)
	for p.ks < gemvWarps && n*p.ks < want && k/8 >= 32*2*p.ks {
		p.ks *= 2
	}
	rb := gemvWarps / p.ks
	blocks := (int64(n) + int64(rb) - 1) / int64(rb)
	if blocks > 1<<31-1 {
		return gemvPlan{}, false
	}
	p.grid = uint32(blocks)
	return p, true
}

// waveGrid is the grid for blocks units of work on a GPU that holds
// slots blocks of the kernel at once: the fewest blocks that do the work
// in as many rounds as a full wave of slots would, so every block does
// the same number of units and the last round is not a partial wave.
func waveGrid(blocks, slots int64) uint32 {
	if slots <= 0 || blocks <= slots {
		return uint32(blocks)
	}
	rounds := (blocks + slots - 1) / slots
	return uint32((blocks + rounds - 1) / rounds)
}

// Shapes of the one-row kernels (kernels_gemv.cu, gemv_row).
const (
	rowWarps   = 16      // ROW_WARPS: warps per block, one block a multiprocessor
	rowMaxK    = 16384   // ROW_MAXK: x lives in shared memory
	rowPfBytes = 1 << 17 // ROW_PF_BYTES: weights a block copies before its PDL wait
)

// rowBatches are the batch lengths (rounds of 256 elements a warp
// holds in flight) the one-row kernels are compiled for, longest first,
// by weights per launch: 8 KiB of each warp's loads in flight, or the
// longest shorter batch that divides a row (kernels_gemv.cu,
// GEMV_ROW_KERNELS).
var rowBatches = [3][]int{1: {8, 7, 6, 5}, 2: {4, 3}}

// rowBatch returns the batch length of the one-row kernel that takes
// out[1, n] = x[1, k]·w[n, k]ᵀ over nw weights (nw 1, or 2 for the
// gated pair; n the rows of all segments) on a GPU of sms
// multiprocessors, or 0 where none does: one row of x, 16-bit, every
// operand 16-byte aligned, k at most rowMaxK and R = k/256 rounds that
// one of rowBatches[nw] divides (a batch never straddles two rows), and
// at least one row for every warp of the grid. Other shapes run the
// split-K kernels.
func rowBatch(m, n, k int, dt tensor.DType, aligned bool, sms, nw int) int {
	if m != 1 || (dt != tensor.Float16 && dt != tensor.BFloat16) || !aligned || sms <= 0 || nw < 1 || nw >= len(rowBatches) ||
		k <= 0 || k > rowMaxK || k%256 != 0 || int64(n) < int64(sms)*rowWarps {
		return 0
	}
	for _, u := range rowBatches[nw] {
		if (k/256)%u == 0 {
			return u
		}
	}
	return 0
}

// rowName is the one-row kernel of kind (nw weights) and dt whose
// batches are u rounds long.
func rowName(kind string, dt tensor.DType, nw, u int) string {
	if u == rowBatches[nw][0] {
		return "gemv1_" + kind + "_" + gemvSuffix(dt)
	}
	return fmt.Sprintf("gemv1_%s_%s_u%d", kind, gemvSuffix(dt), u)
}

// rowKinds are the one-row kernel kinds and their weights per launch.
var rowKinds = []struct {
	kind string
	nw   int
}{{"nt", 1}, {"nt3", 1}, {"gated", 2}}

// launchRow launches one-row kernel kind of dt (nw weights, batches of
// u rounds), a block a multiprocessor.
func (g *GPU) launchRow(kind string, dt tensor.DType, nw, u int, params ...unsafe.Pointer) error {
	return g.launchGrid(rowName(kind, dt, nw, u), [3]uint32{uint32(g.sms), 1, 1}, rowWarps*32, params...)
}

// gemvGrid is the grid of a skinny kernel launch of blocks row groups:
// one balanced wave (kernels_gemv.cu, gemv_grid).
func (g *GPU) gemvGrid(name string, blocks int64) (uint32, error) {
	slots, err := g.slots(name, gemvWarps*32)
	if err != nil {
		return 0, err
	}
	return waveGrid(blocks, int64(slots)), nil
}

// slots is how many blocks of kernel name (threads each) the GPU holds
// at once: multiprocessors times the occupancy, cached per kernel.
func (g *GPU) slots(name string, threads int) (int, error) {
	if n, ok := g.occ[name]; ok {
		return n, nil
	}
	k, ok := g.fns[name]
	if !ok {
		return 0, fmt.Errorf("%w: no GPU kernel %s", ErrUnsupported, name)
	}
	var per int
	err := g.dev.Do(func(cuda.Stream) error {
		var err error
		per, err = g.drv.OccupancyMaxActiveBlocksPerMultiprocessor(k.f, threads, 0)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("occupancy of %s: %w", name, err)
	}
	if g.occ == nil {
		g.occ = map[string]int{}
	}
	g.occ[name] = per * g.sms
	return g.occ[name], nil
}

func gemvName(kind string, dt tensor.DType, mt int) string {
	return fmt.Sprintf("gemv_%s_%s_m%d", kind, gemvSuffix(dt), mt)
}

// gemvSuffix is the dtype suffix of the skinny kernels (16-bit only).
func gemvSuffix(dt tensor.DType) string {
	if dt == tensor.BFloat16 {
		return "bf16"
	}
	return "f16"
}

// gemvKernels compiles and loads kernels_gemv.cu and kernels_attn.cu
// (one module) at the first skinny product or split-KV attention, and
// reads the multiprocessor count.
func (g *GPU) gemvKernels() error {
	if g.gemvMod != 0 {
		return nil
	}
	err := g.dev.Do(func(cuda.Stream) error {
		d, err := g.drv.DeviceGet(g.dev.Ordinal())
		if err != nil {
			return err
		}
		if g.sms, err = g.drv.DeviceAttribute(d, cuda.AttrMultiprocessorCount); err != nil {
			return err
		}
		g.gemvMod, err = g.loadModule(gemvModule())
		if err != nil {
			return err
		}
		// The one-row kernels ask for rowPfBytes of dynamic shared
		// memory; a GPU that cannot give it keeps them off.
		g.rowOK = true
		for _, rk := range rowKinds {
			for _, u := range rowBatches[rk.nw] {
				for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
					if g.dynamicSmem(rowName(rk.kind, dt, rk.nw, u), rowPfBytes) != nil {
						g.rowOK = false
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vm: skinny-matrix kernels on cuda:%d: %w", g.dev.Ordinal(), err)
	}
	return nil
}

// gemvArgs are a skinny-matrix launch's parameters, kept alive across
// the launch.
type gemvArgs struct {
	x, w, w2, out uint64
	m, n, k, ks   int32
	pre           int32 // 1: read w before the PDL wait (GPU.SetFixedWeights)
}

// tryGemvNT runs out = a·bᵀ through the skinny-matrix kernel when
// planGemv takes the shape (ok), else leaves it to the caller.
func (g *GPU) tryGemvNT(m, k, n int, dt tensor.DType, p []uint64) (ok bool, err error) {
	switch skinnyPath(m, int(gemvMaxRows.Load())) {
	case "":
		return false, nil
	case "tc":
		return g.tryTC("nt", m, k, n, dt, p)
	}
	if err := g.gemvKernels(); err != nil {
		return false, err
	}
	if u := rowBatch(m, n, k, dt, aligned16(p...), g.sms, 1); g.rowOK && u > 0 {
		a := &gemvArgs{x: p[0], w: p[1], out: p[2], n: int32(n), k: int32(k), pre: g.preArg()}
		err := g.launchRow("nt", dt, 1, u, unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.out),
			unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.pre))
		runtime.KeepAlive(a)
		return true, err
	}
	pl, ok := planGemv(m, n, k, dt, aligned16(p...), g.sms, int(gemvMaxRows.Load()))
	if !ok {
		return false, nil
	}
	a := &gemvArgs{x: p[0], w: p[1], out: p[2], m: int32(m), n: int32(n), k: int32(k), ks: int32(pl.ks), pre: g.preArg()}
	name := gemvName("nt", dt, pl.mt)
	grid, err := g.gemvGrid(name, int64(pl.grid))
	if err != nil {
		return false, err
	}
	err = g.launchGrid(name, [3]uint32{grid, 1, 1}, gemvWarps*32,
		unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.out),
		unsafe.Pointer(&a.m), unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.ks), unsafe.Pointer(&a.pre))
	runtime.KeepAlive(a)
	return true, err
}

// skinnyPath is the kernel family that takes a product of m rows of x
// under threshold maxRows: "core" (CUDA cores, up to
// GemvDefaultCoreRows), "tc" (tensor cores, up to TCMaxM) or "" (cuBLAS).
func skinnyPath(m, maxRows int) string {
	switch {
	case m < 1 || m > maxRows:
		return ""
	case m < tcMinRows:
		return "core"
	case m <= TCMaxM:
		return "tc"
	}
	return ""
}

func aligned16(p ...uint64) bool {
	for _, x := range p {
		if x%16 != 0 {
			return false
		}
	}
	return true
}

// TryGated runs a fused gated projection (the VM's gated fusion; t: x, wg, wu, g, u, a,
// out) as one gemv_gated launch when planGemv takes the shape, out does
// not overlap x, and the kernels are on; else the caller runs the four
// ops.
func (g *GPU) TryGated(t []*tensor.Tensor) (bool, error) {
	x, wg, wu, out := t[0], t[1], t[2], t[6]
	m, k, n, err := matmulDimsT(x, wg, out, true)
	if err != nil {
		return false, nil
	}
	path := skinnyPath(m, int(gemvMaxRows.Load()))
	if !wu.Shape().Equal(wg.Shape()) || wu.DType() != wg.DType() || path == "" {
		return false, nil
	}
	p, err := g.ptrs([]string{"x", "w_gate", "w_up", "out"}, x, wg, wu, out)
	if err != nil {
		return false, err
	}
	if overlaps(p[0], x.NumBytes(), p[3], out.NumBytes()) {
		return false, nil
	}
	if path == "tc" {
		return g.tryTC("gated", m, k, n, x.DType(), p)
	}
	if err := g.gemvKernels(); err != nil {
		return false, err
	}
	if u := rowBatch(m, n, k, x.DType(), aligned16(p...), g.sms, 2); g.rowOK && u > 0 {
		a := &gemvArgs{x: p[0], w: p[1], w2: p[2], out: p[3], n: int32(n), k: int32(k), pre: g.preArg()}
		err := g.launchRow("gated", x.DType(), 2, u, unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.w2), unsafe.Pointer(&a.out),
			unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.pre))
		runtime.KeepAlive(a)
		return true, err
	}
	pl, ok := planGemv(m, n, k, x.DType(), aligned16(p...), g.sms, int(gemvMaxRows.Load()))
	if !ok {
		return false, nil
	}
	a := &gemvArgs{x: p[0], w: p[1], w2: p[2], out: p[3], m: int32(m), n: int32(n), k: int32(k), ks: int32(pl.ks), pre: g.preArg()}
	name := gemvName("gated", x.DType(), pl.mt)
	grid, err := g.gemvGrid(name, int64(pl.grid))
	if err != nil {
		return false, err
	}
	err = g.launchGrid(name, [3]uint32{grid, 1, 1}, gemvWarps*32,
		unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.w2), unsafe.Pointer(&a.out),
		unsafe.Pointer(&a.m), unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.ks), unsafe.Pointer(&a.pre))
	runtime.KeepAlive(a)
	return true, err
}

// TrySiluMul runs out = silu(g) ⊙ u (the gated projection's activation
// after its two products ran apart) as one silu_mul launch when g, u and
// out have one 16-bit shape of whole 16-byte pieces, 16-byte aligned,
// and out is an input or overlaps neither; else the caller runs silu and
// mul.
func (g *GPU) TrySiluMul(gt, u, out *tensor.Tensor) (bool, error) {
	n := gt.NumElements()
	dt := gt.DType()
	if (dt != tensor.Float16 && dt != tensor.BFloat16) || !tensor.SameLayout(gt, u) || !tensor.SameLayout(gt, out) || n == 0 || n%8 != 0 {
		return false, nil
	}
	suf, err := kernelSuffix(dt)
	if err != nil {
		return false, nil
	}
	p, err := g.ptrs([]string{"gate", "up", "out"}, gt, u, out)
	if err != nil {
		return false, err
	}
	// out may be g or u itself (the decoder's memory plan puts the
	// product where the gate was): each element is read before it is
	// written, by the same thread; a partial overlap is refused.
	nb := gt.NumBytes()
	if !aligned16(p...) || (p[2] != p[0] && overlaps(p[0], nb, p[2], nb)) || (p[2] != p[1] && overlaps(p[1], nb, p[2], nb)) {
		return false, nil
	}
	if err := g.gemvKernels(); err != nil {
		return false, err
	}
	a := &struct {
		g, u, out uint64
		n8        int64
	}{p[0], p[1], p[2], n / 8}
	err = g.launchGrid("silu_mul_"+suf, [3]uint32{blocks(a.n8), 1, 1}, kernelThreads,
		unsafe.Pointer(&a.g), unsafe.Pointer(&a.u), unsafe.Pointer(&a.out), unsafe.Pointer(&a.n8))
	runtime.KeepAlive(a)
	return true, err
}

// overlaps reports whether byte ranges [a, a+na) and [b, b+nb) meet.
func overlaps(a uint64, na int64, b uint64, nb int64) bool {
	return a < b+uint64(nb) && b < a+uint64(na)
}

// TryNT3 runs three products of one x (t: x, w0, w1, w2, o0, o1, o2; the
// q, k and v projections) as one gemv_nt3 launch when planGemv takes all
// three with one split and no output overlaps x; else the caller runs
// them one by one.
func (g *GPU) TryNT3(t []*tensor.Tensor) (bool, error) {
	x := t[0]
	var ns [3]int
	var m, k int
	for i := range 3 {
		mi, ki, ni, err := matmulDimsT(x, t[1+i], t[4+i], true)
		if err != nil || (i > 0 && (mi != m || ki != k)) {
			return false, nil
		}
		m, k, ns[i] = mi, ki, ni
	}
	rows := int(gemvMaxRows.Load())
	if rows >= GemvDefaultRows {
		rows = max(rows, tcTripleRows) // the triple on the tensor cores to 32 rows (tcTripleRows)
	}
	path := skinnyPath(m, rows)
	if path == "" {
		return false, nil
	}
	p, err := g.ptrs([]string{"x", "w_q", "w_k", "w_v", "q", "k", "v"}, t...)
	if err != nil {
		return false, err
	}
	for i := range 3 {
		if overlaps(p[0], x.NumBytes(), p[4+i], t[4+i].NumBytes()) {
			return false, nil
		}
	}
	if path == "tc" {
		return g.tryTCNT3(m, k, ns, x.DType(), p)
	}
	if err := g.gemvKernels(); err != nil {
		return false, err
	}
	if u := rowBatch(m, ns[0]+ns[1]+ns[2], k, x.DType(), aligned16(p...), g.sms, 1); g.rowOK && u > 0 {
		a := &struct {
			x, w0, w1, w2, o0, o1, o2 uint64
			n0, n1, n2, k, pre        int32
		}{p[0], p[1], p[2], p[3], p[4], p[5], p[6], int32(ns[0]), int32(ns[1]), int32(ns[2]), int32(k), g.preArg()}
		err := g.launchRow("nt3", x.DType(), 1, u, unsafe.Pointer(&a.x), unsafe.Pointer(&a.w0), unsafe.Pointer(&a.w1), unsafe.Pointer(&a.w2),
			unsafe.Pointer(&a.o0), unsafe.Pointer(&a.o1), unsafe.Pointer(&a.o2),
			unsafe.Pointer(&a.n0), unsafe.Pointer(&a.n1), unsafe.Pointer(&a.n2), unsafe.Pointer(&a.k), unsafe.Pointer(&a.pre))
		runtime.KeepAlive(a)
		return true, err
	}
	pl, ok := planGemv(m, ns[0]+ns[1]+ns[2], k, x.DType(), aligned16(p...), g.sms, int(gemvMaxRows.Load()))
	if !ok {
		return false, nil
	}
	rb := gemvWarps / pl.ks
	blocks := 0
	for _, n := range ns {
		blocks += (n + rb - 1) / rb
	}
	name := gemvName("nt3", x.DType(), pl.mt)
	grid, err := g.gemvGrid(name, int64(blocks))
	if err != nil {
		return false, err
	}
	a := &struct {
		x, w0, w1, w2, o0, o1, o2 uint64
		n0, n1, n2, m, k, ks, pre int32
	}{p[0], p[1], p[2], p[3], p[4], p[5], p[6], int32(ns[0]), int32(ns[1]), int32(ns[2]), int32(m), int32(k), int32(pl.ks), g.preArg()}
	err = g.launchGrid(name, [3]uint32{grid, 1, 1}, gemvWarps*32,
		unsafe.Pointer(&a.x), unsafe.Pointer(&a.w0), unsafe.Pointer(&a.w1), unsafe.Pointer(&a.w2),
		unsafe.Pointer(&a.o0), unsafe.Pointer(&a.o1), unsafe.Pointer(&a.o2),
		unsafe.Pointer(&a.n0), unsafe.Pointer(&a.n1), unsafe.Pointer(&a.n2),
		unsafe.Pointer(&a.m), unsafe.Pointer(&a.k), unsafe.Pointer(&a.ks), unsafe.Pointer(&a.pre))
	runtime.KeepAlive(a)
	return true, err
}

// addNormVRegs is ADDNORM_VR (kernels_fused.cu): the 16-byte pieces of
// its row a thread of add_rms_norm_v holds.
const addNormVRegs = 4

// addNormVec reports whether add_rms_norm_v takes rows of h elements of
// dt: 16-bit, h a multiple of 8 up to 8 x addNormVRegs x normThreads,
// every operand 16-byte aligned.
func addNormVec(dt tensor.DType, h int, aligned bool) bool {
	return (dt == tensor.Float16 || dt == tensor.BFloat16) && aligned && h > 0 && h%8 == 0 && h/8 <= addNormVRegs*normThreads
}

// TryAddNorm runs a residual add and the RMSNorm of its sum (t: x, y,
// sum, w, out) as one add_rms_norm launch when x, y and sum have one
// shape [rows, h] and w is [h].
func (g *GPU) TryAddNorm(t []*tensor.Tensor, eps float64) (bool, error) {
	x, y, sum, w, out := t[0], t[1], t[2], t[3], t[4]
	if !tensor.SameLayout(x, y) || !tensor.SameLayout(x, sum) || !tensor.SameLayout(x, out) || w.DType() != x.DType() {
		return false, nil
	}
	rows, h := rowsOf(x)
	if len(w.Shape()) != 1 || int(w.Shape()[0]) != h || rows == 0 {
		return false, nil
	}
	suf, err := kernelSuffix(x.DType())
	if err != nil {
		return false, nil
	}
	if err := g.gemvKernels(); err != nil {
		return false, err
	}
	p, err := g.ptrs([]string{"x", "y", "sum", "w", "out"}, t...)
	if err != nil {
		return false, err
	}
	grid, err := gridRows(rows)
	if err != nil {
		return false, nil
	}
	if addNormVec(x.DType(), h, aligned16(p...)) {
		a := &struct {
			x, y, sum, w, out uint64
			h8                int32
			eps               float32
			pre               int32
		}{p[0], p[1], p[2], p[3], p[4], int32(h / 8), float32(eps), g.preArg()}
		err = g.launchGrid("add_rms_norm_v_"+suf, grid, normThreads, unsafe.Pointer(&a.x), unsafe.Pointer(&a.y), unsafe.Pointer(&a.sum),
			unsafe.Pointer(&a.w), unsafe.Pointer(&a.out), unsafe.Pointer(&a.h8), unsafe.Pointer(&a.eps), unsafe.Pointer(&a.pre))
		runtime.KeepAlive(a)
		return true, err
	}
	a := &struct {
		x, y, sum, w, out uint64
		h                 int64
		eps               float32
	}{p[0], p[1], p[2], p[3], p[4], int64(h), float32(eps)}
	err = g.launchGrid("add_rms_norm_"+suf, grid, normThreads, unsafe.Pointer(&a.x), unsafe.Pointer(&a.y), unsafe.Pointer(&a.sum),
		unsafe.Pointer(&a.w), unsafe.Pointer(&a.out), unsafe.Pointer(&a.h), unsafe.Pointer(&a.eps))
	runtime.KeepAlive(a)
	return true, err
}

// gemvModule is kernels_gemv.cu with the attention and fused kernels.
func gemvModule() module {
	var names []string
	for _, kind := range []string{"nt", "nt3", "gated"} {
		for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
			for _, mt := range gemvRowBuckets {
				names = append(names, gemvName(kind, dt, mt))
			}
		}
	}
	for _, dt := range []string{"f16", "bf16"} {
		for _, e := range []string{"_e2", "_e4", "_e8", "_e2_q4", "_e4_q4"} {
			names = append(names, "attn_split_"+dt+e, "attn_rope_split_"+dt+e)
		}
		names = append(names, "attn_combine_"+dt, "add_rms_norm_"+dt, "add_rms_norm_v_"+dt, "silu_mul_"+dt)
	}
	names = append(names, "add_rms_norm_f32")
	for _, rk := range rowKinds {
		for _, u := range rowBatches[rk.nw] {
			names = append(names, rowName(rk.kind, tensor.Float16, rk.nw, u), rowName(rk.kind, tensor.BFloat16, rk.nw, u))
		}
	}
	return module{"chorus_vm_gemv.cu", cudasrc.Half + cudasrc.PDL + kernelSource + gemvKernelSource + attnKernelSource + fusedKernelSource, names}
}
