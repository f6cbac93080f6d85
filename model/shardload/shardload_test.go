package shardload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/model/shard"
	"github.com/chorus-rt/chorus/model/shardload"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func TestMain(m *testing.M) {
	worker.Main()
	os.Exit(m.Run())
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// how one test tensor is sharded: kind "replicate", "split" (dim) or
// "fused" (dim 0, segments).
type how struct {
	kind string
	dim  int
	segs []int64
}

type ckpt struct {
	dir   string
	full  map[string]*tensor.Tensor
	hows  map[string]how
	spec  *shard.Spec
	names []string
}

// smallModel writes a two-layer decoder's worth of weights over three
// files with an index: fused QKV, column- and row-split projections,
// replicated embeddings and norms, in three dtypes.
func smallModel(t *testing.T) *ckpt {
	c := &ckpt{dir: t.TempDir(), full: map[string]*tensor.Tensor{}, hows: map[string]how{}}
	var named []safetensors.Named
	add := func(name string, dt tensor.DType, shape tensor.Shape, h how) {
		x := tensor.MustNew(dt, shape)
		if err := tensor.Random(x, uint64(len(c.full)+1)); err != nil {
			t.Fatal(err)
		}
		c.full[name], c.hows[name] = x, h
		c.names = append(c.names, name)
		named = append(named, safetensors.Named{Name: name, Tensor: x})
	}
	add("tok_embeddings.weight", tensor.BFloat16, tensor.Shape{32, 8}, how{kind: "replicate"})
	for l := range 2 {
		p := fmt.Sprintf("layers.%d.", l)
		add(p+"attention.wqkv", tensor.Float32, tensor.Shape{16, 8}, how{kind: "fused", segs: []int64{8, 4, 4}})
		add(p+"attention.wo", tensor.Float32, tensor.Shape{8, 8}, how{kind: "split", dim: 1})
		add(p+"feed_forward.w1", tensor.Float16, tensor.Shape{16, 8}, how{kind: "split", dim: 0})
		add(p+"feed_forward.w2", tensor.Float16, tensor.Shape{8, 16}, how{kind: "split", dim: 1})
		add(p+"attention_norm.weight", tensor.Float32, tensor.Shape{8}, how{kind: "replicate"})
	}
	add("norm.weight", tensor.Float32, tensor.Shape{8}, how{kind: "replicate"})
	if _, err := safetensors.WriteSharded(c.dir, named, 700, nil); err != nil {
		t.Fatal(err)
	}
	spec, err := shard.ParseSpec([]byte(`{"rules":[
		{"match":"layers.*.attention.wqkv","func":"fused","args":[0,8,4,4],"dtype":"float32"},
		{"match":"layers.*.attention.wo","split":1},
		{"regex":"layers\\.[0-9]+\\.feed_forward\\.w1","split":0,"dtype":"float16"},
		{"match":"layers.*.feed_forward.w2","split":-1},
		{"match":"**norm.weight","replicate":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c.spec = spec
	return c
}

// want is rank's part of name, computed element by element.
func (c *ckpt) want(name string, rank, n int) (tensor.Shape, []byte) {
	x, h := c.full[name], c.hows[name]
	shape := x.Shape().Clone()
	var ivs [][2]int64
	switch h.kind {
	case "replicate":
		return shape, x.Bytes()
	case "split":
		p := shape[h.dim] / int64(n)
		ivs = [][2]int64{{int64(rank) * p, int64(rank+1) * p}}
	case "fused":
		var start int64
		for _, s := range h.segs {
			p := s / int64(n)
			ivs = append(ivs, [2]int64{start + int64(rank)*p, start + int64(rank+1)*p})
			start += s
		}
	}
	elem := int64(x.DType().Size())
	outer, inner := int64(1), int64(1)
	for _, d := range shape[:h.dim] {
		outer *= d
	}
	for _, d := range shape[h.dim+1:] {
		inner *= d
	}
	var out []byte
	var width int64
	for _, iv := range ivs {
		width += iv[1] - iv[0]
	}
	for o := range outer {
		for _, iv := range ivs {
			for j := iv[0]; j < iv[1]; j++ {
				i := (o*shape[h.dim] + j) * inner // the run of inner elements at (o, j)
				out = append(out, x.Bytes()[i*elem:(i+inner)*elem]...)
			}
		}
	}
	shape[h.dim] = width
	return shape, out
}

// check compares every worker's tensors with the oracle.
func (c *ckpt) check(t *testing.T, s *session.Session, refs map[string]*session.DRef, dev tensor.Device) {
	t.Helper()
	ctx := bg(t)
	if len(refs) != len(c.full) {
		t.Fatalf("%d tensors loaded, want %d", len(refs), len(c.full))
	}
	n := s.NumWorkers() / s.NumGroups()
	for w := range s.NumWorkers() {
		for _, name := range c.names {
			v, err := s.DebugGetFromRemote(ctx, refs[name], w)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := v.(*tensor.Tensor)
			if !ok {
				t.Fatalf("worker %d: %s is a %T", w, name, v)
			}
			shape, data := c.want(name, w%n, n)
			if got.DType() != c.full[name].DType() || !got.Shape().Equal(shape) || !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("worker %d: %s: got %s%v, want %s%v (or the data differs)", w, name, got.DType(), got.Shape(), c.full[name].DType(), shape)
			}
		}
	}
}

type sessionKind struct {
	name  string
	dev   tensor.Device
	start func(t *testing.T) (*session.Session, error)
}

func kinds() []sessionKind {
	var ks []sessionKind
	for _, n := range []int{2, 4} {
		ks = append(ks,
			sessionKind{fmt.Sprintf("threaded-%d", n), tensor.CPUDevice, func(t *testing.T) (*session.Session, error) {
				return session.NewThreaded(session.Options{NumWorkers: n})
			}},
			sessionKind{fmt.Sprintf("process-%d", n), tensor.CPUDevice, func(t *testing.T) (*session.Session, error) {
				return session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n}})
			}})
	}
	ks = append(ks,
		sessionKind{"threaded-fakegpu-2", tensor.CUDADevice(0), func(t *testing.T) (*session.Session, error) {
			return session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}, OpenDevice: worker.OpenFake})
		}},
		sessionKind{"process-fakegpu-4", tensor.CUDADevice(0), func(t *testing.T) (*session.Session, error) {
			return session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 4, DeviceIDs: []int{0, 1}},
				Env: []string{worker.EnvFakeGPU + "=1"}})
		}},
		// Two groups of two: each group holds a full copy, split in two.
		sessionKind{"threaded-2groups", tensor.CPUDevice, func(t *testing.T) (*session.Session, error) {
			return session.NewThreaded(session.Options{NumWorkers: 4, NumGroups: 2})
		}})
	if d, err := cuda.Load(); err == nil && d.Init() == nil {
		if n, err := d.DeviceCount(); err == nil && n > 0 {
			ks = append(ks, sessionKind{"process-cuda-2", tensor.CUDADevice(0), func(t *testing.T) (*session.Session, error) {
				return session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1 % n}}})
			}})
		}
	}
	return ks
}

func TestLoadShardedInSessions(t *testing.T) {
	leaktest.Check(t)
	c := smallModel(t)
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			s, err := k.start(t)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			rec := &recorder{}
			var st shardload.Stats
			refs, err := shardload.Load(bg(t), s, c.dir, c.spec, shardload.Options{Progress: rec, Stats: &st})
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, s, refs, k.dev)
			// Every worker read exactly the bytes of its parts (no
			// conversion here): split tensors once over the group,
			// replicated ones once per worker.
			if len(st.BytesRead) != s.NumWorkers() {
				t.Fatalf("bytes read of %d workers, have %d", len(st.BytesRead), s.NumWorkers())
			}
			for w, got := range st.BytesRead {
				var want int64
				n := s.NumWorkers()
				if k.name == "threaded-2groups" {
					n = 2
				}
				for _, name := range c.names {
					_, b := c.want(name, w%n, n)
					want += int64(len(b))
				}
				if got != want {
					t.Errorf("worker %d read %d bytes, its parts hold %d", w, got, want)
				}
			}
			if rec.calls != len(c.full) || rec.done != rec.total || rec.doneBytes != rec.totalBytes || !rec.finished {
				t.Errorf("progress %+v", rec)
			}
			for _, r := range refs {
				r.Release()
			}
			if err := s.Sync(bg(t)); err != nil {
				t.Fatal(err)
			}
			if n := s.LiveRegisters(); n != 0 {
				t.Errorf("%d registers left", n)
			}
		})
	}
}

type recorder struct {
	calls, done, total    int
	doneBytes, totalBytes int64
	finished              bool
}

func (r *recorder) Progress(done, total int, db, tb int64) {
	r.calls++
	r.done, r.total, r.doneBytes, r.totalBytes = done, total, db, tb
}
func (r *recorder) Done() { r.finished = true }

// TestBytesReadOnce drives the worker functions by hand, as any
// controller can, and checks the bytes the workers read: each byte of a
// split tensor once in all, each byte of a replicated one once per worker.
func TestBytesReadOnce(t *testing.T) {
	leaktest.Check(t)
	c := smallModel(t)
	const n = 4
	s, err := session.NewThreaded(session.Options{NumWorkers: n})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	ctx := bg(t)
	js, _ := c.spec.JSON()
	open, _ := s.GetGlobalFunc(ctx, shardload.FuncOpen)
	load, _ := s.GetGlobalFunc(ctx, shardload.FuncLoad)
	read, _ := s.GetGlobalFunc(ctx, shardload.FuncBytesRead)
	closeF, _ := s.GetGlobalFunc(ctx, shardload.FuncClose)
	h, err := s.CallPacked(open, c.dir, string(js), 0)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, name := range c.names {
		if _, err := s.CallPacked(load, h, name); err != nil {
			t.Fatal(err)
		}
		if c.hows[name].kind == "replicate" {
			want += n * c.full[name].NumBytes()
		} else {
			want += c.full[name].NumBytes()
		}
	}
	r, err := s.CallPacked(read, h)
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	for w := range n {
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			t.Fatal(err)
		}
		got += v.(int64)
	}
	if got != want {
		t.Errorf("workers read %d bytes, want %d", got, want)
	}
	s.CallPackedDiscard(closeF, h)
	if _, err := s.CallPacked(load, h, c.names[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("load after close: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	leaktest.Check(t)
	c := smallModel(t)
	s, err := session.NewThreaded(session.Options{NumWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	ctx := bg(t)
	// A checkpoint with a 7-element tensor, to split in 2.
	odd := t.TempDir()
	safetensors.WriteFile(filepath.Join(odd, "model.safetensors"), []safetensors.Named{{Name: "norm.weight", Tensor: tensor.MustNew(tensor.Float32, tensor.Shape{7})}}, nil)
	one := 1
	cases := []struct {
		name   string
		dir    string
		spec   *shard.Spec
		want   error
		substr string
	}{
		{"missing checkpoint", filepath.Join(c.dir, "nope"), c.spec, safetensors.ErrNotFound, "nope: no such file"},
		{"rule matches nothing", c.dir, &shard.Spec{Rules: []shard.Rule{{Match: "layers.*.atention.wo", Split: &one}}}, shard.ErrSpec, `rule 0 (match "layers.*.atention.wo") matches no tensor`},
		{"indivisible", odd, &shard.Spec{Rules: []shard.Rule{{Match: "norm.weight", Split: new(int)}}}, shard.ErrShape, `"norm.weight" float32[7]`},
		{"wrong dtype", c.dir, &shard.Spec{Rules: []shard.Rule{{Match: "norm.weight", Replicate: true, DType: "bfloat16"}}}, shard.ErrDType, "holds float32, the spec expects bfloat16"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := shardload.LoadSharded(ctx, s, tc.dir, tc.spec)
			// Worker errors cross the session as text: the sentinel's
			// message is in it, errors.Is sees ErrFuncFailed.
			if !errors.Is(err, session.ErrFuncFailed) || !strings.Contains(err.Error(), tc.want.Error()) ||
				!strings.Contains(err.Error(), tc.substr) || refs != nil {
				t.Errorf("got %v, %d refs\nwant %v mentioning %q", err, len(refs), tc.want, tc.substr)
			}
			if n := s.LiveRegisters(); n != 0 {
				t.Errorf("%d registers left after the error", n)
			}
		})
	}
	// A file cut short after the workers opened it: the load fails naming
	// the tensor, and nothing is left behind.
	cut := t.TempDir()
	big := tensor.MustNew(tensor.Float32, tensor.Shape{64, 4})
	path := filepath.Join(cut, "model.safetensors")
	safetensors.WriteFile(path, []safetensors.Named{{Name: "a", Tensor: big}, {Name: "b", Tensor: big}}, nil)
	rep := &truncating{path: path}
	refs, err := shardload.Load(ctx, s, cut, nil, shardload.Options{Progress: rep})
	if !strings.Contains(err.Error(), safetensors.ErrTruncated.Error()) || !strings.Contains(err.Error(), `load "b"`) || refs != nil {
		t.Errorf("truncated: %v", err)
	}
	if n := s.LiveRegisters(); n != 0 {
		t.Errorf("%d registers left after the error", n)
	}
}

// truncating cuts the file after the first tensor is loaded.
type truncating struct{ path string }

func (r *truncating) Progress(done, total int, db, tb int64) {
	if done == 1 {
		fi, _ := os.Stat(r.path)
		os.Truncate(r.path, fi.Size()-4)
	}
}
func (r *truncating) Done() {}

func TestLineReporter(t *testing.T) {
	var b bytes.Buffer
	r := shardload.NewLine(&b)
	r.Progress(1, 120, 1e6, 4e9)
	r.Progress(2, 120, 2e6, 4e9) // within 100 ms: skipped
	r.Progress(120, 120, 4e9, 4e9)
	r.Done()
	if got := b.String(); got != "\rloading 1/120 tensors, 0.0/4.0 GB\rloading 120/120 tensors, 4.0/4.0 GB\n" {
		t.Errorf("%q", got)
	}
}

// TestLoadLargeThroughStaging loads tensors larger than the staging
// buffers (several pinned chunks each, column splits of many rows) onto
// fake GPUs and, when present, real ones.
func TestLoadLargeThroughStaging(t *testing.T) {
	leaktest.Check(t)
	c := &ckpt{dir: t.TempDir(), full: map[string]*tensor.Tensor{}, hows: map[string]how{}}
	shapes := map[string]how{"w_rows": {kind: "split", dim: 0}, "w_cols": {kind: "split", dim: 1}, "w_rep": {kind: "replicate"}}
	// Every part takes two or more chunks. Real GPUs: 12 MiB tensors
	// through 4 MiB buffers; fakes: 96 KiB tensors through 16 KiB
	// buffers (fast under -race).
	shape, staging := tensor.Shape{96, 256}, int64(16<<10)
	if hasCUDA() {
		shape, staging = tensor.Shape{1536, 2048}, 4<<20
	}
	var named []safetensors.Named
	for _, name := range []string{"w_cols", "w_rep", "w_rows"} {
		x := tensor.MustNew(tensor.Float32, shape)
		if err := tensor.Random(x, uint64(len(name))); err != nil {
			t.Fatal(err)
		}
		c.full[name], c.hows[name] = x, shapes[name]
		c.names = append(c.names, name)
		named = append(named, safetensors.Named{Name: name, Tensor: x})
	}
	if err := safetensors.WriteFile(filepath.Join(c.dir, "model.safetensors"), named, nil); err != nil {
		t.Fatal(err)
	}
	zero, one := 0, 1
	c.spec = &shard.Spec{Rules: []shard.Rule{{Match: "w_rows", Split: &zero}, {Match: "w_cols", Split: &one}}}
	for _, k := range kinds() {
		if k.dev.Kind != tensor.CUDA {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			s, err := k.start(t)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			refs, err := shardload.Load(bg(t), s, c.dir, c.spec, shardload.Options{StagingBytes: staging})
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, s, refs, k.dev)
		})
	}
}

func hasCUDA() bool {
	d, err := cuda.Load()
	return err == nil && d.Init() == nil
}

// TestMismatch: workers that see different checkpoints at the same path
// (different hosts) are refused before anything loads. Worker 1's info
// is forged here through a registry of the session's own.
func TestMismatch(t *testing.T) {
	leaktest.Check(t)
	c := smallModel(t)
	reg := registry.New()
	for _, name := range []string{shardload.FuncOpen, shardload.FuncLoad, shardload.FuncClose} {
		fn, err := registry.Global.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		reg.Register(name, fn)
	}
	info, _ := registry.Global.Lookup(shardload.FuncInfo)
	reg.Register(shardload.FuncInfo, func(env registry.Env, args []any) (any, error) {
		v, err := info(env, args)
		if err != nil || env.WorkerID() == 0 {
			return v, err
		}
		return strings.Replace(v.(string), `"fingerprint":"`, `"fingerprint":"x`, 1), nil
	})
	s, err := session.NewThreaded(session.Options{NumWorkers: 2, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	refs, err := shardload.LoadSharded(bg(t), s, c.dir, c.spec)
	if !errors.Is(err, shardload.ErrMismatch) || !strings.Contains(err.Error(), "worker 1") || refs != nil {
		t.Errorf("got %v", err)
	}
	if n := s.LiveRegisters(); n != 0 {
		t.Errorf("%d registers left", n)
	}
}
