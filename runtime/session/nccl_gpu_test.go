package session_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// nccltest.run(kind, dtype, count, op, seed): the collective on GPU
	// tensors through the worker's communicator; returns wrong elements.
	registry.MustRegisterTyped("nccltest.run", func(env registry.Env, kind string, dt tensor.DType, count int64, opName string, seed int64) (int64, error) {
		c, err := registry.Comm(env, false)
		if err != nil {
			return 0, err
		}
		op, _ := reduce.ParseOp(opName)
		n, r := c.Size(), c.Rank()
		inputs := make([][]float64, n)
		var mine *tensor.Tensor
		for q := range n {
			in, err := propInput(dt, count, uint64(seed), q, op)
			if err != nil {
				return 0, err
			}
			inputs[q], _ = tensor.ToFloat64(in)
			if q == r {
				mine = in
			}
		}
		outN := count
		switch kind {
		case "allgather":
			outN *= int64(n)
		case "reduce_scatter":
			outN /= int64(n)
		}
		send, err := env.Alloc(dt, tensor.Shape{count}, env.Device(), "")
		if err != nil {
			return 0, err
		}
		recv, err := env.Alloc(dt, tensor.Shape{outN}, env.Device(), "")
		if err != nil {
			return 0, err
		}
		if err := registry.FromHost(env, send, mine); err != nil {
			return 0, err
		}
		ctx := env.Context()
		switch kind {
		case "allreduce":
			err = c.AllReduce(ctx, send, recv, op)
		case "reduce_scatter":
			err = c.ReduceScatter(ctx, send, recv, op)
		case "allgather":
			err = c.AllGather(ctx, send, recv)
		case "broadcast":
			err = c.Broadcast(ctx, send, recv, 0)
		}
		if err != nil {
			return 0, err
		}
		got, err := registry.ToHost(env, recv)
		if err != nil {
			return 0, err
		}
		want := collectiveRef(kind, dt, op, inputs, count, outN, r)
		rtol, atol := tensor.DefaultTolerance(dt)
		if err := tensor.CloseTo(got, want, rtol*float64(n)*4, atol*float64(n)*4); err != nil {
			return 1, fmt.Errorf("%s %s x %d: %w", kind, dt, count, err)
		}
		return 0, nil
	})
}

// TestNCCLBackend runs collectives on GPU tensors through NCCL, one worker
// process per GPU (skipped without GPUs).
func TestNCCLBackend(t *testing.T) {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		gputest.Skipf(t, "no CUDA driver")
	}
	ngpu, err := d.DeviceCount()
	if err != nil || ngpu < 1 {
		gputest.Skipf(t, "no GPU: %d, %v", ngpu, err)
	}
	n := min(ngpu, 2)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: ids}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "nccl", 0); err != nil {
		t.Fatal(err)
	}
	f := mustFunc(t, s, "nccltest.run")
	cases := []struct {
		kind string
		dt   tensor.DType
		n    int64
		op   string
	}{
		{"allreduce", tensor.BFloat16, 1 << 20, "sum"},
		{"allreduce", tensor.Float32, 1001, "max"},
		{"allreduce", tensor.Float16, 4096, "avg"},
		{"allreduce", tensor.Int32, 77, "sum"},
		{"reduce_scatter", tensor.Float32, 4096, "sum"},
		{"allgather", tensor.BFloat16, 999, "sum"},
		{"broadcast", tensor.Float64, 123, "sum"},
	}
	for i, c := range cases {
		r, err := s.CallPacked(f, c.kind, c.dt, c.n, c.op, int64(i))
		if err != nil {
			t.Fatal(err)
		}
		for w := range n {
			if v := get(t, s, r, w); v != int64(0) {
				t.Errorf("%+v: worker %d: %v wrong", c, w, v)
			}
		}
	}
	// A count mismatch across workers is caught before NCCL sees it.
	if err := s.Sync(bg(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("nccl backend: %d cases on %d GPU(s) correct", len(cases), n)
}

func init() {
	// nccltest.lonely(count): only worker 0 calls an allreduce (its peers
	// never do), then waits for its device.
	registry.MustRegisterTyped("nccltest.lonely", func(env registry.Env, count int64) error {
		if env.WorkerID() != 0 {
			return nil
		}
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		t, err := env.Alloc(tensor.Float32, tensor.Shape{count}, env.Device(), "")
		if err != nil {
			return err
		}
		if err := c.AllReduce(env.Context(), t, t, reduce.Sum); err != nil {
			return err
		}
		return registry.SyncDevice(env)
	})
	// nccltest.group_sum(): an allreduce over the worker's group of
	// 1.0 + worker id; returns what element 0 became.
	registry.MustRegisterTyped("nccltest.group_sum", func(env registry.Env) (float64, error) {
		c, err := registry.Comm(env, true)
		if err != nil {
			return 0, err
		}
		t, err := env.Alloc(tensor.Float32, tensor.Shape{1000}, env.Device(), "")
		if err != nil {
			return 0, err
		}
		h := tensor.MustNew(tensor.Float32, tensor.Shape{1000})
		tensor.Fill(h, float64(1+env.WorkerID()))
		if err := registry.FromHost(env, t, h); err != nil {
			return 0, err
		}
		if err := c.AllReduce(env.Context(), t, t, reduce.Sum); err != nil {
			return 0, err
		}
		out, err := registry.ToHost(env, t)
		if err != nil {
			return 0, err
		}
		v, err := tensor.ToFloat64(out)
		if err != nil {
			return 0, err
		}
		return v[0], nil
	})
}

// needGPUs skips unless n GPUs are present (NCCL needs one GPU per rank).
func needGPUs(t *testing.T, n int) {
	t.Helper()
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		gputest.Skipf(t, "no CUDA driver")
	}
	if got, err := d.DeviceCount(); err != nil || got < n {
		gputest.Require(t, n)
	}
}

func hasGPUs(n int) bool {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		return false
	}
	got, err := d.DeviceCount()
	return err == nil && got >= n
}

// Groups on the nccl backend are split from the global communicator.
func TestNCCLGroups(t *testing.T) {
	needGPUs(t, 2)
	s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, NumGroups: 2, DeviceIDs: []int{0, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(bg(t), "nccl", 0); err != nil {
		t.Fatal(err)
	}
	r, err := s.CallPacked(mustFunc(t, s, "nccltest.group_sum"))
	if err != nil {
		t.Fatal(err)
	}
	// Groups of one: each worker's sum is its own value.
	for w := range 2 {
		if v := get(t, s, r, w); v != float64(1+w) {
			t.Errorf("worker %d: group sum %v, want %v", w, v, 1+w)
		}
	}
	// The global communicator still sums over both.
	f := mustFunc(t, s, "nccltest.run")
	r, err = s.CallPacked(f, "allreduce", tensor.Float32, int64(5000), "sum", int64(7))
	if err != nil {
		t.Fatal(err)
	}
	for w := range 2 {
		if v := get(t, s, r, w); v != int64(0) {
			t.Errorf("worker %d: %v wrong after split", w, v)
		}
	}
}

// A collective only one worker calls: with the host argument check it
// times out on that worker; without it, the worker hangs on its GPU until
// Shutdown aborts the communicator.
func TestNCCLLonelyCollective(t *testing.T) {
	needGPUs(t, 2)
	t.Run("checked-timeout", func(t *testing.T) {
		s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
		if err := s.InitCCL(bg(t), "nccl", 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CallPacked(mustFunc(t, s, "nccltest.lonely"), int64(1024)); err != nil {
			t.Fatal(err)
		}
		err = s.Sync(bg(t))
		if !errors.Is(err, ccl.ErrTimeout) {
			t.Fatalf("Sync: %v, want ccl.ErrTimeout", err)
		}
		// The communicator is failed on worker 0 from now on.
		if _, err := s.CallPacked(mustFunc(t, s, "nccltest.lonely"), int64(1024)); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(bg(t)); !errors.Is(err, ccl.ErrFailed) {
			t.Fatalf("second Sync: %v, want ccl.ErrFailed", err)
		}
	})
	t.Run("unchecked-abort-at-shutdown", func(t *testing.T) {
		s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}, ShutdownGrace: time.Second,
			Worker: worker.Options{SkipChecks: true}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.InitCCL(bg(t), "nccl", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CallPacked(mustFunc(t, s, "nccltest.lonely"), int64(1<<20)); err != nil {
			t.Fatal(err)
		}
		if err := s.SyncWorker(bg(t), 1); err != nil {
			t.Fatal(err)
		}
		err = s.Shutdown() // worker 0 is stuck in its stream synchronization
		if err == nil || !strings.Contains(err.Error(), "aborted") {
			t.Fatalf("Shutdown: %v, want a report that worker 0's communicators were aborted", err)
		}
	})
	t.Run("process-peer-killed", func(t *testing.T) {
		var logs lockedBuffer
		s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}, ShutdownGrace: 5 * time.Second,
			Worker: worker.Options{SkipChecks: true}}, Stderr: &logs})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
		if err := s.InitCCL(bg(t), "nccl", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CallPacked(mustFunc(t, s, "nccltest.lonely"), int64(1<<20)); err != nil {
			t.Fatal(err)
		}
		if err := s.SyncWorker(bg(t), 1); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(s.PIDs()[1], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(bg(t)); !errors.Is(err, session.ErrWorkerLost) {
			t.Fatalf("Sync: %v, want ErrWorkerLost", err)
		}
		// The abort is asynchronous to the controller: wait for worker 0
		// to say it happened (or give up after a generous deadline).
		const want = "worker 0: a peer was lost; aborting communicators"
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(logs.String(), want) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		s.Shutdown()
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("worker 0 did not abort; its log:\n%s", logs.String())
		}
	})
}
