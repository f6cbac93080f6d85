package session_test

import (
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/registry"
	"github.com/chorus-rt/chorus/session"
	"github.com/chorus-rt/chorus/tensor"
	"github.com/chorus-rt/chorus/worker"
)

func init() {
	// nccltest.run(kind, dtype, count, op, seed): the collective on GPU
	// tensors through the worker's communicator; returns wrong elements.
	registry.MustRegisterTyped("nccltest.run", func(env registry.Env, kind string, dt tensor.DType, count int64, opName string, seed int64) (int64, error) {
		c, err := worker.Comm(env, false)
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
		if err := worker.FromHost(env, send, mine); err != nil {
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
		got, err := worker.ToHost(env, recv)
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
		t.Skip("no CUDA driver")
	}
	ngpu, err := d.DeviceCount()
	if err != nil || ngpu < 1 {
		t.Skipf("no GPU: %d, %v", ngpu, err)
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
