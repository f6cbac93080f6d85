package gpuexec_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl/ipc"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

// TestMain turns this test binary into a worker when a process session
// (TestGPUSharedMPS) starts it.
func TestMain(m *testing.M) {
	worker.Main()
	os.Exit(m.Run())
}

func init() {
	// gpuexectest.ipc: custom all-reduces of count float32 elements with
	// strategy: the first `checked` calls each checked exactly (output
	// poisoned before each), then `iters` calls back to back into one
	// output, the last checked. staged: send is not IPC memory (one-shot
	// up to 512 KB takes the push kernel). Returns the wrong elements.
	registry.MustRegisterTyped("gpuexectest.ipc", func(env registry.Env, count int64, strategy string, checked, iters int64, staged bool) (int64, error) {
		n, r := env.NumWorkers(), env.WorkerID()
		in := tensor.MustNew(tensor.Float32, tensor.Shape{count})
		want := make([]float32, count)
		src, err := tensor.Data[float32](in)
		if err != nil {
			return 0, err
		}
		for i := range count {
			src[i] = float32(r + 1 + int(i%7))
			for q := range n {
				want[i] += float32(q + 1 + int(i%7))
			}
		}
		scope := worker.ScopeIPC
		if staged {
			scope = ""
		}
		send, err := env.Alloc(tensor.Float32, tensor.Shape{count}, env.Device(), scope)
		if err != nil {
			return 0, err
		}
		recv, err := env.Alloc(tensor.Float32, tensor.Shape{count}, env.Device(), "")
		if err != nil {
			return 0, err
		}
		if err := registry.FromHost(env, send, in); err != nil {
			return 0, err
		}
		poison := tensor.MustNew(tensor.Float32, tensor.Shape{count})
		tensor.Poison(poison)
		wrong := int64(0)
		check := func() error {
			if err := registry.SyncDevice(env); err != nil {
				return err
			}
			got, err := registry.ToHost(env, recv)
			if err != nil {
				return err
			}
			vs, err := tensor.Data[float32](got)
			if err != nil {
				return err
			}
			for i, v := range vs {
				if v != want[i] {
					wrong++
				}
			}
			return registry.FromHost(env, recv, poison)
		}
		for range checked {
			if err := registry.CustomAllReduce(env, send, recv, "sum", strategy); err != nil {
				return wrong, err
			}
			if err := check(); err != nil {
				return wrong, err
			}
		}
		for range iters {
			if err := registry.CustomAllReduce(env, send, recv, "sum", strategy); err != nil {
				return wrong, err
			}
		}
		return wrong, check()
	})
}

// mpsEnabled reports whether GPU 0's contexts are shared through the MPS
// daemon (the driver's attribute).
func mpsEnabled(t *testing.T) bool {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		return false
	}
	dev, err := d.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.DeviceAttribute(dev, cuda.AttrMPSEnabled)
	return err == nil && v != 0
}

// logShare logs what ccl/ipc sees of GPU 0 from a context of this
// process, made under the current environment (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
func logShare(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d, err := cuda.Load()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := d.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer d.PrimaryCtxRelease(dev)
	if err := d.SetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := ipc.DescribeGPU(d, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU 0: MPS %v, %d SMs, this context may use %d (0: all)", g.MPS, g.SMs, g.ActiveSMs)
}

// TestGPUSharedMPS runs 2 and 4 ranks as processes on GPU 0 under MPS
// (scripts/gpu-check.sh starts the daemon; the test starts nothing and
// skips without it): every ipc strategy (one-shot pull, push, two-shot,
// auto) and every library plan, at sizes whose full grids would not be
// resident together (4 and 16 MiB), each call checked exactly for the
// first calls, then a run of calls back to back. Without co-resident
// grids these calls waited for their timeout.
func TestGPUSharedMPS(t *testing.T) {
	gputest.Require(t, 1)
	if !mpsEnabled(t) {
		t.Skip("GPU 0 is not under MPS (scripts/gpu-check.sh runs this test with the MPS daemon)")
	}
	// With an active thread percentage the ranks' contexts may use fewer
	// SMs: grids shrink further (2 ranks, the strategies only).
	t.Run("2ranks-25pct", func(t *testing.T) {
		t.Setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
		logShare(t)
		sharedGPU(t, 2, true)
	})
	logShare(t)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) { sharedGPU(t, n, false) })
	}
}

// sharedGPU runs n ranks on GPU 0: the ipc strategies, and unless
// strategiesOnly every library plan.
func sharedGPU(t *testing.T, n int, strategiesOnly bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: make([]int, n)}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	if err := s.InitCCL(ctx, "ipc", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	f, err := s.GetGlobalFunc(ctx, "gpuexectest.ipc")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	for _, c := range []struct {
		strategy       string
		count          int64
		staged         bool
		checked, iters int64
	}{
		{"oneshot", 256, false, 50, 10000},
		{"oneshot", 64 << 10, true, 50, 2000}, // push
		{"oneshot", 1<<20 + 3, false, 20, 200},
		{"oneshot", 4 << 20, false, 10, 100},
		{"twoshot", 256, false, 50, 10000},
		{"twoshot", 1<<20 + 3, false, 20, 200},
		{"twoshot", 4 << 20, false, 10, 100},
		{"auto", 4 << 18, true, 10, 100},
	} {
		out, err := s.CallPacked(f, c.count, c.strategy, c.checked, c.iters, c.staged)
		if err != nil {
			t.Fatalf("%s of %d floats (staged %v): %v", c.strategy, c.count, c.staged, err)
		}
		for w := range n {
			v, err := s.DebugGetFromRemote(ctx, out, w)
			if err != nil {
				t.Fatal(err)
			}
			if v.(int64) != 0 {
				t.Errorf("%s of %d floats (staged %v): worker %d: %d wrong elements", c.strategy, c.count, c.staged, w, v)
			}
		}
		out.Release()
	}
	if strategiesOnly {
		return
	}
	for _, name := range library.Names() {
		p, err := library.Build(name, n, library.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := run.LoadGPU(ctx, s, p, run.GPUOptions{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// ipc: the tensors in IPC memory, which plans that stage a
		// buffer reach directly (gpuexec.DirectProposal).
		for _, sz := range []struct {
			bytes int64
			iters int
			ipc   bool
		}{{1 << 10, 10000, false}, {4 << 20, 200, false}, {16 << 20, 50, false}, {1 << 10, 2000, true}, {4 << 20, 200, true}} {
			inN, outN := run.Counts(p, tensor.Float32, sz.bytes)
			if inN == 0 {
				continue
			}
			c.IPCTensors = sz.ipc
			for _, graph := range []bool{false, true} {
				r, err := c.Bench(ctx, tensor.Float32, inN, outN, sz.iters, 1, reduce.Sum, graph, 7)
				if err != nil {
					t.Fatalf("%s, %d bytes, graph %v, IPC tensors %v: %v", name, sz.bytes, graph, sz.ipc, err)
				}
				if r.Wrong != 0 {
					t.Errorf("%s, %d bytes, graph %v, IPC tensors %v: %d wrong elements", name, sz.bytes, graph, sz.ipc, r.Wrong)
				}
				t.Logf("%s %d ranks %d bytes graph %v IPC tensors %v: %.1f us a call", name, n, sz.bytes, graph, sz.ipc, r.TimeUs)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
