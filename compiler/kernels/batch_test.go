package kernels

import (
	"errors"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// TestCPUAttentionBatch: three sequences on caches of their own ([batch,
// max_seq, kv_heads, head_dim]), a prefill of two tokens each and then a
// decode step of one each at different positions, against the reference
// run sequence by sequence; every cache holds exactly its own rows.
func TestCPUAttentionBatch(t *testing.T) {
	for _, dt := range modelDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			const batch, hq, hkv, d, seq = 3, 4, 2, 8, 5
			kc := tensor.MustNew(dt, tensor.Shape{batch, seq, hkv, d})
			vc := tensor.MustNew(dt, tensor.Shape{batch, seq, hkv, d})
			cache := seq * hkv * d
			kcRef, vcRef := make([][]float64, batch), make([][]float64, batch)
			for b := range batch {
				kcRef[b], vcRef[b] = make([]float64, cache), make([]float64, cache)
			}
			rtol, atol := tol(dt, d)
			rtol, atol = 2*rtol, 2*atol
			// pos lists every sequence's positions (equal runs).
			for step, pos := range [][]int32{{0, 1, 0, 1, 0, 1}, {2, 2, 2}, {3, 3, 3}} {
				n := int64(len(pos))
				tps := len(pos) / batch
				q := randTensor(t, dt, tensor.Shape{n, hq, d}, uint64(40+step))
				k := randTensor(t, dt, tensor.Shape{n, hkv, d}, uint64(50+step))
				v := randTensor(t, dt, tensor.Shape{n, hkv, d}, uint64(60+step))
				out := tensor.MustNew(dt, tensor.Shape{n, hq, d})
				if err := CPUAttention(q, k, v, kc, vc, int32Tensor(t, tensor.Shape{n}, pos...), out); err != nil {
					t.Fatal(err)
				}
				qf, kf, vf := floats(t, q), floats(t, k), floats(t, v)
				var want []float64
				for b := range batch {
					lo, hi := b*tps, (b+1)*tps
					var o []float64
					o, kcRef[b], vcRef[b] = refAttention(qf[lo*hq*d:hi*hq*d], kf[lo*hkv*d:hi*hkv*d], vf[lo*hkv*d:hi*hkv*d], kcRef[b], vcRef[b], pos[lo:hi], hq, hkv, d)
					want = append(want, o...)
				}
				checkClose(t, "attention", out, want, rtol, atol)
				var kw, vw []float64
				for b := range batch {
					kw, vw = append(kw, kcRef[b]...), append(vw, vcRef[b]...)
				}
				checkClose(t, "k caches", kc, kw, 0, 0)
				checkClose(t, "v caches", vc, vw, 0, 0)
			}
			// One position past its cache refuses the whole call: no
			// sequence's cache changes.
			q := randTensor(t, dt, tensor.Shape{batch, hq, d}, 1)
			k := randTensor(t, dt, tensor.Shape{batch, hkv, d}, 2)
			before := floats(t, kc)
			err := CPUAttention(q, k, k, kc, vc, int32Tensor(t, tensor.Shape{batch}, 4, 4, seq), tensor.MustNew(dt, q.Shape()))
			if !errors.Is(err, ErrShape) {
				t.Errorf("position %d of a %d-row cache: %v", seq, seq, err)
			}
			checkClose(t, "k caches after a refused call", kc, before, 0, 0)
		})
	}
}

// TestCheckAttentionBatch: the shapes a batched call takes and refuses.
func TestCheckAttentionBatch(t *testing.T) {
	f := func(s ...int64) *tensor.Tensor { return tensor.MustNew(tensor.Float32, tensor.Shape(s)) }
	i32 := func(n int64) *tensor.Tensor { return tensor.MustNew(tensor.Int32, tensor.Shape{n}) }
	for _, c := range []struct {
		name        string
		tok, cacheB int64
		ok          bool
		batch, tps  int
	}{
		{"decode of 4", 4, 4, true, 4, 1},
		{"prefill of 3 each", 6, 2, true, 2, 3},
		{"one sequence", 5, 1, true, 1, 5},
		{"uneven runs", 5, 2, false, 0, 0},
		{"fewer tokens than sequences", 2, 4, false, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := checkAttention(f(c.tok, 4, 8), f(c.tok, 2, 8), f(c.tok, 2, 8), f(c.cacheB, 16, 2, 8), f(c.cacheB, 16, 2, 8), i32(c.tok), f(c.tok, 4, 8))
			if (err == nil) != c.ok {
				t.Fatalf("err %v, want ok %v", err, c.ok)
			}
			if c.ok && (a.batch != c.batch || a.tps() != c.tps || a.maxSeq != 16) {
				t.Errorf("batch %d, tps %d, max_seq %d; want %d, %d, 16", a.batch, a.tps(), a.maxSeq, c.batch, c.tps)
			}
		})
	}
}
