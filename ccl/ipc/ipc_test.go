package ipc

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/tensor"
)

func TestParseStrategy(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Strategy
		ok   bool
	}{{"auto", Auto, true}, {"oneshot", OneShot, true}, {"twoshot", TwoShot, true}, {"nccl", NCCL, true}, {"one_shot", 0, false}, {"", 0, false}} {
		got, err := ParseStrategy(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseStrategy(%q) = %v, %v", c.in, got, err)
		}
		if c.ok && got.String() != c.in {
			t.Errorf("%v.String() = %q", got, got.String())
		}
		if !c.ok && !errors.Is(err, ccl.ErrBadArgs) {
			t.Errorf("ParseStrategy(%q): %v does not wrap ErrBadArgs", c.in, err)
		}
	}
}

func TestPickNeverNCCLWithoutTable(t *testing.T) {
	// Pick only returns strategies the kernels run; where NCCL wins is a
	// measured decision recorded in docs/ipc.md.
	for n := 2; n <= MaxRanks; n++ {
		for b := int64(1); b <= 1<<30; b *= 2 {
			if s := Pick(b, n); s != OneShot && s != TwoShot {
				t.Fatalf("Pick(%d, %d) = %v", b, n, s)
			}
		}
	}
}

// The Go launch arguments must match struct Args of kernels.cu byte for byte.
func TestKernelArgsLayout(t *testing.T) {
	if got := unsafe.Sizeof(kargs{}); got != 400 {
		t.Fatalf("kargs is %d bytes, kernels.cu's Args is 400", got)
	}
	if off := unsafe.Offsetof(kargs{}.digest); off != 392 {
		t.Fatalf("kargs.digest at %d", off)
	}
	if off := unsafe.Offsetof(kargs{}.flags); off != 396 {
		t.Fatalf("kargs.flags at %d", off)
	}
	if off := unsafe.Offsetof(kargs{}.ctl); off != 384 {
		t.Fatalf("kargs.ctl at %d", off)
	}
	if off := unsafe.Offsetof(kargs{}.in); off != 368 {
		t.Fatalf("kargs.in at %d", off)
	}
	if off := unsafe.Offsetof(kargs{}.out); off != 5*MaxRanks*8 {
		t.Fatalf("kargs.out at %d", off)
	}
	if off := unsafe.Offsetof(kargs{}.rank); off != 360 {
		t.Fatalf("kargs.rank at %d", off)
	}
	if !strings.Contains(kernelSource, "#define MAX_RANKS 8") || !strings.Contains(kernelSource, "#define MAX_BLOCKS 512") {
		t.Fatal("kernels.cu limits differ from MaxRanks/maxBlocks")
	}
}

// The kernels' waiting loops must never load from mapped host memory:
// such a load waits for the host (PCIe, NUMA, power states) and stalled
// barriers by about half a millisecond (docs/ipc.md, "Timeouts and aborts"). a.err is
// the only host word the kernels see, and they only store to it.
func TestKernelsNeverLoadHostMemory(t *testing.T) {
	const store = "*(volatile u32*)a.err = "
	uses := strings.Count(kernelSource, "a.err")
	stores := strings.Count(kernelSource, store)
	if uses == 0 || uses != stores {
		t.Fatalf("kernels.cu uses a.err %d times, %d of them stores (%q): every use must be a store", uses, stores, store)
	}
	for _, bad := range []string{"a.abort", "volatile u32* abort"} {
		if strings.Contains(kernelSource, bad) {
			t.Fatalf("kernels.cu mentions %q: the abort word lives in device memory (a.ctl)", bad)
		}
	}
}

func TestLayoutRegions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		size := r.Int64N(1 << 24)
		if r.IntN(4) == 0 {
			size = r.Int64N(64)
		}
		n := 1 + r.IntN(MaxRanks)
		l := layoutFor(size, n)
		for _, off := range []int64{l.data, l.scratch, l.barIn, l.barMid, l.barOut, l.counters, l.total} {
			if off%align != 0 {
				t.Fatalf("size %d n %d: region offset %d not aligned: %+v", size, n, off, l)
			}
		}
		if l.scratch-l.data < size {
			t.Fatalf("data region too small: %+v for %d", l, size)
		}
		// Two-shot writes ceil(vectors/n) 16-byte vectors of scratch.
		vec := size / 16
		if need := (vec + int64(n) - 1) / int64(n) * 16; l.barIn-l.scratch < need {
			t.Fatalf("scratch %d < %d for size %d n %d", l.barIn-l.scratch, need, size, n)
		}
		if l.barMid-l.barIn != barInBytes || l.counters-l.barOut != barBytes || l.total-l.counters < maxBlocks*4 {
			t.Fatalf("barrier regions wrong: %+v", l)
		}
	}
}

func TestRecordRoundTripAndOrder(t *testing.T) {
	var h cuda.IpcMemHandle
	for i := range h {
		h[i] = byte(i * 7)
	}
	in := record{status: 0, ordinal: 3, pid: 4242, seq: 9, size: 1 << 40, ptr: 0xdead0000, handle: h}
	b := make([]byte, recordBytes)
	in.encode(b)
	if out := decodeRecord(b); out != in {
		t.Fatalf("round trip: %+v != %+v", out, in)
	}
	ok := []record{{seq: 2, size: 100}, {seq: 2, size: 100}}
	if err := checkOrder(ok, 0); err != nil {
		t.Fatal(err)
	}
	for name, rs := range map[string][]record{
		"size":   {{seq: 2, size: 100}, {seq: 2, size: 101}},
		"order":  {{seq: 2, size: 100}, {seq: 3, size: 100}},
		"failed": {{seq: 2, size: 100}, {seq: 2, size: 100, status: 1}},
	} {
		err := checkOrder(rs, 1)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if name != "failed" && !errors.Is(err, ccl.ErrMismatch) {
			t.Errorf("%s: %v does not wrap ccl.ErrMismatch", name, err)
		}
	}
}

func TestDescRoundTrip(t *testing.T) {
	d := desc{bad: 0, strategy: byte(TwoShot), dtype: byte(tensor.BFloat16), op: byte(reduce.Max), staged: 1, count: 12345, seq: 77, offset: 4096}
	b := make([]byte, descBytes)
	d.encode(b)
	if got := decodeDesc(b); got != d {
		t.Fatalf("%+v != %+v", got, d)
	}
}

// Only calls that read their input in place skip the exchange, once
// every rank made them; every field of the descriptor changes the digest
// the kernels compare.
func TestCheckedCalls(t *testing.T) {
	base := desc{strategy: byte(OneShot), dtype: byte(tensor.BFloat16), op: byte(reduce.Sum), staged: routeDirect, count: 4096, seq: 3, offset: 256}
	variants := map[string]desc{"base": base}
	for name, f := range map[string]func(*desc){
		"bad":      func(d *desc) { d.bad = 1 },
		"strategy": func(d *desc) { d.strategy = byte(TwoShot) },
		"nccl":     func(d *desc) { d.strategy = byte(NCCL) },
		"dtype":    func(d *desc) { d.dtype = byte(tensor.Float16) },
		"op":       func(d *desc) { d.op = byte(reduce.Max) },
		"staged":   func(d *desc) { d.staged = routeStaged },
		"pushed":   func(d *desc) { d.staged = routePush },
		"count":    func(d *desc) { d.count++ },
		"seq":      func(d *desc) { d.seq++ },
		"offset":   func(d *desc) { d.offset += 16 },
	} {
		d := base
		f(&d)
		variants[name] = d
	}
	seen := map[uint32]string{}
	for name, d := range variants {
		g := d.digest()
		if g == 0 {
			t.Errorf("%s: digest 0 (the kernels would not compare it)", name)
		}
		if other, ok := seen[g]; ok {
			t.Errorf("%s and %s share digest %#x", name, other, g)
		}
		seen[g] = name
	}
	wantInPlace := map[string]bool{"base": true, "strategy": true, "dtype": true, "op": true, "count": true, "seq": true, "offset": true}
	r := &AllReducer{checked: map[desc]struct{}{}}
	for name, d := range variants {
		if got := d.inPlace(); got != wantInPlace[name] {
			t.Errorf("%s: inPlace %v, want %v", name, got, wantInPlace[name])
		}
		if r.wasChecked(d) {
			t.Errorf("%s: skips the exchange before any call", name)
		}
		r.remember(d)
		if got := r.wasChecked(d); got != wantInPlace[name] {
			t.Errorf("%s: after one exchange, skips it %v, want %v", name, got, wantInPlace[name])
		}
	}
	if r.wasChecked(desc{strategy: byte(OneShot), count: 1}) {
		t.Error("a call never exchanged skips the exchange")
	}
	for i := range maxChecked + 1 {
		d := base
		d.count = int64(i + 10000)
		r.remember(d)
	}
	if len(r.checked) > maxChecked {
		t.Errorf("%d remembered calls, at most %d", len(r.checked), maxChecked)
	}
}

func TestAllocatorConfig(t *testing.T) {
	if _, err := NewAllocator(Config{Rank: 0, Size: 9}); !errors.Is(err, ccl.ErrBadArgs) {
		t.Errorf("9 ranks: %v", err)
	}
	if _, err := NewAllocator(Config{Rank: 2, Size: 2}); !errors.Is(err, ccl.ErrBadArgs) {
		t.Errorf("rank 2 of 2: %v", err)
	}
	if _, err := NewAllocator(Config{Rank: 0, Size: 2}); !errors.Is(err, ccl.ErrBadArgs) {
		t.Errorf("no driver: %v", err)
	}
}

func TestBackendOffersOnlyCustom(t *testing.T) {
	b, err := ccl.Lookup("ipc")
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Join(context.Background(), ccl.Config{ID: id, Rank: 0, Size: 2, Device: tensor.CPUDevice}); !errors.Is(err, ccl.ErrBadArgs) {
		t.Fatalf("join on cpu: %v", err)
	}
	c, err := b.Join(context.Background(), ccl.Config{ID: id, Rank: 1, Size: 2, Device: tensor.CUDADevice(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	x := tensor.MustNew(tensor.Float32, tensor.Shape{4})
	for name, err := range map[string]error{
		"allreduce": c.AllReduce(context.Background(), x, x, reduce.Sum),
		"allgather": c.AllGather(context.Background(), x, x),
		"send":      c.Send(context.Background(), x, 0),
		"barrier":   c.Barrier(context.Background()),
	} {
		if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), "custom_allreduce") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPlacement(t *testing.T) {
	cases := []struct {
		name string
		rs   []record
		ok   bool
	}{
		{"one GPU per rank, one process", []record{{pid: 1, ordinal: 0}, {pid: 1, ordinal: 1}}, true},
		{"processes sharing a GPU", []record{{pid: 1, ordinal: 0}, {pid: 2, ordinal: 0}, {pid: 3, ordinal: 0}}, true},
		{"threads sharing a GPU", []record{{pid: 1, ordinal: 0}, {pid: 2, ordinal: 1}, {pid: 1, ordinal: 0}}, false},
		{"one rank", []record{{pid: 1, ordinal: 0}}, true},
	}
	for _, c := range cases {
		err := placement(c.rs)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "ranks 0 and 2") {
			t.Errorf("%s: error does not name the ranks: %v", c.name, err)
		}
	}
}

// TestRoute: IPC inputs are read where they are (pull), inputs peers
// cannot read take push up to PushMax and the staged copy above it;
// one-shot never runs in place; the push knob overrides.
func TestRoute(t *testing.T) {
	const kb = 1 << 10
	cases := []struct {
		name   string
		s      Strategy
		bytes  int64
		sp, rp uint64
		inIPC  bool
		off    int64
		mode   pushMode
		want   byte
	}{
		{"oneshot IPC", OneShot, 64 * kb, 0x10000, 0x90000, true, 0, pushAuto, routeDirect},
		{"oneshot IPC large", OneShot, 4 << 20, 0x10000, 0x9000000, true, 0, pushAuto, routeDirect},
		{"oneshot IPC, push always", OneShot, 64 * kb, 0x10000, 0x90000, true, 0, pushAlways, routePush},
		{"oneshot IPC above PushMax, push always", OneShot, PushMax + 16, 0x10000, 0x9000000, true, 0, pushAlways, routeDirect},
		{"oneshot host-side tensor", OneShot, 64 * kb, 0x10000, 0x90000, false, 0, pushAuto, routePush},
		{"oneshot not IPC, push never", OneShot, 64 * kb, 0x10000, 0x90000, false, 0, pushNever, routeStaged},
		{"oneshot not IPC above PushMax", OneShot, PushMax + 16, 0x10000, 0x9000000, false, 0, pushAuto, routeStaged},
		{"oneshot in place", OneShot, 64 * kb, 0x10000, 0x10000, true, 0, pushAuto, routePush},
		{"oneshot in place above PushMax", OneShot, PushMax + 16, 0x10000, 0x10000, true, 0, pushAuto, routeStaged},
		{"oneshot misaligned IPC offset", OneShot, 64 * kb, 0x10008, 0x90000, true, 8, pushAuto, routeStaged},
		{"twoshot in place", TwoShot, 64 * kb, 0x10000, 0x10000, true, 0, pushAuto, routeDirect},
		{"twoshot not IPC", TwoShot, 64 * kb, 0x10000, 0x90000, false, 0, pushAlways, routeStaged},
	}
	for _, c := range cases {
		if got := route(c.s, c.bytes, c.sp, c.rp, c.inIPC, c.off, c.mode); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, routeName(got), routeName(c.want))
		}
	}
}

func TestAutoTable(t *testing.T) {
	def, err := ParseAutoTable(defaultAutoTable)
	if err != nil {
		t.Fatalf("built-in table: %v", err)
	}
	if got := def.Ranks(); !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("built-in table covers ranks %v, want 1..8", got)
	}
	for _, tc := range []struct {
		bytes int64
		n     int
		graph bool
		want  Strategy
	}{
		{1 << 30, 2, false, OneShot},
		{1 << 30, 2, true, OneShot},
		{256 << 10, 4, false, OneShot},
		{256<<10 + 16, 4, false, TwoShot},
		{1 << 20, 8, true, TwoShot},
	} {
		if got := pickFrom(def, tc.bytes, tc.n, tc.graph); got != tc.want {
			t.Errorf("pick(%d bytes, %d ranks, graph %v) = %v, want %v", tc.bytes, tc.n, tc.graph, got, tc.want)
		}
	}
	for _, tc := range []struct{ name, json, want string }{
		{"unknown field", `{"rules":[{"ranks":2,"graph":false,"max_bytes":0,"strategy":"oneshot","x":1}]}`, "unknown field"},
		{"nccl", `{"rules":[{"ranks":2,"graph":false,"max_bytes":0,"strategy":"nccl"}]}`, "want oneshot or twoshot"},
		{"ranks", `{"rules":[{"ranks":9,"graph":false,"max_bytes":0,"strategy":"oneshot"}]}`, "outside 1..8"},
		{"open end", `{"rules":[{"ranks":2,"graph":false,"max_bytes":1024,"strategy":"oneshot"}]}`, "end with max_bytes 0"},
		{"order", `{"rules":[{"ranks":2,"graph":false,"max_bytes":4096,"strategy":"oneshot"},{"ranks":2,"graph":false,"max_bytes":1024,"strategy":"twoshot"},{"ranks":2,"graph":false,"max_bytes":0,"strategy":"twoshot"}]}`, "must increase"},
		{"after open", `{"rules":[{"ranks":2,"graph":false,"max_bytes":0,"strategy":"oneshot"},{"ranks":2,"graph":false,"max_bytes":0,"strategy":"twoshot"}]}`, "must increase"},
	} {
		_, err := ParseAutoTable([]byte(tc.json))
		if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrBadArgs containing %q", tc.name, err, tc.want)
		}
	}
	// A measured table: graph replays switch to two-shot above 16 MB.
	m, err := ParseAutoTable([]byte(`{"source":"test","rules":[
		{"ranks":2,"graph":false,"max_bytes":0,"strategy":"oneshot"},
		{"ranks":2,"graph":true,"max_bytes":16777216,"strategy":"oneshot"},
		{"ranks":2,"graph":true,"max_bytes":0,"strategy":"twoshot"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if pickFrom(m, 32<<20, 2, false) != OneShot || pickFrom(m, 32<<20, 2, true) != TwoShot || pickFrom(m, 16<<20, 2, true) != OneShot {
		t.Fatal("measured table not followed")
	}
	if _, ok := m.Pick(1024, 4, false); ok {
		t.Fatal("a rank count the table lacks must not match")
	}
	if pickFrom(m, 1024, 4, false) != OneShot {
		t.Fatal("without a rule auto runs one-shot")
	}
}

func TestAutoTableFill(t *testing.T) {
	def, _ := ParseAutoTable(defaultAutoTable)
	m, err := ParseAutoTable([]byte(`{"rules":[{"ranks":2,"graph":true,"max_bytes":1024,"strategy":"oneshot"},{"ranks":2,"graph":true,"max_bytes":0,"strategy":"twoshot"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m.fill(def)
	if pickFrom(m, 1<<20, 2, true) != TwoShot {
		t.Fatal("the file's rule must win")
	}
	if s, ok := m.Pick(1<<20, 4, false); !ok || s != TwoShot {
		t.Fatalf("built-in rule for 4 ranks: %v %v", s, ok)
	}
	if s, ok := m.Pick(1<<20, 2, false); !ok || s != OneShot {
		t.Fatalf("built-in eager rule for 2 ranks: %v %v", s, ok)
	}
}
