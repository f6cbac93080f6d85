package kernels

import (
	_ "embed"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels_tc.cu
var tcKernelSource string

// Shapes of the tensor-core skinny kernels (kernels_tc.cu).
const (
	tcWarps = 4            // TC_WARPS: warps per block
	tcRows  = 16 * tcWarps // TC_ROWS: rows of w per block (a tile)
	// TCMaxM is the most rows of x the tensor-core kernels take.
	TCMaxM = 32
	// tcMinChunks is the fewest chunks of k a split keeps (a split shorter
	// than this spends more on its partial sums than on its weights).
	tcMinChunks = 8
	tcMaxSplits = 64
)

// tcRowBuckets are the M of the compiled kernels (8 tokens per mma tile).
var tcRowBuckets = []int{8, 16, 32}

// tcMinRows is the fewest rows of x that go to the tensor-core kernels;
// fewer run the CUDA-core ones (kernels_gemv.cu), which read x once per
// piece of w but need no mma tile of 8 tokens.
const tcMinRows = GemvDefaultCoreRows + 1

// Shared memory of the tensor-core kernels: every warp a ring of
// tcStages stages (TC_STAGES), a stage tcStageChunks chunks of k of its
// 16 rows of each weight (TC_AU: 256 bytes of a row).
const (
	tcStages      = 3
	tcStageChunks = 4
)

// tcStageChunksFor is the chunks of k a stage of nw weights at row
// bucket mt (tc_au): the gated pair at 32 rows takes half, so that its
// rings and the block's ring of x fit three blocks a multiprocessor.
func tcStageChunksFor(nw, mt int) int {
	if nw == 2 && mt == 32 {
		return tcStageChunks / 2
	}
	return tcStageChunks
}

// tcSharedX reports whether the kernels of row bucket mt share x among
// a block's warps through a ring of shared memory (tc_rows, XS): from
// two token tiles up, except tc_nt3w, whose warps split k.
func tcSharedX(kind string, mt int) bool { return mt >= 16 && kind != "nt3w" }

// tcSmem is the dynamic shared memory of a block of nw weights at row
// bucket mt: the warps' rings (48 KiB for one weight, 96 KiB for the
// gated pair; 48 KiB for the pair at 32 rows) and, with xs (tcSharedX),
// the block's ring of x (TC_STAGES stages of mt tokens).
func tcSmem(nw, mt int, xs bool) int {
	u := tcStageChunksFor(nw, mt)
	b := tcWarps * tcStages * nw * 16 * u * 64
	if xs {
		b += tcStages * mt * u * 64
	}
	return b
}

// tcNW is the weights a launch of kind multiplies at once.
func tcNW(kind string) int {
	if kind == "gated" {
		return 2
	}
	return 1
}

// tcBlocksPerSM is the blocks of TC_WARPS warps per multiprocessor a
// launch of nw weights at row bucket mt aims for with split-K: the
// kernels' occupancy by shared memory (228 KiB a multiprocessor, 1 KiB a
// block reserved; at most 4), so that every block is resident in one
// wave; the split is the largest that does not exceed it. H200, 8 rows,
// same run, one weight: gate 14336x4096 35.3 us unsplit, 35.4 at 2
// splits, 38.2 at 4 and 42.8 at 8 (the old rule, two waves of 8 a
// multiprocessor rounded up, took 5: 44.9); down 4096x14336 34.7 at 8
// splits, 41.2 at 17; q 4096x4096 15.6 at 8, 18.1 at 16. Llama-3-8B
// steps at batch 4, 8 and 16 (graph-replayed, context 128): 4.875, 5.014
// and 5.297 ms against 4.963, 5.111 and 5.499 with the old rule.
func tcBlocksPerSM(nw, mt int) int {
	return min(4, (228<<10)/(tcSmem(nw, mt, tcSharedX("nt", mt))+1<<10))
}

// tcMaxRows is the most rows of x the tensor-core kernels take by
// default, every weight alike; cuBLAS takes more. From 16 rows the
// block's warps share x through shared memory (tc_rows, XS). H200,
// Llama-3-8B, graph-replayed, against the rule before (the kernels for
// every product of up to 8 rows and, to 16, the q/k/v triple and weights
// up to 8M elements; the others cuBLAS), each in two calls of three or
// two builds, two rounds each (2026-11-29): batch 16 at context 128
// 5.010-5.018 -> 4.612-4.614 ms and 4.851-4.856 -> 4.542-4.561
// (0.921x, 0.936x), at 4096 0.985x and 1.001x. At 32 rows the kernels
// with shared x still lose to cuBLAS alone on every large weight (q 18.6
// against 15.1 us, down 44.7 against 35.1, the gated pair 74.9 against 2
// x 33.5; k/v win, 13.2 against 17.5), and the q/k/v triple on them
// (cuBLAS for the rest) took batch 32 to 0.937x and 0.933x at context
// 128 but 1.022x and 1.029x at 4096 (9.291-9.412 -> 9.558-9.576 ms),
// which the attention's shared-memory carveout explained and removed
// (decodeCarveout): the triple takes up to tcTripleRows, every other
// product of more than 16 rows stays with cuBLAS.
const tcMaxRows = 16

// tcLimits are the limits above, a variable so that tests can send every
// product of up to TCMaxM rows to the tensor-core kernels.
var tcLimits = struct{ rows int }{tcMaxRows}

// tcTakes reports whether a product of m rows of x goes to the
// tensor-core kernels under tcLimits (the shape checks are planTC's).
func tcTakes(m int) bool { return m <= tcLimits.rows }

// tcTripleRows is the most rows of x the q/k/v triple takes to the
// tensor-core kernels, past tcMaxRows: cuBLAS runs the triple as three
// products (q, k and v 14.9, 14.8 and 14.8 us alone at 32 rows, k and v
// at 0.13 of the bound; about 30 us together in a step), the kernel as
// one launch over the three weights (17 us in a step). H200,
// Llama-3-8B, graph-replayed, two rounds of one call, both with the
// attention's carveout (2026-11-29): batch 32 5.307-5.328 -> 4.932-4.946
// ms at context 128, 9.297-9.310 -> 8.915-8.918 at 4096. Before that
// carveout the attention behind the kernel lost what the triple gained
// at 4096 (1.009-1.029x; decodeCarveout).
const tcTripleRows = 32

// tcTakesTriple is tcTakes for the q/k/v triple: up to tcTripleRows where
// tcLimits lets every product of tcMaxRows rows through.
func tcTakesTriple(m int) bool {
	if tcLimits.rows >= tcMaxRows {
		return m <= max(tcLimits.rows, tcTripleRows)
	}
	return tcTakes(m)
}

// tcPlan is one launch of a tensor-core skinny kernel.
type tcPlan struct {
	mt     int // the kernel's row bucket (>= m)
	tiles  int // blocks along n (every weight of the launch)
	splits int // blocks along k
	cps    int // chunks of k per split
}

// partBytes is the device bytes of the split-K partial sums; 0 without
// a split.
func (p tcPlan) partBytes(nw int) int64 {
	if p.splits == 1 {
		return 0
	}
	return int64(p.tiles) * int64(p.splits) * int64(nw) * int64(p.mt) * tcRows * 4
}

func (p tcPlan) countersBytes() int64 { return counterBytes(int64(p.tiles)) }

// counterBytes is the bytes of n int32 counters, in whole 256-byte runs
// (the counter buffers g.tcCounters, shared by the tensor-core products
// and the decode attention).
func counterBytes(n int64) int64 { return (n*4 + 255) / 256 * 256 }

// planTC decides whether x[m, k] times weights of ns rows each (one
// launch: gemv_nt, the three of q/k/v, or with nw = 2 the gate and up
// pair, two weights a row) runs a tensor-core kernel on a GPU with sms
// multiprocessors, and how: m at most TCMaxM, float16 or bfloat16, k a
// multiple of 8, every operand 16-byte aligned. splits > 0 forces the
// split of k (measurements); else the split is the largest that gives at
// most tcBlocksPerSM(nw) blocks per multiprocessor (at least 1), each
// split keeping at least tcMinChunks chunks of k.
func planTC(m int, ns []int, k int, dt tensor.DType, aligned bool, sms, nw, splits int) (tcPlan, bool) {
	if m < 1 || m > TCMaxM || k < 8 || k%8 != 0 || !aligned || len(ns) == 0 || (dt != tensor.Float16 && dt != tensor.BFloat16) {
		return tcPlan{}, false
	}
	var p tcPlan
	for _, b := range tcRowBuckets {
		if b >= m {
			p.mt = b
			break
		}
	}
	for _, n := range ns {
		if n < 1 || n > 1<<30 {
			return tcPlan{}, false
		}
		p.tiles += (n + tcRows - 1) / tcRows
	}
	if p.tiles > 1<<31-1 {
		return tcPlan{}, false
	}
	nch := (k/8 + 3) / 4
	if splits <= 0 {
		want := tcBlocksPerSM(nw, p.mt) * max(sms, 1)
		splits = min(max(want/p.tiles, 1), max(nch/tcMinChunks, 1), tcMaxSplits)
	}
	splits = max(1, min(splits, nch, 65535))
	p.cps = (nch + splits - 1) / splits
	p.splits = (nch + p.cps - 1) / p.cps
	return p, true
}

func tcName(kind string, dt tensor.DType, mt int) string {
	suf := "f16"
	if dt == tensor.BFloat16 {
		suf = "bf16"
	}
	return fmt.Sprintf("tc_%s_%s_m%d", kind, suf, mt)
}

// tcKernels compiles and loads kernels_tc.cu (a module of its own, so a
// failure there leaves the other kernels working) at the first product
// it takes.
func (g *GPU) tcKernels() error {
	if g.tcMod != 0 {
		return nil
	}
	if err := g.gemvKernels(); err != nil { // the multiprocessor count
		return err
	}
	err := g.dev.Do(func(cuda.Stream) (err error) {
		g.tcMod, err = g.loadModule(tcModule())
		if err != nil {
			return err
		}
		// The rings live in dynamic shared memory (tcSmem).
		for _, kind := range []string{"nt", "nt3", "nt3w", "gated"} {
			for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
				for _, mt := range tcRowBuckets {
					if err := g.dynamicSmem(tcName(kind, dt, mt), tcSmem(tcNW(kind), mt, tcSharedX(kind, mt))); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vm: tensor-core skinny kernels on cuda:%d: %w", g.dev.Ordinal(), err)
	}
	return nil
}

// tcScratch returns the device addresses of the per-tile counters and
// the partial sums of a split launch (0, 0 without a split). The two
// live in buffers of their own (g.tcCounters, g.tcBufs), each shared by
// every plan: counters are zero between launches (the last block of a
// tile resets its own), so any plan may use any counter buffer long
// enough, but a partial-sums buffer must never hold another plan's
// counters (a q/k/v triple of 160 tiles once found a gated launch's sums
// where its counters were and left tiles unwritten). Buffers are kept
// until the state closes (a captured graph holds their addresses),
// zeroed when made, and none is made while the stream is captured.
func (g *GPU) tcScratch(p tcPlan, nw int) (counters, part uint64, err error) {
	if p.splits == 1 {
		return 0, 0, nil
	}
	c, err := g.scratchBuf(&g.tcCounters, p.countersBytes(), "a tensor-core product")
	if err != nil {
		return 0, 0, err
	}
	b, err := g.scratchBuf(&g.tcBufs, p.partBytes(nw), "a tensor-core product")
	if err != nil {
		return 0, 0, err
	}
	return uint64(c.Ptr()), uint64(b.Ptr()), nil
}

// scratchBuf returns the first buffer of *bufs of at least n bytes, or
// a new zeroed one appended to it. Buffers are kept until the GPU state
// closes (a captured graph holds their addresses); none is made while
// the stream is captured (what: the user, for that error).
func (g *GPU) scratchBuf(bufs *[]*device.Buffer, n int64, what string) (*device.Buffer, error) {
	for _, b := range *bufs {
		if b.Size() >= n {
			return b, nil
		}
	}
	if g.dev.Capturing() {
		return nil, fmt.Errorf("%w: %s needs a %d-byte scratch buffer inside a capture (run the function once first)", ErrUnsupported, what, n)
	}
	buf, err := g.dev.Alloc(n)
	if err != nil {
		return nil, err
	}
	if err := g.dev.Memset(buf, 0, 0, n); err != nil {
		g.dev.Free(buf)
		return nil, err
	}
	*bufs = append(*bufs, buf)
	return buf, nil
}

// tcArgs are a tensor-core launch's parameters, kept alive across the
// launch.
type tcArgs struct {
	x, w, w2, out, part, counters uint64
	m, n, k, cps                  int32
	pre                           int32 // 1: copy w before the PDL wait (GPU.SetFixedWeights)
}

// launchTC runs kind ("nt" or "gated") of x[m, k] and the weights in a
// (w, and w2 for gated) into a.out under plan pl.
func (g *GPU) launchTC(kind string, dt tensor.DType, pl tcPlan, a *tcArgs) error {
	var err error
	if a.counters, a.part, err = g.tcScratch(pl, tcNW(kind)); err != nil {
		return err
	}
	a.cps = int32(pl.cps)
	grid := [3]uint32{uint32(pl.tiles), uint32(pl.splits), 1}
	if kind == "gated" {
		err = g.launchGrid(tcName(kind, dt, pl.mt), grid, tcWarps*32,
			unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.w2), unsafe.Pointer(&a.out),
			unsafe.Pointer(&a.m), unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.cps),
			unsafe.Pointer(&a.part), unsafe.Pointer(&a.counters), unsafe.Pointer(&a.pre))
	} else {
		err = g.launchGrid(tcName(kind, dt, pl.mt), grid, tcWarps*32,
			unsafe.Pointer(&a.x), unsafe.Pointer(&a.w), unsafe.Pointer(&a.out),
			unsafe.Pointer(&a.m), unsafe.Pointer(&a.n), unsafe.Pointer(&a.k), unsafe.Pointer(&a.cps),
			unsafe.Pointer(&a.part), unsafe.Pointer(&a.counters), unsafe.Pointer(&a.pre))
	}
	runtime.KeepAlive(a)
	return err
}

// tryTC runs out = x·wᵀ (kind "nt"; p: x, w, out) or the gated
// projection (kind "gated"; p: x, wg, wu, out) through a tensor-core
// kernel when planTC takes the shape.
func (g *GPU) tryTC(kind string, m, k, n int, dt tensor.DType, p []uint64) (bool, error) {
	if !tcTakes(m) {
		return false, nil
	}
	if err := g.tcKernels(); err != nil {
		return false, err
	}
	pl, ok := planTC(m, []int{n}, k, dt, aligned16(p...), g.sms, tcNW(kind), 0)
	if !ok {
		return false, nil
	}
	a := &tcArgs{x: p[0], w: p[1], out: p[len(p)-1], m: int32(m), n: int32(n), k: int32(k), pre: g.preArg()}
	if kind == "gated" {
		a.w2 = p[2]
	}
	return true, g.launchTC(kind, dt, pl, a)
}

// tryTCNT3 is TryNT3 through the tensor-core kernel (p: x, w0, w1, w2,
// o0, o1, o2). Where planTC would split k across blocks of up to 8 rows
// of x, the triple runs tc_nt3w instead: tiles of 16 rows, the block's
// warps splitting k (tcWarpTiles).
func (g *GPU) tryTCNT3(m, k int, ns [3]int, dt tensor.DType, p []uint64) (bool, error) {
	if !tcTakesTriple(m) {
		return false, nil
	}
	if err := g.tcKernels(); err != nil {
		return false, err
	}
	pl, ok := planTC(m, ns[:], k, dt, aligned16(p...), g.sms, 1, 0)
	if !ok {
		return false, nil
	}
	if tiles, ok := tcWarpTiles(pl, ns[:]); ok {
		a := &struct {
			x, w0, w1, w2, o0, o1, o2 uint64
			n0, n1, n2, m, k          int32
			pre                       int32
		}{p[0], p[1], p[2], p[3], p[4], p[5], p[6], int32(ns[0]), int32(ns[1]), int32(ns[2]), int32(m), int32(k), g.preArg()}
		err := g.launchGrid(tcName("nt3w", dt, pl.mt), [3]uint32{uint32(tiles), 1, 1}, tcWarps*32,
			unsafe.Pointer(&a.x), unsafe.Pointer(&a.w0), unsafe.Pointer(&a.w1), unsafe.Pointer(&a.w2),
			unsafe.Pointer(&a.o0), unsafe.Pointer(&a.o1), unsafe.Pointer(&a.o2),
			unsafe.Pointer(&a.n0), unsafe.Pointer(&a.n1), unsafe.Pointer(&a.n2),
			unsafe.Pointer(&a.m), unsafe.Pointer(&a.k), unsafe.Pointer(&a.pre))
		runtime.KeepAlive(a)
		return true, err
	}
	counters, part, err := g.tcScratch(pl, 1)
	if err != nil {
		return false, err
	}
	a := &struct {
		x, w0, w1, w2, o0, o1, o2 uint64
		n0, n1, n2, m, k, cps     int32
		part, counters            uint64
		pre                       int32
	}{p[0], p[1], p[2], p[3], p[4], p[5], p[6], int32(ns[0]), int32(ns[1]), int32(ns[2]), int32(m), int32(k), int32(pl.cps), part, counters, g.preArg()}
	err = g.launchGrid(tcName("nt3", dt, pl.mt), [3]uint32{uint32(pl.tiles), uint32(pl.splits), 1}, tcWarps*32,
		unsafe.Pointer(&a.x), unsafe.Pointer(&a.w0), unsafe.Pointer(&a.w1), unsafe.Pointer(&a.w2),
		unsafe.Pointer(&a.o0), unsafe.Pointer(&a.o1), unsafe.Pointer(&a.o2),
		unsafe.Pointer(&a.n0), unsafe.Pointer(&a.n1), unsafe.Pointer(&a.n2),
		unsafe.Pointer(&a.m), unsafe.Pointer(&a.k), unsafe.Pointer(&a.cps),
		unsafe.Pointer(&a.part), unsafe.Pointer(&a.counters), unsafe.Pointer(&a.pre))
	runtime.KeepAlive(a)
	return true, err
}

// tcWarpTiles returns the blocks of tc_nt3w for the triple of ns rows
// (tiles of 16 rows) when pl splits k across blocks and its rows fit one
// mma tile of 8 tokens; false otherwise (the 64-row tiles fill the GPU
// without a split, or 16 and 32 rows, where it was slower). H200,
// Llama-3-8B, graph-replayed, both builds twice in one call
// (2026-11-29): batch 8 4.497-4.503 -> 4.429-4.469 ms at context 128,
// 5.692-5.715 -> 5.600-5.623 at 4096; batch 16 1.007x and 1.011x slower.
func tcWarpTiles(pl tcPlan, ns []int) (int, bool) {
	if pl.splits <= 1 || pl.mt != 8 {
		return 0, false
	}
	tiles := 0
	for _, n := range ns {
		tiles += (n + 15) / 16
	}
	return tiles, tiles <= 1<<31-1
}

// tcModule is kernels_tc.cu, the tensor-core skinny products.
func tcModule() module {
	var names []string
	for _, kind := range []string{"nt", "nt3", "nt3w", "gated"} {
		for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
			for _, mt := range tcRowBuckets {
				names = append(names, tcName(kind, dt, mt))
			}
		}
	}
	return module{"chorus_vm_tc.cu", cudasrc.Half + cudasrc.PDL + kernelSource + gemvKernelSource + tcKernelSource, names}
}
