package kernels

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// Float64 references of the decoder ops, written plainly (index by index)
// and independently of the kernels' code.

func refRMSNorm(x, w []float64, h int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/h; r++ {
		ss := 0.0
		for j := range h {
			ss += x[r*h+j] * x[r*h+j]
		}
		for j := range h {
			out[r*h+j] = x[r*h+j] / math.Sqrt(ss/float64(h)+eps) * w[j]
		}
	}
	return out
}

func refLayerNorm(x, w, b []float64, h int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/h; r++ {
		mean, v := 0.0, 0.0
		for j := range h {
			mean += x[r*h+j]
		}
		mean /= float64(h)
		for j := range h {
			v += (x[r*h+j] - mean) * (x[r*h+j] - mean)
		}
		v /= float64(h)
		for j := range h {
			out[r*h+j] = (x[r*h+j]-mean)/math.Sqrt(v+eps)*w[j] + b[j]
		}
	}
	return out
}

func refRope(x []float64, pos []int32, heads, d int, theta float64) []float64 {
	out := make([]float64, len(x))
	for t, p := range pos {
		for h := range heads {
			base := (t*heads + h) * d
			for i := range d / 2 {
				ang := float64(p) / math.Pow(theta, float64(2*i)/float64(d))
				x1, x2 := x[base+i], x[base+i+d/2]
				out[base+i] = x1*math.Cos(ang) - x2*math.Sin(ang)
				out[base+i+d/2] = x2*math.Cos(ang) + x1*math.Sin(ang)
			}
		}
	}
	return out
}

// refAttention returns out and the caches after the append.
func refAttention(q, k, v, kc, vc []float64, pos []int32, hq, hkv, d int) (out, kc2, vc2 []float64) {
	kc2, vc2 = append([]float64(nil), kc...), append([]float64(nil), vc...)
	row := hkv * d
	for t, p := range pos {
		copy(kc2[int(p)*row:], k[t*row:(t+1)*row])
		copy(vc2[int(p)*row:], v[t*row:(t+1)*row])
	}
	out = make([]float64, len(q))
	for t, p := range pos {
		for h := range hq {
			kh := h * hkv / hq
			s := make([]float64, p+1)
			m := math.Inf(-1)
			for j := range s {
				for i := range d {
					s[j] += q[(t*hq+h)*d+i] * kc2[(j*hkv+kh)*d+i]
				}
				s[j] /= math.Sqrt(float64(d))
				m = math.Max(m, s[j])
			}
			sum := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			for j := range s {
				for i := range d {
					out[(t*hq+h)*d+i] += s[j] / sum * vc2[(j*hkv+kh)*d+i]
				}
			}
		}
	}
	return out, kc2, vc2
}

func int32Tensor(t *testing.T, shape tensor.Shape, vals ...int32) *tensor.Tensor {
	t.Helper()
	x := tensor.MustNew(tensor.Int32, shape)
	d, _ := tensor.Data[int32](x)
	copy(d, vals)
	return x
}

func checkClose(t *testing.T, what string, got *tensor.Tensor, want []float64, rtol, atol float64) {
	t.Helper()
	if err := tensor.CloseTo(got, want, rtol, atol); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

var modelDTypes = []tensor.DType{tensor.Float64, tensor.Float32, tensor.Float16, tensor.BFloat16}

func TestCPUNorms(t *testing.T) {
	for _, dt := range modelDTypes {
		for _, shape := range []tensor.Shape{{1, 8}, {3, 40}, {2, 3, 17}} {
			t.Run(dt.String()+shape.String(), func(t *testing.T) {
				h := int(shape[len(shape)-1])
				x := randTensor(t, dt, shape, 1)
				w := randTensor(t, dt, tensor.Shape{int64(h)}, 2)
				b := randTensor(t, dt, tensor.Shape{int64(h)}, 3)
				out := tensor.MustNew(dt, shape)
				rtol, atol := tol(dt, h)
				if err := CPURMSNorm(x, w, 1e-5, out); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "rms_norm", out, refRMSNorm(floats(t, x), floats(t, w), h, 1e-5), rtol, atol)
				if err := CPULayerNorm(x, w, b, 1e-3, out); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "layer_norm", out, refLayerNorm(floats(t, x), floats(t, w), floats(t, b), h, 1e-3), rtol, atol)
			})
		}
	}
}

func TestCPURope(t *testing.T) {
	for _, dt := range modelDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			const tok, heads, d = 3, 2, 16
			x := randTensor(t, dt, tensor.Shape{tok, heads, d}, 4)
			pos := int32Tensor(t, tensor.Shape{tok}, 0, 7, 1000)
			out := tensor.MustNew(dt, x.Shape())
			if err := CPURope(x, pos, 10000, out); err != nil {
				t.Fatal(err)
			}
			rtol, atol := tol(dt, 2)
			checkClose(t, "rope", out, refRope(floats(t, x), []int32{0, 7, 1000}, heads, d, 10000), rtol, atol)
			// Position 0 is the identity.
			x0, _ := tensor.ToFloat64(x)
			o0, _ := tensor.ToFloat64(out)
			for i := range heads * d {
				if x0[i] != o0[i] {
					t.Fatalf("rope at position 0 changed element %d: %v -> %v", i, x0[i], o0[i])
				}
			}
		})
	}
}

// TestCPURopeTable: the table form against a float64 rotation by
// float32(pos)·f_i (the angle rounded to float32, as Hugging Face computes
// it); a table of theta^(-2i/d) gives the theta form's result within the
// float32 angle's rounding; a wrong table length is an error.
func TestCPURopeTable(t *testing.T) {
	const tok, heads, d = 3, 2, 16
	positions := []int32{0, 7, 70000}
	freqs := make([]float32, d/2)
	for i := range freqs {
		freqs[i] = float32(1 / math.Pow(10000, float64(2*i)/d) / float64(1+i%2))
	}
	for _, dt := range modelDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			x := randTensor(t, dt, tensor.Shape{tok, heads, d}, 4)
			pos := int32Tensor(t, tensor.Shape{tok}, positions...)
			out := tensor.MustNew(dt, x.Shape())
			if err := CPURopeTable(x, pos, freqs, out); err != nil {
				t.Fatal(err)
			}
			xs := floats(t, x)
			want := make([]float64, len(xs))
			for ti, p := range positions {
				for h := range heads {
					base := (ti*heads + h) * d
					for i := range d / 2 {
						ang := float64(float32(p) * freqs[i])
						x1, x2 := xs[base+i], xs[base+i+d/2]
						want[base+i] = x1*math.Cos(ang) - x2*math.Sin(ang)
						want[base+i+d/2] = x2*math.Cos(ang) + x1*math.Sin(ang)
					}
				}
			}
			rtol, atol := tol(dt, 2)
			checkClose(t, "rope table", out, want, rtol, atol)
		})
	}
	t.Run("theta table", func(t *testing.T) {
		x := randTensor(t, tensor.Float64, tensor.Shape{tok, heads, d}, 5)
		pos := int32Tensor(t, tensor.Shape{tok}, 0, 7, 100)
		tab := make([]float32, d/2)
		for i := range tab {
			tab[i] = float32(math.Pow(10000, -2*float64(i)/d))
		}
		a, b := tensor.MustNew(tensor.Float64, x.Shape()), tensor.MustNew(tensor.Float64, x.Shape())
		if err := CPURopeTable(x, pos, tab, a); err != nil {
			t.Fatal(err)
		}
		if err := CPURope(x, pos, 10000, b); err != nil {
			t.Fatal(err)
		}
		// float32 angles of up to 100 rad: about 1e-5 apart at most.
		checkClose(t, "rope table vs theta", a, floats(t, b), 0, 2e-5)
	})
	x := randTensor(t, tensor.Float32, tensor.Shape{1, 1, d}, 6)
	if err := CPURopeTable(x, int32Tensor(t, tensor.Shape{1}, 1), freqs[:3], tensor.MustNew(tensor.Float32, x.Shape())); !errors.Is(err, ErrShape) {
		t.Errorf("short table: %v, want ErrShape", err)
	}
	if err := CPURopeTable(x, int32Tensor(t, tensor.Shape{1}, -1), freqs, tensor.MustNew(tensor.Float32, x.Shape())); !errors.Is(err, ErrShape) {
		t.Errorf("negative position: %v, want ErrShape", err)
	}
}

// TestCPUAttention: a prefill of 3 tokens then a decode step, grouped
// heads (4 query heads over 2 kv heads), against the reference; the
// caches hold exactly the appended rows.
func TestCPUAttention(t *testing.T) {
	for _, dt := range modelDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			const hq, hkv, d, seq = 4, 2, 8, 6
			kc := tensor.MustNew(dt, tensor.Shape{seq, hkv, d})
			vc := tensor.MustNew(dt, tensor.Shape{seq, hkv, d})
			kcRef, vcRef := make([]float64, seq*hkv*d), make([]float64, seq*hkv*d)
			rtol, atol := tol(dt, d)
			rtol, atol = 2*rtol, 2*atol // softmax, then a weighted sum
			for step, pos := range [][]int32{{0, 1, 2}, {3}, {4}} {
				n := int64(len(pos))
				q := randTensor(t, dt, tensor.Shape{n, hq, d}, uint64(10+step))
				k := randTensor(t, dt, tensor.Shape{n, hkv, d}, uint64(20+step))
				v := randTensor(t, dt, tensor.Shape{n, hkv, d}, uint64(30+step))
				out := tensor.MustNew(dt, tensor.Shape{n, hq, d})
				if err := CPUAttention(q, k, v, kc, vc, int32Tensor(t, tensor.Shape{n}, pos...), out); err != nil {
					t.Fatal(err)
				}
				var want []float64
				want, kcRef, vcRef = refAttention(floats(t, q), floats(t, k), floats(t, v), kcRef, vcRef, pos, hq, hkv, d)
				checkClose(t, "attention", out, want, rtol, atol)
				checkClose(t, "k cache", kc, kcRef, 0, 0)
				checkClose(t, "v cache", vc, vcRef, 0, 0)
			}
			// A position past the cache is an error and writes nothing.
			q := randTensor(t, dt, tensor.Shape{1, hq, d}, 1)
			k := randTensor(t, dt, tensor.Shape{1, hkv, d}, 1)
			before := floats(t, kc)
			err := CPUAttention(q, k, k, kc, vc, int32Tensor(t, tensor.Shape{1}, seq), tensor.MustNew(dt, q.Shape()))
			if !errors.Is(err, ErrShape) {
				t.Errorf("position %d of a %d-row cache: %v", seq, seq, err)
			}
			checkClose(t, "k cache after a refused call", kc, before, 0, 0)
		})
	}
}

func TestCPUElementwiseModelOps(t *testing.T) {
	for _, dt := range modelDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			x := randTensor(t, dt, tensor.Shape{3, 5}, 5)
			y := randTensor(t, dt, tensor.Shape{5}, 6)
			out := tensor.MustNew(dt, x.Shape())
			rtol, atol := tol(dt, 1)
			xs, ys := floats(t, x), floats(t, y)
			if err := CPUSilu(x, out); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, len(xs))
			for i, v := range xs {
				want[i] = v / (1 + math.Exp(-v))
			}
			checkClose(t, "silu", out, want, rtol, atol)
			if err := CPUMul(x, y, out); err != nil {
				t.Fatal(err)
			}
			for i, v := range xs {
				want[i] = v * ys[i%5]
			}
			checkClose(t, "mul", out, want, rtol, atol)
		})
	}
}

func TestCPUEmbeddingArgmax(t *testing.T) {
	for _, dt := range modelDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			table := randTensor(t, dt, tensor.Shape{7, 4}, 8)
			ids := int32Tensor(t, tensor.Shape{2, 2}, 6, 0, 3, 6)
			out := tensor.MustNew(dt, tensor.Shape{2, 2, 4})
			if err := CPUEmbedding(ids, table, out); err != nil {
				t.Fatal(err)
			}
			tv := floats(t, table)
			var want []float64
			for _, id := range []int{6, 0, 3, 6} {
				want = append(want, tv[id*4:id*4+4]...)
			}
			checkClose(t, "embedding", out, want, 0, 0)
			bad := int32Tensor(t, tensor.Shape{2, 2}, 6, 7, 0, 0)
			if err := CPUEmbedding(bad, table, out); !errors.Is(err, ErrShape) {
				t.Errorf("id 7 of a 7-row table: %v", err)
			}

			// argmax: ties go to the first index; NaN never wins.
			x := tensor.MustNew(dt, tensor.Shape{4, 3})
			nan := math.NaN()
			if err := tensor.SetFromFloat64(x, []float64{1, 3, 3, nan, -1, -2, -5, nan, -4, nan, nan, nan}); err != nil {
				t.Fatal(err)
			}
			am := tensor.MustNew(tensor.Int32, tensor.Shape{4})
			if err := CPUArgmax(x, am); err != nil {
				t.Fatal(err)
			}
			checkClose(t, "argmax", am, []float64{1, 1, 2, 0}, 0, 0)
		})
	}
}

func TestCPUModelKernelErrors(t *testing.T) {
	f32 := func(s ...int64) *tensor.Tensor { return tensor.MustNew(tensor.Float32, s) }
	i32 := func(s ...int64) *tensor.Tensor { return tensor.MustNew(tensor.Int32, s) }
	for name, err := range map[string]error{
		"rms_norm weight size":  CPURMSNorm(f32(2, 4), f32(3), 1e-5, f32(2, 4)),
		"layer_norm out shape":  CPULayerNorm(f32(2, 4), f32(4), f32(4), 1e-5, f32(4, 2)),
		"rope odd head dim":     CPURope(f32(1, 1, 3), i32(1), 1e4, f32(1, 1, 3)),
		"rope float positions":  CPURope(f32(1, 1, 4), f32(1), 1e4, f32(1, 1, 4)),
		"rope negative pos":     CPURope(f32(1, 1, 4), int32Tensor(t, tensor.Shape{1}, -1), 1e4, f32(1, 1, 4)),
		"attention heads":       CPUAttention(f32(1, 3, 4), f32(1, 2, 4), f32(1, 2, 4), f32(4, 2, 4), f32(4, 2, 4), i32(1), f32(1, 3, 4)),
		"attention cache width": CPUAttention(f32(1, 2, 4), f32(1, 2, 4), f32(1, 2, 4), f32(4, 1, 4), f32(4, 1, 4), i32(1), f32(1, 2, 4)),
		"argmax out dtype":      CPUArgmax(f32(2, 3), f32(2)),
		"embedding float ids":   CPUEmbedding(f32(2), f32(3, 4), f32(2, 4)),
		"mul dtypes":            CPUMul(f32(2), i32(2), f32(2)),
	} {
		if !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v, want ErrShape", name, err)
		}
	}
}

// TestRMSNormRounding pins the half-precision rounding of rms_norm to
// transformers' LlamaRMSNorm (Qwen2's and Mistral's are the same code):
// the row is normalized in float32, cast to the input dtype, then
// multiplied by the weight (`weight * hidden_states.to(input_dtype)`),
// the product rounded again. Each row is one where rounding once, after
// the weight, gives other values (old): the old rounding fails it. float32
// rounds nowhere in between, so its rows are the plain product.
func TestRMSNormRounding(t *testing.T) {
	cases := []struct {
		dt              tensor.DType
		x, w, want, old []float64
	}{
		{tensor.Float16,
			[]float64{-1.6826171875, 0.49462890625, 1.3720703125, -0.01406097412109375},
			[]float64{1.1982421875, 0.76904296875, 1.076171875, 0.990234375},
			[]float64{-1.8115234375, 0.341796875, 1.326171875, -0.01250457763671875},
			[]float64{-1.810546875, 0.341552734375, 1.326171875, -0.01250457763671875}},
		{tensor.Float16,
			[]float64{0.546875, 0.325439453125, 0.465576171875, -0.90283203125},
			[]float64{1.4580078125, 0.86474609375, 1.142578125, 0.78271484375},
			[]float64{1.3310546875, 0.469482421875, 0.8876953125, -1.1796875},
			[]float64{1.330078125, 0.469482421875, 0.8876953125, -1.1787109375}},
		{tensor.Float16,
			[]float64{-0.62939453125, 1.025390625, 0.61083984375, 1.3818359375},
			[]float64{0.7109375, 1.0673828125, 0.92138671875, 0.9287109375},
			[]float64{-0.46337890625, 1.1328125, 0.58251953125, 1.3291015625},
			[]float64{-0.46337890625, 1.1337890625, 0.5830078125, 1.3291015625}},
		{tensor.BFloat16,
			[]float64{0.59765625, -0.384765625, 1.28125, 0.5078125},
			[]float64{1.3125, 0.94140625, 0.80078125, 1.1953125},
			[]float64{1.0078125, -0.466796875, 1.328125, 0.78515625},
			[]float64{1.0078125, -0.466796875, 1.3203125, 0.78125}},
		{tensor.BFloat16,
			[]float64{-0.61328125, -0.380859375, -1.3828125, -0.4375},
			[]float64{0.98046875, 1.015625, 0.81640625, 0.921875},
			[]float64{-0.7421875, -0.478515625, -1.3984375, -0.49609375},
			[]float64{-0.7421875, -0.4765625, -1.390625, -0.498046875}},
		{tensor.BFloat16,
			[]float64{0.12451171875, 0.89453125, -1.46875, -0.5703125},
			[]float64{0.6796875, 0.87109375, 0.79296875, 0.75},
			[]float64{0.0927734375, 0.859375, -1.28125, -0.47265625},
			[]float64{0.09326171875, 0.859375, -1.28125, -0.470703125}},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s/%d", c.dt, i), func(t *testing.T) {
			if slices.Equal(c.want, c.old) {
				t.Fatal("the case does not tell the two roundings apart")
			}
			h := int64(len(c.x))
			x, w, out := tensor.MustNew(c.dt, tensor.Shape{1, h}), tensor.MustNew(c.dt, tensor.Shape{h}), tensor.MustNew(c.dt, tensor.Shape{1, h})
			for _, p := range []struct {
				t *tensor.Tensor
				v []float64
			}{{x, c.x}, {w, c.w}} {
				if err := tensor.SetFromFloat64(p.t, p.v); err != nil {
					t.Fatal(err)
				}
				if got := floats(t, p.t); !slices.Equal(got, p.v) {
					t.Fatalf("inputs %v are not %s values (%v)", p.v, c.dt, got)
				}
			}
			if err := CPURMSNorm(x, w, 1e-6, out); err != nil {
				t.Fatal(err)
			}
			if got := floats(t, out); !slices.Equal(got, c.want) {
				t.Errorf("rms_norm = %v, want %v (rounding once after the weight gives %v)", got, c.want, c.old)
			}
		})
	}
	// float32: no rounding between the normalization and the weight.
	x, w, out := tensor.MustNew(tensor.Float32, tensor.Shape{1, 4}), tensor.MustNew(tensor.Float32, tensor.Shape{4}), tensor.MustNew(tensor.Float32, tensor.Shape{1, 4})
	xs, ws := []float32{0.3, -1.7, 2.2, 0.01}, []float32{1.1, 0.9, 1.3, 0.7}
	if err := tensor.SetFromFloat64(x, []float64{0.3, -1.7, 2.2, 0.01}); err != nil {
		t.Fatal(err)
	}
	if err := tensor.SetFromFloat64(w, []float64{1.1, 0.9, 1.3, 0.7}); err != nil {
		t.Fatal(err)
	}
	if err := CPURMSNorm(x, w, 1e-6, out); err != nil {
		t.Fatal(err)
	}
	var ss float32
	for _, v := range xs {
		ss += v * v
	}
	inv := float32(1 / math.Sqrt(float64(ss)/4+1e-6))
	got, _ := tensor.Data[float32](out)
	for j := range xs {
		if want := xs[j] * inv * ws[j]; got[j] != want {
			t.Errorf("float32 element %d = %v, want %v", j, got[j], want)
		}
	}
}
