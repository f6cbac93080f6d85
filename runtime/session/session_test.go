package session_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

type kind struct {
	name  string
	start func(t *testing.T, n, groups int) *session.Session
}

var kinds = []kind{
	{"threaded", func(t *testing.T, n, groups int) *session.Session {
		s, err := session.NewThreaded(session.Options{NumWorkers: n, NumGroups: groups, ShutdownGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"process-shm", processKind("shm")},
	{"process-stream", processKind("stream")},
}

func processKind(tr string) func(t *testing.T, n, groups int) *session.Session {
	return func(t *testing.T, n, groups int) *session.Session {
		s, err := session.NewProcess(bg(t), session.ProcessOptions{
			Options:   session.Options{NumWorkers: n, NumGroups: groups, ShutdownGrace: 2 * time.Second},
			Transport: tr,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// forKinds runs f once per session kind, with a goroutine-leak check and a
// Shutdown that must succeed.
func forKinds(t *testing.T, n, groups int, f func(t *testing.T, s *session.Session)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			leaktest.Check(t)
			s := k.start(t, n, groups)
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
			f(t, s)
		})
	}
}

func mustFunc(t *testing.T, s *session.Session, name string) *session.DRef {
	t.Helper()
	f, err := s.GetGlobalFunc(bg(t), name)
	if err != nil {
		t.Fatalf("GetGlobalFunc(%q): %v", name, err)
	}
	return f
}

func mustCall(t *testing.T, s *session.Session, f *session.DRef, args ...any) *session.DRef {
	t.Helper()
	r, err := s.CallPacked(f, args...)
	if err != nil {
		t.Fatalf("CallPacked: %v", err)
	}
	return r
}

func get(t *testing.T, s *session.Session, r *session.DRef, w int) any {
	t.Helper()
	v, err := s.DebugGetFromRemote(bg(t), r, w)
	if err != nil {
		t.Fatalf("DebugGetFromRemote(%v, %d): %v", r, w, err)
	}
	return v
}

func TestBuiltinsAndGroups(t *testing.T) {
	forKinds(t, 4, 2, func(t *testing.T, s *session.Session) {
		want := map[string]func(w int) any{
			"chorus.worker_id":   func(w int) any { return int64(w) },
			"chorus.worker_rank": func(w int) any { return int64(w % 2) },
			"chorus.num_workers": func(int) any { return int64(4) },
			"chorus.num_groups":  func(int) any { return int64(2) },
			"chorus.group_id":    func(w int) any { return int64(w / 2) },
			"chorus.group_size":  func(int) any { return int64(2) },
			"chorus.device":      func(int) any { return tensor.CPUDevice },
		}
		for name, fn := range want {
			r := mustCall(t, s, mustFunc(t, s, name))
			for w := range 4 {
				if got := get(t, s, r, w); got != fn(w) {
					t.Errorf("%s on worker %d = %v, want %v", name, w, got, fn(w))
				}
			}
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCallArgumentsAndDRefs(t *testing.T) {
	forKinds(t, 3, 1, func(t *testing.T, s *session.Session) {
		add := mustFunc(t, s, "test.add")
		a := mustCall(t, s, add, 2, int8(3))
		b := mustCall(t, s, add, a, a) // DRef arguments resolve per worker
		for w := range 3 {
			if got := get(t, s, b, w); got != int64(10) {
				t.Errorf("worker %d: got %v, want 10", w, got)
			}
		}
		desc := mustFunc(t, s, "test.describe")
		r := mustCall(t, s, desc, 1, 2.5, true, "s", []byte("b"), tensor.BFloat16, tensor.CUDADevice(1), tensor.Shape{2, 3}, nil)
		if got, want := get(t, s, r, 1), "1 2.5 true s [98] bfloat16 cuda:1 (2, 3) <nil>"; got != want {
			t.Errorf("describe = %q, want %q", got, want)
		}
		echo := mustFunc(t, s, "test.echo")
		for _, v := range []any{int64(-7), 1.5, false, "", []byte{}, tensor.Float16, tensor.Shape{}, nil} {
			r := mustCall(t, s, echo, v)
			got := get(t, s, r, 2)
			if !equalValue(got, v) {
				t.Errorf("echo(%#v) = %#v", v, got)
			}
		}
		// Arguments that cannot travel are refused on the controller.
		for _, bad := range []any{struct{}{}, uint64(1 << 63), tensor.MustNew(tensor.Float32, tensor.Shape{1})} {
			if _, err := s.CallPacked(echo, bad); err == nil {
				t.Errorf("CallPacked(%T) succeeded", bad)
			}
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func equalValue(a, b any) bool {
	switch x := a.(type) {
	case []byte:
		y, ok := b.([]byte)
		return ok && string(x) == string(y)
	case tensor.Shape:
		y, ok := b.(tensor.Shape)
		return ok && x.Equal(y)
	}
	return a == b
}

func TestRegisterIDs(t *testing.T) {
	forKinds(t, 2, 1, func(t *testing.T, s *session.Session) {
		add := mustFunc(t, s, "test.add")
		a := mustCall(t, s, add, 1, 1)
		b := mustCall(t, s, add, 1, 2)
		if a.Reg() == 0 || b.Reg() == 0 || a.Reg() == b.Reg() {
			t.Fatalf("register ids %d, %d: want distinct and non-zero", a.Reg(), b.Reg())
		}
		ra, rb := a.Reg(), b.Reg()
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
		if err := b.Release(); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(); !errors.Is(err, session.ErrReleased) {
			t.Errorf("second Release: %v, want ErrReleased", err)
		}
		// Most recently freed first.
		c := mustCall(t, s, add, 2, 2)
		d := mustCall(t, s, add, 3, 3)
		if c.Reg() != rb || d.Reg() != ra {
			t.Errorf("reused ids %d, %d; want %d, %d", c.Reg(), d.Reg(), rb, ra)
		}
		// The stale DRef a now shares its id with d but must not work.
		if _, err := s.CallPacked(add, a, 1); !errors.Is(err, session.ErrReleased) {
			t.Errorf("call with released DRef: %v, want ErrReleased", err)
		}
		if _, err := s.DebugGetFromRemote(bg(t), a, 0); !errors.Is(err, session.ErrReleased) {
			t.Errorf("get of released DRef: %v, want ErrReleased", err)
		}
		if got := get(t, s, d, 0); got != int64(6) {
			t.Errorf("d = %v, want 6", got)
		}
		other, err := session.NewThreaded(session.Options{NumWorkers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Shutdown()
		f2 := mustFunc(t, other, "test.add")
		if _, err := s.CallPacked(f2, 1, 1); !errors.Is(err, session.ErrForeignRef) {
			t.Errorf("foreign function DRef: %v, want ErrForeignRef", err)
		}
		if _, err := s.CallPacked(add, f2, 1); !errors.Is(err, session.ErrForeignRef) {
			t.Errorf("foreign argument DRef: %v, want ErrForeignRef", err)
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCopyAndDebugSet(t *testing.T) {
	forKinds(t, 2, 1, func(t *testing.T, s *session.Session) {
		rt := mustFunc(t, s, "test.rank_tensor")
		ts := mustCall(t, s, rt, 5)
		host := tensor.FromSlice([]float32{1, 2, 3, 4, 5})
		if err := s.CopyToWorker0(host, ts); err != nil {
			t.Fatal(err)
		}
		// The copy is taken at call time: changing host now must not matter.
		hd, _ := tensor.Data[float32](host)
		hd[0] = 99
		back := tensor.MustNew(tensor.Float32, tensor.Shape{5})
		if err := s.CopyFromWorker0(bg(t), back, ts); err != nil {
			t.Fatal(err)
		}
		if d, _ := tensor.Data[float32](back); d[0] != 1 || d[4] != 5 {
			t.Errorf("CopyFromWorker0 = %v", d)
		}
		// Worker 1 kept its own data.
		v := get(t, s, ts, 1).(*tensor.Tensor)
		if d, _ := tensor.Data[float32](v); d[0] != 100 || d[4] != 104 {
			t.Errorf("worker 1 tensor = %v", d)
		}
		// A fetched tensor is a copy: writing to it changes nothing remote.
		d1, _ := tensor.Data[float32](v)
		d1[0] = -1
		v2 := get(t, s, ts, 1).(*tensor.Tensor)
		if d, _ := tensor.Data[float32](v2); d[0] != 100 {
			t.Errorf("remote tensor changed through a fetched copy: %v", d)
		}

		// Layout mismatches: on the controller for CopyFromWorker0, at the
		// next sync for CopyToWorker0.
		wrong := tensor.MustNew(tensor.Float32, tensor.Shape{4})
		if err := s.CopyFromWorker0(bg(t), wrong, ts); !errors.Is(err, session.ErrLayout) {
			t.Errorf("CopyFromWorker0 into wrong shape: %v, want ErrLayout", err)
		}
		if err := s.CopyToWorker0(tensor.MustNew(tensor.Int32, tensor.Shape{5}), ts); err != nil {
			t.Fatal(err)
		}
		if err := s.SyncWorker(bg(t), 0); err == nil || !strings.Contains(err.Error(), "layout mismatch") {
			t.Errorf("sync after bad CopyToWorker0: %v", err)
		}

		reg, err := s.NewRegister()
		if err != nil {
			t.Fatal(err)
		}
		val := tensor.FromSlice([]int64{7, 8})
		if err := s.DebugSetRegister(reg, val, 1); err != nil {
			t.Fatal(err)
		}
		vd, _ := tensor.Data[int64](val)
		vd[0] = 0
		got := get(t, s, reg, 1).(*tensor.Tensor)
		if d, _ := tensor.Data[int64](got); d[0] != 7 || d[1] != 8 {
			t.Errorf("DebugSetRegister value = %v", d)
		}
		if _, err := s.DebugGetFromRemote(bg(t), reg, 0); !errors.Is(err, session.ErrBadReg) {
			t.Errorf("get of a register never set on worker 0: %v, want ErrBadReg", err)
		}
		if _, err := s.DebugGetFromRemote(bg(t), reg, 2); !errors.Is(err, session.ErrBadWorker) {
			t.Errorf("worker 2 of 2: %v, want ErrBadWorker", err)
		}
		opaque := mustCall(t, s, mustFunc(t, s, "test.opaque"))
		if _, err := s.DebugGetFromRemote(bg(t), opaque, 0); err == nil || !strings.Contains(err.Error(), "cannot be sent") {
			t.Errorf("get of a Go struct: %v", err)
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestEmpty(t *testing.T) {
	forKinds(t, 4, 2, func(t *testing.T, s *session.Session) {
		empty := mustFunc(t, s, "chorus.empty")
		cases := []struct {
			w0, inGroup bool
			has         []bool
		}{
			{false, false, []bool{true, true, true, true}},
			{true, false, []bool{true, false, false, false}},
			{true, true, []bool{true, false, true, false}},
		}
		for _, c := range cases {
			r := mustCall(t, s, empty, tensor.Shape{2, 3}, tensor.BFloat16, nil, c.w0, c.inGroup)
			for w, has := range c.has {
				v := get(t, s, r, w)
				tt, ok := v.(*tensor.Tensor)
				if ok != has {
					t.Errorf("worker0_only=%v in_group=%v worker %d: got %v", c.w0, c.inGroup, w, v)
					continue
				}
				if ok && (tt.DType() != tensor.BFloat16 || !tt.Shape().Equal(tensor.Shape{2, 3})) {
					t.Errorf("empty gave %v", tt)
				}
			}
		}
		// No GPU here: asking for one is an error, not a host tensor.
		mustCall(t, s, empty, tensor.Shape{1}, tensor.Float32, "cuda:0", false, false)
		if err := s.Sync(bg(t)); err == nil || !strings.Contains(err.Error(), "cuda:0") {
			t.Errorf("empty on cuda:0 without a GPU: %v", err)
		}
	})
}

func TestFunctionFailures(t *testing.T) {
	forKinds(t, 3, 1, func(t *testing.T, s *session.Session) {
		ctx := bg(t)
		failOn := mustFunc(t, s, "test.fail_on")
		r := mustCall(t, s, failOn, 2, "disk on fire")
		err := s.Sync(ctx)
		if !errors.Is(err, session.ErrFuncFailed) {
			t.Fatalf("Sync: %v, want ErrFuncFailed", err)
		}
		for _, want := range []string{"worker 2", `"test.fail_on"`, "disk on fire"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
		if err := s.Sync(ctx); err != nil {
			t.Errorf("failure reported twice: %v", err)
		}
		// The failed result: a debug get and a dependent call both fail.
		if _, err := s.DebugGetFromRemote(ctx, r, 2); !errors.Is(err, session.ErrDepFailed) || !strings.Contains(err.Error(), "disk on fire") {
			t.Errorf("get of failed result: %v", err)
		}
		if v := get(t, s, r, 0); v != nil {
			t.Errorf("worker 0 result = %v, want nil", v)
		}
		echo := mustFunc(t, s, "test.echo")
		mustCall(t, s, echo, r)
		err = s.SyncWorker(ctx, 2)
		if !errors.Is(err, session.ErrDepFailed) || !strings.Contains(err.Error(), "disk on fire") {
			t.Errorf("dependent call: %v", err)
		}

		panicOn := mustFunc(t, s, "test.panic_on")
		mustCall(t, s, panicOn, 1)
		err = s.Sync(ctx)
		if !errors.Is(err, session.ErrPanic) || !strings.Contains(err.Error(), "worker 1") || !strings.Contains(err.Error(), "nil map") {
			t.Errorf("panic: %v", err)
		}

		// Argument checks of typed functions.
		add := mustFunc(t, s, "test.add")
		mustCall(t, s, add, 1)
		mustCall(t, s, add, "x", 1)
		err = s.Sync(ctx)
		if !errors.Is(err, session.ErrBadArgs) || !strings.Contains(err.Error(), "want 2 arguments, got 1") || !strings.Contains(err.Error(), "argument 0: want int64, got string") {
			t.Errorf("bad args: %v", err)
		}

		if _, err := s.GetGlobalFunc(ctx, "no.such.function"); !errors.Is(err, session.ErrUnknownFunction) {
			t.Errorf("unknown function: %v", err)
		}
		// Everything still works.
		v := get(t, s, mustCall(t, s, add, 20, 22), 1)
		if v != int64(42) {
			t.Errorf("after faults: %v", v)
		}
		if err := s.Sync(ctx); err != nil {
			t.Errorf("final sync: %v", err)
		}
	})
}

func TestFailureOnOneWorkerSeenBySyncOfAnother(t *testing.T) {
	forKinds(t, 2, 1, func(t *testing.T, s *session.Session) {
		ctx := bg(t)
		failOn := mustFunc(t, s, "test.fail_on")
		mustCall(t, s, failOn, 1, "only one")
		// Worker 0's sync does not wait for worker 1, but a full sync must
		// report worker 1's failure exactly once, whatever was seen before.
		_ = s.SyncWorker(ctx, 0)
		err := s.Sync(ctx)
		err0 := s.SyncWorker(ctx, 0)
		n := 0
		for _, e := range []error{err, err0} {
			if e != nil {
				n += strings.Count(e.Error(), "only one")
			}
		}
		if n > 1 {
			t.Errorf("failure reported %d times", n)
		}
	})
}

func TestSyncTimeoutThenRecover(t *testing.T) {
	forKinds(t, 2, 1, func(t *testing.T, s *session.Session) {
		sleep := mustFunc(t, s, "test.sleep_ms")
		if err := s.CallPackedDiscard(sleep, 300); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := s.Sync(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sync with short deadline: %v", err)
		}
		// The late reply must be recognised as stale, not taken for the
		// answer to the next command.
		add := mustFunc(t, s, "test.add")
		if v := get(t, s, mustCall(t, s, add, 1, 2), 0); v != int64(3) {
			t.Errorf("after timeout: %v", v)
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestShutdownIdempotent(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			leaktest.Check(t)
			s := k.start(t, 2, 1)
			pids := s.PIDs()
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
			if err := s.Shutdown(); err != nil {
				t.Fatalf("second Shutdown: %v", err)
			}
			for _, pid := range pids {
				if processAlive(pid) {
					t.Errorf("worker pid %d still running after Shutdown", pid)
				}
			}
			if _, err := s.GetGlobalFunc(bg(t), "test.add"); !errors.Is(err, session.ErrShutdown) {
				t.Errorf("call after Shutdown: %v, want ErrShutdown", err)
			}
			if err := s.Sync(bg(t)); !errors.Is(err, session.ErrShutdown) {
				t.Errorf("Sync after Shutdown: %v, want ErrShutdown", err)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []session.Options{{NumWorkers: 0}, {NumWorkers: 4, NumGroups: 3}, {NumWorkers: 2, NumGroups: -1}} {
		if s, err := session.NewThreaded(o); err == nil {
			s.Shutdown()
			t.Errorf("NewThreaded(%+v) succeeded", o)
		}
		if s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: o}); err == nil {
			s.Shutdown()
			t.Errorf("NewProcess(%+v) succeeded", o)
		}
	}
	if _, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 1}, Transport: "carrier-pigeon"}); err == nil {
		t.Error("unknown transport accepted")
	}
	// A program that is not a chorus worker: start-up fails, no hang.
	_, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 1}, Program: "/bin/true", StartTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "did not start") {
		t.Errorf("non-worker program: %v", err)
	}
}

// A failure announced by one worker reaches a sync of another worker:
// every transport can tell, without blocking, that a notice is waiting.
func TestNoticeReachesSyncOfAnotherWorker(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			leaktest.Check(t)
			s := k.start(t, 2, 1)
			defer s.Shutdown()
			ctx := bg(t)
			if err := s.CallPackedDiscard(mustFunc(t, s, "test.fail_on"), 1, "seen from afar"); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				err := s.SyncWorker(ctx, 0)
				if err != nil {
					if !strings.Contains(err.Error(), "worker 1") || !strings.Contains(err.Error(), "seen from afar") {
						t.Fatalf("SyncWorker(0): %v", err)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("worker 1's failure never reached SyncWorker(0)")
				}
			}
			// Reported once: the full sync must not repeat it.
			if err := s.Sync(ctx); err != nil {
				t.Errorf("failure reported again: %v", err)
			}
		})
	}
}

// Regression: a worker that exits on Shutdown before the command reached
// the others must not be taken for a lost worker (which left the others to
// die by the lifeline).
func TestShutdownManyWorkersClean(t *testing.T) {
	for _, tr := range []string{"shm", "stream"} {
		t.Run(tr, func(t *testing.T) {
			for range 3 {
				var out lockedBuffer
				s, err := session.NewProcess(bg(t), session.ProcessOptions{
					Options: session.Options{NumWorkers: 8}, Transport: tr, Stderr: &out,
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Shutdown(); err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
				if msg := out.String(); msg != "" {
					t.Fatalf("workers complained during a clean Shutdown:\n%s", msg)
				}
			}
		})
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
