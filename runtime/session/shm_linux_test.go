package session_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// ccltest.allreduce_path(n): a float32 sum allreduce of n elements
	// in place, each worker w contributing w+1+i%7; returns the cpu
	// backend's path for it, or "wrong element i" when the result is off.
	registry.MustRegisterTyped("ccltest.allreduce_path", func(env registry.Env, n int64) (string, error) {
		c, err := registry.Comm(env, false)
		if err != nil {
			return "", err
		}
		t, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), "")
		if err != nil {
			return "", err
		}
		d, _ := tensor.Data[float32](t)
		for i := range d {
			d[i] = float32(env.WorkerID() + 1 + i%7)
		}
		if err := c.AllReduce(env.Context(), t, t, reduce.Sum); err != nil {
			return "", err
		}
		w := c.Size()
		for i, v := range d {
			if want := float32(w*(w+1)/2 + w*(i%7)); v != want {
				return fmt.Sprintf("wrong element %d: %v, want %v", i, v, want), nil
			}
		}
		p, ok := c.(interface{ PathFor(ccl.Kind, int) string })
		if !ok {
			return "", fmt.Errorf("communicator %T reports no path", c)
		}
		return p.PathFor(ccl.KindAllReduce, int(n*4)), nil
	})
}

// A process session on the host allocates large tensors in each worker's
// shared arena and its allreduces read them through the peers' mappings;
// worker.Options.NoSharedTensors (tests only) brings back
// process_vm_readv; a threaded session reads directly. chorus.memory
// reports the arena.
func TestSharedTensorsInProcessSession(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		noArena    bool
		threaded   bool
		cpu        cpu.Options // reach every worker's communicator
	}{
		{"process", "shm", false, false, cpu.Options{}},
		{"process-opt-out", "cma", true, false, cpu.Options{}},
		{"process-no-cma", "staged: disabled (Options.NoCMA)", true, false, cpu.Options{NoCMA: true}},
		{"threaded", "direct", false, true, cpu.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Check(t)
			opts := session.Options{NumWorkers: 3, ShutdownGrace: 2 * time.Second, Worker: worker.Options{NoSharedTensors: tc.noArena, CPU: tc.cpu}}
			var s *session.Session
			var err error
			if tc.threaded {
				s, err = session.NewThreaded(opts)
			} else {
				s, err = session.NewProcess(bg(t), session.ProcessOptions{Options: opts, Transport: "shm"})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
			if err := s.InitCCL(bg(t), "cpu", 0); err != nil {
				t.Fatal(err)
			}
			f := mustFunc(t, s, "ccltest.allreduce_path")
			for _, n := range []int64{1 << 18, 300_001} {
				r := mustCall(t, s, f, n)
				for w := range 3 {
					if got := get(t, s, r, w); got != tc.path {
						t.Errorf("n=%d worker %d: %v, want path %q", n, w, got, tc.path)
					}
				}
				r.Release()
			}
			mem, err := s.Memory(bg(t))
			if err != nil {
				t.Fatal(err)
			}
			for w, m := range mem {
				if hasArena := m.SharedTensors != nil; hasArena != (tc.path == "shm") {
					t.Errorf("worker %d: shared tensor arena %+v, want one: %v", w, m.SharedTensors, tc.path == "shm")
				} else if hasArena && (m.SharedTensors.Allocs == 0 || m.HostAlloc.Fallbacks != 0) {
					t.Errorf("worker %d: arena %+v, host allocator %+v: want allocations and no fallback", w, m.SharedTensors, m.HostAlloc)
				}
			}
		})
	}
}

// A process session sends its commands through the broadcast log (the
// default) or through each worker's ring (session.NoBroadcastLog, tests
// only): both deliver broadcasts and targeted commands, small (in a log
// entry) and large (a redirect to the ring, also larger than the ring),
// in order, also while the controller runs more than a log's worth of
// commands ahead of the workers.
func TestBroadcastLog(t *testing.T) {
	for _, env := range []string{"1", "0"} {
		t.Run("log="+env, func(t *testing.T) {
			leaktest.Check(t)
			if env == "0" {
				session.NoBroadcastLog(t)
			}
			s, err := session.NewProcess(bg(t), session.ProcessOptions{
				Options:   session.Options{NumWorkers: 3, ShutdownGrace: 2 * time.Second},
				Transport: "shm", RingSize: 4096,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
			echo := mustFunc(t, s, "test.echo")
			// 9000 broadcasts without a sync: more entries than the log
			// holds (shm.LogSlots), with arguments from empty to 6000
			// bytes (every 10th larger than an entry: a redirect).
			var last *session.DRef
			var want string
			for i := range 9000 {
				n := i % 100
				if i%10 == 0 {
					n = (i * 37) % 6001
				}
				want = strings.Repeat(string(rune('a'+i%26)), n)
				r := mustCall(t, s, echo, want)
				if last != nil {
					last.Release()
				}
				last = r
			}
			for w := range 3 {
				if got := get(t, s, last, w); got != want {
					t.Fatalf("worker %d: echo of %d bytes came back as %d bytes", w, len(want), len(got.(string)))
				}
			}
			// Targeted: a large tensor to worker 0, a small value to 2.
			rt := mustFunc(t, s, "test.rank_tensor")
			ts := mustCall(t, s, rt, 20000)
			host := tensor.MustNew(tensor.Float32, tensor.Shape{20000})
			hd, _ := tensor.Data[float32](host)
			for i := range hd {
				hd[i] = float32(i) / 3
			}
			if err := s.CopyToWorker0(host, ts); err != nil {
				t.Fatal(err)
			}
			if err := s.DebugSetRegister(last, "small", 2); err != nil {
				t.Fatal(err)
			}
			back := tensor.MustNew(tensor.Float32, tensor.Shape{20000})
			if err := s.CopyFromWorker0(bg(t), back, ts); err != nil {
				t.Fatal(err)
			}
			bd, _ := tensor.Data[float32](back)
			for i := range bd {
				if bd[i] != hd[i] {
					t.Fatalf("element %d: %v, want %v", i, bd[i], hd[i])
				}
			}
			if got := get(t, s, last, 2); got != "small" {
				t.Fatalf("worker 2: %v, want small", got)
			}
			if got := get(t, s, last, 1); got != want {
				t.Fatalf("worker 1 changed: %d bytes", len(got.(string)))
			}
		})
	}
}
