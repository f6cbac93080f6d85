package mlp_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/cmd/chorus/internal/mlp"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func TestMain(m *testing.M) {
	worker.Main() // process sessions re-execute this binary as workers
	os.Exit(m.Run())
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var small = mlp.Config{Batch: 3, Hidden: 16, FFN: 32, DType: tensor.Float32, Seed: 7}

// TestShardsCoverTheModel: the shards of any worker count put together
// are the same full parameters.
func TestShardsCoverTheModel(t *testing.T) {
	full := map[string][]float64{}
	for _, n := range []int{1, 2, 4} {
		for _, name := range []string{"x", "w1", "b1", "w2", "b2"} {
			rows, cols := int64(1), small.Hidden
			switch name {
			case "x":
				rows = small.Batch
			case "w1":
				rows, cols = small.Hidden, small.FFN
			case "b1":
				cols = small.FFN
			case "w2":
				rows = small.FFN
			}
			got := make([]float64, rows*cols)
			for r := range n {
				sh, err := small.Shard(name, r, n)
				if err != nil {
					t.Fatal(err)
				}
				v, _ := tensor.ToFloat64(sh)
				f := small.FFN / int64(n)
				for i, x := range v {
					idx := int64(i)
					switch name {
					case "w1":
						idx = int64(i)/f*cols + int64(r)*f + int64(i)%f
					case "b1":
						idx = int64(r)*f + int64(i)
					case "w2":
						idx = int64(r)*f*cols + int64(i)
					}
					got[idx] = x
				}
			}
			if want, ok := full[name]; ok && fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("%s: %d workers' shards differ from 1 worker's", name, n)
			}
			full[name] = got
		}
	}
	if _, err := small.Shard("w3", 0, 1); err == nil {
		t.Error("unknown parameter accepted")
	}
	if _, err := small.Shard("w1", 0, 3); err == nil {
		t.Error("ffn 32 split over 3 workers accepted")
	}
}

func TestCompilePlansMemory(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPUDevice, tensor.CUDADevice(0)} {
		cc, err := mlp.Compile(mlp.Config{Batch: 8, Hidden: 64, FFN: 256, DType: tensor.Float16}, 2, dev, "one_shot", nil)
		if err != nil {
			t.Fatal(err)
		}
		// Per worker: h, hb, a [8,128] and partial, reduced, y [8,64] in
		// float16: 3·2048 + 3·1024 bytes before planning. After: on the
		// CPU two 2048-byte storages hold h/a/partial/reduced and hb, plus
		// y; on a GPU partial moves to its own ipc_memory storage (the
		// golden pipeline_mlp test has the GPU numbers).
		want := map[tensor.DeviceKind]int64{tensor.CPU: 5120, tensor.CUDA: 6144}[dev.Kind]
		if cc.PeakBefore.Total != 9216 || cc.PeakAfter.Total != want {
			t.Errorf("%v: peak %d -> %d, want 9216 -> %d", dev, cc.PeakBefore.Total, cc.PeakAfter.Total, want)
		}
		text := cc.Module.String()
		hasIPC := strings.Contains(text, "custom_allreduce") && strings.Contains(text, "chorus.ipc.alloc_storage")
		if hasIPC != (dev.Kind == tensor.CUDA) {
			t.Errorf("%v: custom all-reduce and IPC allocation present = %v:\n%s", dev, hasIPC, text)
		}
	}
	if _, err := mlp.Build(mlp.Config{Batch: 1, Hidden: 4, FFN: 6, DType: tensor.Float32}, 4); err == nil {
		t.Error("Build accepted ffn 6 over 4 workers")
	}
}

// TestMLP runs the MLP on 1, 2 and 4 CPU workers of threaded and process
// sessions and compares with the float64 reference; the half types run
// on two threaded workers.
func TestMLP(t *testing.T) {
	type run struct {
		kind string
		n    int
		dt   tensor.DType
	}
	var runs []run
	for _, k := range []string{"threaded", "process"} {
		for _, n := range []int{1, 2, 4} {
			runs = append(runs, run{k, n, tensor.Float32})
		}
	}
	runs = append(runs, run{"threaded", 2, tensor.Float16}, run{"threaded", 2, tensor.BFloat16})
	for _, r := range runs {
		t.Run(fmt.Sprintf("%s/%d/%s", r.kind, r.n, r.dt), func(t *testing.T) {
			leaktest.Check(t)
			ctx := bg(t)
			var s *session.Session
			var err error
			if r.kind == "threaded" {
				s, err = session.NewThreaded(session.Options{NumWorkers: r.n})
			} else {
				s, err = session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: r.n}})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			if err := s.InitCCL(ctx, "cpu", 0); err != nil {
				t.Fatal(err)
			}
			c := small
			c.DType = r.dt
			st, ck, err := mlp.Run(ctx, s, c, tensor.CPUDevice, "")
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			if ck.Err != nil || !ck.Identical {
				t.Errorf("check: %+v", ck)
			}
			// A second step on the reused workspace gives the same bits.
			y, err := st.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			ck2, err := st.CheckResult(ctx, y)
			if err != nil || ck2.MaxAbsErr != ck.MaxAbsErr || ck2.Err != nil {
				t.Errorf("second step: %+v, %v (first %+v)", ck2, err, ck)
			}
		})
	}
}

func TestDemo(t *testing.T) {
	ctx := bg(t)
	s, err := session.NewThreaded(session.Options{NumWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "cpu", 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := mlp.Demo(ctx, &out, s, small, tensor.CPUDevice, ""); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"2 workers on cpu", `pipeline "cpu": plan-devices, plan-memory`, "peak bytes per worker and call: 1152 before memory planning, 576 after (global 576)",
		"allreduce(%partial, sum, %reduced)", ": ok", "identical bits on every worker: true", "median"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestMLPGPU runs the MLP on GPUs: matmul in cuBLAS, the all-reduce as
// the custom IPC all-reduce; two workers on two GPUs over NCCL, or, with
// one GPU, two worker processes sharing it (backend "ipc"). Each case
// then captures the step as a CUDA graph and replays it, with y poisoned
// before every replay.
func TestMLPGPU(t *testing.T) {
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "cuInit: %v", err)
	}
	n, err := d.DeviceCount()
	if err != nil || n < 1 {
		gputest.Skipf(t, "needs a GPU, have %d (%v)", n, err)
	}
	ids, backend := []int{0, 1}, "nccl"
	if n < 2 {
		ids, backend = []int{0, 0}, "ipc"
	}
	for _, c := range []struct {
		dt       tensor.DType
		strategy string
	}{{tensor.Float16, "one_shot"}, {tensor.Float16, "two_shot"}, {tensor.BFloat16, "auto"}, {tensor.Float32, "auto"}} {
		t.Run(c.dt.String()+"/"+c.strategy, func(t *testing.T) {
			ctx := bg(t)
			s, err := session.NewProcess(ctx, session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: ids}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown()
			if err := s.InitCCL(ctx, backend, 0); err != nil {
				t.Fatal(err)
			}
			cfg := mlp.Config{Batch: 8, Hidden: 256, FFN: 1024, DType: c.dt, Seed: 3}
			st, ck, err := mlp.Run(ctx, s, cfg, tensor.CUDADevice(0), c.strategy)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			if ck.Err != nil || !ck.Identical {
				t.Errorf("check: %+v", ck)
			}
			if !strings.Contains(st.Compiled.Module.String(), "custom_allreduce") {
				t.Error("the GPU program has no custom_allreduce")
			}
			g, err := st.CaptureStep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Release()
			poison := mustGlobal(t, s, "mlptest.poison")
			for i := range 3 {
				y, err := st.ReplayStep(ctx, g)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Sync(ctx); err != nil {
					t.Fatalf("replay %d: %v", i, err)
				}
				ck, err := st.CheckResult(ctx, y)
				if err != nil {
					t.Fatal(err)
				}
				if ck.Err != nil || !ck.Identical {
					t.Errorf("replay %d: %+v", i, ck)
				}
				if _, err := s.CallPacked(poison, y); err != nil {
					t.Fatal(err)
				}
				y.Release()
			}
		})
	}
}

func init() {
	// mlptest.poison(t) fills a GPU tensor with NaNs or extreme values.
	registry.MustRegisterTyped("mlptest.poison", func(env registry.Env, x *tensor.Tensor) error {
		p := tensor.MustNew(x.DType(), x.Shape())
		tensor.Poison(p)
		return registry.FromHost(env, x, p)
	})
}

func mustGlobal(t *testing.T, s *session.Session, name string) *session.DRef {
	t.Helper()
	f, err := s.GetGlobalFunc(bg(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
