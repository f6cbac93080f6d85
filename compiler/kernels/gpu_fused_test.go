package kernels

import (
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// TestGPUSiluMul checks silu_mul on cuda:0 against the CPU silu and mul
// one after the other, with out a tensor of its own and out the gate
// itself (as the decoder's memory plan places it), and that a shape of
// part of a 16-byte piece is left to the caller.
func TestGPUSiluMul(t *testing.T) {
	g, dev := openTestGPU(t)
	const rows, n = 64, 304
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			gt := randTensor(t, dt, tensor.Shape{rows, n}, 21)
			u := randTensor(t, dt, tensor.Shape{rows, n}, 22)
			// gates over silu's whole curve, not only [-1, 1)
			gv := floats(t, gt)
			for i := range gv {
				gv[i] *= 8
			}
			if err := tensor.SetFromFloat64(gt, gv); err != nil {
				t.Fatal(err)
			}
			a, want := tensor.MustNew(dt, tensor.Shape{rows, n}), tensor.MustNew(dt, tensor.Shape{rows, n})
			if err := CPUSilu(gt, a); err != nil {
				t.Fatal(err)
			}
			if err := CPUMul(a, u, want); err != nil {
				t.Fatal(err)
			}
			dg, du := onGPU(t, dev, gt), onGPU(t, dev, u)
			dout := onGPU(t, dev, tensor.MustNew(dt, tensor.Shape{rows, n}))
			if ok, err := g.TrySiluMul(dg, du, dout); err != nil || !ok {
				t.Fatalf("silu_mul: ran %v, %v", ok, err)
			}
			dg2 := onGPU(t, dev, gt)
			if ok, err := g.TrySiluMul(dg2, du, dg2); err != nil || !ok {
				t.Fatalf("silu_mul into the gate: ran %v, %v", ok, err)
			}
			if err := dev.Sync(); err != nil {
				t.Fatal(err)
			}
			for name, got := range map[string]*tensor.Tensor{"out": fromGPU(t, dev, dout), "out = gate": fromGPU(t, dev, dg2)} {
				off, worst := ulpDiffs(t, got, want)
				if worst > 2 || float64(off) > 0.01*rows*n {
					t.Errorf("%s: %d of %d elements differ from silu then mul on the CPU, by up to %d ulp (allowed: 1%%, 2 ulp)", name, off, rows*n, worst)
				}
			}
			odd := onGPU(t, dev, tensor.MustNew(dt, tensor.Shape{3, 5}))
			if ok, err := g.TrySiluMul(odd, odd, odd); ok || err != nil {
				t.Errorf("15 elements: ran %v, %v; want it left to silu and mul", ok, err)
			}
		})
	}
}
