package kernels

import (
	"fmt"
	"math"

	"github.com/chorus-rt/chorus/tensor"
)

// CPU kernels of the decoder ops (embedding, rms_norm, layer_norm, rope,
// attention with a KV cache, silu, mul, argmax). As for matmul: float32,
// float16 and bfloat16 compute in float32 (widened once, rounded once per
// output element; rms_norm also rounds the normalized value before the
// weight, as transformers does), float64 in float64. Positions and token ids are int32
// tensors and are checked (an id outside the table or a position outside
// the cache is an error, never a clamp).

// floatKernel runs f on a float32 buffer for out (out's own data for
// float32, scratch for the half types) and rounds it into out.
func floatKernel(out *tensor.Tensor, f func(o []float32)) error {
	o, err := outFloats(out)
	if err != nil {
		return err
	}
	f(o)
	return storeFloats(out, o)
}

// f64s returns a float64 tensor's data (the caller checked the dtype).
func f64s(t *tensor.Tensor) []float64 {
	d, _ := tensor.Data[float64](t)
	return d
}

// int32s returns an int32 host tensor's data.
func int32s(what string, t *tensor.Tensor) ([]int32, error) {
	if t.DType() != tensor.Int32 {
		return nil, fmt.Errorf("%w: %s must be int32, is %s", ErrShape, what, t.DType())
	}
	return tensor.Data[int32](t)
}

func sameFloatLayout(op string, x, out *tensor.Tensor) error {
	if !tensor.SameLayout(x, out) {
		return fmt.Errorf("%w: %s of %s%v into %s%v", ErrShape, op, x.DType(), x.Shape(), out.DType(), out.Shape())
	}
	return nil
}

// rowsOf is a tensor's element count split as rows × last dim.
func rowsOf(t *tensor.Tensor) (rows, n int) {
	s := t.Shape()
	if len(s) == 0 {
		return 1, 1
	}
	n = int(s[len(s)-1])
	if n == 0 {
		return 0, 0
	}
	return int(t.NumElements()) / n, n
}

// checkEmbedding returns the ids and the table's vocabulary and width.
func checkEmbedding(ids, table, out *tensor.Tensor) (vocab, h int, err error) {
	ts := table.Shape()
	if ids.DType() != tensor.Int32 || len(ts) != 2 || table.DType() != out.DType() ||
		!out.Shape().Equal(append(ids.Shape().Clone(), ts[1])) {
		return 0, 0, fmt.Errorf("%w: embedding of %s%v in %s%v into %s%v", ErrShape, ids.DType(), ids.Shape(), table.DType(), ts, out.DType(), out.Shape())
	}
	return int(ts[0]), int(ts[1]), nil
}

// CPUEmbedding copies rows of table into out (no arithmetic: the rows are
// copied as bytes, so every dtype is exact).
func CPUEmbedding(ids, table, out *tensor.Tensor) error {
	vocab, h, err := checkEmbedding(ids, table, out)
	if err != nil {
		return err
	}
	id, err := int32s("embedding ids", ids)
	if err != nil {
		return err
	}
	row := h * table.DType().Size()
	tb, ob := table.Bytes(), out.Bytes()
	for i, v := range id {
		if v < 0 || int(v) >= vocab {
			return fmt.Errorf("%w: embedding id %d (element %d) outside the table's %d rows", ErrShape, v, i, vocab)
		}
		copy(ob[i*row:(i+1)*row], tb[int(v)*row:(int(v)+1)*row])
	}
	return nil
}

// checkNorm checks x [..., h], out like x, and the weights [h].
func checkNorm(op string, x, out *tensor.Tensor, params ...*tensor.Tensor) error {
	if err := sameFloatLayout(op, x, out); err != nil {
		return err
	}
	_, h := rowsOf(x)
	for _, p := range params {
		if p.DType() != x.DType() || len(p.Shape()) != 1 || int(p.Shape()[0]) != h {
			return fmt.Errorf("%w: %s of %v needs weights %s[%d], got %s%v", ErrShape, op, x.Shape(), x.DType(), h, p.DType(), p.Shape())
		}
	}
	return nil
}

// rmsNorm computes x / sqrt(mean(x²) + eps) · w over rows of h. round
// rounds the normalized value to the tensor's dtype before the weight
// multiplies it, as transformers' LlamaRMSNorm (and Qwen2's, Mistral's)
// does: `weight * hidden_states.to(input_dtype)`; the caller rounds the
// product once more when it stores it. nil: no rounding (float32,
// float64).
func rmsNorm[T float32 | float64](x, w, out []T, rows, h int, eps float64, round func(T) T) {
	for r := range rows {
		xr, or := x[r*h:(r+1)*h], out[r*h:(r+1)*h]
		var ss T
		for _, v := range xr {
			ss += v * v
		}
		inv := T(1 / math.Sqrt(float64(ss)/float64(h)+eps))
		if round == nil {
			for j, v := range xr {
				or[j] = v * inv * w[j]
			}
			continue
		}
		for j, v := range xr {
			or[j] = round(v*inv) * w[j]
		}
	}
}

// halfRound is rounding a float32 to dt and back, for the half types
// (nil for the others: nothing to round).
func halfRound(dt tensor.DType) func(float32) float32 {
	switch dt {
	case tensor.Float16:
		return func(v float32) float32 { return tensor.F16FromFloat32(v).Float32() }
	case tensor.BFloat16:
		return func(v float32) float32 { return tensor.BF16FromFloat32(v).Float32() }
	}
	return nil
}

// CPURMSNorm computes out = x / sqrt(mean(x²) + eps) · w over the last
// dim, in float32 for float32 and the half types; for the half types the
// normalized value is rounded to the dtype before the product with w
// (transformers' order), the product rounded again as it is stored.
func CPURMSNorm(x, w *tensor.Tensor, eps float64, out *tensor.Tensor) error {
	if err := checkNorm("rms_norm", x, out, w); err != nil {
		return err
	}
	rows, h := rowsOf(x)
	if x.DType() == tensor.Float64 {
		rmsNorm(f64s(x), f64s(w), f64s(out), rows, h, eps, nil)
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	wd, err := hostFloats(w)
	if err != nil {
		return err
	}
	return floatKernel(out, func(o []float32) { rmsNorm(xd, wd, o, rows, h, eps, halfRound(x.DType())) })
}

func layerNorm[T float32 | float64](x, w, b, out []T, rows, h int, eps float64) {
	for r := range rows {
		xr, or := x[r*h:(r+1)*h], out[r*h:(r+1)*h]
		var mean T
		for _, v := range xr {
			mean += v
		}
		mean /= T(h)
		var ss T
		for _, v := range xr {
			ss += (v - mean) * (v - mean)
		}
		inv := T(1 / math.Sqrt(float64(ss)/float64(h)+eps))
		for j, v := range xr {
			or[j] = (v-mean)*inv*w[j] + b[j]
		}
	}
}

// CPULayerNorm computes out = (x - mean) / sqrt(var + eps) · w + b.
func CPULayerNorm(x, w, b *tensor.Tensor, eps float64, out *tensor.Tensor) error {
	if err := checkNorm("layer_norm", x, out, w, b); err != nil {
		return err
	}
	rows, h := rowsOf(x)
	if x.DType() == tensor.Float64 {
		layerNorm(f64s(x), f64s(w), f64s(b), f64s(out), rows, h, eps)
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	wd, err := hostFloats(w)
	if err != nil {
		return err
	}
	bd, err := hostFloats(b)
	if err != nil {
		return err
	}
	return floatKernel(out, func(o []float32) { layerNorm(xd, wd, bd, o, rows, h, eps) })
}

// checkRope returns tokens, heads and head_dim of rope's operands.
func checkRope(x, pos, out *tensor.Tensor) (t, heads, d int, err error) {
	if err := sameFloatLayout("rope", x, out); err != nil {
		return 0, 0, 0, err
	}
	s := x.Shape()
	if len(s) != 3 || s[2]%2 != 0 || pos.DType() != tensor.Int32 || !pos.Shape().Equal(tensor.Shape{s[0]}) {
		return 0, 0, 0, fmt.Errorf("%w: rope of %v at positions %s%v (want [tokens, heads, even head_dim] and int32 [tokens])", ErrShape, s, pos.DType(), pos.Shape())
	}
	return int(s[0]), int(s[1]), int(s[2]), nil
}

// RopeAngle is the angle rope turns pair i of a head of size d at
// position p: p · theta^(-2i/d), in float64 (the GPU kernel computes it
// in double precision too).
func RopeAngle(p, i, d int, theta float64) float64 {
	return float64(p) * math.Pow(theta, -2*float64(i)/float64(d))
}

func rope[T float32 | float64](x, out []T, pos []int32, t, heads, d int, theta float64) {
	half := d / 2
	for ti := range t {
		for i := range half {
			sin, cos := math.Sincos(RopeAngle(int(pos[ti]), i, d, theta))
			s, c := T(sin), T(cos)
			for h := range heads {
				base := (ti*heads + h) * d
				x1, x2 := x[base+i], x[base+i+half]
				out[base+i] = x1*c - x2*s
				out[base+i+half] = x2*c + x1*s
			}
		}
	}
}

// CPURope applies the rotate-half rotary embedding at the given positions.
func CPURope(x, pos *tensor.Tensor, theta float64, out *tensor.Tensor) error {
	t, heads, d, err := checkRope(x, pos, out)
	if err != nil {
		return err
	}
	p, err := int32s("rope positions", pos)
	if err != nil {
		return err
	}
	for i, v := range p {
		if v < 0 {
			return fmt.Errorf("%w: rope position %d (token %d) is negative", ErrShape, v, i)
		}
	}
	if x.DType() == tensor.Float64 {
		rope(f64s(x), f64s(out), p, t, heads, d, theta)
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	return floatKernel(out, func(o []float32) { rope(xd, o, p, t, heads, d, theta) })
}

// RopeTableAngle is the angle the table form of rope turns pair i at
// position p: float32(p)·invFreq[i], rounded to float32, as Hugging Face's
// rotary embedding computes it (the GPU kernel does the same float32
// product).
func RopeTableAngle(p int32, invFreq float32) float32 { return float32(p) * invFreq }

func ropeTable[T float32 | float64](x, out []T, pos []int32, t, heads, d int, freqs []float32) {
	half := d / 2
	for ti := range t {
		for i := range half {
			sin, cos := math.Sincos(float64(RopeTableAngle(pos[ti], freqs[i])))
			// Of the float32 angle; in float32 (the half types' compute
			// type) the sine and cosine round as PyTorch's float32
			// sin/cos give them.
			s, c := T(sin), T(cos)
			for h := range heads {
				base := (ti*heads + h) * d
				x1, x2 := x[base+i], x[base+i+half]
				out[base+i] = x1*c - x2*s
				out[base+i+half] = x2*c + x1*s
			}
		}
	}
}

// CPURopeTable is rope's table form: pair i turns by float32(pos)·freqs[i].
func CPURopeTable(x, pos *tensor.Tensor, freqs []float32, out *tensor.Tensor) error {
	t, heads, d, err := checkRope(x, pos, out)
	if err != nil {
		return err
	}
	if len(freqs) != d/2 {
		return fmt.Errorf("%w: rope table of %d inverse frequencies for head_dim %d", ErrShape, len(freqs), d)
	}
	p, err := int32s("rope positions", pos)
	if err != nil {
		return err
	}
	for i, v := range p {
		if v < 0 {
			return fmt.Errorf("%w: rope position %d (token %d) is negative", ErrShape, v, i)
		}
	}
	if x.DType() == tensor.Float64 {
		ropeTable(f64s(x), f64s(out), p, t, heads, d, freqs)
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	return floatKernel(out, func(o []float32) { ropeTable(xd, o, p, t, heads, d, freqs) })
}

// attnDims are the sizes of an attention call: t tokens in batch
// equal runs, run b appending to and reading cache b (rank-4 caches
// [batch, max_seq, kv_heads, head_dim]; rank-3 caches are batch 1).
type attnDims struct {
	t, hq, hkv, d, maxSeq int
	batch                 int
}

// tps is the tokens of each sequence (run) of a batched call.
func (a attnDims) tps() int { return a.t / a.batch }

func checkAttention(q, k, v, kc, vc, pos, out *tensor.Tensor) (attnDims, error) {
	bad := func() (attnDims, error) {
		return attnDims{}, fmt.Errorf("%w: attention q %s%v, k %v, v %v, caches %s%v %s%v, pos %s%v, out %s%v", ErrShape,
			q.DType(), q.Shape(), k.Shape(), v.Shape(), kc.DType(), kc.Shape(), vc.DType(), vc.Shape(), pos.DType(), pos.Shape(), out.DType(), out.Shape())
	}
	qs, ks, cs := q.Shape(), k.Shape(), kc.Shape()
	if len(qs) != 3 || len(ks) != 3 || (len(cs) != 3 && len(cs) != 4) || !tensor.SameLayout(q, out) || !tensor.SameLayout(k, v) || !tensor.SameLayout(kc, vc) {
		return bad()
	}
	for _, x := range []*tensor.Tensor{k, kc} {
		if x.DType() != q.DType() {
			return bad()
		}
	}
	batch := int64(1)
	if len(cs) == 4 {
		batch, cs = cs[0], cs[1:]
	}
	a := attnDims{t: int(qs[0]), hq: int(qs[1]), hkv: int(ks[1]), d: int(qs[2]), maxSeq: int(cs[0]), batch: int(batch)}
	if int(ks[0]) != a.t || int(ks[2]) != a.d || int(cs[1]) != a.hkv || int(cs[2]) != a.d || a.hkv < 1 || a.hq%a.hkv != 0 ||
		a.batch < 1 || a.t%a.batch != 0 || pos.DType() != tensor.Int32 || !pos.Shape().Equal(tensor.Shape{qs[0]}) {
		return bad()
	}
	return a, nil
}

// seqViews are the operands of sequence b of a batched attention call:
// its tokens' rows of q, k, v, pos and out, and its caches (rank 3).
func seqViews(a attnDims, b int, q, k, v, kc, vc, pos, out *tensor.Tensor) ([7]*tensor.Tensor, error) {
	n := int64(a.tps())
	tok := int64(b) * n
	var r [7]*tensor.Tensor
	var err error
	view := func(i int, t *tensor.Tensor, rowBytes int64, first int64, shape tensor.Shape) {
		if err == nil {
			r[i], err = t.View(first*rowBytes, t.DType(), shape)
		}
	}
	es := int64(q.DType().Size())
	view(0, q, int64(a.hq*a.d)*es, tok, tensor.Shape{n, int64(a.hq), int64(a.d)})
	view(1, k, int64(a.hkv*a.d)*es, tok, tensor.Shape{n, int64(a.hkv), int64(a.d)})
	view(2, v, int64(a.hkv*a.d)*es, tok, tensor.Shape{n, int64(a.hkv), int64(a.d)})
	cache := tensor.Shape{int64(a.maxSeq), int64(a.hkv), int64(a.d)}
	view(3, kc, int64(a.maxSeq*a.hkv*a.d)*es, int64(b), cache)
	view(4, vc, int64(a.maxSeq*a.hkv*a.d)*es, int64(b), cache)
	view(5, pos, 4, tok, tensor.Shape{n})
	view(6, out, int64(a.hq*a.d)*es, tok, tensor.Shape{n, int64(a.hq), int64(a.d)})
	return r, err
}

// CPUAttention appends k and v into the caches at rows pos, then computes
// causal grouped-query attention of q over cache rows 0..pos[t].
func CPUAttention(q, k, v, kc, vc, pos, out *tensor.Tensor) error {
	a, err := checkAttention(q, k, v, kc, vc, pos, out)
	if err != nil {
		return err
	}
	if len(kc.Shape()) == 4 {
		// A batch: every sequence on its own cache, one after the other,
		// once every position is known to be inside its cache.
		p, err := int32s("attention positions", pos)
		if err != nil {
			return err
		}
		for i, x := range p {
			if x < 0 || int(x) >= a.maxSeq {
				return fmt.Errorf("%w: attention position %d (token %d) outside the cache's %d rows", ErrShape, x, i, a.maxSeq)
			}
		}
		for b := range a.batch {
			s, err := seqViews(a, b, q, k, v, kc, vc, pos, out)
			if err != nil {
				return err
			}
			if err := CPUAttention(s[0], s[1], s[2], s[3], s[4], s[5], s[6]); err != nil {
				return fmt.Errorf("attention of sequence %d: %w", b, err)
			}
		}
		return nil
	}
	p, err := int32s("attention positions", pos)
	if err != nil {
		return err
	}
	maxPos := -1
	for i, x := range p {
		if x < 0 || int(x) >= a.maxSeq {
			return fmt.Errorf("%w: attention position %d (token %d) outside the cache's %d rows", ErrShape, x, i, a.maxSeq)
		}
		maxPos = max(maxPos, int(x))
	}
	// Append: the caches have k's dtype, so rows are copied as bytes.
	row := a.hkv * a.d * k.DType().Size()
	kb, vb, kcb, vcb := k.Bytes(), v.Bytes(), kc.Bytes(), vc.Bytes()
	for i, x := range p {
		copy(kcb[int(x)*row:(int(x)+1)*row], kb[i*row:(i+1)*row])
		copy(vcb[int(x)*row:(int(x)+1)*row], vb[i*row:(i+1)*row])
	}
	if maxPos < 0 {
		return nil
	}
	used := (maxPos + 1) * a.hkv * a.d
	if q.DType() == tensor.Float64 {
		attend(f64s(q), f64s(kc)[:used], f64s(vc)[:used], f64s(out), p, a)
		return nil
	}
	qd, err := hostFloats(q)
	if err != nil {
		return err
	}
	// Only the rows in use are widened.
	kcu, err := kc.View(0, kc.DType(), tensor.Shape{int64(used)})
	if err != nil {
		return err
	}
	vcu, err := vc.View(0, vc.DType(), tensor.Shape{int64(used)})
	if err != nil {
		return err
	}
	kd, err := hostFloats(kcu)
	if err != nil {
		return err
	}
	vd, err := hostFloats(vcu)
	if err != nil {
		return err
	}
	return floatKernel(out, func(o []float32) { attend(qd, kd, vd, o, p, a) })
}

func attend[T float32 | float64](q, kc, vc, out []T, pos []int32, a attnDims) {
	group := a.hq / a.hkv
	scale := T(1 / math.Sqrt(float64(a.d)))
	scores := make([]T, 0, int(slicesMax(pos))+1)
	for t := range a.t {
		n := int(pos[t]) + 1
		for h := range a.hq {
			kvh := h / group
			qv := q[(t*a.hq+h)*a.d : (t*a.hq+h+1)*a.d]
			scores = scores[:n]
			m := T(math.Inf(-1))
			for j := range n {
				kr := kc[(j*a.hkv+kvh)*a.d : (j*a.hkv+kvh+1)*a.d]
				var s T
				for i, x := range qv {
					s += x * kr[i]
				}
				s *= scale
				scores[j] = s
				m = max(m, s)
			}
			var sum T
			for j, s := range scores {
				e := T(math.Exp(float64(s - m)))
				scores[j] = e
				sum += e
			}
			o := out[(t*a.hq+h)*a.d : (t*a.hq+h+1)*a.d]
			clear(o)
			for j, e := range scores {
				vr := vc[(j*a.hkv+kvh)*a.d : (j*a.hkv+kvh+1)*a.d]
				w := e / sum
				for i, x := range vr {
					o[i] += w * x
				}
			}
		}
	}
}

func slicesMax(p []int32) int32 {
	m := int32(0)
	for _, x := range p {
		m = max(m, x)
	}
	return m
}

// Silu is x · sigmoid(x) in float64.
func Silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// CPUSilu computes out = silu(x).
func CPUSilu(x, out *tensor.Tensor) error {
	if err := sameFloatLayout("silu", x, out); err != nil {
		return err
	}
	if x.DType() == tensor.Float64 {
		o := f64s(out)
		for i, v := range f64s(x) {
			o[i] = Silu(v)
		}
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	return floatKernel(out, func(o []float32) {
		for i, v := range xd {
			o[i] = v / (1 + float32(math.Exp(float64(-v))))
		}
	})
}

// CPUMul computes out = x · y with broadcasting.
func CPUMul(x, y, out *tensor.Tensor) error {
	if x.DType() != y.DType() || x.DType() != out.DType() {
		return fmt.Errorf("%w: mul dtypes %s, %s -> %s", ErrShape, x.DType(), y.DType(), out.DType())
	}
	bc, err := newBroadcast(x.Shape(), y.Shape(), out.Shape())
	if err != nil {
		return err
	}
	if out.NumElements() == 0 {
		return nil
	}
	if x.DType() == tensor.Float64 {
		xd, yd, od := f64s(x), f64s(y), f64s(out)
		bc.apply(func(i, ix, iy int64) { od[i] = xd[ix] * yd[iy] })
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	yd, err := hostFloats(y)
	if err != nil {
		return err
	}
	return floatKernel(out, func(o []float32) {
		bc.apply(func(i, ix, iy int64) { o[i] = xd[ix] * yd[iy] })
	})
}

func checkArgmax(x, out *tensor.Tensor) (rows, n int, err error) {
	s := x.Shape()
	if len(s) < 1 || s[len(s)-1] < 1 || out.DType() != tensor.Int32 || !out.Shape().Equal(s[:len(s)-1]) {
		return 0, 0, fmt.Errorf("%w: argmax of %s%v into %s%v", ErrShape, x.DType(), s, out.DType(), out.Shape())
	}
	rows, n = rowsOf(x)
	return rows, n, nil
}

func argmax[T float32 | float64](x []T, o []int32, rows, n int) {
	for r := range rows {
		best, bi := T(math.Inf(-1)), int32(0)
		found := false
		for j, v := range x[r*n : (r+1)*n] {
			if v > best || (!found && v == best) { // NaN never wins; -Inf can
				best, bi, found = v, int32(j), true
			}
		}
		o[r] = bi
	}
}

// CPUArgmax writes the index of the largest element of every row (the
// first on ties; NaN never wins; a row of NaNs gives 0).
func CPUArgmax(x, out *tensor.Tensor) error {
	rows, n, err := checkArgmax(x, out)
	if err != nil {
		return err
	}
	o, err := tensor.Data[int32](out)
	if err != nil {
		return err
	}
	if x.DType() == tensor.Float64 {
		argmax(f64s(x), o, rows, n)
		return nil
	}
	xd, err := hostFloats(x)
	if err != nil {
		return err
	}
	argmax(xd, o, rows, n)
	return nil
}
