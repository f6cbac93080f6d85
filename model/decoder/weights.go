package decoder

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// RandomParamFunc is the worker function that makes a worker's shard of
// a random parameter: (name string, full shape, split int64, seed int64,
// dtype, transposed bool, units int64, padded bool) -> tensor on the
// worker's device. Every worker computes only its
// own block; element (i, j) of the full parameter is a hash of (seed,
// name, i, j), so shards agree with RandomParam whatever the worker count.
const RandomParamFunc = "decoder.random_param"

func splitmix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// randomScale keeps activations near unit size: norm weights near 1,
// biases small, matrices scaled by 1/sqrt(fan-in).
func randomScale(p ParamSpec) (scale, offset float64) {
	switch {
	case strings.HasSuffix(p.Name, ".weight"):
		return 0.1, 1
	case strings.HasSuffix(p.Name, ".bias") || isQKVBias(p.Name):
		return 0.1, 0
	case p.Name == ParamEmbed:
		return 1, 0
	}
	return 1 / math.Sqrt(float64(p.Shape[0])), 0
}

// randomValue is element (i, j) of the full parameter, rounded to dt.
func randomValue(p ParamSpec, seed uint64, salt uint64, i, j int64, dt tensor.DType) float64 {
	cols := p.Shape[len(p.Shape)-1]
	u := splitmix(seed*0x100000001b3 ^ salt ^ uint64(i*cols+j))
	scale, off := randomScale(p)
	return roundTo(dt, off+(float64(u>>11)/(1<<53)*2-1)*scale)
}

func isQKVBias(name string) bool {
	for _, s := range []string{AttnBQ, AttnBK, AttnBV} {
		if strings.HasSuffix(name, "."+s) {
			return true
		}
	}
	return false
}

func nameSalt(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix(h.Sum64())
}

func roundTo(dt tensor.DType, v float64) float64 {
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

// RandomParam is the full random parameter (row-major, rounded to dt).
func RandomParam(p ParamSpec, seed uint64, dt tensor.DType) []float64 {
	r0, r1, c0, c1 := p.ShardRange(0, 1)
	return randomBlock(p, seed, dt, r0, r1, c0, c1)
}

// randomBlock is rows [r0, r1) and columns [c0, c1) of the parameter as
// stored. The values are those of the [in, out] parameter (Canonical), so
// a model is the same in either layout: element (i, j) of a Transposed
// parameter is element (j, i) of its canonical form.
func randomBlock(p ParamSpec, seed uint64, dt tensor.DType, r0, r1, c0, c1 int64) []float64 {
	salt, q := nameSalt(p.Name), p.Canonical()
	out := make([]float64, 0, (r1-r0)*(c1-c0))
	for i := r0; i < r1; i++ {
		for j := c0; j < c1; j++ {
			if p.Transposed {
				out = append(out, randomValue(q, seed, salt, j, i, dt))
			} else {
				out = append(out, randomValue(q, seed, salt, i, j, dt))
			}
		}
	}
	return out
}

// RandomShard is worker r of n's shard of a random parameter, on the host.
func RandomShard(p ParamSpec, seed uint64, dt tensor.DType, r, n int) (*tensor.Tensor, error) {
	if r < 0 || r >= n {
		return nil, fmt.Errorf("%w: worker %d of %d", ErrConfig, r, n)
	}
	if len(p.Shape) < 1 || len(p.Shape) > 2 {
		return nil, fmt.Errorf("%w: parameter %s of shape %v (1 or 2 dims)", ErrConfig, p.Name, p.Shape)
	}
	if err := p.CheckSplit(n); err != nil {
		return nil, err
	}
	s := p.ShardShape(n)
	t, err := tensor.New(dt, s)
	if err != nil {
		return nil, err
	}
	r0, r1, c0, c1 := p.ShardRange(r, n)
	block := randomBlock(p, seed, dt, r0, r1, c0, c1)
	if p.Padded && (r1-r0 != s[0] || len(s) == 2 && c1-c0 != s[1]) {
		// The block at the top left of a zero shard.
		full := make([]float64, t.NumElements())
		w := c1 - c0
		for i := range r1 - r0 {
			copy(full[i*s[len(s)-1]:], block[i*w:(i+1)*w])
		}
		block = full
	}
	return t, tensor.SetFromFloat64(t, block)
}

// CheckSplit reports whether the parameter splits over n workers as its
// spec says: an even split, whole units (n dividing Units, or a multiple
// of it), or any size when padded.
func (p ParamSpec) CheckSplit(n int) error {
	d := p.splitDim()
	if d < 0 || p.Padded {
		return nil
	}
	size, N := p.Shape[d], int64(n)
	ok := size%N == 0
	if p.Units > 0 && p.Units < N {
		ok = N%p.Units == 0 && size%p.Units == 0
	}
	if !ok {
		return fmt.Errorf("%w: %s %v does not %s over %d workers", ErrConfig, p.Name, p.Shape, p.Split, n)
	}
	return nil
}

func init() {
	registry.MustRegisterTyped(RandomParamFunc, func(env registry.Env, name string, shape tensor.Shape, split, seed int64, dt tensor.DType, transposed bool, units int64, padded bool) (*tensor.Tensor, error) {
		h, err := RandomShard(ParamSpec{Name: name, Shape: shape, Split: Split(split), Transposed: transposed, Units: units, Padded: padded}, uint64(seed), dt, env.WorkerID(), env.NumWorkers())
		if err != nil {
			return nil, err
		}
		if env.Device().Kind == tensor.CPU {
			return h, nil
		}
		t, err := env.Alloc(dt, h.Shape(), env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
}

// RandomWeights makes every worker's shards of a random model (seeded)
// on the workers' devices: the map Load takes. The caller owns the DRefs
// (ReleaseWeights).
func RandomWeights(ctx context.Context, s *session.Session, c Config, seed uint64) (map[string]*session.DRef, error) {
	if err := c.Validate(s.NumWorkers()); err != nil {
		return nil, err
	}
	f, err := s.GetGlobalFunc(ctx, RandomParamFunc)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	w := map[string]*session.DRef{}
	for _, p := range c.Params() {
		r, err := s.CallPacked(f, p.Name, p.Shape, int64(p.Split), int64(seed), c.DType, p.Transposed, p.Units, p.Padded)
		if err != nil {
			ReleaseWeights(w)
			return nil, err
		}
		w[p.Name] = r
	}
	if err := s.Sync(ctx); err != nil {
		ReleaseWeights(w)
		return nil, fmt.Errorf("decoder: random weights: %w", err)
	}
	return w, nil
}

// ReleaseWeights drops every register of a weight map once (tied
// embeddings share the embedding's register).
func ReleaseWeights(w map[string]*session.DRef) {
	done := map[*session.DRef]bool{}
	for k, r := range w {
		if r != nil && !done[r] {
			done[r] = true
			r.Release()
		}
		delete(w, k)
	}
}

// narrowBF16 and narrowF16 round v to bfloat16 and float16, to nearest
// even, straight from the float64 bits (one rounding, as
// tensor.BF16FromFloat64 and F16FromFloat64 do); ok is false for values
// outside the type's normal range, which the caller sends through those.
// Small enough to be inlined: the generic form with the widths as
// arguments and the fallback inside was not, and took 44% of RandomFill
// (9.4 ns an element on 2 vCPUs).
func narrowBF16(v float64) (h uint16, ok bool) {
	b := math.Float64bits(v)
	b += (1<<44 - 1) + (b>>45)&1
	e := b>>52&0x7ff - (1023 - 127) // wraps below the normal range
	return uint16(b>>63<<15 | e<<7 | b>>45&0x7f), e-1 < 254
}

func narrowF16(v float64) (h uint16, ok bool) {
	b := math.Float64bits(v)
	b += (1<<41 - 1) + (b>>42)&1
	e := b>>52&0x7ff - (1023 - 15)
	return uint16(b>>63<<15 | e<<10 | b>>42&0x3ff), e-1 < 30
}

// RandomFill writes the full random parameter p as stored (RandomParam's
// values, rounded to dt) into out as dt's little-endian bytes, the rows
// spread over every CPU: what WriteRandom writes, at memory speed rather
// than through float64 slices.
func RandomFill(p ParamSpec, seed uint64, dt tensor.DType, out []byte) error {
	n, err := p.Shape.NumElements()
	if err != nil || len(p.Shape) < 1 || len(p.Shape) > 2 {
		return fmt.Errorf("%w: parameter %s of shape %v (1 or 2 dims)", ErrConfig, p.Name, p.Shape)
	}
	if dt != tensor.Float32 && dt != tensor.Float16 && dt != tensor.BFloat16 {
		return fmt.Errorf("%w: random %s in %s (float32, float16, bfloat16)", ErrConfig, p.Name, dt)
	}
	if int64(len(out)) != n*int64(dt.Size()) {
		return fmt.Errorf("%w: %s needs %d bytes, got %d", ErrConfig, p.Name, n*int64(dt.Size()), len(out))
	}
	rows, cols := int64(1), p.Shape[len(p.Shape)-1]
	if len(p.Shape) == 2 {
		rows = p.Shape[0]
	}
	salt, q := nameSalt(p.Name), p.Canonical()
	qcols := q.Shape[len(q.Shape)-1]
	scale, off := randomScale(q)
	h0 := seed*0x100000001b3 ^ salt
	fill := func(r0, r1 int64) {
		for i := r0; i < r1; i++ {
			row := out[i*cols*int64(dt.Size()) : (i+1)*cols*int64(dt.Size())]
			// Element (i, j) as stored is (j, i) of the canonical
			// parameter when transposed (randomBlock's rule): its hash
			// index steps by qcols along the row.
			idx, step := i*qcols, int64(1)
			if p.Transposed {
				idx, step = i, qcols
			}
			// (u>>11 < 2^53 converts exactly through int64, one
			// instruction where uint64 takes a branchy sequence)
			switch dt {
			case tensor.Float32:
				for j := range cols {
					u := splitmix(h0 ^ uint64(idx+j*step))
					binary.LittleEndian.PutUint32(row[4*j:], math.Float32bits(float32(off+(float64(int64(u>>11))*0x1p-53*2-1)*scale)))
				}
			case tensor.Float16:
				for j := range cols {
					u := splitmix(h0 ^ uint64(idx+j*step))
					v := off + (float64(int64(u>>11))*0x1p-53*2-1)*scale
					h, ok := narrowF16(v)
					if !ok {
						h = uint16(tensor.F16FromFloat64(v))
					}
					row[2*j], row[2*j+1] = byte(h), byte(h>>8)
				}
			case tensor.BFloat16:
				for j := range cols {
					u := splitmix(h0 ^ uint64(idx+j*step))
					v := off + (float64(int64(u>>11))*0x1p-53*2-1)*scale
					h, ok := narrowBF16(v)
					if !ok {
						h = uint16(tensor.BF16FromFloat64(v))
					}
					row[2*j], row[2*j+1] = byte(h), byte(h>>8)
				}
			}
		}
	}
	workers := int64(runtime.GOMAXPROCS(0))
	if rows*cols < 1<<16 || workers == 1 {
		fill(0, rows)
		return nil
	}
	var wg sync.WaitGroup
	step := (rows + workers - 1) / workers
	for r0 := int64(0); r0 < rows; r0 += step {
		wg.Add(1)
		go func(r0, r1 int64) {
			defer wg.Done()
			fill(r0, r1)
		}(r0, min(r0+step, rows))
	}
	wg.Wait()
	return nil
}
