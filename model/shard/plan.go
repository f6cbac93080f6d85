package shard

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/tensor"
)

// Sentinel errors that callers test with errors.Is (the safetensors
// sentinels pass through too).
var (
	// ErrSpec: a spec that does not parse, a rule that matches no tensor,
	// an unknown function, a bad rank or rank count.
	ErrSpec = errors.New("bad sharding spec")
	// ErrShape: a tensor that cannot be sharded as asked (a dimension not
	// divisible by the number of ranks, a dimension it does not have, a
	// function's plan that does not fit the tensor). The same sentinel as
	// safetensors.ErrShape.
	ErrShape = safetensors.ErrShape
	// ErrDType: a tensor whose dtype is not the one the spec expects, or a
	// conversion chorus does not make (safetensors.ErrDType).
	ErrDType = safetensors.ErrDType
	// ErrNotFound: no tensor of that name (safetensors.ErrNotFound).
	ErrNotFound = safetensors.ErrNotFound
)

// Range is Len bytes starting Off bytes into a tensor's data.
type Range struct{ Off, Len int64 }

// Plan is one rank's part of one tensor: the concatenation of Ranges, in
// order, is the part's data, of shape Shape (same dtype).
type Plan struct {
	Shape  tensor.Shape
	Ranges []Range
}

// Bytes is the size of the part.
func (p Plan) Bytes() int64 {
	var n int64
	for _, r := range p.Ranges {
		n += r.Len
	}
	return n
}

// Coalesce merges ranges that follow each other and drops empty ones.
func Coalesce(rs []Range) []Range {
	out := rs[:0:0]
	for _, r := range rs {
		if r.Len == 0 {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].Off+out[k].Len == r.Off {
			out[k].Len += r.Len
			continue
		}
		out = append(out, r)
	}
	return out
}

// Interval is [Lo, Hi) along one dimension.
type Interval struct{ Lo, Hi int64 }

// Blocks is the plan of the sub-tensor made of the given intervals of
// dimension dim, concatenated along dim in order (other dimensions
// whole), for a row-major tensor of shape with elem-byte elements.
func Blocks(shape tensor.Shape, elem int64, dim int, ivs []Interval) (Plan, error) {
	if dim < 0 || dim >= len(shape) {
		return Plan{}, fmt.Errorf("%w: dimension %d of a %d-dimensional shape %v", ErrShape, dim, len(shape), shape)
	}
	outer, inner := int64(1), elem
	for _, d := range shape[:dim] {
		outer *= d
	}
	for _, d := range shape[dim+1:] {
		inner *= d
	}
	var width int64
	for _, iv := range ivs {
		if iv.Lo < 0 || iv.Hi < iv.Lo || iv.Hi > shape[dim] {
			return Plan{}, fmt.Errorf("%w: interval [%d, %d) of dimension %d of size %d", ErrShape, iv.Lo, iv.Hi, dim, shape[dim])
		}
		width += iv.Hi - iv.Lo
	}
	out := shape.Clone()
	out[dim] = width
	if n, err := shape.NumElements(); err != nil || n == 0 {
		return Plan{Shape: out}, err // no bytes (and no loop over a huge outer count)
	}
	// Ranges are merged as they are made, so a split that reads whole
	// rows stays one range however many rows there are.
	var rs []Range
	row := shape[dim] * inner
	for i := range outer {
		for _, iv := range ivs {
			r := Range{Off: i*row + iv.Lo*inner, Len: (iv.Hi - iv.Lo) * inner}
			if r.Len == 0 {
				continue
			}
			if k := len(rs) - 1; k >= 0 && rs[k].Off+rs[k].Len == r.Off {
				rs[k].Len += r.Len
				continue
			}
			rs = append(rs, r)
		}
	}
	return Plan{Shape: out, Ranges: rs}, nil
}

// Split is rank's plan when dimension dim is split into n equal parts.
func Split(shape tensor.Shape, elem int64, dim, rank, n int) (Plan, error) {
	if dim < 0 || dim >= len(shape) {
		return Plan{}, fmt.Errorf("%w: split dimension %d of shape %v (%d dimensions)", ErrShape, dim, shape, len(shape))
	}
	if shape[dim]%int64(n) != 0 {
		return Plan{}, fmt.Errorf("%w: split dimension %d of shape %v into %d parts: %d is not divisible by %d", ErrShape, dim, shape, n, shape[dim], n)
	}
	part := shape[dim] / int64(n)
	return Blocks(shape, elem, dim, []Interval{{int64(rank) * part, int64(rank+1) * part}})
}

// Replicate is the whole tensor.
func Replicate(shape tensor.Shape, elem int64) Plan {
	n, _ := shape.NumElements()
	return Plan{Shape: shape.Clone(), Ranges: Coalesce([]Range{{0, n * elem}})}
}

// Request is what a Func is asked: rank's part of tensor Name (of Shape
// and DType) among N ranks, with the rule's Args.
type Request struct {
	Name    string
	Shape   tensor.Shape
	DType   tensor.DType
	Rank, N int
	Args    []int64
}

// Func computes a plan. The Loader checks the result: ranges inside the
// tensor, aligned to elements, adding up to Shape.
type Func func(Request) (Plan, error)

var funcs = struct {
	sync.RWMutex
	m map[string]Func
}{m: map[string]Func{}}

// Register adds a function under name, for rules that say {"func": name}.
func Register(name string, fn Func) error {
	if name == "" || fn == nil {
		return fmt.Errorf("%w: register %q: empty name or nil function", ErrSpec, name)
	}
	funcs.Lock()
	defer funcs.Unlock()
	if _, dup := funcs.m[name]; dup {
		return fmt.Errorf("%w: function %q registered twice", ErrSpec, name)
	}
	funcs.m[name] = fn
	return nil
}

// MustRegister is Register for init functions.
func MustRegister(name string, fn Func) {
	if err := Register(name, fn); err != nil {
		panic(err)
	}
}

// LookupFunc finds a registered function.
func LookupFunc(name string) (Func, error) {
	funcs.RLock()
	defer funcs.RUnlock()
	fn, ok := funcs.m[name]
	if !ok {
		var names []string
		for n := range funcs.m {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%w: unknown function %q (registered: %v)", ErrSpec, name, names)
	}
	return fn, nil
}

// FuncFused is the built-in function for fused weights: args are
// [dim, s0, s1, ...]; dimension dim is the concatenation of segments of
// sizes s0, s1, ... (q, k, v of a fused QKV projection: with grouped
// query heads, k and v are smaller than q); each segment is split into N
// equal parts and the rank takes its part of every segment, in order.
const FuncFused = "fused"

func fused(r Request) (Plan, error) {
	if len(r.Args) < 2 {
		return Plan{}, fmt.Errorf("%w: %s wants args [dim, size, size...], got %v", ErrSpec, FuncFused, r.Args)
	}
	dim := int(r.Args[0])
	if dim < 0 || dim >= len(r.Shape) {
		return Plan{}, fmt.Errorf("%w: %s: dimension %d of shape %v", ErrShape, FuncFused, dim, r.Shape)
	}
	var ivs []Interval
	var start int64
	for i, s := range r.Args[1:] {
		if s < 0 || s%int64(r.N) != 0 {
			return Plan{}, fmt.Errorf("%w: %s: segment %d of size %d is not divisible by %d ranks", ErrShape, FuncFused, i, s, r.N)
		}
		part := s / int64(r.N)
		ivs = append(ivs, Interval{start + int64(r.Rank)*part, start + int64(r.Rank+1)*part})
		start += s
	}
	if start != r.Shape[dim] {
		return Plan{}, fmt.Errorf("%w: %s: segments %v add up to %d, dimension %d of shape %v is %d", ErrShape, FuncFused, r.Args[1:], start, dim, r.Shape, r.Shape[dim])
	}
	return Blocks(r.Shape, int64(r.DType.Size()), dim, ivs)
}

func init() { MustRegister(FuncFused, fused) }

// checkPlan validates a function's plan against the tensor.
func checkPlan(p Plan, r Request) (Plan, error) {
	elem := int64(r.DType.Size())
	total, err := r.Shape.NumElements()
	if err != nil {
		return Plan{}, err
	}
	total *= elem
	if err := p.Shape.Validate(); err != nil {
		return Plan{}, fmt.Errorf("%w: result shape: %v", ErrShape, err)
	}
	want, _ := p.Shape.NumElements()
	var sum int64
	for _, rg := range p.Ranges {
		if rg.Off < 0 || rg.Len < 0 || rg.Off > total || rg.Len > total-rg.Off {
			return Plan{}, fmt.Errorf("%w: range [%d, %d) outside the tensor's %d bytes", ErrShape, rg.Off, rg.Off+rg.Len, total)
		}
		if rg.Off%elem != 0 || rg.Len%elem != 0 {
			return Plan{}, fmt.Errorf("%w: range [%d, %d) not aligned to %d-byte elements", ErrShape, rg.Off, rg.Off+rg.Len, elem)
		}
		sum += rg.Len
	}
	if sum != want*elem {
		return Plan{}, fmt.Errorf("%w: ranges hold %d bytes, result shape %v needs %d", ErrShape, sum, p.Shape, want*elem)
	}
	return Plan{Shape: p.Shape.Clone(), Ranges: Coalesce(append([]Range(nil), p.Ranges...))}, nil
}
