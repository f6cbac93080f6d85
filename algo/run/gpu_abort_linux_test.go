package run_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/gpuworker"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// gpu_loop(handle, count, marker) runs the plan until a call fails
	// (a peer is killed meanwhile), syncing every 16 calls; the error
	// that ended it goes to marker.<worker id>, and marker.started.<id>
	// is written after the first 16 calls, so the test kills a peer only
	// while kernels run.
	registry.MustRegisterTyped("runtest.gpu_loop", func(env registry.Env, h any, count int64, marker string) error {
		err := gpuLoop(env, h, count, fmt.Sprintf("%s.started.%d", marker, env.WorkerID()))
		_ = os.WriteFile(fmt.Sprintf("%s.%d", marker, env.WorkerID()), []byte(err.Error()), 0o644)
		return err
	})
}

func gpuLoop(env registry.Env, h any, count int64, started string) error {
	e, ok := h.(*gpuworker.Executor)
	if !ok || e.X == nil {
		return fmt.Errorf("runtest.gpu_loop: %T is not a loaded plan", h)
	}
	send, err := env.Alloc(tensor.BFloat16, tensor.Shape{count}, env.Device(), tensor.ScopeGlobal)
	if err != nil {
		return err
	}
	recv, err := env.Alloc(tensor.BFloat16, tensor.Shape{count}, env.Device(), tensor.ScopeGlobal)
	if err != nil {
		return err
	}
	for it := 0; ; it++ {
		if err := e.X.Run(env.Context(), send, recv, reduce.Sum); err != nil {
			return err
		}
		if it%16 == 15 {
			if err := registry.SyncDevice(env); err != nil {
				return err
			}
			if it == 15 {
				if err := os.WriteFile(started, nil, 0o644); err != nil {
					return err
				}
			}
		}
	}
}

// TestGPUPlanPeerKilled kills one of three workers while all run
// allreduce_packet on the GPU executor (kernel timeout 60 s). The
// survivors, waiting for the lost peer in a kernel or in the host
// exchange before a call, must stop at the session's abort (Worker.Abort
// sets every executor's abort word and ends the control communicator),
// not at the timeout: each survivor's loop ends with an error within the
// 20 s hang guard below. Skipped without a GPU.
func TestGPUPlanPeerKilled(t *testing.T) {
	gputest.Require(t, 1)
	const n = 3
	ngpu := gpuCount()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i % ngpu
	}
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: ids}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "ipc", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	p, err := library.Build("allreduce_packet", n, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := run.LoadGPU(bg(t), s, p, run.GPUOptions{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	count, _ := run.Counts(p, tensor.BFloat16, 2*4099)
	marker := filepath.Join(t.TempDir(), "ended")
	loop, err := s.GetGlobalFunc(bg(t), "runtest.gpu_loop")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CallPacked(loop, c.Handle(), count, marker); err != nil {
		t.Fatal(err)
	}
	waitFile := func(f string, until time.Time) ([]byte, error) {
		for {
			b, err := os.ReadFile(f)
			if err == nil || time.Now().After(until) {
				return b, err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for w := range n {
		if _, err := waitFile(fmt.Sprintf("%s.started.%d", marker, w), time.Now().Add(120*time.Second)); err != nil {
			t.Fatalf("worker %d never started its loop: %v", w, err)
		}
	}
	if err := syscall.Kill(s.PIDs()[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); !errors.Is(err, session.ErrWorkerLost) {
		t.Fatalf("Sync after a worker was killed: %v, want ErrWorkerLost", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, w := range []int{0, 2} {
		b, err := waitFile(fmt.Sprintf("%s.%d", marker, w), deadline)
		if err != nil {
			t.Fatalf("worker %d's plan calls did not end after the abort: %v", w, err)
		}
		if strings.Contains(string(b), "gave up") {
			t.Errorf("worker %d ended by its timeout, not the abort: %s", w, b)
		}
		t.Logf("worker %d ended with: %s", w, b)
	}
}
