package session_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/registry"
	"github.com/chorus-rt/chorus/session"
	"github.com/chorus-rt/chorus/tensor"
	"github.com/chorus-rt/chorus/worker"
)

func init() {
	// ipctest.loop runs one-shot custom all-reduces until one fails (a
	// peer is killed meanwhile), syncing every 64 calls.
	registry.MustRegisterTyped("ipctest.loop", func(env registry.Env, count int64) error {
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
			if err := worker.CustomAllReduce(env, send, recv, "sum", "oneshot"); err != nil {
				return err
			}
			if it%64 == 63 {
				if err := worker.SyncDevice(env); err != nil {
					return err
				}
			}
		}
	})
}

// TestCustomAllReduceAbort kills one worker while the others run custom
// all-reduces: the survivors' kernels, spinning on the lost peer, must
// stop at the session's abort signal rather than at their 30 s timeout,
// so the survivors finish and Shutdown does not have to force them.
func TestCustomAllReduceAbort(t *testing.T) {
	needGPUs(t, 1)
	ngpu := gpuCount(t)
	const n = 3
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i % ngpu
	}
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: ids}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InitCCL(bg(t), "ipc", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CallPacked(mustFunc(t, s, "ipctest.loop"), int64(4099)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the loop run
	victim := s.PIDs()[1]
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); !errors.Is(err, session.ErrWorkerLost) {
		t.Fatalf("Sync after a worker was killed: %v, want ErrWorkerLost", err)
	}
	err = s.Shutdown()
	t.Logf("Shutdown: %v", err)
	if err != nil && strings.Contains(err.Error(), "still busy") {
		t.Fatalf("a survivor was still in its custom all-reduce at Shutdown: %v", err)
	}
}
