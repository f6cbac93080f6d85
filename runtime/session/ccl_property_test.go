package session_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// propInput is rank r's input: every worker can regenerate any rank's
// input from the seed, so each worker checks its own output against a
// float64 reference without any data leaving the workers.
func propInput(dt tensor.DType, n int64, seed uint64, rank int, op reduce.Op) (*tensor.Tensor, error) {
	t, err := tensor.New(dt, tensor.Shape{n})
	if err != nil {
		return nil, err
	}
	lo, hi := -8.0, 8.0
	if op == reduce.Prod {
		lo, hi = -2, 3
		if dt.IsFloat() {
			lo, hi = 0.5, 1.5
		}
	}
	if dt == tensor.Uint8 {
		lo = 0
	}
	return t, tensor.RandomRange(t, seed+uint64(rank)*7919, lo, hi)
}

func foldRef(op reduce.Op, acc, v float64, first bool) float64 {
	if first {
		return v
	}
	switch op {
	case reduce.Sum, reduce.Avg:
		return acc + v
	case reduce.Prod:
		return acc * v
	case reduce.Min:
		return math.Min(acc, v)
	}
	return math.Max(acc, v)
}

// collectiveRef is rank r's expected output of a collective over inputs
// (one float64 slice per rank), computed in float64: the reduction in rank
// order, avg divided once (integers truncated toward zero).
func collectiveRef(kind string, dt tensor.DType, op reduce.Op, inputs [][]float64, count, outN int64, r int) []float64 {
	n := len(inputs)
	want := make([]float64, outN)
	for i := range want {
		switch kind {
		case "allreduce", "reduce_scatter":
			j := int64(i)
			if kind == "reduce_scatter" {
				j += int64(r) * outN
			}
			acc := 0.0
			for q := range n {
				acc = foldRef(op, acc, inputs[q][j], q == 0)
			}
			if op == reduce.Avg {
				acc /= float64(n)
				if dt.IsInt() {
					acc = math.Trunc(acc)
				}
			}
			want[i] = acc
		case "allgather":
			want[i] = inputs[int64(i)/count][int64(i)%count]
		case "broadcast":
			want[i] = inputs[0][i]
		}
	}
	return want
}

func init() {
	// ccltest.prop(kind, dtype, count, op, seed, in_group) runs one
	// collective on this worker and returns how many output elements are
	// wrong (-1: the output was not fully written).
	registry.MustRegisterTyped("ccltest.prop", func(env registry.Env, kind string, dt tensor.DType, count int64, opName string, seed int64, inGroup bool) (int64, error) {
		c, err := registry.Comm(env, inGroup)
		if err != nil {
			return 0, err
		}
		op, err := reduce.ParseOp(opName)
		if err != nil {
			return 0, err
		}
		n, r := c.Size(), c.Rank()
		inputs := make([][]float64, n)
		for q := range n {
			in, err := propInput(dt, count, uint64(seed), q, op)
			if err != nil {
				return 0, err
			}
			if inputs[q], err = tensor.ToFloat64(in); err != nil {
				return 0, err
			}
		}
		send, _ := propInput(dt, count, uint64(seed), r, op)
		outN := count
		switch kind {
		case "allgather":
			outN = count * int64(n)
		case "reduce_scatter":
			outN = count / int64(n)
		}
		recv, err := tensor.New(dt, tensor.Shape{outN})
		if err != nil {
			return 0, err
		}
		tensor.Poison(recv)
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
		if pc, err := tensor.PoisonCount(recv); err != nil || (pc > 0 && dt.IsFloat()) {
			return -1, err
		}
		want := collectiveRef(kind, dt, op, inputs, count, outN, r)
		rtol, atol := tensor.DefaultTolerance(dt)
		if err := tensor.CloseTo(recv, want, rtol*float64(n), atol*float64(n)); err != nil {
			var me *tensor.MismatchError
			if errors.As(err, &me) {
				return int64(me.Count), nil
			}
			return 0, err
		}
		return 0, nil
	})
}

// TestCCLPropertyAcrossSessions sweeps random collectives, dtypes, ops and
// sizes through every session kind (threads and processes), with groups.
func TestCCLPropertyAcrossSessions(t *testing.T) {
	forKinds(t, 6, 2, func(t *testing.T, s *session.Session) {
		if err := s.InitCCL(bg(t), "cpu", 0); err != nil {
			t.Fatal(err)
		}
		f := mustFunc(t, s, "ccltest.prop")
		rng := rand.New(rand.NewPCG(1, 2))
		kinds := []string{"allreduce", "reduce_scatter", "allgather", "broadcast"}
		sizes := []int64{0, 1, 7, 30, 1023, 4097, 70001, 300000}
		for i := range 24 {
			kind := kinds[rng.IntN(len(kinds))]
			dt := tensor.DTypes[rng.IntN(len(tensor.DTypes))]
			op := reduce.Op(rng.IntN(5))
			if dt == tensor.Bool {
				op = reduce.Max
			}
			inGroup := rng.IntN(2) == 0
			ranks := int64(6)
			if inGroup {
				ranks = 3
			}
			count := sizes[rng.IntN(len(sizes))]
			if kind == "reduce_scatter" {
				count -= count % ranks
			}
			name := fmt.Sprintf("%d-%s-%s-%s-%d-group=%v", i, kind, dt, op, count, inGroup)
			r, err := s.CallPacked(f, kind, dt, count, op.String(), int64(i), inGroup)
			if err != nil {
				t.Fatal(err)
			}
			for w := range 6 {
				v, err := s.DebugGetFromRemote(bg(t), r, w)
				if err != nil {
					t.Fatalf("%s: worker %d: %v", name, w, err)
				}
				if v != int64(0) {
					t.Errorf("%s: worker %d: %v wrong elements", name, w, v)
				}
			}
			r.Release()
		}
		if err := s.Sync(bg(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func init() {
	// ccltest.allreduce_unless(w): every worker but w joins an allreduce.
	registry.MustRegisterTyped("ccltest.allreduce_unless", func(env registry.Env, skip int) error {
		if env.WorkerID() == skip {
			return nil
		}
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		t := tensor.FromSlice([]float32{1, 2, 3})
		return c.AllReduce(env.Context(), t, t, reduce.Sum)
	})
}

// A worker that never arrives: the others fail with a timeout naming it,
// the communicator is failed for good, the session stays usable, and a new
// InitCCL gives a working communicator.
func TestCCLTimeoutInSession(t *testing.T) {
	forKinds(t, 3, 1, func(t *testing.T, s *session.Session) {
		ctx := bg(t)
		if err := s.InitCCL(ctx, "cpu", time.Second); err != nil {
			t.Fatal(err)
		}
		f := mustFunc(t, s, "ccltest.allreduce_unless")
		if err := s.CallPackedDiscard(f, 2); err != nil {
			t.Fatal(err)
		}
		// The ccl sentinels survive the worker boundary (as error codes).
		err := s.Sync(ctx)
		if !errors.Is(err, ccl.ErrTimeout) || strings.Count(err.Error(), "ranks [2] never arrived") != 2 {
			t.Fatalf("Sync: %v, want a timeout naming worker 2 from workers 0 and 1", err)
		}
		for _, w := range []string{"worker 0", "worker 1"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %s", err, w)
			}
		}
		// The communicator is failed on every worker, the one that was
		// absent included.
		if err := s.CallPackedDiscard(f, -1); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx); !errors.Is(err, ccl.ErrFailed) || strings.Count(err.Error(), ccl.ErrFailed.Error()) != 3 {
			t.Errorf("after a timeout: %v, want every worker to report %q", err, ccl.ErrFailed)
		}
		if err := s.InitCCL(ctx, "cpu", 0); err != nil {
			t.Fatal(err)
		}
		if err := s.CallPackedDiscard(f, -1); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Errorf("after a new InitCCL: %v", err)
		}
	})
}
