package session_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// ipctest.run: iters custom all-reduces back to back, inputs
	// alternating between two rank-dependent sets (queued device copies
	// into the send buffer), outputs in a ring of poisoned tensors, each
	// checked against a float64 reference. flags: "inplace", "staged"
	// (send not in IPC memory), "delay" (one rank, rotating, sleeps before
	// each call). Returns the strategy the last call ran.
	registry.MustRegisterTyped("ipctest.run", func(env registry.Env, dt tensor.DType, count int64, opName, strategy string, seed, iters int64, flags string) (string, error) {
		op, err := reduce.ParseOp(opName)
		if err != nil {
			return "", err
		}
		n, r := env.NumWorkers(), env.WorkerID()
		inplace, staged, delay := strings.Contains(flags, "inplace"), strings.Contains(flags, "staged"), strings.Contains(flags, "delay")
		dev := env.Device()
		var srcs [2]*tensor.Tensor
		var wants [2][]float64
		for k := range srcs {
			inputs := make([][]float64, n)
			var mine *tensor.Tensor
			for q := range n {
				in, err := propInput(dt, count, uint64(seed)+uint64(k)*1000, q, op)
				if err != nil {
					return "", err
				}
				inputs[q], _ = tensor.ToFloat64(in)
				if q == r {
					mine = in
				}
			}
			wants[k] = collectiveRef("allreduce", dt, op, inputs, count, count, r)
			if srcs[k], err = env.Alloc(dt, tensor.Shape{count}, dev, ""); err != nil {
				return "", err
			}
			if err := registry.FromHost(env, srcs[k], mine); err != nil {
				return "", err
			}
		}
		scope := worker.ScopeIPC
		if staged {
			scope = ""
		}
		send, err := env.Alloc(dt, tensor.Shape{count}, dev, scope)
		if err != nil {
			return "", err
		}
		poison := tensor.MustNew(dt, tensor.Shape{count})
		tensor.Poison(poison)
		ring := make([]*tensor.Tensor, 4)
		if inplace {
			ring = ring[:1]
		}
		for i := range ring {
			if inplace {
				ring[i] = send
				continue
			}
			if ring[i], err = env.Alloc(dt, tensor.Shape{count}, dev, ""); err != nil {
				return "", err
			}
			if err := registry.FromHost(env, ring[i], poison); err != nil {
				return "", err
			}
		}
		rtol, atol := tensor.DefaultTolerance(dt)
		checked := int64(0) // calls before this one are checked
		check := func(upTo int64) error {
			if err := registry.SyncDevice(env); err != nil {
				return err
			}
			first := checked
			checked = upTo + 1
			for it := first; it <= upTo; it++ {
				out := ring[it%int64(len(ring))]
				got, err := registry.ToHost(env, out)
				if err != nil {
					return err
				}
				if err := tensor.CloseTo(got, wants[it%2], rtol*float64(n)*4, atol*float64(n)*4); err != nil {
					return fmt.Errorf("worker %d: call %d of %d (%s %s %s x %d, %s): %w", r, it, iters, strategy, dt, op, count, flags, err)
				}
				if !inplace {
					if err := registry.FromHost(env, out, poison); err != nil {
						return err
					}
				}
			}
			return nil
		}
		for it := range iters {
			if err := registry.CopyTensor(env, send, srcs[it%2]); err != nil {
				return "", err
			}
			if delay && int(it)%n == r {
				time.Sleep(20 * time.Microsecond)
			}
			if err := registry.CustomAllReduce(env, send, ring[it%int64(len(ring))], opName, strategy); err != nil {
				return "", err
			}
			if it%int64(len(ring)) == int64(len(ring))-1 || it == iters-1 {
				if err := check(it); err != nil {
					return "", err
				}
			}
		}
		ip, err := registry.IPCOf(env)
		if err != nil {
			return "", err
		}
		return ip.LastStrategy(), nil
	})
	// ipctest.differ(strategy): one-shot or two-shot all-reduces over two
	// views of one IPC allocation (1000 and 40000 bfloat16 elements: one
	// block and ten), each first on every rank (exchanged on the host and
	// remembered), then worker 0 the short one and the others the long
	// one: a mismatch only the kernels see. Returns SyncDevice's error.
	registry.MustRegisterTyped("ipctest.differ", func(env registry.Env, strategy string) error {
		dev := env.Device()
		buf, err := env.Alloc(tensor.BFloat16, tensor.Shape{40000}, dev, worker.ScopeIPC)
		if err != nil {
			return err
		}
		out, err := env.Alloc(tensor.BFloat16, tensor.Shape{40000}, dev, "")
		if err != nil {
			return err
		}
		var views [2]*tensor.Tensor
		for i, n := range []int64{1000, 40000} {
			if views[i], err = buf.View(0, tensor.BFloat16, tensor.Shape{n}); err != nil {
				return err
			}
		}
		short, err := out.View(0, tensor.BFloat16, tensor.Shape{1000})
		if err != nil {
			return err
		}
		outs := [2]*tensor.Tensor{short, out}
		for i := range 2 {
			if err := registry.CustomAllReduce(env, views[i], outs[i], "sum", strategy); err != nil {
				return err
			}
		}
		if err := registry.SyncDevice(env); err != nil {
			return fmt.Errorf("worker %d: matching calls: %w", env.WorkerID(), err)
		}
		i := 1
		if env.WorkerID() == 0 {
			i = 0
		}
		if err := registry.CustomAllReduce(env, views[i], outs[i], "sum", strategy); err != nil {
			return err
		}
		return registry.SyncDevice(env)
	})
	// ipctest.alloc(bytes): an IPC allocation of a worker-dependent size
	// when skew is set.
	registry.MustRegisterTyped("ipctest.alloc", func(env registry.Env, count int64, skew bool) error {
		if skew && env.WorkerID() == 1 {
			count++
		}
		_, err := env.Alloc(tensor.Float32, tensor.Shape{count}, env.Device(), worker.ScopeIPC)
		return err
	})
}

// TestCustomAllReduce runs the IPC all-reduce on real GPUs: 2 ranks on 2
// GPUs over NCCL, and 3..8 ranks as several worker processes per GPU
// (backend "ipc"; correctness only).
func TestCustomAllReduce(t *testing.T) {
	needGPUs(t, 1)
	ngpu := gpuCount(t)
	type setup struct {
		workers  int
		backend  string
		threaded bool
	}
	setups := []setup{{2, "nccl", false}, {2, "nccl", true}, {2, "ipc", false}, {3, "ipc", false}, {4, "ipc", false}, {8, "ipc", false}}
	for _, su := range setups {
		if su.backend == "nccl" && ngpu < su.workers {
			continue
		}
		t.Run(fmt.Sprintf("%dranks-%s-threaded=%v", su.workers, su.backend, su.threaded), func(t *testing.T) {
			ids := make([]int, su.workers)
			for i := range ids {
				ids[i] = i % ngpu
			}
			opts := session.Options{NumWorkers: su.workers, DeviceIDs: ids}
			var s *session.Session
			var err error
			if su.threaded {
				s, err = session.NewThreaded(opts)
			} else {
				s, err = session.NewProcess(bg(t), session.ProcessOptions{Options: opts})
			}
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
			f := mustFunc(t, s, "ipctest.run")
			type tc struct {
				dt       tensor.DType
				count    int64
				op       string
				strategy string
				iters    int64
				flags    string
			}
			var cases []tc
			// Back-to-back runs: 2000 calls, except with more than 4 worker
			// processes per GPU, where the GPU time-slices between their
			// contexts and every call waits for all of them (8 ranks on one
			// H100 took over 60 s for 2000 calls).
			long := int64(2000)
			if su.workers > 4*ngpu {
				long = 250
			}
			for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
				for _, op := range []string{"sum", "min", "max"} {
					for _, st := range []string{"oneshot", "twoshot"} {
						// IPC inputs: one-shot reads the peers' memory (pull).
						for _, cnt := range []int64{1, 7, 1000, 4099, 65536 + 3, 300001} {
							cases = append(cases, tc{dt, cnt, op, st, 2, ""})
						}
					}
				}
			}
			cases = append(cases,
				tc{tensor.BFloat16, 1 << 20, "sum", "oneshot", 6, ""},
				tc{tensor.BFloat16, 1<<22 + 5, "sum", "twoshot", 6, ""},
				tc{tensor.BFloat16, 3000, "sum", "auto", 4, ""},
				tc{tensor.BFloat16, 1 << 22, "sum", "auto", 4, ""},
				tc{tensor.Float32, 4099, "sum", "twoshot", 4, "inplace"},
				tc{tensor.Float32, 4099, "sum", "oneshot", 4, "inplace"},
				tc{tensor.Float16, 100003, "max", "oneshot", 4, "staged"},
				tc{tensor.Float16, 100003, "min", "twoshot", 4, "staged"},
				tc{tensor.BFloat16, 300001, "sum", "oneshot", 4, "staged"},
				tc{tensor.Float32, 4099, "max", "oneshot", 4, "staged"},
				tc{tensor.BFloat16, 65536 + 3, "min", "oneshot", 4, "staged"},
				tc{tensor.BFloat16, 300001, "max", "oneshot", 4, "inplace"},
				tc{tensor.Float32, 200000, "sum", "oneshot", long, "delay"},
				tc{tensor.BFloat16, 8192, "sum", "oneshot", long, "delay"},
				tc{tensor.BFloat16, 8192 + 5, "sum", "oneshot", long, "staged,delay"}, // push
				tc{tensor.BFloat16, 8192 + 3, "sum", "twoshot", long, "delay"},
			)
			for i, c := range cases {
				r, err := s.CallPacked(f, c.dt, c.count, c.op, c.strategy, int64(i), c.iters, c.flags)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Sync(bg(t)); err != nil {
					t.Fatalf("%+v: %v", c, err)
				}
				if c.strategy == "auto" {
					t.Logf("auto ran %v for %d x %s", get(t, s, r, 0), c.count, c.dt)
				}
				r.Release()
			}
			t.Logf("%d ranks on %d GPU(s): %d cases correct", su.workers, ngpu, len(cases))

			// Mismatches are errors on every worker, never hangs.
			if _, err := s.CallPacked(mustFunc(t, s, "ipctest.alloc"), int64(1000), true); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(bg(t)); !errors.Is(err, ccl.ErrMismatch) {
				t.Fatalf("skewed IPC allocation: %v, want ccl.ErrMismatch", err)
			}
			if _, err := s.CallPacked(mustFunc(t, s, "ipctest.alloc"), int64(1000), false); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(bg(t)); err != nil {
				t.Fatalf("IPC allocation after a mismatch: %v", err)
			}
			// Unsupported explicit strategy: an error, not a silent route.
			if _, err := s.CallPacked(f, tensor.Int32, int64(100), "sum", "oneshot", int64(1), int64(1), ""); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(bg(t)); !errors.Is(err, ccl.ErrBadArgs) && !errors.Is(err, ccl.ErrMismatch) {
				t.Fatalf("int32 oneshot: %v, want a bad-arguments error", err)
			}
			// A call every rank made before skips the host's exchange; the
			// kernels compare digests and report a difference, on every
			// worker, with the next synchronization. The all-reducer fails
			// from then on, so this comes last.
			if _, err := s.CallPacked(mustFunc(t, s, "ipctest.differ"), []string{"oneshot", "twoshot"}[su.workers%2]); err != nil {
				t.Fatal(err)
			}
			err = s.Sync(bg(t))
			if !errors.Is(err, ccl.ErrMismatch) || strings.Contains(err.Error(), "matching calls") {
				t.Fatalf("calls that differ only on the GPU: %v, want ccl.ErrMismatch from the kernels", err)
			}
			if got := workerErrors(t, err, "differed between ranks"); len(got) != su.workers {
				t.Fatalf("calls that differ only on the GPU: workers %v reported the mismatch, want all %d (%v)", got, su.workers, err)
			}
		})
	}
}

func gpuCount(t *testing.T) int {
	t.Helper()
	for n := 8; n >= 1; n-- {
		if hasGPUs(n) {
			return n
		}
	}
	return 0
}

// TestCustomAllReduceThreadsShareGPU: two threaded workers on one GPU
// would run spinning kernels in one context, which can starve each other;
// the all-reducer refuses that placement with a bad-arguments error on
// every worker instead of hanging.
func TestCustomAllReduceThreadsShareGPU(t *testing.T) {
	needGPUs(t, 1)
	s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "ipc", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CallPacked(mustFunc(t, s, "ipctest.run"), tensor.BFloat16, int64(1000), "sum", "oneshot", int64(1), int64(1), ""); err != nil {
		t.Fatal(err)
	}
	err = s.Sync(bg(t))
	if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), "threads of one process") {
		t.Fatalf("threaded ranks sharing a GPU: %v, want a bad-arguments error naming the placement", err)
	}
}
