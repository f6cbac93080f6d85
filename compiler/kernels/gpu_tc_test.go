package kernels

import (
	"math"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// poisoned is a host tensor of NaNs (an element the kernel leaves
// unwritten fails the comparison).
func poisoned(t *testing.T, dt tensor.DType, shape ...int64) *tensor.Tensor {
	t.Helper()
	x := tensor.MustNew(dt, tensor.Shape(shape))
	v := make([]float64, x.NumElements())
	for i := range v {
		v[i] = math.NaN()
	}
	if err := tensor.SetFromFloat64(x, v); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestGPUTensorCoreSkinny runs the tensor-core skinny kernels on cuda:0
// (matmul_nt, the q/k/v triple and the gated projection, 5 to 32 rows of
// x: every row bucket, tail tiles, k not a multiple of the 32-element
// chunk, with and without split-K) against the CPU kernels (float32
// accumulation, one rounding), into poisoned outputs, twice: the second
// launch, with the weights marked fixed (copied before the PDL wait),
// must give the same bits (the split counters are back at zero and the
// last block sums the splits in order). The three products share the
// scratch buffers, as a step's do.
func TestGPUTensorCoreSkinny(t *testing.T) {
	g, dev := openTestGPU(t)
	saved, savedRows := tcLimits, gemvMaxRows.Load()
	tcLimits.rows = TCMaxM // every case through the kernels
	gemvMaxRows.Store(GemvMaxM)
	defer func() {
		tcLimits = saved
		gemvMaxRows.Store(savedRows)
	}()
	cases := []struct {
		name    string
		m, n, k int
	}{
		{"m5_tail", 5, 100, 72},
		{"m8_split", 8, 1024, 4096},
		{"m7_split_tail", 7, 1000, 1024},
		{"m12", 12, 1030, 512},
		{"m16_long", 16, 200, 14336},
		{"m32", 32, 4096, 1024},
		{"m27_split_tail", 27, 1000, 4104},
		{"m20_long", 20, 300, 14336},
	}
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		tol := map[tensor.DType]float64{tensor.Float16: 2e-3, tensor.BFloat16: 1.6e-2}[dt]
		for _, c := range cases {
			t.Run(dt.String()+"/"+c.name, func(t *testing.T) {
				if _, ok := planTC(c.m, []int{c.n}, c.k, dt, true, 132, 1, 0); !ok {
					t.Fatal("planTC refuses the case")
				}
				x := randTensor(t, dt, tensor.Shape{int64(c.m), int64(c.k)}, 1)
				w := randTensor(t, dt, tensor.Shape{int64(c.n), int64(c.k)}, 2)
				w2 := randTensor(t, dt, tensor.Shape{int64(c.n), int64(c.k)}, 3)
				w3 := randTensor(t, dt, tensor.Shape{int64(c.n / 2), int64(c.k)}, 4)
				mk := func(n int) *tensor.Tensor { return tensor.MustNew(dt, tensor.Shape{int64(c.m), int64(n)}) }
				// CPU: the product, the gated projection, the triple.
				want, u, act, gated, want3 := mk(c.n), mk(c.n), mk(c.n), mk(c.n), mk(c.n/2)
				for _, err := range []error{CPUMatmulNT(x, w, want), CPUMatmulNT(x, w2, u), CPUSilu(want, act), CPUMul(act, u, gated), CPUMatmulNT(x, w3, want3)} {
					if err != nil {
						t.Fatal(err)
					}
				}
				dx, dw, dw2, dw3 := onGPU(t, dev, x), onGPU(t, dev, w), onGPU(t, dev, w2), onGPU(t, dev, w3)
				var first []float64
				for run := range 2 {
					g.SetFixedWeights(run == 1)
					out := onGPU(t, dev, poisoned(t, dt, int64(c.m), int64(c.n)))
					if err := g.MatmulNT(dx, dw, out); err != nil {
						t.Fatal(err)
					}
					gOut := onGPU(t, dev, poisoned(t, dt, int64(c.m), int64(c.n)))
					scratch := []*tensor.Tensor{onGPU(t, dev, mk(c.n)), onGPU(t, dev, mk(c.n)), onGPU(t, dev, mk(c.n))}
					if ok, err := g.TryGated([]*tensor.Tensor{dx, dw, dw2, scratch[0], scratch[1], scratch[2], gOut}); err != nil || !ok {
						t.Fatalf("gated: ran %v, %v", ok, err)
					}
					o := []*tensor.Tensor{onGPU(t, dev, poisoned(t, dt, int64(c.m), int64(c.n))), onGPU(t, dev, poisoned(t, dt, int64(c.m), int64(c.n))), onGPU(t, dev, poisoned(t, dt, int64(c.m), int64(c.n/2)))}
					if ok, err := g.TryNT3([]*tensor.Tensor{dx, dw, dw2, dw3, o[0], o[1], o[2]}); err != nil || !ok {
						t.Fatalf("nt3: ran %v, %v", ok, err)
					}
					g.SetFixedWeights(false)
					if err := dev.Sync(); err != nil {
						t.Fatal(err)
					}
					for _, r := range []struct {
						name      string
						got, want *tensor.Tensor
					}{{"matmul_nt", out, want}, {"gated", gOut, gated}, {"nt3 q", o[0], want}, {"nt3 k", o[1], u}, {"nt3 v", o[2], want3}} {
						h := fromGPU(t, dev, r.got)
						tl := tol
						if r.name == "gated" {
							// Four roundings (g, u, silu, the product) of sums the
							// tensor cores and the CPU add in other orders: float16,
							// k 14336, 4 ulp at 2.02 (3.9e-3), seen on an H200.
							tl = 2 * tol
						}
						if err := tensor.AllClose(h, r.want, tl, tl); err != nil {
							t.Errorf("run %d: %s vs CPU: %v", run, r.name, err)
						}
						if r.name == "matmul_nt" {
							v := floats(t, h)
							if first == nil {
								first = v
							} else {
								for i := range v {
									if math.Float64bits(v[i]) != math.Float64bits(first[i]) {
										t.Fatalf("second launch differs at %d: %v, first %v", i, v[i], first[i])
									}
								}
							}
						}
					}
				}
			})
		}
	}
}
