package session_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

// TestMain turns this test binary into a worker when a process session
// starts it, or into a stand-alone controller for the orphan test, or
// into a program that forgot worker.Main (envForgetful).
func TestMain(m *testing.M) {
	if os.Getenv(envForgetful) != "" {
		os.Exit(forgetfulMain()) // before worker.Main: the program under test forgot it
	}
	worker.Main()
	if os.Getenv(envController) != "" {
		os.Exit(runController())
	}
	os.Exit(m.Run())
}

func init() {
	registry.MustRegisterTyped("test.add", func(a, b int64) int64 { return a + b })
	registry.MustRegisterTyped("test.fail_on", func(env registry.Env, w int, msg string) error {
		if w < 0 || env.WorkerID() == w {
			return errors.New(msg)
		}
		return nil
	})
	registry.MustRegisterTyped("test.panic_on", func(env registry.Env, w int) int64 {
		if env.WorkerID() == w {
			var m map[string]int
			//lint:ignore SA5000 a real runtime panic, not a panic(string)
			m["boom"] = 1
		}
		return 1
	})
	registry.MustRegisterTyped("test.sleep_ms", func(env registry.Env, ms int) {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-env.Context().Done():
		}
	})
	registry.MustRegisterTyped("test.block", func() { select {} })
	// rank_tensor(n): float32 tensor of worker_id*100 + i.
	registry.MustRegisterTyped("test.rank_tensor", func(env registry.Env, n int64) (*tensor.Tensor, error) {
		t, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), "")
		if err != nil {
			return nil, err
		}
		d, _ := tensor.Data[float32](t)
		for i := range d {
			d[i] = float32(env.WorkerID()*100 + i)
		}
		return t, nil
	})
	registry.MustRegisterTyped("test.sum", func(t *tensor.Tensor) (float64, error) {
		d, err := tensor.Data[float32](t)
		if err != nil {
			return 0, err
		}
		var s float64
		for _, v := range d {
			s += float64(v)
		}
		return s, nil
	})
	registry.MustRegisterTyped("test.echo", func(v any) any { return v })
	registry.MustRegisterTyped("test.describe", func(args ...any) string { return strings.TrimSuffix(fmt.Sprintln(args...), "\n") })
	registry.MustRegisterTyped("test.opaque", func() any { return struct{ X int }{1} })
	registry.MustRegisterTyped("test.mem_free", func(env registry.Env) (int64, error) {
		d, err := cuda.Load()
		if err != nil {
			return 0, err
		}
		// The worker's device thread has the context; this one needs it too.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		dev, err := d.DeviceGet(env.Device().ID)
		if err != nil {
			return 0, err
		}
		ctx, err := d.PrimaryCtxRetain(dev)
		if err != nil {
			return 0, err
		}
		defer d.PrimaryCtxRelease(dev)
		if err := d.SetCurrent(ctx); err != nil {
			return 0, err
		}
		free, _, err := d.MemGetInfo()
		return free, err
	})
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
