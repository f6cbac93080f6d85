package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/tensor"
)

func testRegistry(t *testing.T) *registry.Registry {
	r := registry.New()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.RegisterTyped("add", func(a, b int64) int64 { return a + b }))
	must(r.RegisterTyped("fail", func() error { return errors.New("nope") }))
	must(r.RegisterTyped("boom", func() int64 { panic("kaboom") }))
	must(r.RegisterTyped("tensor", func(env registry.Env) (*tensor.Tensor, error) {
		return env.Alloc(tensor.Float32, tensor.Shape{2}, env.Device(), "")
	}))
	return r
}

func newTestWorker(t *testing.T, id, n int) *Worker {
	w, err := New(Config{ID: id, NumWorkers: n, Registry: testRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

type step struct {
	cmd      wire.Command
	notice   bool        // a Failure notice is expected
	reply    bool        // a Reply is expected
	value    any         // the reply's value, when reply
	codes    []wire.Code // the reply's error codes, when reply
	contains string      // substring of the first reply error
}

func run(t *testing.T, w *Worker, steps []step) {
	t.Helper()
	for i, s := range steps {
		reply, notice, _ := w.Handle(&s.cmd)
		if (notice != nil) != s.notice {
			t.Fatalf("step %d (%v): notice = %v, want %v", i, s.cmd.Action, notice, s.notice)
		}
		if (reply != nil) != s.reply {
			t.Fatalf("step %d (%v): reply = %v, want %v", i, s.cmd.Action, reply, s.reply)
		}
		if reply == nil {
			continue
		}
		if reply.Seq != s.cmd.Seq || reply.Worker != int32(w.WorkerID()) {
			t.Errorf("step %d: reply seq/worker %d/%d", i, reply.Seq, reply.Worker)
		}
		if s.value != nil && reply.Value != s.value {
			t.Errorf("step %d: value %v, want %v", i, reply.Value, s.value)
		}
		var codes []wire.Code
		for _, e := range reply.Errors {
			codes = append(codes, e.Code)
		}
		if len(codes) != len(s.codes) {
			t.Fatalf("step %d: error codes %v (%v), want %v", i, codes, reply.Errors, s.codes)
		}
		for j := range codes {
			if codes[j] != s.codes[j] {
				t.Errorf("step %d: error codes %v, want %v", i, codes, s.codes)
			}
		}
		if s.contains != "" && (len(reply.Errors) == 0 || !strings.Contains(reply.Errors[0].Msg, s.contains)) {
			t.Errorf("step %d: errors %v lack %q", i, reply.Errors, s.contains)
		}
	}
}

func TestHandleTranscript(t *testing.T) {
	w := newTestWorker(t, 1, 2)
	sync := func(seq uint64) wire.Command {
		return wire.Command{Action: wire.ActSyncWorker, Seq: seq, Worker: wire.AllWorkers}
	}
	get := func(seq uint64, reg int64) wire.Command {
		return wire.Command{Action: wire.ActDebugGet, Seq: seq, Worker: 1, Reg: reg}
	}
	run(t, w, []step{
		{cmd: wire.Command{Action: wire.ActGetGlobalFunc, Seq: 1, Reg: 1, Name: "add"}, reply: true},
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 2, Reg: 2, Func: 1, Args: []any{int64(2), int64(3)}}},
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 3, Reg: 3, Func: 1, Args: []any{value.Ref(2), value.Ref(2)}}},
		{cmd: get(4, 3), reply: true, value: int64(10)},
		// Unknown function: the reply itself carries the failure.
		{cmd: wire.Command{Action: wire.ActGetGlobalFunc, Seq: 5, Reg: 4, Name: "nope"}, reply: true, codes: []wire.Code{wire.CodeUnknown}},
		// Calling the failed lookup: first failure since the reply -> notice.
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 6, Reg: 5, Func: 4}, notice: true},
		// A second failure: no second notice.
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 7, Reg: 6, Func: 9}},
		{cmd: sync(8), reply: true, codes: []wire.Code{wire.CodeDepFailed, wire.CodeBadReg}, contains: "unknown function"},
		{cmd: sync(9), reply: true},
		// Bad args, function error, panic, dependent failure.
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 10, Reg: 7, Func: 1, Args: []any{"x", int64(1)}}, notice: true},
		{cmd: wire.Command{Action: wire.ActGetGlobalFunc, Seq: 11, Reg: 8, Name: "fail"}, reply: true, codes: []wire.Code{wire.CodeBadArgs}},
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 12, Reg: 9, Func: 8}, notice: true},
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 13, Reg: 10, Func: 1, Args: []any{value.Ref(9), int64(1)}}},
		{cmd: sync(14), reply: true, codes: []wire.Code{wire.CodeFailed, wire.CodeDepFailed}, contains: "nope"},
		{cmd: wire.Command{Action: wire.ActGetGlobalFunc, Seq: 15, Reg: 11, Name: "boom"}, reply: true},
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 16, Reg: 12, Func: 11}, notice: true},
		{cmd: sync(17), reply: true, codes: []wire.Code{wire.CodePanic}, contains: "kaboom"},
		// KillReg empties a register; reading it is CodeBadReg.
		{cmd: wire.Command{Action: wire.ActKillReg, Seq: 18, Reg: 3}},
		{cmd: get(19, 3), reply: true, codes: []wire.Code{wire.CodeBadReg}, contains: "empty"},
		// A function cannot travel to the controller.
		{cmd: get(20, 1), reply: true, codes: []wire.Code{wire.CodeBadReg}, contains: "cannot be sent"},
		// Register ids are bounded.
		{cmd: wire.Command{Action: wire.ActDebugSet, Seq: 21, Worker: 1, Reg: MaxRegisters, Args: []any{int64(1)}}, notice: true},
		{cmd: sync(22), reply: true, codes: []wire.Code{wire.CodeBadReg}, contains: "out of range"},
		// Targeted set and get; register 0 discards.
		{cmd: wire.Command{Action: wire.ActDebugSet, Seq: 23, Worker: 1, Reg: 40, Args: []any{"hello"}}},
		{cmd: get(24, 40), reply: true, value: "hello"},
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 25, Reg: 0, Func: 1, Args: []any{int64(1), int64(1)}}},
		{cmd: get(26, 0), reply: true, codes: []wire.Code{wire.CodeBadReg}},
		{cmd: wire.Command{Action: wire.ActPing, Seq: 27}, reply: true},
	})
	if _, _, stop := w.Handle(&wire.Command{Action: wire.ActShutdown}); !stop {
		t.Error("Shutdown did not stop the worker")
	}
}

func TestCopies(t *testing.T) {
	w := newTestWorker(t, 0, 1)
	src := tensor.FromSlice([]float32{1, 2})
	run(t, w, []step{
		{cmd: wire.Command{Action: wire.ActGetGlobalFunc, Seq: 1, Reg: 1, Name: "tensor"}, reply: true},
		{cmd: wire.Command{Action: wire.ActCallPacked, Seq: 2, Reg: 2, Func: 1}},
		{cmd: wire.Command{Action: wire.ActCopyToWorker0, Seq: 3, Reg: 2, Args: []any{src}}},
		{cmd: wire.Command{Action: wire.ActCopyToWorker0, Seq: 4, Reg: 2, Args: []any{tensor.FromSlice([]float32{1, 2, 3})}}, notice: true},
		{cmd: wire.Command{Action: wire.ActCopyToWorker0, Seq: 5, Reg: 2, Args: []any{int64(1)}}},
		{cmd: wire.Command{Action: wire.ActCopyToWorker0, Seq: 6, Reg: 1, Args: []any{src}}},
		{cmd: wire.Command{Action: wire.ActSyncWorker, Seq: 7}, reply: true, codes: []wire.Code{wire.CodeBadArgs, wire.CodeBadArgs, wire.CodeBadReg}, contains: "layout mismatch"},
		{cmd: wire.Command{Action: wire.ActCopyFromWorker0, Seq: 8, Reg: 1}, reply: true, codes: []wire.Code{wire.CodeBadReg}, contains: "not a tensor"},
	})
	reply, _, _ := w.Handle(&wire.Command{Action: wire.ActCopyFromWorker0, Seq: 9, Reg: 2})
	got, ok := reply.Value.(*tensor.Tensor)
	if !ok || len(reply.Errors) != 0 {
		t.Fatalf("CopyFromWorker0: %+v", reply)
	}
	if err := tensor.Equal(got, src); err != nil {
		t.Error(err)
	}
}

func TestErrorListIsBounded(t *testing.T) {
	w := newTestWorker(t, 0, 1)
	for i := range wire.MaxErrorsPerReply + 5 {
		w.Handle(&wire.Command{Action: wire.ActCallPacked, Seq: uint64(i), Reg: 1, Func: 99})
	}
	reply, _, _ := w.Handle(&wire.Command{Action: wire.ActSyncWorker, Seq: 100})
	if len(reply.Errors) != wire.MaxErrorsPerReply || reply.Dropped != 5 {
		t.Errorf("errors %d dropped %d, want %d and 5", len(reply.Errors), reply.Dropped, wire.MaxErrorsPerReply)
	}
}

func TestGroupsAndBuiltins(t *testing.T) {
	w, err := New(Config{ID: 5, NumWorkers: 8, NumGroups: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := map[string]int64{
		"chorus.worker_id": 5, "chorus.worker_rank": 1, "chorus.num_workers": 8,
		"chorus.num_groups": 2, "chorus.group_id": 1, "chorus.group_size": 4,
	}
	reg := int64(1)
	for name, v := range want {
		w.Handle(&wire.Command{Action: wire.ActGetGlobalFunc, Reg: reg, Name: name})
		w.Handle(&wire.Command{Action: wire.ActCallPacked, Reg: reg + 1, Func: reg})
		r, _, _ := w.Handle(&wire.Command{Action: wire.ActDebugGet, Reg: reg + 1})
		if r.Value != v || len(r.Errors) != 0 {
			t.Errorf("%s = %v (%v), want %d", name, r.Value, r.Errors, v)
		}
		reg += 2
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{ID: 0, NumWorkers: 1}, true},
		{Config{ID: 3, NumWorkers: 4, NumGroups: 2}, true},
		{Config{ID: 4, NumWorkers: 4}, false},
		{Config{ID: -1, NumWorkers: 4}, false},
		{Config{ID: 0, NumWorkers: 0}, false},
		{Config{ID: 0, NumWorkers: 4, NumGroups: 3}, false},
		{Config{ID: 0, NumWorkers: 4, Device: tensor.Device{Kind: 9}}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", c.cfg, err, c.ok)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	for _, s := range []Spec{
		{ID: 2, NumWorkers: 4, NumGroups: 2, Transport: "stream", Device: tensor.CUDADevice(1), Log: -1},
		{ID: 3, NumWorkers: 4, NumGroups: 1, Transport: "shm", Device: tensor.CPUDevice, Log: -1},
		{ID: 3, NumWorkers: 4, NumGroups: 1, Transport: "shm", Device: tensor.CPUDevice, Log: 1},
		// The options travel too; their strings may hold commas and
		// equals signs.
		{ID: 0, NumWorkers: 2, NumGroups: 1, Transport: "shm", Device: tensor.CPUDevice, Log: 0, Flight: true, TraceFile: "/tmp/a,b=c.worker-0.part",
			Options: Options{FakeGPU: true, CPUProfile: "/tmp/prof dir", IPCAutoTable: "t.json", SkipChecks: true, NoSharedTensors: true,
				CPU:      cpu.Options{SlotBytes: 4096, OneShotMax: 1024, NoCMA: true, Threads: 2, Spin: time.Millisecond, CMAChunk: 1 << 20},
				Endpoint: hier.EndpointOptions{Addr: "10.0.0.1", Files: link.Files{CA: "ca.pem", Cert: "c%2C.pem", Key: "k.pem", Token: "tok"}, Plaintext: true}}},
	} {
		got, err := ParseSpec(s.String())
		if err != nil || got != s {
			t.Fatalf("ParseSpec(%q) = %+v, %v", s.String(), got, err)
		}
	}
	for _, bad := range []string{
		"v1,id=0,n=1,groups=1,transport=stream,device=cpu,log=0", "v1,id=0,n=1,groups=1,transport=shm,device=cpu,log=-1",
		"v1,id=0,n=1,groups=1,transport=shm,device=cpu,log=x",
		"", "v2,id=0,n=1,groups=1,transport=shm,device=cpu", "v1,id=0,n=1,groups=1,transport=shm",
		"v1,id=0,n=1,groups=1,transport=udp,device=cpu", "v1,id=5,n=1,groups=1,transport=shm,device=cpu",
		"v1,id=x,n=1,groups=1,transport=shm,device=cpu", "v1,id=0,n=1,groups=1,transport=shm,device=cpu,extra=1",
		"v1,id", "v1,id=0,n=4,groups=3,transport=shm,device=cpu",
		"v1,id=0,n=1,groups=1,transport=shm,device=cpu,flight=yes", "v1,id=0,n=1,groups=1,transport=shm,device=cpu,trace=%zz",
		"v1,id=0,n=1,groups=1,transport=shm,device=cpu,cpu=%7B%22Slots%22%3A1%7D", "v1,id=0,n=1,groups=1,transport=shm,device=cpu,cpu=x",
	} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add("v1,id=0,n=1,groups=1,transport=shm,device=cpu")
	f.Add("v1,id=3,n=4,groups=2,transport=stream,device=cuda:3")
	f.Add("v1,,,=")
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseSpec(s)
		if err != nil {
			return
		}
		again, err := ParseSpec(spec.String())
		if err != nil || again != spec {
			t.Fatalf("round trip of %q: %+v, %v", s, again, err)
		}
	})
}

// IPC memory needs GPU workers and a GPU communicator: without them the
// scope and the custom all-reduce are clear errors, not silent fallbacks.
func TestIPCNeedsGPUs(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"cpu worker", Config{ID: 0, NumWorkers: 2}},
		{"fake gpu, no communicator", Config{ID: 0, NumWorkers: 2, Device: tensor.CUDADevice(0), OpenDevice: OpenFake}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			_, err = w.Alloc(tensor.Float32, tensor.Shape{16}, w.Device(), ScopeIPC)
			if err == nil {
				t.Fatal("ipc_memory allocation succeeded")
			}
			if w.Device().Kind == tensor.CUDA && !errors.Is(err, ErrNoIPC) {
				t.Errorf("alloc: %v, want ErrNoIPC", err)
			}
			x := tensor.MustNew(tensor.Float32, tensor.Shape{16})
			if err := w.CustomAllReduce(x, x, "sum", "auto"); err == nil {
				t.Error("custom all-reduce without IPC succeeded")
			}
			if err := w.CustomAllReduce(x, x, "sum", "threeshot"); err == nil || !strings.Contains(err.Error(), "threeshot") {
				t.Errorf("unknown strategy: %v", err)
			}
		})
	}
}

// newFakeGPUWorker is a one-worker session's worker on a fake GPU,
// closed when the test ends.
func newFakeGPUWorker(t *testing.T) *Worker {
	t.Helper()
	w, err := New(Config{ID: 0, NumWorkers: 1, Device: tensor.CUDADevice(0), OpenDevice: OpenFake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// TestCapture records device copies on a fake GPU and replays them: the
// recorded copy runs only at Launch and reads the source as it is then;
// allocations, reads back and syncs inside the capture are refused; a
// failing fn discards the capture; a CPU worker cannot capture.
func TestCapture(t *testing.T) {
	w := newFakeGPUWorker(t)
	dev := w.Device()
	src, err := w.Alloc(tensor.Float32, tensor.Shape{4}, dev, "")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := w.Alloc(tensor.Float32, tensor.Shape{4}, dev, "")
	if err != nil {
		t.Fatal(err)
	}
	host := func(vs ...float32) *tensor.Tensor { return tensor.FromSlice(vs) }
	vals := func(x *tensor.Tensor) []float32 {
		fs, err := tensor.Data[float32](x)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	if err := w.FromHost(src, host(1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	g, err := w.Capture(func() error {
		if _, err := w.Alloc(tensor.Float32, tensor.Shape{4}, dev, ""); !errors.Is(err, device.ErrCapturing) {
			t.Errorf("Alloc during capture: %v, want ErrCapturing", err)
		}
		if _, err := w.ToHost(dst); !errors.Is(err, device.ErrCapturing) {
			t.Errorf("ToHost during capture: %v, want ErrCapturing", err)
		}
		if err := w.SyncDevice(); !errors.Is(err, device.ErrCapturing) {
			t.Errorf("SyncDevice during capture: %v, want ErrCapturing", err)
		}
		return w.CopyTensor(dst, src)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got, err := w.ToHost(dst)
	if err != nil {
		t.Fatal(err)
	}
	if vals(got)[0] != 0 {
		t.Fatalf("the recorded copy ran during the capture: %v", vals(got))
	}
	for it := range 3 {
		v := float32(10 * (it + 1))
		if err := w.FromHost(src, host(v, v+1, v+2, v+3)); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		got, err := w.ToHost(dst)
		if err != nil {
			t.Fatal(err)
		}
		if fs := vals(got); fs[0] != v || fs[3] != v+3 {
			t.Fatalf("replay %d: %v, want %v..%v", it, fs, v, v+3)
		}
	}
	boom := errors.New("boom")
	if _, err := w.Capture(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failing capture: %v, want fn's error", err)
	}
	if err := w.SyncDevice(); err != nil {
		t.Fatalf("the failed capture was left open: %v", err)
	}
	func() {
		defer func() { _ = recover() }()
		w.Capture(func() error { panic("fn panics") })
	}()
	if err := w.SyncDevice(); err != nil {
		t.Fatalf("a panicking capture was left open: %v", err)
	}
	cpu := newTestWorker(t, 0, 1)
	if _, err := cpu.Capture(func() error { return nil }); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("capture on a CPU worker: %v, want ErrNoDevice", err)
	}
}

// TestLiveGraphBlocksInitCCL: InitCCL would free the IPC memory and
// communicators a captured graph uses, so it is refused while one is
// alive, and allowed once it is closed.
func TestLiveGraphBlocksInitCCL(t *testing.T) {
	w := newFakeGPUWorker(t)
	x, err := w.Alloc(tensor.Float32, tensor.Shape{4}, w.Device(), "")
	if err != nil {
		t.Fatal(err)
	}
	g, err := w.Capture(func() error { return w.CopyTensor(x, x) })
	if err != nil {
		t.Fatal(err)
	}
	b, err := ccl.Lookup("cpu")
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.initCCL("cpu", id, nil, 5000); err == nil || !strings.Contains(err.Error(), "graphs are still alive") {
		t.Fatalf("InitCCL with a live graph: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.initCCL("cpu", id, nil, 5000); err != nil {
		t.Fatalf("InitCCL after the graph was closed: %v", err)
	}
}

func TestParseVmHWM(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"Name:\tx\nVmPeak:\t  999 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n", 1234 << 10, true},
		{"VmHWM: 0 kB", 0, true},
		{"VmRSS:\t 1000 kB\n", 0, false},
		{"VmHWM:\t 12 MB\n", 0, false},
		{"VmHWM:\t -5 kB\n", 0, false},
		{"VmHWM:\t 99999999999999999999 kB\n", 0, false},
		{"", 0, false},
	} {
		got, err := ParseVmHWM(strings.NewReader(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// FuzzParseVmHWM: never panics; what parses is a whole number of KiB.
func FuzzParseVmHWM(f *testing.F) {
	f.Add("VmHWM:\t    1234 kB\n")
	f.Add("VmHWM: x kB")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseVmHWM(strings.NewReader(s))
		if err == nil && (n < 0 || n%1024 != 0) {
			t.Fatalf("%q: %d bytes", s, n)
		}
	})
}

// checkHook is a device hook whose work gave up (Check fails once).
type checkHook struct{ err error }

func (h *checkHook) Abort() {}
func (h *checkHook) Check() error {
	err := h.err
	h.err = nil
	return err
}
func (h *checkHook) Close() error { return nil }

// TestDebugGetReportsGaveUp: a device value copied to the controller
// after a custom all-reduce (or a plan, a device hook) gave up waiting
// for its peers is wrong; the copy reports that error instead of the
// value, with the collective's code.
func TestDebugGetReportsGaveUp(t *testing.T) {
	w := newFakeGPUWorker(t)
	x, err := w.Alloc(tensor.Float32, tensor.Shape{4}, w.Device(), "")
	if err != nil {
		t.Fatal(err)
	}
	w.regs = append(w.regs, slot{set: true, v: x})
	reg := int64(len(w.regs) - 1)
	get := wire.Command{Action: wire.ActDebugGet, Seq: 1, Reg: reg}
	run(t, w, []step{{cmd: get, reply: true}})
	remove, err := w.AddDeviceHook(&checkHook{err: fmt.Errorf("%w: a plan waited too long", ccl.ErrTimeout)})
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	get.Seq = 2
	run(t, w, []step{{cmd: get, reply: true, codes: []wire.Code{wire.CodeCCLTimeout}, contains: "waited too long"}})
	get.Seq = 3
	run(t, w, []step{{cmd: get, reply: true}})
}
