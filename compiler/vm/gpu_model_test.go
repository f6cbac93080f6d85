package vm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// int32_on(shape, lo, hi, seed): uniform int32 values in [lo, hi] on
	// the worker's device.
	registry.MustRegisterTyped("vmtest.int32_on", func(env registry.Env, shape tensor.Shape, lo, hi, seed int64) (*tensor.Tensor, error) {
		h, err := tensor.New(tensor.Int32, shape)
		if err != nil {
			return nil, err
		}
		if err := tensor.RandomRange(h, uint64(seed), float64(lo), float64(hi)+1); err != nil {
			return nil, err
		}
		t, err := env.Alloc(tensor.Int32, shape, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
	// int32_steps_on(shape, lo, hi): n distinct int32 values spread evenly
	// over [lo, hi], in decreasing order (positions of one attention call:
	// two tokens at one position would write one cache row twice, in an
	// order the GPU does not fix).
	registry.MustRegisterTyped("vmtest.int32_steps_on", func(env registry.Env, shape tensor.Shape, lo, hi int64) (*tensor.Tensor, error) {
		n, err := shape.NumElements()
		if err != nil {
			return nil, err
		}
		if n > hi-lo+1 {
			return nil, fmt.Errorf("%d distinct values do not fit in [%d, %d]", n, lo, hi)
		}
		h, err := tensor.New(tensor.Int32, shape)
		if err != nil {
			return nil, err
		}
		step := int64(0)
		if n > 1 {
			step = (hi - lo) / (n - 1)
		}
		b := h.Bytes()
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(hi-i*step)))
		}
		t, err := env.Alloc(tensor.Int32, shape, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
}

// modelInput is a parameter of a model-op test function: floats of the
// case's dtype in [-1, 1), or int32 values in [lo, hi] when ints is set.
type modelInput struct {
	shape    tensor.Shape
	ints     bool
	distinct bool // ints: distinct values (int32_steps_on)
	lo, hi   int64
}

// modelCase is one decoder op as a function of its inputs; results are
// the values compared (outputs, and for attention the caches, which are
// inputs it writes: listed in written).
type modelCase struct {
	name    string
	inputs  []modelInput
	body    func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref
	written []int
}

func floatIn(s ...int64) modelInput { return modelInput{shape: s} }
func intIn(lo, hi int64, s ...int64) modelInput {
	return modelInput{shape: s, ints: true, lo: lo, hi: hi}
}

func modelCases() []modelCase {
	out := func(b *ir.FuncBuilder, dt tensor.DType, s ...int64) ir.Ref {
		return b.AllocTensor("out", s, dt, vdevice.Unconstrained, "")
	}
	attention := func(name string, t, hq, hkv, d, seq, lo, hi int64) modelCase {
		return modelCase{name, []modelInput{floatIn(t, hq, d), floatIn(t, hkv, d), floatIn(t, hkv, d), floatIn(seq, hkv, d), floatIn(seq, hkv, d), modelInput{shape: tensor.Shape{t}, ints: true, distinct: true, lo: lo, hi: hi}},
			func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
				o := out(b, dt, t, hq, d)
				b.Attention(in[0], in[1], in[2], in[3], in[4], in[5], o)
				return []ir.Ref{o}
			}, []int{3, 4}}
	}
	return []modelCase{
		{"embedding", []modelInput{intIn(0, 999, 7), floatIn(1000, 300)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			o := out(b, dt, 7, 300)
			b.Embedding(in[0], in[1], o)
			return []ir.Ref{o}
		}, nil},
		{"rms_norm", []modelInput{floatIn(5, 1000), floatIn(1000)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			o := out(b, dt, 5, 1000)
			b.RMSNorm(in[0], in[1], 1e-5, o)
			return []ir.Ref{o}
		}, nil},
		{"layer_norm", []modelInput{floatIn(3, 77), floatIn(77), floatIn(77)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			o := out(b, dt, 3, 77)
			b.LayerNorm(in[0], in[1], in[2], 1e-5, o)
			return []ir.Ref{o}
		}, nil},
		{"rope", []modelInput{floatIn(4, 3, 64), intIn(0, 4000, 4)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			o := out(b, dt, 4, 3, 64)
			b.Rope(in[0], in[1], 10000, o)
			return []ir.Ref{o}
		}, nil},
		{"rope_table", []modelInput{floatIn(4, 3, 64), intIn(0, 130000, 4)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			o := out(b, dt, 4, 3, 64)
			fs := make([]float32, 32)
			for i := range fs {
				fs[i] = float32(1 / math.Pow(500000, float64(2*i)/64) / float64(1+i%3))
			}
			b.RopeTable(in[0], in[1], fs, o)
			return []ir.Ref{o}
		}, nil},
		attention("attention/prefill", 3, 8, 2, 128, 64, 30, 45),
		attention("attention/decode", 1, 4, 4, 80, 64, 63, 63),
		attention("attention/d16", 2, 6, 3, 16, 8, 0, 7),
		{"silu_mul", []modelInput{floatIn(3, 500), floatIn(3, 500)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			s := out(b, dt, 3, 500)
			b.Silu(in[0], s)
			o := out(b, dt, 3, 500)
			b.Mul(s, in[1], o)
			return []ir.Ref{s, o}
		}, nil},
		// matmul_nt: cuBLAS with op T on b against the CPU's row dot
		// products (b [n, k], nn.Linear's layout), with batch dims and
		// sizes off the CPU kernel's blocks.
		{"matmul_nt", []modelInput{floatIn(2, 3, 130), floatIn(77, 130)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			o := out(b, dt, 2, 3, 77)
			b.MatmulNT(in[0], in[1], o)
			return []ir.Ref{o}
		}, nil},
		{"argmax", []modelInput{floatIn(3, 5000)}, func(b *ir.FuncBuilder, in []ir.Ref, dt tensor.DType) []ir.Ref {
			o := b.AllocTensor("out", tensor.Shape{3}, tensor.Int32, vdevice.Unconstrained, "")
			b.Argmax(in[0], o)
			return []ir.Ref{o}
		}, nil},
	}
}

// runModelCase compiles and runs one case on s's worker 0 (whose device
// is dev) and returns the results and written inputs on the host.
func runModelCase(t *testing.T, ctx context.Context, s *session.Session, dev tensor.Device, c modelCase, dt tensor.DType) []*tensor.Tensor {
	t.Helper()
	b := ir.NewFunc("f")
	var in []ir.Ref
	for i, x := range c.inputs {
		d := dt
		if x.ints {
			d = tensor.Int32
		}
		in = append(in, b.Param(fmt.Sprintf("in%d", i), ir.Tensor(x.shape, d, vdevice.Unconstrained)))
	}
	b.Return(c.body(b, in, dt)...)
	f, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	p, err := vm.Pipeline(dev, "auto")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := p.Run(&ir.Module{Name: "k", Funcs: []*ir.Function{f}}, passes.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := vm.Load(ctx, s, mod)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Release()
	fillOn, intOn := mustFunc(t, s, "vmtest.fill_on"), mustFunc(t, s, "vmtest.int32_on")
	stepsOn := mustFunc(t, s, "vmtest.int32_steps_on")
	var args []any
	for i, x := range c.inputs {
		switch {
		case x.distinct:
			args = append(args, mustCall(t, s, stepsOn, x.shape, x.lo, x.hi))
		case x.ints:
			args = append(args, mustCall(t, s, intOn, x.shape, x.lo, x.hi, int64(100+i)))
		default:
			args = append(args, mustCall(t, s, fillOn, x.shape, dt, int64(100+i)))
		}
	}
	r, err := prog.Call(ctx, "f", args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var refs []*session.DRef
	if len(f.Results) == 1 {
		refs = append(refs, r)
	} else {
		for i := range f.Results {
			ri, err := prog.Result(r, i)
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ri)
		}
	}
	for _, i := range c.written {
		refs = append(refs, args[i].(*session.DRef))
	}
	var got []*tensor.Tensor
	for _, ref := range refs {
		v, err := s.DebugGetFromRemote(ctx, ref, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v.(*tensor.Tensor))
	}
	return got
}

// TestGPUModelKernels runs every decoder op (embedding, rms_norm,
// layer_norm, rope, attention with the cache append, silu, mul,
// matmul_nt, argmax)
// through the NVRTC kernels on cuda:0 and through the CPU kernels on the
// same inputs, in float32, float16 and bfloat16. Both compute in float32
// and round once, so they agree within about one unit in the last place
// of the dtype: rtol = atol = 1e-4 (float32), 2e-3 (float16), 1.6e-2
// (bfloat16); embedding, the cache rows and argmax exactly.
func TestGPUModelKernels(t *testing.T) {
	gpuCount(t)
	ctx := bg(t)
	gs, err := session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: 1, DeviceIDs: []int{0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Shutdown()
	cs, err := session.NewThreaded(session.Options{NumWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Shutdown()
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
		rtol := map[tensor.DType]float64{tensor.Float32: 1e-4, tensor.Float16: 2e-3, tensor.BFloat16: 1.6e-2}[dt]
		for _, c := range modelCases() {
			t.Run(dt.String()+"/"+c.name, func(t *testing.T) {
				gpu := runModelCase(t, ctx, gs, tensor.CUDADevice(0), c, dt)
				cpu := runModelCase(t, ctx, cs, tensor.CPUDevice, c, dt)
				for i := range gpu {
					tol := rtol
					if gpu[i].DType() == tensor.Int32 || c.name == "embedding" || i >= len(gpu)-len(c.written) {
						tol = 0
					}
					if err := tensor.AllClose(gpu[i], cpu[i], tol, tol); err != nil {
						t.Errorf("result %d: GPU vs CPU: %v", i, err)
					}
				}
			})
		}
	}
}

// TestModelOpsOnCPUWorkers runs the GPU test's cases through the VM on a
// CPU worker (Load, device and memory planning, the CPU kernels) in
// float32 and in float64, and compares the two.
func TestModelOpsOnCPUWorkers(t *testing.T) {
	ctx := bg(t)
	cs, err := session.NewThreaded(session.Options{NumWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Shutdown()
	for _, c := range modelCases() {
		t.Run(c.name, func(t *testing.T) {
			f32 := runModelCase(t, ctx, cs, tensor.CPUDevice, c, tensor.Float32)
			f64 := runModelCase(t, ctx, cs, tensor.CPUDevice, c, tensor.Float64)
			for i := range f32 {
				want, err := tensor.ToFloat64(f64[i])
				if err != nil {
					t.Fatal(err)
				}
				if err := tensor.CloseTo(f32[i], want, 1e-4, 1e-4); err != nil {
					t.Errorf("result %d: float32 vs float64: %v", i, err)
				}
			}
		})
	}
}
