package session_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// ipctest.graph captures, on every worker, a copy of the input into
	// IPC memory followed by a one-shot, a two-shot and a staged
	// (input outside IPC memory) custom all-reduce into three outputs,
	// then replays the graph `replays` times with the source alternating
	// between two rank-dependent sets, checking every output against a
	// float64 reference after each replay (outputs poisoned in between).
	// An eager one-shot call runs between replays every third time, so
	// eager calls and replays share the kernels' flag counters. Before
	// the capture (after a warm-up) it checks that an allocation and a
	// workspace-growing call inside a capture are refused with
	// device.ErrCapturing.
	registry.MustRegisterTyped("ipctest.graph", func(env registry.Env, dt tensor.DType, count int64, opName string, seed, replays int64) error {
		op, err := reduce.ParseOp(opName)
		if err != nil {
			return err
		}
		n, r := env.NumWorkers(), env.WorkerID()
		dev := env.Device()
		alloc := func(scope string) (*tensor.Tensor, error) {
			return env.Alloc(dt, tensor.Shape{count}, dev, scope)
		}
		var srcs [2]*tensor.Tensor
		var wants [2][]float64
		for k := range srcs {
			inputs := make([][]float64, n)
			var mine *tensor.Tensor
			for q := range n {
				in, err := propInput(dt, count, uint64(seed)+uint64(k)*1000, q, op)
				if err != nil {
					return err
				}
				inputs[q], _ = tensor.ToFloat64(in)
				if q == r {
					mine = in
				}
			}
			wants[k] = collectiveRef("allreduce", dt, op, inputs, count, count, r)
			if srcs[k], err = alloc(""); err != nil {
				return err
			}
			if err := registry.FromHost(env, srcs[k], mine); err != nil {
				return err
			}
		}
		slot, err := alloc("") // the graph's source: refilled before each replay
		if err != nil {
			return err
		}
		send, err := alloc(worker.ScopeIPC)
		if err != nil {
			return err
		}
		outs := make([]*tensor.Tensor, 4) // oneshot, twoshot, staged, eager
		for i := range outs {
			if outs[i], err = alloc(""); err != nil {
				return err
			}
		}
		poison := tensor.MustNew(dt, tensor.Shape{count})
		tensor.Poison(poison)
		rtol, atol := tensor.DefaultTolerance(dt)
		check := func(what string, it int64, outs ...*tensor.Tensor) error {
			if err := registry.SyncDevice(env); err != nil {
				return err
			}
			for i, out := range outs {
				got, err := registry.ToHost(env, out)
				if err != nil {
					return err
				}
				if err := tensor.CloseTo(got, wants[it%2], rtol*float64(n)*4, atol*float64(n)*4); err != nil {
					return fmt.Errorf("worker %d: %s %d, output %d (%s %s x %d): %w", r, what, it, i, dt, op, count, err)
				}
				if err := registry.FromHost(env, out, poison); err != nil {
					return err
				}
			}
			return nil
		}

		// Warm-up: the workspaces exist before the capture.
		if err := registry.CopyTensor(env, send, srcs[0]); err != nil {
			return err
		}
		for i, st := range []string{"oneshot", "twoshot"} {
			if err := registry.CustomAllReduce(env, send, outs[i], opName, st); err != nil {
				return err
			}
		}
		if err := registry.CustomAllReduce(env, srcs[0], outs[2], opName, "oneshot"); err != nil {
			return err
		}
		if err := check("warm-up", 0, outs[:3]...); err != nil {
			return err
		}
		// Refusals inside a capture (after the warm-up made the
		// all-reducer): nothing is recorded, no rank hangs.
		big, err := env.Alloc(dt, tensor.Shape{4*count + 1<<20}, dev, "")
		if err != nil {
			return err
		}
		bigOut, err := env.Alloc(dt, tensor.Shape{4*count + 1<<20}, dev, "")
		if err != nil {
			return err
		}
		_, err = registry.Capture(env, func() error {
			_, err := alloc("")
			return err
		})
		if !errors.Is(err, device.ErrCapturing) {
			return fmt.Errorf("worker %d: allocation inside a capture: %v, want device.ErrCapturing", r, err)
		}
		_, err = registry.Capture(env, func() error {
			return registry.CustomAllReduce(env, big, bigOut, opName, "twoshot") // staged, grows the workspace
		})
		if !errors.Is(err, device.ErrCapturing) {
			return fmt.Errorf("worker %d: workspace growth inside a capture: %v, want device.ErrCapturing", r, err)
		}

		g, err := registry.Capture(env, func() error {
			if err := registry.CopyTensor(env, send, slot); err != nil {
				return err
			}
			for i, st := range []string{"oneshot", "twoshot"} {
				if err := registry.CustomAllReduce(env, send, outs[i], opName, st); err != nil {
					return err
				}
			}
			return registry.CustomAllReduce(env, slot, outs[2], opName, "oneshot")
		})
		if err != nil {
			return err
		}
		defer g.Close()
		for it := range replays {
			if err := registry.CopyTensor(env, slot, srcs[it%2]); err != nil {
				return err
			}
			if int(it)%n == r {
				time.Sleep(20 * time.Microsecond)
			}
			if err := g.Launch(); err != nil {
				return err
			}
			if err := check("replay", it, outs[:3]...); err != nil {
				return err
			}
			if it%3 == 2 {
				if err := registry.CopyTensor(env, send, srcs[(it+1)%2]); err != nil {
					return err
				}
				if err := registry.CustomAllReduce(env, send, outs[3], opName, "oneshot"); err != nil {
					return err
				}
				if err := check("eager call after replay", it+1, outs[3]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// TestCustomAllReduceGraph replays custom all-reduces captured in CUDA
// graphs (see ipctest.graph) on real GPUs.
func TestCustomAllReduceGraph(t *testing.T) {
	needGPUs(t, 1)
	ngpu := gpuCount(t)
	type setup struct {
		workers int
		backend string
	}
	for _, su := range []setup{{2, "nccl"}, {2, "ipc"}, {3, "ipc"}} {
		if su.backend == "nccl" && ngpu < su.workers {
			continue
		}
		t.Run(fmt.Sprintf("%dranks-%s", su.workers, su.backend), func(t *testing.T) {
			ids := make([]int, su.workers)
			for i := range ids {
				ids[i] = i % ngpu
			}
			s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: su.workers, DeviceIDs: ids}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			if err := s.InitCCL(bg(t), su.backend, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			f := mustFunc(t, s, "ipctest.graph")
			cases := []struct {
				dt    tensor.DType
				count int64
				op    string
			}{
				{tensor.BFloat16, 4099, "sum"},     // push one-shot, with a tail
				{tensor.Float32, 65536 + 3, "max"}, // push one-shot at 256 KB
				{tensor.Float16, 300001, "sum"},    // pull one-shot (above ipc.PushMax)
			}
			for i, c := range cases {
				if _, err := s.CallPacked(f, c.dt, c.count, c.op, int64(100+i), int64(60)); err != nil {
					t.Fatal(err)
				}
				if err := s.Sync(bg(t)); err != nil {
					t.Fatalf("%s x %d %s: %v", c.dt, c.count, c.op, err)
				}
			}
			t.Logf("%d ranks on %d GPU(s): %d graph cases correct", su.workers, ngpu, len(cases))
		})
	}
}

func init() {
	// ipctest.ipc_tensor(count, scope): a bfloat16 tensor of count
	// elements in scope, every element worker id + 1.
	registry.MustRegisterTyped("ipctest.ipc_tensor", func(env registry.Env, count int64, scope string) (*tensor.Tensor, error) {
		x, err := env.Alloc(tensor.BFloat16, tensor.Shape{count}, env.Device(), scope)
		if err != nil {
			return nil, err
		}
		h := tensor.MustNew(tensor.BFloat16, tensor.Shape{count})
		vals := make([]float64, count)
		for i := range vals {
			vals[i] = float64(env.WorkerID() + 1)
		}
		if err := tensor.SetFromFloat64(h, vals); err != nil {
			return nil, err
		}
		return x, registry.FromHost(env, x, h)
	})
	// ipctest.poison_tensor(t) poisons a GPU tensor.
	registry.MustRegisterTyped("ipctest.poison_tensor", func(env registry.Env, x *tensor.Tensor) error {
		p := tensor.MustNew(x.DType(), x.Shape())
		tensor.Poison(p)
		return registry.FromHost(env, x, p)
	})
}

// TestCustomAllReduceGraphBuiltin captures the built-in
// chorus.custom_allreduce from the controller (chorus.graph.capture) and
// replays it (chorus.graph.launch) into a poisoned output.
func TestCustomAllReduceGraphBuiltin(t *testing.T) {
	needGPUs(t, 1)
	ngpu := gpuCount(t)
	backend, ids := "ipc", []int{0, 0}
	if ngpu >= 2 {
		backend, ids = "nccl", []int{0, 1}
	}
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: ids}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), backend, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	mk := mustFunc(t, s, "ipctest.ipc_tensor")
	x, err := s.CallPacked(mk, int64(4099), worker.ScopeIPC)
	if err != nil {
		t.Fatal(err)
	}
	y, err := s.CallPacked(mk, int64(4099), "")
	if err != nil {
		t.Fatal(err)
	}
	ar := mustFunc(t, s, "chorus.custom_allreduce")
	if _, err := s.CallPacked(ar, x, "oneshot", "sum", y); err != nil { // warm-up
		t.Fatal(err)
	}
	g, err := s.CallPacked(mustFunc(t, s, worker.GraphCaptureFunc), "chorus.custom_allreduce", x, "oneshot", "sum", y)
	if err != nil {
		t.Fatal(err)
	}
	launch, poison := mustFunc(t, s, worker.GraphLaunchFunc), mustFunc(t, s, "ipctest.poison_tensor")
	for i := range 3 {
		if _, err := s.CallPacked(poison, y); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CallPacked(launch, g); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
		for w := range 2 {
			v, err := s.DebugGetFromRemote(bg(t), y, w)
			if err != nil {
				t.Fatal(err)
			}
			f, _ := tensor.ToFloat64(v.(*tensor.Tensor))
			for j, got := range f {
				if got != 3 {
					t.Fatalf("replay %d, worker %d: y[%d] = %v, want 3", i, w, j, got)
				}
			}
		}
	}
}
