package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels_model.cu
var modelKernelSource string

// modelKernelNames are the kernels of kernels_model.cu, each in _f32,
// _f16 and _bf16.
var modelKernelNames = []string{"mul", "silu", "embedding", "rms_norm", "layer_norm", "rope", "rope_table", "kv_append", "attention", "argmax"}

// Launch shapes of the decoder kernels (kernels_model.cu).
const (
	normThreads   = 256  // rms_norm, layer_norm: one block per row (a multiple of 32, at most 1024)
	argmaxThreads = 1024 // argmax: one block per row, as many threads as a block takes (a row is a vocabulary)
	attnThreads   = 128  // attention: ATT_WARPS warps
	attnMaxHeadD  = 256  // ATT_MAX_D
)

// modelKernels compiles and loads kernels_model.cu at the first decoder
// op (a module of its own, so the add/gelu/matmul path does not depend
// on it).
func (g *GPU) modelKernels() error {
	if g.modelMod != 0 {
		return nil
	}
	err := g.dev.Do(func(cuda.Stream) (err error) {
		g.modelMod, err = g.loadModule(modelModule())
		return err
	})
	if err != nil {
		return fmt.Errorf("vm: decoder kernels on cuda:%d: %w", g.dev.Ordinal(), err)
	}
	return nil
}

// launchGrid launches kernel name with the given grid and block size on
// the worker's stream. params point at the kernel's arguments in order.
func (g *GPU) launchGrid(name string, grid [3]uint32, threads uint32, params ...unsafe.Pointer) error {
	k, ok := g.fns[name]
	if !ok {
		return fmt.Errorf("%w: no GPU kernel %s", ErrUnsupported, name)
	}
	return g.dev.Do(func(s cuda.Stream) error {
		return g.launchOn(s, name, k, grid, [3]uint32{threads, 1, 1}, params)
	})
}

// gridRows is a grid of one block per row (rows < 2³¹).
func gridRows(rows int) ([3]uint32, error) {
	if rows < 0 || rows > math.MaxInt32 {
		return [3]uint32{}, fmt.Errorf("%w: %d rows in one launch", ErrUnsupported, rows)
	}
	return [3]uint32{uint32(rows), 1, 1}, nil
}

// Model runs a decoder op on the GPU; f is eps or theta.
func (g *GPU) Model(op ir.Op, f float64, t []*tensor.Tensor) error {
	if err := g.modelKernels(); err != nil {
		return err
	}
	names := []string{"x", "y", "z", "w", "u", "v", "out"}
	p, err := g.ptrs(names[:len(t)], t...)
	if err != nil {
		return err
	}
	switch op {
	case ir.OpEmbedding:
		return g.embedding(t, p)
	case ir.OpRMSNorm, ir.OpLayerNorm:
		return g.norm(op, t, p, f)
	case ir.OpRope:
		return g.rope(t, p, f)
	case ir.OpAttention:
		return g.attention(t, p)
	case ir.OpSilu:
		return g.silu(t, p)
	case ir.OpMul:
		return g.mul(t, p)
	case ir.OpArgmax:
		return g.argmax(t, p)
	}
	return fmt.Errorf("%w: op %v on the GPU", ErrUnsupported, op)
}

func (g *GPU) embedding(t []*tensor.Tensor, p []uint64) error {
	vocab, h, err := checkEmbedding(t[0], t[1], t[2])
	if err != nil {
		return err
	}
	suf, err := kernelSuffix(t[1].DType())
	if err != nil {
		return err
	}
	a := &struct {
		ids, table, out   uint64
		nids, vocab, cols int64
	}{p[0], p[1], p[2], t[0].NumElements(), int64(vocab), int64(h)}
	n := a.nids * a.cols
	if n == 0 {
		return nil
	}
	err = g.launchGrid("embedding_"+suf, [3]uint32{blocks(n), 1, 1}, kernelThreads,
		unsafe.Pointer(&a.ids), unsafe.Pointer(&a.table), unsafe.Pointer(&a.out), unsafe.Pointer(&a.nids), unsafe.Pointer(&a.vocab), unsafe.Pointer(&a.cols))
	runtime.KeepAlive(a)
	return err
}

func (g *GPU) norm(op ir.Op, t []*tensor.Tensor, p []uint64, eps float64) error {
	x, out := t[0], t[len(t)-1]
	name := "rms_norm"
	if op == ir.OpLayerNorm {
		name = "layer_norm"
	}
	if err := checkNorm(name, x, out, t[1:len(t)-1]...); err != nil {
		return err
	}
	suf, err := kernelSuffix(x.DType())
	if err != nil {
		return err
	}
	rows, h := rowsOf(x)
	if rows == 0 {
		return nil
	}
	grid, err := gridRows(rows)
	if err != nil {
		return err
	}
	a := &struct {
		x, w, b, out uint64
		h            int64
		eps          float32
	}{x: p[0], w: p[1], out: p[len(p)-1], h: int64(h), eps: float32(eps)}
	params := []unsafe.Pointer{unsafe.Pointer(&a.x), unsafe.Pointer(&a.w)}
	if op == ir.OpLayerNorm {
		a.b = p[2]
		params = append(params, unsafe.Pointer(&a.b))
	}
	params = append(params, unsafe.Pointer(&a.out), unsafe.Pointer(&a.h), unsafe.Pointer(&a.eps))
	err = g.launchGrid(name+"_"+suf, grid, normThreads, params...)
	runtime.KeepAlive(a)
	return err
}

func (g *GPU) rope(t []*tensor.Tensor, p []uint64, theta float64) error {
	tok, heads, d, err := checkRope(t[0], t[1], t[2])
	if err != nil {
		return err
	}
	suf, err := kernelSuffix(t[0].DType())
	if err != nil {
		return err
	}
	n := int64(tok * heads * d / 2)
	if n == 0 {
		return nil
	}
	a := &struct {
		x, pos, out uint64
		t, heads, d int64
		theta       float64
	}{p[0], p[1], p[2], int64(tok), int64(heads), int64(d), theta}
	err = g.launchGrid("rope_"+suf, [3]uint32{blocks(n), 1, 1}, kernelThreads,
		unsafe.Pointer(&a.x), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out), unsafe.Pointer(&a.t), unsafe.Pointer(&a.heads), unsafe.Pointer(&a.d), unsafe.Pointer(&a.theta))
	runtime.KeepAlive(a)
	return err
}

// ropeMaxHalf is ROPE_MAX_HALF of kernels_model.cu: the most inverse
// frequencies (head_dim / 2) the table form takes on the GPU.
const ropeMaxHalf = 256

// RopeTable is rope's table form on the GPU: the table is a kernel
// parameter (by value), so a captured CUDA graph replays with it.
func (g *GPU) RopeTable(t []*tensor.Tensor, freqs []float32) error {
	if err := g.modelKernels(); err != nil {
		return err
	}
	tok, heads, d, err := checkRope(t[0], t[1], t[2])
	if err != nil {
		return err
	}
	if len(freqs) != d/2 || len(freqs) > ropeMaxHalf {
		return fmt.Errorf("%w: rope table of %d inverse frequencies for head_dim %d on the GPU (at most %d)", ErrUnsupported, len(freqs), d, ropeMaxHalf)
	}
	suf, err := kernelSuffix(t[0].DType())
	if err != nil {
		return err
	}
	p, err := g.ptrs([]string{"x", "pos", "out"}, t...)
	if err != nil {
		return err
	}
	n := int64(tok * heads * d / 2)
	if n == 0 {
		return nil
	}
	a := &struct {
		x, pos, out uint64
		t, heads, d int64
		f           [ropeMaxHalf]float32
	}{x: p[0], pos: p[1], out: p[2], t: int64(tok), heads: int64(heads), d: int64(d)}
	copy(a.f[:], freqs)
	err = g.launchGrid("rope_table_"+suf, [3]uint32{blocks(n), 1, 1}, kernelThreads,
		unsafe.Pointer(&a.x), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out), unsafe.Pointer(&a.t), unsafe.Pointer(&a.heads), unsafe.Pointer(&a.d), unsafe.Pointer(&a.f))
	runtime.KeepAlive(a)
	return err
}

// attention is two launches on the worker's stream: the cache append,
// then attention over the cache (ordered by the stream).
func (g *GPU) attention(t []*tensor.Tensor, p []uint64) error {
	dims, err := checkAttention(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
	if err != nil {
		return err
	}
	suf, err := kernelSuffix(t[0].DType())
	if err != nil {
		return err
	}
	if dims.d > attnMaxHeadD {
		return fmt.Errorf("%w: attention head_dim %d on the GPU (at most %d)", ErrUnsupported, dims.d, attnMaxHeadD)
	}
	if dims.t == 0 {
		return nil
	}
	if dims.t > 65535 || dims.maxSeq > math.MaxInt32 {
		return fmt.Errorf("%w: attention of %d tokens (at most 65535) over a cache of %d rows", ErrUnsupported, dims.t, dims.maxSeq)
	}
	ap := &struct {
		k, v, kc, vc, pos uint64
		t, row, seq, tps  int64
	}{p[1], p[2], p[3], p[4], p[5], int64(dims.t), int64(dims.hkv * dims.d), int64(dims.maxSeq), int64(dims.tps())}
	err = g.launchGrid("kv_append_"+suf, [3]uint32{blocks(ap.t * ap.row), 1, 1}, kernelThreads,
		unsafe.Pointer(&ap.k), unsafe.Pointer(&ap.v), unsafe.Pointer(&ap.kc), unsafe.Pointer(&ap.vc), unsafe.Pointer(&ap.pos),
		unsafe.Pointer(&ap.t), unsafe.Pointer(&ap.row), unsafe.Pointer(&ap.seq), unsafe.Pointer(&ap.tps))
	runtime.KeepAlive(ap)
	if err != nil {
		return err
	}
	if ok, err := g.trySplitAttention(dims, t[0].DType(), p); ok || err != nil {
		return err
	}
	a := &struct {
		q, kc, vc, pos, out uint64
		hq, hkv, d, seq     int32
		scale               float32
		tps                 int32
	}{p[0], p[3], p[4], p[5], p[6], int32(dims.hq), int32(dims.hkv), int32(dims.d), int32(dims.maxSeq), float32(1 / math.Sqrt(float64(dims.d))), int32(dims.tps())}
	err = g.launchGrid("attention_"+suf, [3]uint32{uint32(dims.hq), uint32(dims.t), 1}, attnThreads,
		unsafe.Pointer(&a.q), unsafe.Pointer(&a.kc), unsafe.Pointer(&a.vc), unsafe.Pointer(&a.pos), unsafe.Pointer(&a.out),
		unsafe.Pointer(&a.hq), unsafe.Pointer(&a.hkv), unsafe.Pointer(&a.d), unsafe.Pointer(&a.seq), unsafe.Pointer(&a.scale), unsafe.Pointer(&a.tps))
	runtime.KeepAlive(a)
	return err
}

func (g *GPU) silu(t []*tensor.Tensor, p []uint64) error {
	if err := sameFloatLayout("silu", t[0], t[1]); err != nil {
		return err
	}
	suf, err := kernelSuffix(t[0].DType())
	if err != nil {
		return err
	}
	n := t[0].NumElements()
	if n == 0 {
		return nil
	}
	a := &geluArgs{x: p[0], out: p[1], n: n}
	err = g.launch("silu_"+suf, n, []unsafe.Pointer{unsafe.Pointer(&a.x), unsafe.Pointer(&a.out), unsafe.Pointer(&a.n)})
	runtime.KeepAlive(a)
	return err
}

func (g *GPU) mul(t []*tensor.Tensor, p []uint64) error {
	x, y, out := t[0], t[1], t[2]
	if x.DType() != y.DType() || x.DType() != out.DType() {
		return fmt.Errorf("%w: mul dtypes %s, %s -> %s", ErrShape, x.DType(), y.DType(), out.DType())
	}
	bc, err := newBroadcast(x.Shape(), y.Shape(), out.Shape())
	if err != nil {
		return err
	}
	suf, err := kernelSuffix(x.DType())
	if err != nil {
		return err
	}
	if len(bc.shape) > len(bcastArgs{}.shape) {
		return fmt.Errorf("%w: mul of rank %d (at most 8 after merging dims)", ErrUnsupported, len(bc.shape))
	}
	n := out.NumElements()
	if n == 0 {
		return nil
	}
	a := &addArgs{x: p[0], y: p[1], out: p[2], p: bcastArgs{n: n, rank: int32(len(bc.shape))}}
	copy(a.p.shape[:], bc.shape)
	copy(a.p.sx[:], bc.sx)
	copy(a.p.sy[:], bc.sy)
	err = g.launch("mul_"+suf, n, []unsafe.Pointer{unsafe.Pointer(&a.x), unsafe.Pointer(&a.y), unsafe.Pointer(&a.out), unsafe.Pointer(&a.p)})
	runtime.KeepAlive(a)
	return err
}

func (g *GPU) argmax(t []*tensor.Tensor, p []uint64) error {
	rows, n, err := checkArgmax(t[0], t[1])
	if err != nil {
		return err
	}
	suf, err := kernelSuffix(t[0].DType())
	if err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	grid, err := gridRows(rows)
	if err != nil {
		return err
	}
	a := &struct {
		x, out uint64
		n      int64
	}{p[0], p[1], int64(n)}
	err = g.launchGrid("argmax_"+suf, grid, argmaxThreads, unsafe.Pointer(&a.x), unsafe.Pointer(&a.out), unsafe.Pointer(&a.n))
	runtime.KeepAlive(a)
	return err
}

// modelModule is kernels_model.cu.
func modelModule() module {
	var names []string
	for _, k := range modelKernelNames {
		for _, dt := range []string{"f32", "f16", "bf16"} {
			names = append(names, k+"_"+dt)
		}
	}
	return module{"chorus_vm_model.cu", cudasrc.Half + cudasrc.PDL + kernelSource + modelKernelSource, names}
}
