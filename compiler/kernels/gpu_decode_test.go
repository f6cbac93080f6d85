package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/tensor"
)

// TestGPUDecodeAttention runs dec_attn and dec_attn_rope on cuda:0
// (float16 and bfloat16, head dims 64 and 128, 1, 4, 8 and 16 query
// heads a kv head, batches of 1, 3 and 8, positions near the end of the
// cache, short contexts in a long cache, the first row) against the CPU
// (rope_table of q and k, then the attention with its append), into
// poisoned outputs: dec_attn on the caches after the CPU's append and
// through the attention op (the GPU's append first), dec_attn_rope
// through TryRopeAttention with the caches compared too. In the cases
// with nan set, sequence 1 has position -1 and sequence 2 a position
// past the cache on the GPU: their rows must be NaN and their caches
// untouched, the other sequences unchanged. Each case runs without and
// with SetFixedWeights's promise (the kernels read pos and the cache
// rows before each position before their PDL wait, row pos after it),
// and with the promise and every split plan merged by its last blocks
// (decodeFuseSplits past any plan's splits; several rounds of DEC_TAIL
// where a plan has more); and that the kernels' shared-memory carveout
// preference was set (decodeCarveouts).
func TestGPUDecodeAttention(t *testing.T) {
	g, dev := openTestGPU(t)
	type dcase struct {
		d, grp, batch, seq int
		short, nan         bool
	}
	var cases []dcase
	for _, d := range []int{64, 128} {
		for _, grp := range []int{1, 4, 8, 16} {
			for _, batch := range []int{1, 3, 8} {
				for _, short := range []bool{false, true} {
					seq := 700
					if d == 128 && grp == 4 && batch != 3 {
						seq = 4133 // Llama-3-8B's kv heads over a long cache
					}
					cases = append(cases, dcase{d, grp, batch, seq, short, batch == 3 && short})
				}
			}
		}
	}
	freqsOf := func(d int) []float32 {
		f := make([]float32, d/2)
		for i := range f {
			f[i] = float32(math.Pow(500000, -2*float64(i)/float64(d)))
		}
		return f
	}
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		tl := map[tensor.DType]float64{tensor.Float16: 2e-3, tensor.BFloat16: 1.6e-2}[dt]
		for i, c := range cases {
			name := fmt.Sprintf("%s/d%d_g%d_b%d_seq%d_short%v", dt, c.d, c.grp, c.batch, c.seq, c.short)
			t.Run(name, func(t *testing.T) {
				defer func(v int) { decodeFuseSplits = v }(decodeFuseSplits)
				hkv := 2
				if c.grp == 16 {
					hkv = 1
				}
				hq, tk := c.grp*hkv, c.batch
				cache := tensor.Shape{int64(c.seq), int64(hkv), int64(c.d)}
				if c.batch > 1 {
					cache = append(tensor.Shape{int64(c.batch)}, cache...)
				}
				seed := uint64(100 * i)
				q := randTensor(t, dt, tensor.Shape{int64(tk), int64(hq), int64(c.d)}, seed+1)
				k := randTensor(t, dt, tensor.Shape{int64(tk), int64(hkv), int64(c.d)}, seed+2)
				v := randTensor(t, dt, tensor.Shape{int64(tk), int64(hkv), int64(c.d)}, seed+3)
				kc0, vc0 := randTensor(t, dt, cache, seed+4), randTensor(t, dt, cache, seed+5)
				pv := make([]float64, tk)
				for b := range pv {
					pv[b] = float64(c.seq - 1 - 37*b) // long contexts, each its own length
					if c.short {
						pv[b] = float64(3 * b) // sequence 0 at the first row
					}
				}
				pos := tensor.MustNew(tensor.Int32, tensor.Shape{int64(tk)})
				if err := tensor.SetFromFloat64(pos, pv); err != nil {
					t.Fatal(err)
				}
				gpos := pos
				if c.nan {
					pb := append([]float64(nil), pv...)
					pb[1], pb[2] = -1, float64(c.seq)
					gpos = tensor.MustNew(tensor.Int32, tensor.Shape{int64(tk)})
					if err := tensor.SetFromFloat64(gpos, pb); err != nil {
						t.Fatal(err)
					}
				}
				dims, err := checkAttention(q, k, v, kc0, vc0, pos, q)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := planDecode(dims, dt, true, 132); !ok {
					t.Fatal("planDecode refuses the case")
				}
				// the CPU: the plain attention (its append included), and
				// rope of q and k before it
				clone := func(x *tensor.Tensor) *tensor.Tensor {
					y := tensor.MustNew(x.DType(), x.Shape())
					copy(y.Bytes(), x.Bytes())
					return y
				}
				kc, vc := clone(kc0), clone(vc0)
				want := tensor.MustNew(dt, tensor.Shape{int64(tk), int64(hq), int64(c.d)})
				if err := CPUAttention(q, k, v, kc, vc, pos, want); err != nil {
					t.Fatal(err)
				}
				freqs := freqsOf(c.d)
				qr, kr := tensor.MustNew(dt, q.Shape()), tensor.MustNew(dt, k.Shape())
				if err := CPURopeTable(q, pos, freqs, qr); err != nil {
					t.Fatal(err)
				}
				if err := CPURopeTable(k, pos, freqs, kr); err != nil {
					t.Fatal(err)
				}
				rkc, rvc := clone(kc0), clone(vc0)
				rwant := tensor.MustNew(dt, tensor.Shape{int64(tk), int64(hq), int64(c.d)})
				if err := CPUAttention(qr, kr, v, rkc, rvc, pos, rwant); err != nil {
					t.Fatal(err)
				}
				// NaN sequences: NaN rows, caches as they were
				if c.nan {
					row := hkv * c.d
					for _, x := range []struct{ out, kc, vc *tensor.Tensor }{{want, kc, vc}, {rwant, rkc, rvc}} {
						w := floats(t, x.out)
						for _, b := range []int{1, 2} {
							for e := range hq * c.d {
								w[b*hq*c.d+e] = math.NaN()
							}
						}
						if err := tensor.SetFromFloat64(x.out, w); err != nil {
							t.Fatal(err)
						}
						for _, y := range [][2]*tensor.Tensor{{x.kc, kc0}, {x.vc, vc0}} {
							cv, ov := floats(t, y[0]), floats(t, y[1])
							for _, b := range []int{1, 2} {
								at := (b*c.seq + int(pv[b])) * row
								copy(cv[at:at+row], ov[at:at+row])
							}
							if err := tensor.SetFromFloat64(y[0], cv); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				// without and with the promise that pos and the rows before
				// each position are fixed (read before the PDL wait; a
				// kernel of the call launched before, as in a VM call)
				// and with every split plan merged by its last blocks
				for _, run := range []struct {
					fixed bool
					fuse  int
				}{{false, decodeFuseSplits}, {true, decodeFuseSplits}, {true, attnMaxSplits}} {
					fixed := run.fixed
					decodeFuseSplits = run.fuse
					g.SetFixedWeights(fixed)
					if fixed {
						g.callLaunches = max(g.callLaunches, 1)
					}
					out := func() *tensor.Tensor { return onGPU(t, dev, poisoned(t, dt, int64(tk), int64(hq), int64(c.d))) }
					// dec_attn on the CPU-appended caches
					direct := []*tensor.Tensor{onGPU(t, dev, q), onGPU(t, dev, k), onGPU(t, dev, v), onGPU(t, dev, kc), onGPU(t, dev, vc), onGPU(t, dev, gpos), out()}
					p, err := g.ptrs([]string{"q", "k", "v", "k_cache", "v_cache", "pos", "out"}, direct...)
					if err != nil {
						t.Fatal(err)
					}
					if ok, err := g.tryDecodeAttention(dims, dt, p, nil); err != nil || !ok {
						t.Fatalf("dec_attn (fixed %v): ran %v, %v", fixed, ok, err)
					}
					if g.carveoutErr != nil {
						t.Errorf("the carveout preference was not set: %v", g.carveoutErr)
					}
					// the attention op: the GPU's append, then the kernel it picks
					op := []*tensor.Tensor{direct[0], direct[1], direct[2], onGPU(t, dev, kc0), onGPU(t, dev, vc0), direct[5], out()}
					if err := g.Model(ir.OpAttention, 0, op); err != nil {
						t.Fatal(err)
					}
					// rope, the append and attention in one
					rope := []*tensor.Tensor{direct[0], direct[1], direct[2], onGPU(t, dev, kc0), onGPU(t, dev, vc0), direct[5], out()}
					if ok, err := g.TryRopeAttention(rope, freqs); err != nil || !ok {
						t.Fatalf("TryRopeAttention (fixed %v): ran %v, %v", fixed, ok, err)
					}
					if err := dev.Sync(); err != nil {
						t.Fatal(err)
					}
					for _, r := range []struct {
						what      string
						got, want *tensor.Tensor
					}{
						{"dec_attn", direct[6], want}, {"attention op", op[6], want}, {"attention op's k cache", op[3], kc},
						{"dec_attn_rope", rope[6], rwant}, {"dec_attn_rope's k cache", rope[3], rkc}, {"dec_attn_rope's v cache", rope[4], rvc},
					} {
						if err := tensor.AllClose(fromGPU(t, dev, r.got), r.want, tl, tl); err != nil {
							t.Errorf("%s (fixed %v, fused up to %d splits) vs CPU: %v", r.what, fixed, run.fuse, err)
						}
					}
				}
				g.SetFixedWeights(false)
			})
		}
	}
}

// BenchmarkGPUDecodeAttention times the attention half of the op (the
// caches already appended) for Llama-3-8B decode (bfloat16, 32 query
// heads over 8 kv heads, head dim 128, a cache of 4133 rows a sequence)
// at batches 1, 8 and 32 and positions 4100 and 130, through the
// split-KV kernels (the same run's anchor) and through dec_attn at
// the chosen blocks a multiprocessor and rows a block (decode.go) and
// others beside it. Run it
// with -test.bench GPUDecode on a GPU machine.
func BenchmarkGPUDecodeAttention(b *testing.B) {
	g, dev := openTestGPU(b)
	const hq, hkv, d, seq = 32, 8, 128, 4133
	dt := tensor.BFloat16
	if err := g.gemvKernels(); err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{1, 8, 32} {
		mk := func(shape tensor.Shape, fill func(*tensor.Tensor) error) *tensor.Tensor {
			h := tensor.MustNew(dt, shape)
			if shape.Equal(tensor.Shape{int64(batch)}) {
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
		cache := tensor.Shape{seq, hkv, d}
		if batch > 1 {
			cache = append(tensor.Shape{int64(batch)}, cache...)
		}
		q := mk(tensor.Shape{int64(batch), hq, d}, random(1))
		kv := mk(tensor.Shape{int64(batch), hkv, d}, random(2))
		kc, vc := mk(cache, random(3)), mk(cache, random(4))
		out := mk(tensor.Shape{int64(batch), hq, d}, random(5))
		for _, at := range []int{4100, 130} {
			pos := mk(tensor.Shape{int64(batch)}, func(x *tensor.Tensor) error {
				v := make([]float64, batch)
				for i := range v {
					v[i] = float64(at)
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
			type choice struct{ perSM, rows, fuse int }
			for _, ch := range []choice{{0, 0, 0}, {1, 4096, 8}, {1, 4096, 0}, {1, 4096, attnMaxSplits}, {1, 1024, 8}, {2, 512, 8}, {2, 4096, 8}} {
				name := fmt.Sprintf("b%d/pos%d/dec_%dpersm_%drows_fuse%d", batch, at, ch.perSM, ch.rows, ch.fuse)
				if ch.perSM == 0 {
					name = fmt.Sprintf("b%d/pos%d/split", batch, at)
				}
				b.Run(name, func(b *testing.B) {
					saved := [3]int{decodeBlocksPerSM, decodeMaxChunk, decodeFuseSplits}
					defer func() { decodeBlocksPerSM, decodeMaxChunk, decodeFuseSplits = saved[0], saved[1], saved[2] }()
					run := func() {
						var ok bool
						var err error
						if ch.perSM == 0 {
							pl, planned := planAttention(dims.t, dims.hq, dims.hkv, dims.d, dims.maxSeq, dt, true, g.sms)
							if !planned {
								b.Fatal("planAttention refuses the call")
							}
							ok, err = true, g.splitAttention(pl, dims, dt, p, nil)
						} else {
							decodeBlocksPerSM, decodeMaxChunk, decodeFuseSplits = ch.perSM, ch.rows, ch.fuse
							ok, err = g.tryDecodeAttention(dims, dt, p, nil)
						}
						if err != nil || !ok {
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
}
