package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/tensor"
)

// TestGPUPrefillAttention runs prefill_attn on cuda:0 (float16 and
// bfloat16, head dim 64 and 128, 1, 4 and 8 query heads a kv head, 16,
// 33 and 512 tokens a sequence, batches of 1 and 2, positions from 0 and
// from 100: a second chunk of a prompt) against the CPU attention, into
// poisoned outputs: the kernel itself, on the caches after the CPU's
// append, and the attention op (the GPU's append, then the kernel the
// op picks). In the cases with nan set the last token of sequence 0 has
// a position outside the cache on the GPU: its row must be NaN, the
// others (which never see that token's row) unchanged.
func TestGPUPrefillAttention(t *testing.T) {
	g, dev := openTestGPU(t)
	type pcase struct {
		d, grp, tps, batch, off int
		nan                     bool
	}
	var cases []pcase
	for _, d := range []int{64, 128} {
		for _, grp := range []int{1, 4, 8} {
			for _, tps := range []int{16, 33, 512} {
				for _, batch := range []int{1, 2} {
					for _, off := range []int{0, 100} {
						cases = append(cases, pcase{d, grp, tps, batch, off, tps == 33 && batch == 2 && off == 100})
					}
				}
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		tl := map[tensor.DType]float64{tensor.Float16: 2e-3, tensor.BFloat16: 1.6e-2}[dt]
		for i, c := range cases {
			name := fmt.Sprintf("%s/d%d_g%d_t%d_b%d_off%d", dt, c.d, c.grp, c.tps, c.batch, c.off)
			t.Run(name, func(t *testing.T) {
				hkv := 2
				if c.grp == 8 {
					hkv = 1
				}
				hq, tk := c.grp*hkv, c.tps*c.batch
				// sequence b's tokens sit at off + 3b + i: the sequences of a
				// batch differ in length
				seq := c.off + c.tps + 3*(c.batch-1) + 7
				cache := tensor.Shape{int64(seq), int64(hkv), int64(c.d)}
				if c.batch > 1 {
					cache = append(tensor.Shape{int64(c.batch)}, cache...)
				}
				seed := uint64(10 * i)
				q := randTensor(t, dt, tensor.Shape{int64(tk), int64(hq), int64(c.d)}, seed+1)
				k := randTensor(t, dt, tensor.Shape{int64(tk), int64(hkv), int64(c.d)}, seed+2)
				v := randTensor(t, dt, tensor.Shape{int64(tk), int64(hkv), int64(c.d)}, seed+3)
				kc, vc := randTensor(t, dt, cache, seed+4), randTensor(t, dt, cache, seed+5)
				pos := tensor.MustNew(tensor.Int32, tensor.Shape{int64(tk)})
				pv := make([]float64, tk)
				for j := range pv {
					pv[j] = float64(c.off + 3*(j/c.tps) + j%c.tps)
				}
				if err := tensor.SetFromFloat64(pos, pv); err != nil {
					t.Fatal(err)
				}
				dims, err := checkAttention(q, k, v, kc, vc, pos, q)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := planPrefill(dims, dt, true); !ok {
					t.Fatal("planPrefill refuses the case")
				}
				dpos := pos
				if c.nan {
					bad := tensor.MustNew(tensor.Int32, tensor.Shape{int64(tk)})
					pb := append([]float64(nil), pv...)
					pb[c.tps-1] = -1
					if err := tensor.SetFromFloat64(bad, pb); err != nil {
						t.Fatal(err)
					}
					dpos = bad
				}
				// the op's operands before the CPU's append
				op := []*tensor.Tensor{onGPU(t, dev, q), onGPU(t, dev, k), onGPU(t, dev, v), onGPU(t, dev, kc), onGPU(t, dev, vc),
					onGPU(t, dev, dpos), onGPU(t, dev, poisoned(t, dt, int64(tk), int64(hq), int64(c.d)))}
				want := tensor.MustNew(dt, tensor.Shape{int64(tk), int64(hq), int64(c.d)})
				if err := CPUAttention(q, k, v, kc, vc, pos, want); err != nil {
					t.Fatal(err)
				}
				if c.nan {
					w := floats(t, want)
					for e := range hq * c.d {
						w[(c.tps-1)*hq*c.d+e] = math.NaN()
					}
					if err := tensor.SetFromFloat64(want, w); err != nil {
						t.Fatal(err)
					}
				}
				// the kernel on the appended caches
				direct := []*tensor.Tensor{op[0], op[1], op[2], onGPU(t, dev, kc), onGPU(t, dev, vc), op[5],
					onGPU(t, dev, poisoned(t, dt, int64(tk), int64(hq), int64(c.d)))}
				p, err := g.ptrs([]string{"q", "k", "v", "k_cache", "v_cache", "pos", "out"}, direct...)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := g.tryPrefillAttention(dims, dt, p); err != nil || !ok {
					t.Fatalf("prefill kernel: ran %v, %v", ok, err)
				}
				if err := g.Model(ir.OpAttention, 0, op); err != nil {
					t.Fatal(err)
				}
				if err := dev.Sync(); err != nil {
					t.Fatal(err)
				}
				for _, r := range []struct {
					what string
					out  *tensor.Tensor
				}{{"prefill_attn", direct[6]}, {"attention op", op[6]}} {
					got := fromGPU(t, dev, r.out)
					if err := tensor.AllClose(got, want, tl, tl); err != nil {
						gv, wv := floats(t, got), floats(t, want)
						bad := map[string]int{}
						for e := range gv {
							if d := math.Abs(gv[e] - wv[e]); !(d <= tl+tl*math.Abs(wv[e])) && !(math.IsNaN(gv[e]) && math.IsNaN(wv[e])) {
								bad[fmt.Sprintf("token %% 16 = %d, head %d", e/(hq*c.d)%16, e/c.d%hq)]++
							}
						}
						t.Errorf("%s vs CPU: %v; mismatches by token and head: %v", r.what, err, bad)
					}
				}
			})
		}
	}
}

// BenchmarkGPUPrefillAttention times the attention half of the op (the
// caches already appended) for a Llama-3-8B prompt (bfloat16, 32 query
// heads over 8 kv heads, head dim 128, a cache of 4096 rows) of 512
// tokens from position 0 and from 512 (a second chunk), through the
// prefill kernel and, as the same run's anchor, the split-KV kernels.
// Run it with -test.bench GPUPrefill on a GPU machine.
func BenchmarkGPUPrefillAttention(b *testing.B) {
	g, dev := openTestGPU(b)
	const tk, hq, hkv, d, seq = 512, 32, 8, 128, 4096
	dt := tensor.BFloat16
	mk := func(shape tensor.Shape, fill func(*tensor.Tensor) error) *tensor.Tensor {
		h := tensor.MustNew(dt, shape)
		if shape.Equal(tensor.Shape{tk}) {
			h = tensor.MustNew(tensor.Int32, shape)
		}
		if err := fill(h); err != nil {
			b.Fatal(err)
		}
		return onGPU(b, dev, h)
	}
	random := func(seed uint64) func(*tensor.Tensor) error {
		return func(x *tensor.Tensor) error { return tensor.RandomRange(x, seed, -2, 2) }
	}
	q := mk(tensor.Shape{tk, hq, d}, random(1))
	kv := mk(tensor.Shape{tk, hkv, d}, random(2))
	kc, vc := mk(tensor.Shape{seq, hkv, d}, random(3)), mk(tensor.Shape{seq, hkv, d}, random(4))
	out := mk(tensor.Shape{tk, hq, d}, random(5))
	for _, off := range []int{0, 512} {
		pos := mk(tensor.Shape{tk}, func(x *tensor.Tensor) error {
			v := make([]float64, tk)
			for i := range v {
				v[i] = float64(off + i)
			}
			return tensor.SetFromFloat64(x, v)
		})
		ts := []*tensor.Tensor{q, kv, kv, kc, vc, pos, out}
		dims, err := checkAttention(ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6])
		if err != nil {
			b.Fatal(err)
		}
		p, err := g.ptrs([]string{"q", "k", "v", "k_cache", "v_cache", "pos", "out"}, ts...)
		if err != nil {
			b.Fatal(err)
		}
		for _, path := range []string{"split", "prefill"} {
			b.Run(fmt.Sprintf("%s/pos%d", path, off), func(b *testing.B) {
				saved := prefillMin
				if path == "split" {
					prefillMin = math.MaxInt
				}
				defer func() { prefillMin = saved }()
				run := func() {
					if ok, err := g.trySplitAttention(dims, dt, p); err != nil || !ok {
						b.Fatalf("ran %v, %v", ok, err)
					}
				}
				run()
				if err := dev.Sync(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					run()
				}
				if err := dev.Sync(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
