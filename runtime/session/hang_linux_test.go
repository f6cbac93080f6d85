package session_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// stopWorker freezes a worker process (SIGSTOP) and makes sure the test
// resumes it, whatever happens.
func stopWorker(t *testing.T, pid int) (resume func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume = func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(resume)
	// The signal takes effect asynchronously (a thread spinning in user
	// space stops at its next interrupt): wait until the kernel says so.
	waitFor(t, "the worker to stop", func() bool { return procStopped(pid) })
	return resume
}

// procStopped reports whether every thread of pid is stopped.
func procStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || s[i+2] != 'T' {
			return false
		}
	}
	return true
}

func processSession(t *testing.T, n int, o session.Options) *session.Session {
	t.Helper()
	o.NumWorkers = n
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 2 * time.Second
	}
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: o})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHangReportFrozenWorker is the scenario: a process session
// running a loop of cpu allreduces, one worker frozen with SIGSTOP. The
// controller reports, from the frozen worker's flight recorder in shared
// memory, that it is stopped and what it was doing, and what the others
// wait in; once the worker resumes, the sync completes.
func TestHangReportFrozenWorker(t *testing.T) {
	leaktest.Check(t)
	var out lockedBuffer
	s := processSession(t, 3, session.Options{HangReport: 50 * time.Millisecond, HangOutput: &out})
	defer func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	if err := s.InitCCL(bg(t), "cpu", time.Minute); err != nil {
		t.Fatal(err)
	}
	loop := mustFunc(t, s, "test.allreduce_loop")
	// One round first, so that the frozen worker's recorder shows a
	// finished collective.
	if err := s.CallPackedDiscard(loop, int64(1<<20), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); err != nil {
		t.Fatal(err)
	}
	// Under load (the race detector, a busy CI machine) the start-up's
	// Ping and the first Sync may be reported too: only what comes after
	// the freeze counts.
	mark := len(out.String())
	resume := stopWorker(t, s.PIDs()[1])
	if err := s.CallPackedDiscard(loop, int64(1<<20), 3); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Sync(context.Background()) }()
	waitFor(t, "a hang report naming the frozen worker", func() bool {
		r := out.String()[mark:]
		i := strings.Index(r, "hang report: SyncWorker has waited")
		return i >= 0 && strings.Contains(r[i:], "stopped (SIGSTOP or job control)") && strings.Contains(r[i:], "worker 0 (pid")
	})
	resume()
	if err := <-done; err != nil {
		t.Fatalf("Sync after the worker resumed: %v", err)
	}
	rep := out.String()[mark:]
	t.Logf("hang report:\n%s", rep)
	for _, want := range []string{
		"hang report: SyncWorker has waited",
		"for workers 0-2 (of 3)",
		"stopped (SIGSTOP or job control)): idle for",
		"after SyncWorker; last collective allreduce #1 (cpu, 4 MiB) ended",
		"worker 0 (pid",
		"in CallPacked test.allreduce_loop for",
		"in allreduce #2 (cpu, 4 MiB) for",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestWorkerDeadlineFrozen: a frozen worker process counts as lost after
// the WorkerDeadline; it is killed and Sync says which one and why.
func TestWorkerDeadlineFrozen(t *testing.T) {
	leaktest.Check(t)
	var out lockedBuffer
	s := processSession(t, 2, session.Options{HangReport: 30 * time.Millisecond, HangOutput: &out, WorkerDeadline: 300 * time.Millisecond})
	defer s.Shutdown()
	pid := s.PIDs()[1]
	stopWorker(t, pid)
	err := s.Sync(context.Background())
	var le *session.LostError
	if !errors.As(err, &le) || le.Worker != 1 || le.PID != pid || !strings.Contains(err.Error(), "WorkerDeadline") || !strings.Contains(err.Error(), "idle for") {
		t.Fatalf("Sync = %v, want worker 1 lost by the WorkerDeadline", err)
	}
	waitGone(t, pid)
	if !strings.Contains(out.String(), "count as lost after 300ms") {
		t.Errorf("report does not mention the deadline:\n%s", out.String())
	}
}

// TestFirstCauseFirst: worker 0 freezes in a loop of cpu allreduces; the
// others time out waiting for it; when it resumes, its own next call
// fails with ErrFailed (the communicator is broken). Sync must show the
// timeout naming the missing rank first, and the secondary failure must
// say what broke the communicator.
func TestFirstCauseFirst(t *testing.T) {
	leaktest.Check(t)
	var out lockedBuffer
	s := processSession(t, 3, session.Options{HangReport: 20 * time.Millisecond, HangOutput: &out})
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "cpu", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	loop := mustFunc(t, s, "test.allreduce_loop")
	resume := stopWorker(t, s.PIDs()[0])
	if err := s.CallPackedDiscard(loop, int64(1024), 3); err != nil {
		t.Fatal(err)
	}
	// Only reports on the Sync count: an earlier wait (InitCCL,
	// GetGlobalFunc on a loaded machine) may have named worker 0 alone.
	before := len(out.String())
	done := make(chan error, 1)
	go func() { done <- s.Sync(context.Background()) }()
	// Workers 1 and 2 have answered (their allreduce timed out) once a
	// report on the Sync names worker 0 alone.
	deadline := time.Now().Add(5 * time.Second)
	waitFor(t, "workers 1 and 2 to give up", func() bool {
		if time.Now().After(deadline) {
			t.Fatalf("reports:\n%s", out.String())
		}
		return strings.Contains(out.String()[before:], "for worker 0 (of 3)")
	})
	resume()
	err := <-done
	if err == nil {
		t.Fatal("Sync succeeded")
	}
	msg := err.Error()
	t.Logf("Sync: %v", msg)
	var errs session.Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("want 3 failures, got %v", err)
	}
	var first *wire.WorkerError
	if !errors.As(errs[0], &first) || first.Code != wire.CodeCCLTimeout || !errors.Is(errs[0], ccl.ErrTimeout) {
		t.Fatalf("first failure %v, want a collective timeout", errs[0])
	}
	if !strings.Contains(first.Msg, "ranks [0] never arrived") {
		t.Errorf("first failure does not name rank 0: %v", first)
	}
	if !regexp.MustCompile(`^worker [12]: CallPacked "test.allreduce_loop": ccl: rank [12]: allreduce #1: ranks \[0\] never arrived`).MatchString(msg) {
		t.Errorf("message does not start with the timeout: %s", msg)
	}
	if !errors.Is(errs[2], ccl.ErrFailed) || !strings.Contains(errs[2].Error(), "timed out in allreduce #1 waiting for ranks [0]") {
		t.Errorf("secondary failure does not carry the first cause: %v", errs[2])
	}
}

// TestTraceWorkerKilled: the trace of a session that lost a worker is
// still complete and valid: the dead worker's last events come from its
// flight recorder (the span it died in is closed as unfinished), the
// loss is a fault on the controller's track.
func TestTraceWorkerKilled(t *testing.T) {
	leaktest.Check(t)
	path := filepath.Join(t.TempDir(), "lost.json")
	var out lockedBuffer
	s := processSession(t, 3, session.Options{Trace: path, HangReport: 20 * time.Millisecond, HangOutput: &out})
	if err := s.InitCCL(bg(t), "cpu", 0); err != nil {
		t.Fatal(err)
	}
	loop := mustFunc(t, s, "test.allreduce_loop")
	if err := s.CallPackedDiscard(loop, int64(256), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); err != nil {
		t.Fatal(err)
	}
	sleep := mustFunc(t, s, "test.sleep_ms")
	if err := s.CallPackedDiscard(sleep, 60_000); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Sync(context.Background()) }()
	// Kill it once it is inside the call (its flight recorder says so).
	waitFor(t, "worker 1 to sleep", func() bool { return strings.Contains(out.String(), "in CallPacked test.sleep_ms") })
	if err := syscall.Kill(s.PIDs()[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, session.ErrWorkerLost) {
		t.Fatalf("Sync = %v, want a lost worker", err)
	}
	if err := s.Shutdown(); err != nil {
		t.Logf("Shutdown: %v", err)
	}
	f := readTrace(t, path)
	var died, lost bool
	colls := map[string]int{}
	for _, sp := range trace.Spans(f) {
		switch {
		case sp.Track.Process == "worker 1" && sp.Name == "test.sleep_ms":
			died = sp.Args.Set&trace.HasUnfinished != 0
		case sp.Cat == trace.CatFault && sp.Name == "worker lost" && strings.Contains(sp.Args.Error, "worker 1 lost"):
			lost = true
		case sp.Cat == trace.CatCollective:
			colls[sp.Track.Process]++
		}
	}
	if !died || !lost {
		t.Errorf("unfinished sleep on worker 1: %v; loss recorded: %v", died, lost)
	}
	for w := range 3 {
		if colls[trace.ProcWorker(w)] != 2 {
			t.Errorf("worker %d: %d collectives, want 2 (%v)", w, colls[trace.ProcWorker(w)], colls)
		}
	}
}

// TestHangReportNamesPeers: the controller waits for worker 0 alone,
// which waits inside an allreduce for worker 1, frozen: the report names
// worker 1 as not having reached that collective.
func TestHangReportNamesPeers(t *testing.T) {
	leaktest.Check(t)
	var out lockedBuffer
	s := processSession(t, 2, session.Options{HangReport: 30 * time.Millisecond, HangOutput: &out})
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "cpu", time.Minute); err != nil {
		t.Fatal(err)
	}
	loop := mustFunc(t, s, "test.allreduce_loop")
	resume := stopWorker(t, s.PIDs()[1])
	if err := s.CallPackedDiscard(loop, int64(1024), 1); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.SyncWorker(context.Background(), 0) }()
	waitFor(t, "a report naming worker 1", func() bool { return strings.Contains(out.String(), "has not reached") })
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); err != nil {
		t.Fatal(err)
	}
	rep := out.String()
	t.Logf("%s", rep)
	for _, want := range []string{"for worker 0 (of 2)", "worker 0 (pid", "in allreduce #1 (cpu, 4 KiB)", "stopped (SIGSTOP or job control)) has not reached allreduce #1 (cpu, 4 KiB): idle for"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestWorkerDeadlineCulprit: when the awaited worker waits inside a
// collective for a frozen peer, the deadline takes the peer, not it.
func TestWorkerDeadlineCulprit(t *testing.T) {
	leaktest.Check(t)
	var out lockedBuffer
	s := processSession(t, 2, session.Options{HangReport: 30 * time.Millisecond, HangOutput: &out, WorkerDeadline: 300 * time.Millisecond})
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "cpu", time.Minute); err != nil {
		t.Fatal(err)
	}
	loop := mustFunc(t, s, "test.allreduce_loop")
	pid := s.PIDs()[1]
	stopWorker(t, pid)
	if err := s.CallPackedDiscard(loop, int64(1024), 1); err != nil {
		t.Fatal(err)
	}
	err := s.SyncWorker(context.Background(), 0)
	var le *session.LostError
	if !errors.As(err, &le) || le.Worker != 1 || !strings.Contains(err.Error(), "did not reach allreduce #1 (cpu, 4 KiB)") {
		t.Fatalf("SyncWorker(0) = %v, want worker 1 lost for not reaching the allreduce", err)
	}
	waitGone(t, pid)
}

// TestWorkerDeadlineFullLog: workers stuck in a function while the
// controller keeps sending fill the command log (or, with the log off or
// for frames larger than a log entry, the worker's ring); the send that
// waits for room is under the hang watch like a wait for a reply, so the
// WorkerDeadline declares the worker it waits for lost and the send
// fails, instead of blocking forever.
func TestWorkerDeadlineFullLog(t *testing.T) {
	big := strings.Repeat("x", 64<<10) // 16 of them fill a ring
	for _, tc := range []struct {
		name, transport, log, wait string
		arg                        any
	}{
		{"log", "shm", "1", "room in the command log", int64(1)},
		{"ring without the log", "shm", "0", "room in the command ring", int64(1)},
		{"ring behind the log", "shm", "1", "room in the command ring", big},
		{"stream", "stream", "1", "room in the command stream", big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Check(t)
			if tc.log == "0" {
				session.NoBroadcastLog(t)
			}
			var out lockedBuffer
			s, err := session.NewProcess(bg(t), session.ProcessOptions{Transport: tc.transport, Options: session.Options{
				NumWorkers: 2, ShutdownGrace: 2 * time.Second,
				HangReport: 50 * time.Millisecond, HangOutput: &out, WorkerDeadline: 300 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown()
			block := mustFunc(t, s, "test.block")
			echo := mustFunc(t, s, "test.echo")
			if err := s.CallPackedDiscard(block); err != nil {
				t.Fatal(err)
			}
			sent := make(chan error, 1)
			go func() {
				var err error
				// More than the log holds, and more than a ring holds
				// (1 MiB: 64 KiB commands, or about 40-byte ones).
				for i := 0; i < 40_000 && err == nil; i++ {
					err = s.CallPackedDiscard(echo, tc.arg)
				}
				sent <- err
			}()
			select {
			case err = <-sent:
			case <-time.After(30 * time.Second): // liveness bound, far above the deadline
				t.Fatal("a send waiting for a stuck worker never ended")
			}
			var le *session.LostError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), "WorkerDeadline") {
				t.Fatalf("sending to stuck workers: %v, want a LostError by the WorkerDeadline", err)
			}
			if !strings.Contains(out.String(), tc.wait) {
				t.Errorf("the hang report does not name the wait (%q):\n%s", tc.wait, out.String())
			}
		})
	}
}
