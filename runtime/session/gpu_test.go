package session_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

// gpuKinds: fake GPUs in threads and in processes; real GPUs when the
// CUDA driver is present.
func gpuKinds(t *testing.T) map[string]func(t *testing.T, ids []int) *session.Session {
	ks := map[string]func(t *testing.T, ids []int) *session.Session{
		"threaded-fake": func(t *testing.T, ids []int) *session.Session {
			s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: ids, OpenDevice: worker.OpenFake})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"process-fake": func(t *testing.T, ids []int) *session.Session {
			s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: ids},
				Env: []string{worker.EnvFakeGPU + "=1"}})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	if d, err := cuda.Load(); err == nil && d.Init() == nil {
		ks["process-cuda"] = func(t *testing.T, _ []int) *session.Session {
			n, err := d.DeviceCount()
			if err != nil || n < 1 {
				gputest.Skipf(t, "no device to bind: %d, %v", n, err)
			}
			ids := []int{0, 1 % n}
			s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: ids}})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	return ks
}

func TestGPUTensorsInSessions(t *testing.T) {
	for name, start := range gpuKinds(t) {
		t.Run(name, func(t *testing.T) {
			s := start(t, []int{0, 1})
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			ctx := bg(t)
			devs := mustCall(t, s, mustFunc(t, s, "chorus.device"))
			for w := range 2 {
				d := get(t, s, devs, w).(tensor.Device)
				if d.Kind != tensor.CUDA {
					t.Fatalf("worker %d device = %v", w, d)
				}
			}
			empty := mustFunc(t, s, "chorus.empty")
			buf := mustCall(t, s, empty, tensor.Shape{3, 5}, tensor.BFloat16, nil, false, false)
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			// Device tensors come back to the controller by value.
			got := get(t, s, buf, 1).(*tensor.Tensor)
			if got.DType() != tensor.BFloat16 || !got.Shape().Equal(tensor.Shape{3, 5}) {
				t.Fatalf("fetched %v", got)
			}
			if err := tensor.Equal(got, tensor.MustNew(tensor.BFloat16, tensor.Shape{3, 5})); err != nil {
				t.Errorf("fresh device tensor not zeroed: %v", err)
			}
			host := tensor.MustNew(tensor.BFloat16, tensor.Shape{3, 5})
			if err := tensor.Random(host, 7); err != nil {
				t.Fatal(err)
			}
			if err := s.CopyToWorker0(host, buf); err != nil {
				t.Fatal(err)
			}
			back := tensor.MustNew(tensor.BFloat16, tensor.Shape{3, 5})
			if err := s.CopyFromWorker0(ctx, back, buf); err != nil {
				t.Fatal(err)
			}
			if err := tensor.Equal(back, host); err != nil {
				t.Errorf("CopyToWorker0 then CopyFromWorker0: %v", err)
			}
			// Allocating on a GPU the worker is not bound to is an error.
			mustCall(t, s, empty, tensor.Shape{1}, tensor.Float32, "cuda:5", false, false)
			if err := s.Sync(ctx); err == nil || !strings.Contains(err.Error(), "cuda:5") {
				t.Errorf("empty on an unbound GPU: %v", err)
			}
			if err := buf.Release(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNoDeviceMemoryLeakPerSession creates and closes 20 sessions on the
// real GPU and compares the device's free memory before and after.
func TestNoDeviceMemoryLeakPerSession(t *testing.T) {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		gputest.Skipf(t, "no CUDA driver")
	}
	free := func() int64 {
		s, err := session.NewThreaded(session.Options{NumWorkers: 1, DeviceIDs: []int{0}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
		f := mustFunc(t, s, "test.mem_free")
		v := get(t, s, mustCall(t, s, f), 0)
		return v.(int64)
	}
	before := free()
	for range 20 {
		s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0}, ShutdownGrace: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		empty := mustFunc(t, s, "chorus.empty")
		for range 4 {
			mustCall(t, s, empty, tensor.Shape{16 << 20}, tensor.Float32, nil, false, false)
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	after := free()
	t.Logf("device free memory: %d MiB before, %d MiB after 20 sessions", before>>20, after>>20)
	if before-after > 64<<20 {
		t.Errorf("device memory leaked: %d MiB", (before-after)>>20)
	}
}
