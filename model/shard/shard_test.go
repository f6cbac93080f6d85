package shard

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/tensor"
)

// slice is the oracle: the elements of full whose index along dim falls
// in one of ivs, concatenated along dim in order, computed element by
// element (nothing shared with Blocks).
func slice(full *tensor.Tensor, dim int, ivs []Interval) []byte {
	shape := full.Shape()
	elem := full.DType().Size()
	src := full.Bytes()
	var out []byte
	// Visit the result's elements in row-major order.
	outer := int64(1)
	for _, d := range shape[:dim] {
		outer *= d
	}
	inner := int64(1)
	for _, d := range shape[dim+1:] {
		inner *= d
	}
	for o := range outer {
		for _, iv := range ivs {
			for j := iv.Lo; j < iv.Hi; j++ {
				for in := range inner {
					idx := (o*shape[dim]+j)*inner + in
					out = append(out, src[idx*int64(elem):(idx+1)*int64(elem)]...)
				}
			}
		}
	}
	return out
}

type model struct {
	dir  string
	full map[string]*tensor.Tensor
	spec *Spec
	// want(name, rank, n) is the oracle's bytes and shape.
	want func(name string, rank, n int) ([]byte, tensor.Shape)
	// split reports whether the tensor is divided (read once in all).
	split map[string]bool
}

// randomModel writes a checkpoint of random tensors with a random rule
// each (replicate, split of a random dimension, fused segments), with
// every split dimension divisible by 4, over several files.
func randomModel(t *testing.T, seed uint64) *model {
	rng := rand.New(rand.NewPCG(seed, 99))
	m := &model{dir: t.TempDir(), full: map[string]*tensor.Tensor{}, spec: &Spec{}, split: map[string]bool{}}
	type how struct {
		kind string
		dim  int
		segs []int64
	}
	hows := map[string]how{}
	var named []safetensors.Named
	dts := []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Int8, tensor.Float64, tensor.Int32}
	for i := range 8 + rng.IntN(6) {
		rank := 1 + rng.IntN(3)
		shape := make(tensor.Shape, rank)
		for d := range shape {
			shape[d] = int64(1 + rng.IntN(5))
		}
		h := how{kind: []string{"replicate", "split", "fused"}[rng.IntN(3)]}
		h.dim = rng.IntN(rank)
		switch h.kind {
		case "split":
			shape[h.dim] *= 4
		case "fused":
			k := 1 + rng.IntN(3)
			shape[h.dim] = 0
			for range k {
				s := int64(4 * rng.IntN(4)) // zero-size segments too
				h.segs = append(h.segs, s)
				shape[h.dim] += s
			}
		}
		dt := dts[rng.IntN(len(dts))]
		x := tensor.MustNew(dt, shape)
		if err := tensor.Random(x, seed*100+uint64(i)); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("layers.%d.w%d", i%3, i)
		m.full[name] = x
		hows[name] = h
		named = append(named, safetensors.Named{Name: name, Tensor: x})
		switch h.kind {
		case "split":
			d := h.dim
			if rng.IntN(2) == 0 {
				d -= rank // negative: counted from the end
			}
			m.spec.Rules = append(m.spec.Rules, Rule{Match: name, Split: &d})
			m.split[name] = true
		case "fused":
			m.spec.Rules = append(m.spec.Rules, Rule{Regex: strings.ReplaceAll(name, ".", `\.`), Func: FuncFused, Args: append([]int64{int64(h.dim)}, h.segs...)})
			m.split[name] = true
		default:
			if rng.IntN(2) == 0 { // else: the default replicates
				m.spec.Rules = append(m.spec.Rules, Rule{Match: name, Replicate: true})
			}
		}
	}
	if _, err := safetensors.WriteSharded(m.dir, named, 200, nil); err != nil {
		t.Fatal(err)
	}
	m.want = func(name string, rank, n int) ([]byte, tensor.Shape) {
		x, h := m.full[name], hows[name]
		shape := x.Shape().Clone()
		switch h.kind {
		case "split":
			part := shape[h.dim] / int64(n)
			shape[h.dim] = part
			return slice(x, h.dim, []Interval{{int64(rank) * part, int64(rank+1) * part}}), shape
		case "fused":
			var ivs []Interval
			var start int64
			for _, s := range h.segs {
				p := s / int64(n)
				ivs = append(ivs, Interval{start + int64(rank)*p, start + int64(rank+1)*p})
				start += s
			}
			shape[h.dim] = start / int64(n)
			return slice(x, h.dim, ivs), shape
		}
		return append([]byte(nil), x.Bytes()...), shape
	}
	return m
}

// TestLoadMatchesSlicing is the property test: for random checkpoints and
// specs, N = 1, 2, 4, every rank's host and device loads equal the oracle,
// and the reads the ranks make cover each byte of a split tensor exactly
// once and each byte of a replicated one exactly N times.
func TestLoadMatchesSlicing(t *testing.T) {
	// Host loads larger than a conversion chunk must still read each
	// byte once.
	defer func(c int64) { convertChunk = c }(convertChunk)
	convertChunk = 24
	seeds := 12
	if testing.Short() {
		seeds = 4
	}
	for seed := range uint64(seeds) {
		m := randomModel(t, seed+1)
		for _, n := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("seed%d/n%d", seed, n), func(t *testing.T) {
				// counts[file][offset] = how many times each data byte was read.
				counts := map[string][]int{}
				var mu sync.Mutex
				var total Stats
				for rank := range n {
					l, err := Open(m.dir, m.spec, rank, n)
					if err != nil {
						t.Fatal(err)
					}
					l.onRead = func(file string, off, k int64) {
						mu.Lock()
						defer mu.Unlock()
						c := counts[file]
						for int64(len(c)) < off+k {
							c = append(c, 0)
						}
						for i := off; i < off+k; i++ {
							c[i]++
						}
						counts[file] = c
					}
					dev := device.NewFake(0, 1<<20)
					st, err := NewStaging(dev, 64) // tiny chunks: many refills
					if err != nil {
						t.Fatal(err)
					}
					for _, name := range l.Names() {
						want, shape := m.want(name, rank, n)
						got, err := l.Load(name)
						if err != nil {
							t.Fatal(err)
						}
						if !got.Shape().Equal(shape) || !bytes.Equal(got.Bytes(), want) {
							t.Fatalf("rank %d: %s: got %v, want %v (or data differs)", rank, name, got.Shape(), shape)
						}
						buf, err := dev.Alloc(int64(len(want)) + 8)
						if err != nil {
							t.Fatal(err)
						}
						if err := l.LoadDevice(name, st, buf, 8); err != nil {
							t.Fatal(err)
						}
						back := make([]byte, len(want))
						if err := dev.CopyOut(back, buf, 8); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(back, want) {
							t.Fatalf("rank %d: %s: device copy differs", rank, name)
						}
						dev.Free(buf)
					}
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
					if dev.PinnedInUse() != 0 {
						t.Errorf("%d pinned buffers left", dev.PinnedInUse())
					}
					dev.Close()
					s := l.Stats()
					total.BytesRead += s.BytesRead
					total.Tensors += s.Tensors
					l.Close()
				}
				// Every read went to its tensor's bytes: check the counts
				// per tensor, over the two loads (host and device) each
				// rank made.
				var want int64
				ck, err := safetensors.OpenCheckpoint(m.dir)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				for _, name := range ck.Names() {
					f, info, _ := ck.Lookup(name)
					per := 2
					if !m.split[name] {
						per = 2 * n
					}
					c := counts[f.Path]
					for i := info.Begin; i < info.End; i++ {
						if int64(len(c)) <= i || c[i] != per {
							got := 0
							if int64(len(c)) > i {
								got = c[i]
							}
							t.Fatalf("%s: byte %d read %d times, want %d", name, i-info.Begin, got, per)
						}
					}
					want += int64(per) * info.Size()
				}
				if total.BytesRead != want || total.Tensors != int64(2*n*len(m.full)) {
					t.Errorf("stats %+v, want %d bytes", total, want)
				}
			})
		}
	}
}

func TestBlocksCoalesce(t *testing.T) {
	cases := []struct {
		shape tensor.Shape
		dim   int
		ivs   []Interval
		want  []Range
	}{
		{tensor.Shape{4, 6}, 0, []Interval{{1, 3}}, []Range{{24, 48}}},                               // rows: one range
		{tensor.Shape{4, 6}, 1, []Interval{{2, 4}}, []Range{{8, 8}, {32, 8}, {56, 8}, {80, 8}}},      // columns: one per row
		{tensor.Shape{4, 6}, 1, []Interval{{0, 6}}, []Range{{0, 96}}},                                // whole rows coalesce
		{tensor.Shape{2, 3, 4}, 1, []Interval{{0, 1}, {2, 3}}, []Range{{0, 16}, {32, 32}, {80, 16}}}, // the end of one row meets the next
		{tensor.Shape{4, 6}, 0, []Interval{{0, 1}, {1, 2}}, []Range{{0, 48}}},                        // adjacent segments merge
		{tensor.Shape{1 << 40, 0}, 1, []Interval{{0, 0}}, nil},                                       // no bytes, no loop
	}
	for _, c := range cases {
		p, err := Blocks(c.shape, 4, c.dim, c.ivs)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(p.Ranges) != fmt.Sprint(c.want) {
			t.Errorf("%v dim %d %v: %v, want %v", c.shape, c.dim, c.ivs, p.Ranges, c.want)
		}
	}
}

func writeModel(t *testing.T, ts ...safetensors.Named) string {
	dir := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func named(name string, dt tensor.DType, shape ...int64) safetensors.Named {
	x := tensor.MustNew(dt, shape)
	tensor.Random(x, uint64(len(name)))
	return safetensors.Named{Name: name, Tensor: x}
}

func TestSpecErrors(t *testing.T) {
	dir := writeModel(t,
		named("layers.0.attn.wq", tensor.Float32, 8, 6),
		named("layers.1.attn.wq", tensor.Float32, 8, 6),
		named("embed", tensor.BFloat16, 10, 4),
		named("ids", tensor.Int32, 3))
	cases := []struct {
		name   string
		spec   string
		n      int
		want   error
		substr string
	}{
		{"rule matches nothing", `{"rules":[{"match":"layers.*.atn.wq","split":1}]}`, 2, ErrSpec, `rule 0 (match "layers.*.atn.wq") matches no tensor`},
		{"not divisible", `{"rules":[{"match":"layers.*.attn.wq","split":1}]}`, 4, ErrShape, "6 is not divisible by 4"},
		{"no such dim", `{"rules":[{"match":"embed","split":2}]}`, 2, ErrShape, "split dimension 2"},
		{"unknown func", `{"rules":[{"match":"embed","func":"nope"}]}`, 2, ErrSpec, `unknown function "nope"`},
		{"two actions", `{"rules":[{"match":"embed","split":0,"replicate":true}]}`, 2, ErrSpec, "exactly one"},
		{"no action", `{"rules":[{"match":"embed"}]}`, 2, ErrSpec, "exactly one"},
		{"no pattern", `{"rules":[{"split":0}]}`, 2, ErrSpec, "give match or regex"},
		{"both patterns", `{"rules":[{"match":"embed","regex":"e.*","split":0}]}`, 2, ErrSpec, "not both"},
		{"bad regex", `{"rules":[{"regex":"(","split":0}]}`, 2, ErrSpec, "missing closing"},
		{"unknown field", `{"rules":[{"match":"embed","splt":0}]}`, 2, ErrSpec, "unknown field"},
		{"bad default", `{"default":"shard"}`, 2, ErrSpec, "default"},
		{"default error", `{"default":"error","rules":[{"match":"layers.**","split":0},{"match":"embed","replicate":true}]}`, 2, ErrSpec, `tensor "ids"`},
		{"wrong dtype", `{"rules":[{"match":"embed","split":0,"dtype":"float32"}]}`, 2, ErrDType, "holds bfloat16, the spec expects float32"},
		{"convert ints", `{"rules":[{"match":"ids","replicate":true,"convert":"float16"}]}`, 2, ErrDType, "float32, float16 and bfloat16 only, the checkpoint holds int32"},
		{"convert to int", `{"rules":[{"match":"ids","replicate":true,"convert":"int8"}]}`, 2, ErrSpec, "between float32, float16 and bfloat16 only"},
		{"args without func", `{"rules":[{"match":"ids","split":0,"args":[1]}]}`, 2, ErrSpec, "args without func"},
		{"fused sizes", `{"rules":[{"match":"layers.**","func":"fused","args":[0,4,2]}]}`, 2, ErrShape, "add up to 6"},
		{"fused indivisible", `{"rules":[{"match":"layers.**","func":"fused","args":[0,5,3]}]}`, 2, ErrShape, "not divisible"},
		{"bad rank count", `{}`, 0, ErrSpec, "rank 0 of 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, err := ParseSpec([]byte(c.spec))
			if err == nil {
				var l *Loader
				l, err = Open(dir, spec, 0, c.n)
				if err == nil {
					l.Close()
				}
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.substr) {
				t.Errorf("got %v\nwant %v mentioning %q", err, c.want, c.substr)
			}
		})
	}
	// Load of an absent tensor.
	l, err := Open(dir, nil, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Load("absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent: %v", err)
	}
}

func TestGlob(t *testing.T) {
	cases := []struct {
		glob, name string
		ok         bool
	}{
		{"layers.*.attn.wq", "layers.7.attn.wq", true},
		{"layers.*.attn.wq", "layers.17.attn.wq", true},
		{"layers.*.attn.wq", "layers.7.x.attn.wq", false},
		{"layers.*.attn.wq", "layersX7.attn.wq", false}, // dots are literal
		{"layers.**.wq", "layers.7.x.attn.wq", true},
		{"*.bias", "fc.bias", true},
		{"model.layers.*.mlp.*_proj.weight", "model.layers.3.mlp.gate_proj.weight", true},
		{"a+b", "a+b", true}, // exact, no pattern
	}
	for _, c := range cases {
		r, err := compileRule(0, Rule{Match: c.glob, Replicate: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.matches(c.name) != c.ok {
			t.Errorf("%q ~ %q: %v", c.glob, c.name, !c.ok)
		}
	}
}

func TestRegisteredFunc(t *testing.T) {
	// "test.rows_mod": rank takes rows r, r+n, r+2n...: strided rows,
	// as an interleaved layout would need.
	MustRegister("test.rows_mod", func(r Request) (Plan, error) {
		rows := r.Shape[0] / int64(r.N)
		row := r.Shape[1] * int64(r.DType.Size())
		var rs []Range
		for i := range rows {
			rs = append(rs, Range{(i*int64(r.N) + int64(r.Rank)) * row, row})
		}
		return Plan{Shape: tensor.Shape{rows, r.Shape[1]}, Ranges: rs}, nil
	})
	MustRegister("test.bad", func(r Request) (Plan, error) {
		switch r.Args[0] {
		case 0:
			return Plan{Shape: tensor.Shape{1}, Ranges: []Range{{1 << 20, 4}}}, nil
		case 1:
			return Plan{Shape: tensor.Shape{1}, Ranges: []Range{{2, 4}}}, nil
		case 2:
			return Plan{Shape: tensor.Shape{2}, Ranges: []Range{{0, 4}}}, nil
		}
		return Plan{}, errors.New("refused")
	})
	if err := Register("test.rows_mod", nil); err == nil {
		t.Error("duplicate registration accepted")
	}
	x := named("w", tensor.Float32, 8, 3)
	dir := writeModel(t, x)
	for rank := range 4 {
		l, err := Open(dir, &Spec{Rules: []Rule{{Match: "w", Func: "test.rows_mod"}}}, rank, 4)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Load("w")
		if err != nil {
			t.Fatal(err)
		}
		src := x.Tensor.Bytes()
		want := append(append([]byte(nil), src[rank*12:rank*12+12]...), src[(rank+4)*12:(rank+4)*12+12]...)
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("rank %d differs", rank)
		}
		l.Close()
	}
	for i, substr := range []string{"outside the tensor", "not aligned", "needs 8", "refused"} {
		_, err := Open(dir, &Spec{Rules: []Rule{{Match: "w", Func: "test.bad", Args: []int64{int64(i)}}}}, 0, 2)
		if err == nil || !strings.Contains(err.Error(), substr) || !strings.Contains(err.Error(), `func "test.bad"`) {
			t.Errorf("bad plan %d: %v", i, err)
		}
	}
}

// TestConvert: every pair of float32, float16 and bfloat16 (widening,
// narrowing, and the same dtype), a column split read in several chunks,
// on the host and through pinned staging on the fake device, against
// tensor.SetFromFloat64 of the source values (exact widening, round to
// nearest even narrowing).
func TestConvert(t *testing.T) {
	defer func(c int64) { convertChunk = c }(convertChunk)
	convertChunk = 8 // several chunks per tensor
	floats := []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}
	for _, from := range floats {
		x := named("w", from, 4, 6)
		dir := writeModel(t, x, named("h", tensor.Float16, 4))
		for _, to := range floats {
			one := 1
			spec := &Spec{Rules: []Rule{{Match: "w", Split: &one, Convert: to.String(), DType: from.String()}, {Match: "h", Replicate: true, Convert: "float16"}}}
			l, err := Open(dir, spec, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.Load("w")
			if err != nil {
				t.Fatal(err)
			}
			part := tensor.MustNew(from, tensor.Shape{4, 3})
			copy(part.Bytes(), slice(x.Tensor, 1, []Interval{{3, 6}}))
			vals, _ := tensor.ToFloat64(part)
			want := tensor.MustNew(to, tensor.Shape{4, 3})
			tensor.SetFromFloat64(want, vals)
			if err := tensor.Equal(got, want); err != nil {
				t.Errorf("%v to %v: %v", from, to, err)
			}
			dev := device.NewFake(0, 1<<20)
			st, _ := NewStaging(dev, 64)
			buf, _ := dev.Alloc(want.NumBytes())
			if err := l.LoadDevice("w", st, buf, 0); err != nil {
				t.Fatal(err)
			}
			back := make([]byte, want.NumBytes())
			dev.CopyOut(back, buf, 0)
			if !bytes.Equal(back, want.Bytes()) {
				t.Errorf("%v to %v: device load differs", from, to)
			}
			if h, err := l.Load("h"); err != nil || h.DType() != tensor.Float16 {
				t.Errorf("float16 with convert float16: %v, %v", h, err)
			}
			st.Close()
			dev.Close()
			l.Close()
		}
	}
}

func TestLoadErrors(t *testing.T) {
	x := named("w", tensor.Float32, 64, 4)
	dir := writeModel(t, x)
	l, err := Open(dir, nil, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dev := device.NewFake(0, 1<<20)
	defer dev.Close()
	st, _ := NewStaging(dev, 256)
	defer st.Close()
	small, _ := dev.Alloc(100)
	if err := l.LoadDevice("w", st, small, 0); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Errorf("small destination: %v", err)
	}
	// The file shrinks after Open: the load fails with ErrTruncated and
	// the staging buffers are idle again (usable for the next load).
	path := filepath.Join(dir, "model.safetensors")
	fi, _ := os.Stat(path)
	os.Truncate(path, fi.Size()-10)
	buf, _ := dev.Alloc(x.Tensor.NumBytes())
	if err := l.LoadDevice("w", st, buf, 0); !errors.Is(err, safetensors.ErrTruncated) {
		t.Errorf("truncated, device: %v", err)
	}
	if _, err := l.Load("w"); !errors.Is(err, safetensors.ErrTruncated) || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("truncated, host: %v", err)
	}
	if _, err := NewStaging(struct{ device.Device }{dev}, 0); err == nil {
		t.Error("staging on a device without pinned memory: no error")
	}
}
