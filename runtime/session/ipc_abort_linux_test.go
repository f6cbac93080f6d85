package session_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// ipctest.loop runs one-shot custom all-reduces until one fails (a
	// peer is killed meanwhile), syncing every 64 calls; the error that
	// ended it goes to the file marker.<worker id>.
	// marker.started.<worker id> is written once the first 64 calls are
	// done, so the test kills a peer only while kernels run.
	registry.MustRegisterTyped("ipctest.loop", func(env registry.Env, count int64, marker string) error {
		err := ipcLoop(env, count, fmt.Sprintf("%s.started.%d", marker, env.WorkerID()))
		_ = os.WriteFile(fmt.Sprintf("%s.%d", marker, env.WorkerID()), []byte(err.Error()), 0o644)
		return err
	})
}

func ipcLoop(env registry.Env, count int64, started string) error {
	dev := env.Device()
	send, err := env.Alloc(tensor.BFloat16, tensor.Shape{count}, dev, worker.ScopeIPC)
	if err != nil {
		return err
	}
	recv, err := env.Alloc(tensor.BFloat16, tensor.Shape{count}, dev, "")
	if err != nil {
		return err
	}
	for it := 0; ; it++ {
		if err := registry.CustomAllReduce(env, send, recv, "sum", "oneshot"); err != nil {
			return err
		}
		if it%64 == 63 {
			if err := registry.SyncDevice(env); err != nil {
				return err
			}
			if it == 63 {
				if err := os.WriteFile(started, nil, 0o644); err != nil {
					return err
				}
			}
		}
	}
}

// TestCustomAllReduceAbort kills one worker while the others run custom
// all-reduces. The survivors' kernels, spinning on the lost peer, must
// stop at the session's abort signal, not at their 30 s timeout: each
// survivor's loop must end, with the all-reducer's abort error, well
// before that (the 10 s wait below is a hang guard).
func TestCustomAllReduceAbort(t *testing.T) {
	needGPUs(t, 1)
	ngpu := gpuCount(t)
	const n = 3
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i % ngpu
	}
	// Without the host-side argument exchange the survivors can only be
	// stuck in their kernels (or in the stream sync behind them), not in
	// the control communicator, which the abort also ends.
	s, err := session.NewProcess(bg(t), session.ProcessOptions{
		Options: session.Options{NumWorkers: n, DeviceIDs: ids, Worker: worker.Options{SkipChecks: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "ipc", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ended")
	if _, err := s.CallPacked(mustFunc(t, s, "ipctest.loop"), int64(4099), marker); err != nil {
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
	// Every worker is in its loop (kernels compiled, calls running).
	for w := range n {
		if _, err := waitFile(fmt.Sprintf("%s.started.%d", marker, w), time.Now().Add(60*time.Second)); err != nil {
			t.Fatalf("worker %d never started its loop: %v", w, err)
		}
	}
	victim := s.PIDs()[1]
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); !errors.Is(err, session.ErrWorkerLost) {
		t.Fatalf("Sync after a worker was killed: %v, want ErrWorkerLost", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range []int{0, 2} {
		b, err := waitFile(fmt.Sprintf("%s.%d", marker, w), deadline)
		if err != nil {
			t.Fatalf("worker %d's custom all-reduces did not end after the abort: %v", w, err)
		}
		if !strings.Contains(string(b), "aborted") {
			t.Errorf("worker %d ended with %q, want the all-reducer's abort error", w, b)
		}
	}
}
