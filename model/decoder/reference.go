package decoder

import (
	"fmt"
	"math"
)

// Reference is the decoder in float64, single process, on the full
// (unsharded) weights: what the tensor-parallel program is compared with.
// Every op is written out plainly here, independently of the VM's
// kernels; weights are the dtype-rounded values, intermediates are not
// rounded.
type Reference struct {
	c      Config
	w      map[string][]float64
	kc, vc [][]float64 // per layer [max_seq, kv_heads, head_dim]
}

// NewReference makes the reference of c with weights from full (the full
// parameter for a spec, row-major, as stored: [out, in] for Transposed
// parameters of the HF layout).
func NewReference(c Config, full func(ParamSpec) []float64) (*Reference, error) {
	if err := c.Validate(1); err != nil {
		return nil, err
	}
	r := &Reference{c: c, w: map[string][]float64{}}
	for _, p := range c.Params() {
		v := full(p)
		if n, _ := p.Shape.NumElements(); int64(len(v)) != n {
			return nil, fmt.Errorf("%w: %s has %d values, shape %v", ErrWeights, p.Name, len(v), p.Shape)
		}
		if p.Transposed {
			// [out, in] as stored: the reference computes x·W on [in, out].
			rows, cols := int(p.Shape[0]), int(p.Shape[1])
			t := make([]float64, len(v))
			for i := range rows {
				for j := range cols {
					t[j*rows+i] = v[i*cols+j]
				}
			}
			v = t
		}
		r.w[p.Name] = v
	}
	size := c.MaxSeq * c.KVHeads * c.HeadDim()
	for range c.Layers {
		r.kc = append(r.kc, make([]float64, size))
		r.vc = append(r.vc, make([]float64, size))
	}
	return r, nil
}

// NewRandomReference is the reference of the random model RandomWeights
// makes with the same seed.
func NewRandomReference(c Config, seed uint64) (*Reference, error) {
	return NewReference(c, func(p ParamSpec) []float64 { return RandomParam(p, seed, c.DType) })
}

// matmulRef is x [t, k] · w [k, n].
func matmulRef(x, w []float64, t, k, n int) []float64 {
	out := make([]float64, t*n)
	for i := range t {
		for p := range k {
			a := x[i*k+p]
			for j := range n {
				out[i*n+j] += a * w[p*n+j]
			}
		}
	}
	return out
}

func (r *Reference) norm(x []float64, t int, wName, bName string) []float64 {
	h := r.c.Hidden
	w, b := r.w[wName], r.w[bName]
	out := make([]float64, len(x))
	for i := range t {
		row := x[i*h : (i+1)*h]
		mean := 0.0
		if r.c.norm() == NormLayer {
			for _, v := range row {
				mean += v
			}
			mean /= float64(h)
		}
		ss := 0.0
		for _, v := range row {
			ss += (v - mean) * (v - mean)
		}
		inv := 1 / math.Sqrt(ss/float64(h)+r.c.NormEps)
		for j, v := range row {
			out[i*h+j] = (v - mean) * inv * w[j]
			if b != nil {
				out[i*h+j] += b[j]
			}
		}
	}
	return out
}

// rope turns pair (i, i + d/2) of every head by p·inv_freq[i] (the
// decoder's float32 table, Config.InvFreq; the angle in float64 here).
func (r *Reference) rope(x []float64, pos []int32, heads int) {
	d := r.c.HeadDim()
	inv := r.c.InvFreq()
	for t, p := range pos {
		for h := range heads {
			base := (t*heads + h) * d
			for i := range d / 2 {
				ang := float64(p) * float64(inv[i])
				s, c := math.Sin(ang), math.Cos(ang)
				x1, x2 := x[base+i], x[base+i+d/2]
				x[base+i], x[base+i+d/2] = x1*c-x2*s, x2*c+x1*s
			}
		}
	}
}

// Step runs tokens ids at positions pos (writing their K and V into the
// reference's caches) and returns the logits, [len(ids)][vocab].
func (r *Reference) Step(ids, pos []int32) ([][]float64, error) {
	c := r.c
	t, hd, d := len(ids), c.Hidden, c.HeadDim()
	if len(pos) != t {
		return nil, fmt.Errorf("%w: %d ids, %d positions", ErrSeq, t, len(pos))
	}
	for i := range t {
		if ids[i] < 0 || int(ids[i]) >= c.Vocab || pos[i] < 0 || int(pos[i]) >= c.MaxSeq {
			return nil, fmt.Errorf("%w: token %d at position %d", ErrSeq, ids[i], pos[i])
		}
	}
	h := make([]float64, t*hd)
	for i, id := range ids {
		copy(h[i*hd:], r.w[ParamEmbed][int(id)*hd:(int(id)+1)*hd])
	}
	q, kv := c.Heads*d, c.KVHeads*d
	group := c.Heads / c.KVHeads
	for l := range c.Layers {
		name := func(s string) string { return LayerParam(l, s) }
		x := r.norm(h, t, name(AttnNormW), name(AttnNormB))
		qs := matmulRef(x, r.w[name(AttnWQ)], t, hd, q)
		ks := matmulRef(x, r.w[name(AttnWK)], t, hd, kv)
		vs := matmulRef(x, r.w[name(AttnWV)], t, hd, kv)
		if c.QKVBias {
			addBias(qs, r.w[name(AttnBQ)])
			addBias(ks, r.w[name(AttnBK)])
			addBias(vs, r.w[name(AttnBV)])
		}
		r.rope(qs, pos, c.Heads)
		r.rope(ks, pos, c.KVHeads)
		for i, p := range pos {
			copy(r.kc[l][int(p)*kv:], ks[i*kv:(i+1)*kv])
			copy(r.vc[l][int(p)*kv:], vs[i*kv:(i+1)*kv])
		}
		att := make([]float64, t*q)
		for i, p := range pos {
			for hh := range c.Heads {
				g := hh / group
				qv := qs[(i*c.Heads+hh)*d : (i*c.Heads+hh+1)*d]
				scores := make([]float64, p+1)
				m := math.Inf(-1)
				for j := range scores {
					kr := r.kc[l][(j*c.KVHeads+g)*d:]
					for e := range d {
						scores[j] += qv[e] * kr[e]
					}
					scores[j] /= math.Sqrt(float64(d))
					m = math.Max(m, scores[j])
				}
				sum := 0.0
				for j := range scores {
					scores[j] = math.Exp(scores[j] - m)
					sum += scores[j]
				}
				o := att[(i*c.Heads+hh)*d : (i*c.Heads+hh+1)*d]
				for j, s := range scores {
					vr := r.vc[l][(j*c.KVHeads+g)*d:]
					for e := range d {
						o[e] += s / sum * vr[e]
					}
				}
			}
		}
		o := matmulRef(att, r.w[name(AttnWO)], t, q, hd)
		for i := range h {
			h[i] += o[i]
		}
		x = r.norm(h, t, name(MLPNormW), name(MLPNormB))
		g := matmulRef(x, r.w[name(MLPWGate)], t, hd, c.FFN)
		u := matmulRef(x, r.w[name(MLPWUp)], t, hd, c.FFN)
		for i, v := range g {
			if c.act() == ActGELU {
				g[i] = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
			} else {
				g[i] = v / (1 + math.Exp(-v))
			}
			g[i] *= u[i]
		}
		dn := matmulRef(g, r.w[name(MLPWDown)], t, c.FFN, hd)
		for i := range h {
			h[i] += dn[i]
		}
	}
	x := r.norm(h, t, ParamNormW, ParamNormB)
	lg := matmulRef(x, r.w[ParamLMHead], t, hd, c.Vocab)
	out := make([][]float64, t)
	for i := range out {
		out[i] = lg[i*c.Vocab : (i+1)*c.Vocab]
	}
	return out, nil
}

// addBias adds b to every row of x (rows of len(b)).
func addBias(x, b []float64) {
	for i := range x {
		x[i] += b[i%len(b)]
	}
}

// Argmax is the first index of the largest value.
func Argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
