package vm_test

import (
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/registry"
	"github.com/chorus-rt/chorus/session"
	"github.com/chorus-rt/chorus/tensor"
	"github.com/chorus-rt/chorus/worker"
)

func init() {
	// fill_on(shape, dtype, seed): uniform [-1, 1) values of dtype on the
	// worker's device (the same values on every worker).
	registry.MustRegisterTyped("vmtest.fill_on", func(env registry.Env, shape tensor.Shape, dt tensor.DType, seed int64) (*tensor.Tensor, error) {
		h, err := tensor.New(dt, shape)
		if err != nil {
			return nil, err
		}
		if err := tensor.RandomRange(h, uint64(seed), -1, 1); err != nil {
			return nil, err
		}
		t, err := env.Alloc(dt, shape, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, worker.FromHost(env, t, h)
	})
}

// gpuCount is the number of GPUs, or skips the test.
func gpuCount(t *testing.T) int {
	d, err := cuda.Load()
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		t.Skipf("cuInit: %v", err)
	}
	n, err := d.DeviceCount()
	if err != nil || n < 1 {
		t.Skipf("no GPU: %d, %v", n, err)
	}
	return n
}

// TestGPUKernels runs y = gelu(x·w + b) through cuBLAS and the NVRTC
// kernels on cuda:0 in float32, float16 and bfloat16, against a float64
// reference of the same inputs.
func TestGPUKernels(t *testing.T) {
	gpuCount(t)
	ctx := bg(t)
	s, err := session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: 1, DeviceIDs: []int{0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	fillOn := mustFunc(t, s, "vmtest.fill_on")
	cuda0, _ := vdevice.New(vdevice.CUDA, 0, nil, "")
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			const m, k, n = 5, 70, 33
			b := ir.NewFunc("f")
			x := b.Param("x", ir.Tensor(tensor.Shape{m, k}, dt, cuda0))
			w := b.Param("w", ir.Tensor(tensor.Shape{k, n}, dt, cuda0))
			bias := b.Param("b", ir.Tensor(tensor.Shape{n}, dt, cuda0))
			h := b.AllocTensor("h", tensor.Shape{m, n}, dt, vdevice.Unconstrained, "")
			b.Matmul(x, w, h)
			hb := b.AllocTensor("hb", tensor.Shape{m, n}, dt, vdevice.Unconstrained, "")
			b.Add(h, bias, hb)
			y := b.AllocTensor("y", tensor.Shape{m, n}, dt, vdevice.Unconstrained, "")
			b.Gelu(hb, y)
			b.Return(y)
			f, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			p, err := vm.Pipeline(tensor.CUDADevice(0), "auto")
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
			xs := mustCall(t, s, fillOn, tensor.Shape{m, k}, dt, int64(1))
			ws := mustCall(t, s, fillOn, tensor.Shape{k, n}, dt, int64(2))
			bs := mustCall(t, s, fillOn, tensor.Shape{n}, dt, int64(3))
			r, err := prog.Call(ctx, "f", xs, ws, bs)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := s.DebugGetFromRemote(ctx, r, 0)
			if err != nil {
				t.Fatal(err)
			}
			in := func(shape tensor.Shape, seed uint64) []float64 {
				h := tensor.MustNew(dt, shape)
				if err := tensor.RandomRange(h, seed, -1, 1); err != nil {
					t.Fatal(err)
				}
				v, _ := tensor.ToFloat64(h)
				return v
			}
			xf, wf, bf := in(tensor.Shape{m, k}, 1), in(tensor.Shape{k, n}, 2), in(tensor.Shape{n}, 3)
			want := make([]float64, m*n)
			for i := range m {
				for j := range n {
					acc := 0.0
					for p := range k {
						acc += xf[i*k+p] * wf[p*n+j]
					}
					// The kernels round h and hb to dt, as the VM's stores do.
					want[i*n+j] = vm.Gelu(round(dt, round(dt, acc)+bf[j]))
				}
			}
			rtol, atol := 1e-4, 1e-4
			if dt != tensor.Float32 {
				rtol, atol = 2e-2, 2e-2
			}
			if err := tensor.CloseTo(got.(*tensor.Tensor), want, rtol, atol); err != nil {
				t.Error(fmt.Errorf("%s: %w", dt, err))
			}
		})
	}
}

// round rounds v to dt's precision.
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
