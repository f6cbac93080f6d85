package demo

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// shard_sum_squares(n): this worker's share of sum_{i<n} i^2, computed
	// over the contiguous slice of [0, n) it owns.
	registry.MustRegisterTyped("demo.shard_sum_squares", func(env registry.Env, n int64) int64 {
		lo, hi := shard(n, env.WorkerID(), env.NumWorkers())
		var s int64
		for i := lo; i < hi; i++ {
			s += i * i
		}
		return s
	})
	// rank_tensor(len): a float32 tensor whose elements are
	// worker_id*1000 + index.
	registry.MustRegisterTyped("demo.rank_tensor", func(env registry.Env, n int64) (*tensor.Tensor, error) {
		t, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		d, _ := tensor.Data[float32](t)
		for i := range d {
			d[i] = float32(env.WorkerID()*1000 + i)
		}
		return t, nil
	})
	// scale(t, k): multiplies a float32 tensor in place and returns it.
	registry.MustRegisterTyped("demo.scale", func(t *tensor.Tensor, k float64) (*tensor.Tensor, error) {
		d, err := tensor.Data[float32](t)
		if err != nil {
			return nil, err
		}
		for i := range d {
			d[i] *= float32(k)
		}
		return t, nil
	})
	// fail_on(worker): returns an error on that worker only.
	registry.MustRegisterTyped("demo.fail_on", func(env registry.Env, w int) error {
		if env.WorkerID() == w {
			return errors.New("refusing on purpose to show error reporting")
		}
		return nil
	})
}

func shard(n int64, w, nw int) (int64, int64) {
	per := (n + int64(nw) - 1) / int64(nw)
	lo := min(n, int64(w)*per)
	return lo, min(n, lo+per)
}

// Run drives a session through the demo and prints what each worker did.
func Run(ctx context.Context, out io.Writer, s *session.Session) error {
	n := s.NumWorkers()
	fmt.Fprintf(out, "chorus demo: %s session, %d workers\n\n", s.Kind(), n)
	get := func(name string) (*session.DRef, error) { return s.GetGlobalFunc(ctx, name) }

	wid, err := get("chorus.worker_id")
	if err != nil {
		return err
	}
	ids, err := s.CallPacked(wid)
	if err != nil {
		return err
	}
	dev, err := get("chorus.device")
	if err != nil {
		return err
	}
	devs, err := s.CallPacked(dev)
	if err != nil {
		return err
	}
	const N = 1_000_000
	sq, err := get("demo.shard_sum_squares")
	if err != nil {
		return err
	}
	parts, err := s.CallPacked(sq, N)
	if err != nil {
		return err
	}
	if err := s.Sync(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "1. each worker sums i^2 over its shard of [0, %d):\n", N)
	var total int64
	for w := range n {
		id, err := s.DebugGetFromRemote(ctx, ids, w)
		if err != nil {
			return err
		}
		d, err := s.DebugGetFromRemote(ctx, devs, w)
		if err != nil {
			return err
		}
		p, err := s.DebugGetFromRemote(ctx, parts, w)
		if err != nil {
			return err
		}
		lo, hi := shard(N, w, n)
		fmt.Fprintf(out, "   worker %v on %v: [%d, %d) -> %d\n", id, d, lo, hi, p)
		total += p.(int64)
	}
	want := int64(N-1) * N * (2*N - 1) / 6
	fmt.Fprintf(out, "   controller total %d, closed form (N-1)N(2N-1)/6 = %d, match=%v\n\n", total, want, total == want)

	rt, err := get("demo.rank_tensor")
	if err != nil {
		return err
	}
	ts, err := s.CallPacked(rt, 4)
	if err != nil {
		return err
	}
	scale, err := get("demo.scale")
	if err != nil {
		return err
	}
	if _, err := s.CallPacked(scale, ts, 0.5); err != nil {
		return err
	}
	fmt.Fprintln(out, "2. each worker builds a tensor worker_id*1000 + i, then scales it by 0.5 in place:")
	for w := range n {
		v, err := s.DebugGetFromRemote(ctx, ts, w)
		if err != nil {
			return err
		}
		d, _ := tensor.Data[float32](v.(*tensor.Tensor))
		fmt.Fprintf(out, "   worker %d: %v\n", w, d)
	}
	host := tensor.FromSlice([]float32{7, 7, 7, 7})
	if err := s.CopyToWorker0(host, ts); err != nil {
		return err
	}
	back := tensor.MustNew(tensor.Float32, tensor.Shape{4})
	if err := s.CopyFromWorker0(ctx, back, ts); err != nil {
		return err
	}
	bd, _ := tensor.Data[float32](back)
	fmt.Fprintf(out, "   CopyToWorker0 [7 7 7 7] then CopyFromWorker0 -> %v\n\n", bd)

	fmt.Fprintln(out, "3. faults are reported, not fatal:")
	if _, err := get("demo.no_such_function"); err != nil {
		fmt.Fprintf(out, "   GetGlobalFunc of an unknown name: %v\n", err)
	}
	fail, err := get("demo.fail_on")
	if err != nil {
		return err
	}
	if err := s.CallPackedDiscard(fail, n-1); err != nil {
		return err
	}
	fmt.Fprintf(out, "   Sync after a call that fails on worker %d: %v\n", n-1, s.Sync(ctx))
	again, err := s.CallPacked(sq, 10)
	if err != nil {
		return err
	}
	v, err := s.DebugGetFromRemote(ctx, again, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   the session is still usable: worker 0's share of sum_{i<10} i^2 = %v\n", v)
	for _, r := range []*session.DRef{ids, devs, parts, ts, again} {
		if err := r.Release(); err != nil {
			return err
		}
	}
	return s.Sync(ctx)
}
