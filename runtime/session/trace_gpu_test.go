package session_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// tracetest.gpu_nested(x): device work issued outside package worker
	// (BeginGPU/End) around a host->device copy that times itself.
	registry.MustRegisterTyped("tracetest.gpu_nested", func(env registry.Env, x *tensor.Tensor) error {
		h, err := tensor.New(x.DType(), x.Shape())
		if err != nil {
			return err
		}
		g := registry.BeginGPU(env)
		err = registry.FromHost(env, x, h)
		g.End("outer", x.NumBytes())
		return err
	})
	// tracetest.gpu_step(n): a host->device copy, an NCCL allreduce, a
	// custom all-reduce on IPC memory and a device->host copy.
	registry.MustRegisterTyped("tracetest.gpu_step", func(env registry.Env, n int64) error {
		h, err := tensor.New(tensor.Float32, tensor.Shape{n})
		if err != nil {
			return err
		}
		x, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), "")
		if err != nil {
			return err
		}
		if err := registry.FromHost(env, x, h); err != nil {
			return err
		}
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		if err := c.AllReduce(env.Context(), x, x, 0); err != nil {
			return err
		}
		a, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), worker.ScopeIPC)
		if err != nil {
			return err
		}
		b, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), "")
		if err != nil {
			return err
		}
		if err := registry.CustomAllReduce(env, a, b, "sum", "auto"); err != nil {
			return err
		}
		_, err = registry.ToHost(env, b)
		return err
	})
}

// TestTraceGPU (2 GPUs): copies, the NCCL allreduce and the custom
// all-reduce appear on each worker's GPU stream track, timed with CUDA
// events, and the trace validates.
func TestTraceGPU(t *testing.T) {
	needGPUs(t, 2)
	path := filepath.Join(t.TempDir(), "gpu.json")
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}, Trace: path, ShutdownGrace: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InitCCL(bg(t), "nccl", 0); err != nil {
		s.Shutdown()
		t.Fatal(err)
	}
	f := mustFunc(t, s, "tracetest.gpu_step")
	for range 3 {
		if err := s.CallPackedDiscard(f, int64(1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(bg(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	tf := readTrace(t, path)
	got := map[string]int{}
	for _, e := range tf.Events {
		if e.Cat == trace.CatGPU {
			got[e.Track.Process+"/"+e.Name]++
			if e.Dur <= 0 {
				t.Errorf("gpu event without device time: %+v", e)
			}
		}
	}
	t.Logf("gpu events: %v", got)
	for w := range 2 {
		for _, name := range []string{"copy H2D", "copy D2H", "allreduce nccl", "allreduce ipc/auto"} {
			if got[trace.ProcWorkerGPU(w)+"/"+name] != 3 {
				t.Errorf("worker %d: %d %q events, want 3", w, got[trace.ProcWorkerGPU(w)+"/"+name], name)
			}
		}
	}
}
