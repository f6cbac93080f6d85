package session_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// allreduce_loop(n, iters): iters allreduces of n float32 on the
	// global communicator, as a benchmark's inner loop does.
	registry.MustRegisterTyped("test.allreduce_loop", func(env registry.Env, n int64, iters int) error {
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		x, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), "")
		if err != nil {
			return err
		}
		for range iters {
			if err := c.AllReduce(env.Context(), x, x, 0); err != nil {
				return err
			}
		}
		return nil
	})
	// progress(iters, ms): iters rounds of a pause and a barrier.
	registry.MustRegisterTyped("test.progress", func(env registry.Env, iters, ms int) error {
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		for range iters {
			time.Sleep(time.Duration(ms) * time.Millisecond)
			if err := c.Barrier(env.Context()); err != nil {
				return err
			}
		}
		return nil
	})
	// block_on(w): worker w waits until its context ends (the worker is
	// aborted); the others return at once.
	registry.MustRegisterTyped("test.block_on", func(env registry.Env, w int) {
		if env.WorkerID() == w {
			end := registry.BeginActivity(env, "test activity")
			<-env.Context().Done()
			end()
		}
	})
}

// waitFor polls cond; the deadline only guards against a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readTrace reads and validates a trace file.
func readTrace(t *testing.T, path string) *trace.File {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := trace.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(f); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return f
}

// TestTraceFile traces commands, cpu collectives and a failure in every
// kind of session and checks the file: it validates (balanced, monotonic,
// one track per worker), every worker has its commands and its
// collectives (matched across ranks by sequence number), the controller
// its sends and waits, and the failure is a fault.
func TestTraceFile(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			leaktest.Check(t)
			const n, iters = 3, 4
			path := filepath.Join(t.TempDir(), "trace.json")
			t.Setenv(session.EnvTrace, path)
			s := k.start(t, n, 1)
			if err := s.InitCCL(bg(t), "cpu", 0); err != nil {
				t.Fatal(err)
			}
			loop := mustFunc(t, s, "test.allreduce_loop")
			if err := s.CallPackedDiscard(loop, int64(1024), iters); err != nil {
				t.Fatal(err)
			}
			fail := mustFunc(t, s, "test.fail_on")
			if err := s.CallPackedDiscard(fail, 1, "boom"); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(bg(t)); err == nil || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("Sync = %v, want boom", err)
			}
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
			f := readTrace(t, path)
			procs := map[string]bool{}
			colls := map[int]int{}
			cmds := map[int]map[string]bool{}
			var ctlSend, ctlWait, fault bool
			for _, sp := range trace.Spans(f) {
				procs[sp.Track.Process] = true
				w, _, isWorker := trace.WorkerOf(sp.Track.Process)
				switch {
				case isWorker && sp.Cat == trace.CatCollective:
					if sp.Name != "allreduce" || sp.Args.Bytes != 4096 || sp.Args.Backend != "cpu" || sp.Args.Seq == 0 || sp.Args.Comm != "global" {
						t.Errorf("collective span %+v", sp)
					}
					colls[w]++
				case isWorker && sp.Cat == trace.CatCommand:
					if cmds[w] == nil {
						cmds[w] = map[string]bool{}
					}
					cmds[w][sp.Name] = true
				case sp.Track.Process == trace.ProcController && sp.Name == "CallPacked test.allreduce_loop":
					ctlSend = true
				case sp.Track.Process == trace.ProcController && sp.Name == "wait SyncWorker":
					ctlWait = true
				case sp.Cat == trace.CatFault && strings.Contains(sp.Args.Error, "boom"):
					fault = true
				}
			}
			for w := range n {
				if !procs[trace.ProcWorker(w)] {
					t.Errorf("no track for worker %d: %v", w, procs)
				}
				if colls[w] != iters {
					t.Errorf("worker %d: %d collectives, want %d", w, colls[w], iters)
				}
				for _, c := range []string{"chorus.init_ccl", "test.allreduce_loop", "test.fail_on", "SyncWorker"} {
					if !cmds[w][c] {
						t.Errorf("worker %d: no %q command in %v", w, c, cmds[w])
					}
				}
			}
			if !ctlSend || !ctlWait || !fault {
				t.Errorf("controller: send %v, wait %v, fault %v", ctlSend, ctlWait, fault)
			}
			sum := trace.Summarize(f)
			if len(sum.Collectives) != iters {
				t.Errorf("summary matched %d collectives, want %d", len(sum.Collectives), iters)
			}
			for _, c := range sum.Collectives {
				if c.Ranks != n {
					t.Errorf("collective %s #%d matched %d ranks, want %d", c.Name, c.Seq, c.Ranks, n)
				}
			}
			if parts, _ := filepath.Glob(path + ".worker-*"); len(parts) > 0 {
				t.Errorf("part files left behind: %v", parts)
			}
		})
	}
}

// TestTraceOption: Options.Trace without the environment, and two
// sessions of one process tracing to one file keep both.
func TestTraceOption(t *testing.T) {
	leaktest.Check(t)
	path := filepath.Join(t.TempDir(), "two.json")
	for range 2 {
		s, err := session.NewThreaded(session.Options{NumWorkers: 2, Trace: path})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	f := readTrace(t, path)
	procs := map[string]bool{}
	for _, e := range f.Events {
		procs[e.Track.Process] = true
	}
	for _, p := range []string{"controller", "worker 1", "session 2: controller", "session 2: worker 1"} {
		if !procs[p] {
			t.Errorf("no process %q in %v", p, procs)
		}
	}
	if _, err := session.NewThreaded(session.Options{NumWorkers: 1, Trace: filepath.Join(t.TempDir(), "no", "such", "dir.json")}); err == nil {
		t.Fatal("a trace file that cannot be written is not an error")
	}
	t.Setenv(session.EnvHangReport, "soon")
	if _, err := session.NewThreaded(session.Options{NumWorkers: 1}); err == nil || !strings.Contains(err.Error(), session.EnvHangReport) {
		t.Fatalf("bad %s: %v", session.EnvHangReport, err)
	}
}

// TestHangReportThreaded: a worker stuck in a function is reported with
// what it is doing; WorkerDeadline then makes it lost, and its
// function's context ends.
func TestHangReportThreaded(t *testing.T) {
	leaktest.Check(t)
	var out lockedBuffer
	s, err := session.NewThreaded(session.Options{NumWorkers: 3, HangReport: 20 * time.Millisecond, HangOutput: &out, WorkerDeadline: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	f := mustFunc(t, s, "test.block_on")
	if err := s.CallPackedDiscard(f, 2); err != nil {
		t.Fatal(err)
	}
	err = s.Sync(context.Background())
	var le *session.LostError
	if !errors.As(err, &le) || le.Worker != 2 || !errors.Is(err, session.ErrWorkerLost) || !strings.Contains(err.Error(), "WorkerDeadline") {
		t.Fatalf("Sync = %v, want worker 2 lost by the WorkerDeadline", err)
	}
	rep := out.String()
	for _, want := range []string{"hang report: SyncWorker has waited", "for worker 2 (of 3)", "worker 2: in CallPacked test.block_on for", "; test activity for"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	if strings.Contains(rep, "worker 0:") {
		t.Errorf("report names a worker that answered:\n%s", rep)
	}
	if err := s.Sync(bg(t)); !errors.Is(err, session.ErrWorkerLost) {
		t.Fatalf("Sync after the loss = %v", err)
	}
}

// TestTraceGPUFake: device copies are timed with the device's stopwatch
// (the Fake's host clock here, CUDA events on a GPU) and drawn on the
// worker's GPU stream track.
func TestTraceGPUFake(t *testing.T) {
	leaktest.Check(t)
	path := filepath.Join(t.TempDir(), "gpu.json")
	s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}, OpenDevice: worker.OpenFake, Trace: path})
	if err != nil {
		t.Fatal(err)
	}
	empty := mustFunc(t, s, "chorus.empty")
	x := mustCall(t, s, empty, tensor.Shape{1024}, tensor.Float32, nil, false, false)
	host, err := tensor.New(tensor.Float32, tensor.Shape{1024})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CopyToWorker0(host, x); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DebugGetFromRemote(bg(t), x, 0); err != nil {
		t.Fatal(err)
	}
	// Work timed outside package worker, with a copy inside it: the
	// outer span names it, the inner one is not recorded.
	if err := s.CallPackedDiscard(mustFunc(t, s, "tracetest.gpu_nested"), x); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	f := readTrace(t, path)
	got := map[string]int{}
	for _, e := range f.Events {
		if e.Cat == trace.CatGPU {
			if e.Track.Thread != "stream 0" || e.Args.Bytes != 4096 || e.Phase != trace.Complete {
				t.Errorf("gpu event %+v", e)
			}
			got[e.Track.Process+"/"+e.Name]++
		}
	}
	want := map[string]int{"worker 0 gpu/copy H2D": 1, "worker 0 gpu/copy D2H": 1, "worker 0 gpu/outer": 1, "worker 1 gpu/outer": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("gpu events %v, want %v", got, want)
	}
}

// TestWorkerDeadlineProgress: a call that runs longer than the
// WorkerDeadline while its workers make progress (collectives complete)
// is not cut short.
func TestWorkerDeadlineProgress(t *testing.T) {
	leaktest.Check(t)
	var out lockedBuffer
	const deadline = 400 * time.Millisecond
	s, err := session.NewThreaded(session.Options{NumWorkers: 2, HangReport: -1, HangOutput: &out, WorkerDeadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "cpu", 0); err != nil {
		t.Fatal(err)
	}
	f := mustFunc(t, s, "test.progress")
	// Twice the deadline in all, a barrier every eighth of it.
	if err := s.CallPackedDiscard(f, 16, int(deadline/8/time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); err != nil {
		t.Fatalf("a worker making progress was cut short: %v", err)
	}
	if out.String() != "" {
		t.Errorf("reports although they are off: %s", out.String())
	}
}
