package cpu_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	shmseg "github.com/chorus-rt/chorus/internal/sys/segment"
	"github.com/chorus-rt/chorus/tensor"
)

// snapshot records tensors' bytes so a test can check that a failed call
// changed nothing.
type snapshot struct {
	ts   []*tensor.Tensor
	data [][]byte
}

func (s *snapshot) add(ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil {
			s.ts = append(s.ts, t)
			s.data = append(s.data, append([]byte(nil), t.Bytes()...))
		}
	}
}

func (s *snapshot) changed() error {
	for i, t := range s.ts {
		if string(t.Bytes()) != string(s.data[i]) {
			return fmt.Errorf("tensor %d (%v) was modified by a failed call", i, t)
		}
	}
	return nil
}

// followUp is a correct allreduce every rank makes after an error: the
// communicator must still work. It returns an error if the result is wrong.
func followUp(ctx context.Context, c ccl.Comm) error {
	n := c.Size()
	x := tensor.FromSlice([]int32{int32(c.Rank()), 1, -int32(c.Rank())})
	if err := c.AllReduce(ctx, x, x, reduce.Sum); err != nil {
		return fmt.Errorf("follow-up allreduce: %w", err)
	}
	d, _ := tensor.Data[int32](x)
	if want := []int32{int32(n * (n - 1) / 2), int32(n), -int32(n * (n - 1) / 2)}; !slices.Equal(d, want) {
		return fmt.Errorf("follow-up allreduce gave %v, want %v", d, want)
	}
	return nil
}

// f32 is a poisoned float32 tensor of count elements.
func f32(count int) *tensor.Tensor {
	x := tensor.MustNew(tensor.Float32, shape(count))
	tensor.Poison(x)
	return x
}

func filled(dt tensor.DType, count int) *tensor.Tensor {
	x := tensor.MustNew(dt, shape(count))
	tensor.Random(x, uint64(count))
	return x
}

// TestMismatchAcrossRanks: ranks that disagree on count, dtype, op, root or
// collective all get ErrMismatch, no output is written, and the
// communicator goes on working.
func TestMismatchAcrossRanks(t *testing.T) {
	const k = 6
	type call = func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error
	cases := []struct {
		name string
		call call
	}{
		{"allreduce/count", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			cnt := k
			if odd {
				cnt = k + 1
			}
			recv := f32(cnt)
			snap.add(recv)
			return c.AllReduce(ctx, filled(tensor.Float32, cnt), recv, reduce.Sum)
		}},
		{"allreduce/large-count", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			cnt := largeCount
			if odd {
				cnt = 2 * largeCount
			}
			recv := f32(cnt)
			snap.add(recv)
			return c.AllReduce(ctx, filled(tensor.Float32, cnt), recv, reduce.Sum)
		}},
		{"allreduce/dtype", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			dt := tensor.Float32
			if odd {
				dt = tensor.Int32 // same byte size
			}
			recv := tensor.MustNew(dt, shape(k))
			tensor.Poison(recv)
			snap.add(recv)
			return c.AllReduce(ctx, filled(dt, k), recv, reduce.Sum)
		}},
		{"allreduce/op", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			op := reduce.Sum
			if odd {
				op = reduce.Max
			}
			recv := f32(k)
			snap.add(recv)
			return c.AllReduce(ctx, filled(tensor.Float32, k), recv, op)
		}},
		{"reduce_scatter/op", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			op := reduce.Min
			if odd {
				op = reduce.Prod
			}
			recv := f32(k)
			snap.add(recv)
			return c.ReduceScatter(ctx, filled(tensor.Float32, k*c.Size()), recv, op)
		}},
		{"allgather/count", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			cnt := k
			if odd {
				cnt = k - 1
			}
			recv := f32(cnt * c.Size())
			snap.add(recv)
			return c.AllGather(ctx, filled(tensor.Float32, cnt), recv)
		}},
		{"broadcast/root", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			root := 0
			if odd {
				root = 1
			}
			send, recv := filled(tensor.Float32, k), f32(k)
			snap.add(send, recv)
			return c.Broadcast(ctx, send, recv, root)
		}},
		{"scatter/root", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			root := c.Size() - 1
			if odd {
				root = 0
			}
			send, recv := filled(tensor.Float32, k*c.Size()), f32(k)
			snap.add(send, recv)
			return c.Scatter(ctx, send, recv, root)
		}},
		{"gather/root", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			root := 1
			if odd {
				root = 0
			}
			recv := f32(k * c.Size())
			snap.add(recv)
			return c.Gather(ctx, filled(tensor.Float32, k), recv, root)
		}},
		{"scatter/count", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			cnt := k
			if odd {
				cnt = 2 * k
			}
			send, recv := filled(tensor.Float32, cnt*c.Size()), f32(cnt)
			snap.add(recv)
			if c.Rank() != 0 {
				send = nil
			}
			return c.Scatter(ctx, send, recv, 0)
		}},
		{"kind/allreduce-vs-allgather", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			if odd {
				recv := f32(k * c.Size())
				snap.add(recv)
				return c.AllGather(ctx, filled(tensor.Float32, k), recv)
			}
			recv := f32(k)
			snap.add(recv)
			return c.AllReduce(ctx, filled(tensor.Float32, k), recv, reduce.Sum)
		}},
		{"kind/allreduce-vs-reduce_scatter", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			recv := f32(k)
			snap.add(recv)
			if odd {
				return c.ReduceScatter(ctx, filled(tensor.Float32, k*c.Size()), recv, reduce.Sum)
			}
			return c.AllReduce(ctx, filled(tensor.Float32, k), recv, reduce.Sum)
		}},
		{"kind/broadcast-vs-barrier", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			if odd {
				return c.Barrier(ctx)
			}
			send, recv := filled(tensor.Float32, k), f32(k)
			snap.add(send, recv)
			if c.Rank() != 0 {
				send = nil
			}
			return c.Broadcast(ctx, send, recv, 0)
		}},
		{"kind/gather-vs-scatter", func(ctx context.Context, c ccl.Comm, odd bool, snap *snapshot) error {
			if odd {
				recv := f32(k)
				snap.add(recv)
				return c.Scatter(ctx, nil, recv, 0)
			}
			recv := f32(k * c.Size())
			snap.add(recv)
			if c.Rank() != 0 {
				recv = nil
			}
			return c.Gather(ctx, filled(tensor.Float32, k), recv, 0)
		}},
	}
	for _, tc := range cases {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/n=%d", tc.name, n), func(t *testing.T) {
				odd := n - 1 // the rank that disagrees
				snaps := make([]snapshot, n)
				errs := make([]error, n)
				runErrs := runRanks(t, smallOpts, n, 0, func(ctx context.Context, c ccl.Comm) error {
					r := c.Rank()
					errs[r] = tc.call(ctx, c, r == odd, &snaps[r])
					return followUp(ctx, c)
				})
				noErrors(t, runErrs)
				wantMismatchUnchanged(t, errs, snaps)
			})
		}
	}
}

// TestBadLocalArguments: one rank passes arguments that are wrong on their
// own; it gets ErrBadArgs, every other rank ErrMismatch naming it, nothing
// is written, nobody hangs, and the communicator goes on working.
func TestBadLocalArguments(t *testing.T) {
	const k = 6
	type call = func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error
	// overlapping returns send and recv views of one storage that share
	// some but not all bytes.
	overlapping := func(sendN, recvN, shift int) (send, recv *tensor.Tensor) {
		st, _ := tensor.NewHostStorage(int64(4*(max(sendN, recvN)+shift)), "")
		send, _ = tensor.View(st, 0, tensor.Float32, shape(sendN))
		recv, _ = tensor.View(st, int64(4*shift), tensor.Float32, shape(recvN))
		tensor.Random(send, 1)
		return send, recv
	}
	cases := []struct {
		name string
		bad  func(n int) int // which rank is bad
		call call
	}{
		{"allreduce/recv-size", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			recv := f32(k)
			if bad {
				recv = f32(k + 1)
			}
			snap.add(recv)
			return c.AllReduce(ctx, filled(tensor.Float32, k), recv, reduce.Sum)
		}},
		{"allreduce/nil-recv", firstRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			recv := f32(k)
			snap.add(recv)
			if bad {
				recv = nil
			}
			return c.AllReduce(ctx, filled(tensor.Float32, k), recv, reduce.Sum)
		}},
		{"allreduce/nil-send", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			send, recv := filled(tensor.Float32, k), f32(k)
			snap.add(recv)
			if bad {
				send = nil
			}
			return c.AllReduce(ctx, send, recv, reduce.Sum)
		}},
		{"allreduce/partial-overlap", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			var send, recv *tensor.Tensor
			if bad {
				send, recv = overlapping(k, k, 2)
			} else {
				send, _ = overlapping(k, k, 0)
				recv = f32(k)
			}
			snap.add(send, recv)
			return c.AllReduce(ctx, send, recv, reduce.Sum)
		}},
		{"allreduce/send-recv-dtypes", middleRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			recv := f32(k)
			if bad {
				recv = tensor.MustNew(tensor.Int32, shape(k))
				tensor.Poison(recv)
			}
			snap.add(recv)
			return c.AllReduce(ctx, filled(tensor.Float32, k), recv, reduce.Sum)
		}},
		{"allreduce/invalid-op", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			op := reduce.Sum
			if bad {
				op = reduce.Op(42)
			}
			recv := f32(k)
			snap.add(recv)
			return c.AllReduce(ctx, filled(tensor.Float32, k), recv, op)
		}},
		{"reduce_scatter/not-divisible", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			cnt := k * c.Size()
			if bad {
				cnt++
			}
			recv := f32(k)
			snap.add(recv)
			return c.ReduceScatter(ctx, filled(tensor.Float32, cnt), recv, reduce.Sum)
		}},
		{"reduce_scatter/overlap", firstRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			send, recv := filled(tensor.Float32, k*c.Size()), f32(k)
			if bad {
				send, recv = overlapping(k*c.Size(), k, 1)
			}
			snap.add(send, recv)
			return c.ReduceScatter(ctx, send, recv, reduce.Sum)
		}},
		{"allgather/recv-size", middleRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			recv := f32(k * c.Size())
			if bad {
				recv = f32(k*c.Size() - 1)
			}
			snap.add(recv)
			return c.AllGather(ctx, filled(tensor.Float32, k), recv)
		}},
		{"allgather/overlap", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			send, recv := filled(tensor.Float32, k), f32(k*c.Size())
			if bad {
				send, recv = overlapping(k, k*c.Size(), k/2)
			}
			snap.add(send, recv)
			return c.AllGather(ctx, send, recv)
		}},
		{"broadcast/nil-recv", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			send, recv := filled(tensor.Float32, k), f32(k)
			snap.add(recv)
			if c.Rank() != 0 {
				send = nil
			}
			if bad {
				recv = nil
			}
			return c.Broadcast(ctx, send, recv, 0)
		}},
		{"broadcast/root-send-size", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			root := c.Size() - 1
			send, recv := filled(tensor.Float32, k), f32(k)
			if bad {
				send = filled(tensor.Float32, k+1)
			}
			snap.add(recv)
			return c.Broadcast(ctx, send, recv, root)
		}},
		{"broadcast/root-nil-send", firstRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			recv := f32(k)
			snap.add(recv)
			return c.Broadcast(ctx, nil, recv, 0)
		}},
		{"scatter/not-divisible", middleRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			root := c.Size() / 2
			var send *tensor.Tensor
			if c.Rank() == root {
				send = filled(tensor.Float32, k*c.Size()+1)
			}
			recv := f32(k)
			snap.add(send, recv)
			return c.Scatter(ctx, send, recv, root)
		}},
		{"gather/root-recv-size", lastRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			root := c.Size() - 1
			var recv *tensor.Tensor
			if c.Rank() == root {
				recv = f32(k*c.Size() + 1)
			}
			snap.add(recv)
			return c.Gather(ctx, filled(tensor.Float32, k), recv, root)
		}},
		{"gather/nil-send", firstRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			send := filled(tensor.Float32, k)
			if bad {
				send = nil
			}
			recv := f32(k * c.Size())
			snap.add(recv)
			return c.Gather(ctx, send, recv, c.Size()-1)
		}},
		{"rooted/root-out-of-range", middleRank, func(ctx context.Context, c ccl.Comm, bad bool, snap *snapshot) error {
			root := 0
			if bad {
				root = c.Size()
			}
			send, recv := filled(tensor.Float32, k), f32(k)
			snap.add(recv)
			return c.Broadcast(ctx, send, recv, root)
		}},
	}
	for _, tc := range cases {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/n=%d", tc.name, n), func(t *testing.T) {
				bad := tc.bad(n)
				snaps := make([]snapshot, n)
				errs := make([]error, n)
				runErrs := runRanks(t, smallOpts, n, 0, func(ctx context.Context, c ccl.Comm) error {
					r := c.Rank()
					errs[r] = tc.call(ctx, c, r == bad, &snaps[r])
					return followUp(ctx, c)
				})
				noErrors(t, runErrs)
				names := regexp.MustCompile(fmt.Sprintf(`\brank %d\b`, bad))
				for r, err := range errs {
					switch {
					case r == bad:
						if !errors.Is(err, ccl.ErrBadArgs) {
							t.Errorf("bad rank %d: got %v, want ErrBadArgs", r, err)
						}
					case !errors.Is(err, ccl.ErrMismatch):
						t.Errorf("rank %d: got %v, want ErrMismatch", r, err)
					case !names.MatchString(err.Error()):
						t.Errorf("rank %d: error %q does not name rank %d", r, err, bad)
					}
					if err := snaps[r].changed(); err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

func firstRank(n int) int  { return 0 }
func middleRank(n int) int { return n / 2 }
func lastRank(n int) int   { return n - 1 }

// TestBadArgumentsEveryRank: arguments wrong on every rank (an op the
// dtype does not support, a count no rank count divides) give ErrBadArgs
// everywhere.
func TestBadArgumentsEveryRank(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			errs := make([][]error, 3)
			for i := range errs {
				errs[i] = make([]error, n)
			}
			runErrs := runRanks(t, smallOpts, n, 0, func(ctx context.Context, c ccl.Comm) error {
				r := c.Rank()
				b := filled(tensor.Bool, 5)
				errs[0][r] = c.AllReduce(ctx, b, b, reduce.Avg)
				errs[1][r] = c.ReduceScatter(ctx, filled(tensor.Bool, 5*n), tensor.MustNew(tensor.Bool, shape(5)), reduce.Avg)
				errs[2][r] = c.AllReduce(ctx, filled(tensor.Int8, 5), f32(5), reduce.Sum)
				return followUp(ctx, c)
			})
			noErrors(t, runErrs)
			for i := range errs {
				for r, err := range errs[i] {
					if !errors.Is(err, ccl.ErrBadArgs) {
						t.Errorf("call %d, rank %d: got %v, want ErrBadArgs", i, r, err)
					}
				}
			}
		})
	}
	// Not divisible on every rank (n = 1 divides everything).
	errs := runRanks(t, smallOpts, 3, 0, func(ctx context.Context, c ccl.Comm) error {
		return c.ReduceScatter(ctx, filled(tensor.Float32, 7), f32(2), reduce.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ccl.ErrBadArgs) {
			t.Errorf("reduce_scatter of 7 over 3, rank %d: got %v, want ErrBadArgs", r, err)
		}
	}
}

func TestSendRecvErrors(t *testing.T) {
	t.Run("self-and-out-of-range", func(t *testing.T) {
		errs := runRanks(t, smallOpts, 2, 0, func(ctx context.Context, c ccl.Comm) error {
			x := filled(tensor.Float32, 3)
			for _, peer := range []int{c.Rank(), -1, 2} {
				if err := c.Send(ctx, x, peer); !errors.Is(err, ccl.ErrBadArgs) {
					return fmt.Errorf("send to %d: got %v, want ErrBadArgs", peer, err)
				}
				if err := c.Recv(ctx, x, peer); !errors.Is(err, ccl.ErrBadArgs) {
					return fmt.Errorf("recv from %d: got %v, want ErrBadArgs", peer, err)
				}
			}
			return followUp(ctx, c)
		})
		noErrors(t, errs)
	})
	// The receiver expects another size or dtype: both sides fail with
	// ErrMismatch, the receiver's tensor is untouched, and a following
	// matching message goes through.
	for _, tc := range []struct {
		name     string
		send     *tensor.Tensor
		recvDT   tensor.DType
		recvSize int
	}{
		{"size", filled(tensor.Float32, 10), tensor.Float32, 11},
		{"size-large", filled(tensor.Float32, 2000), tensor.Float32, 1999},
		{"dtype", filled(tensor.Float32, 10), tensor.Int32, 10},
		{"dtype-and-size", filled(tensor.Int8, 8), tensor.Int16, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv := tensor.MustNew(tc.recvDT, shape(tc.recvSize))
			tensor.Poison(recv)
			var snap snapshot
			snap.add(recv)
			good := filled(tensor.Float64, 300)
			got := tensor.MustNew(tensor.Float64, shape(300))
			errs := make([]error, 2)
			runErrs := runRanks(t, smallOpts, 2, 0, func(ctx context.Context, c ccl.Comm) error {
				if c.Rank() == 0 {
					errs[0] = c.Send(ctx, tc.send, 1)
					return c.Send(ctx, good, 1)
				}
				errs[1] = c.Recv(ctx, recv, 0)
				return c.Recv(ctx, got, 0)
			})
			noErrors(t, runErrs)
			for r, err := range errs {
				if !errors.Is(err, ccl.ErrMismatch) {
					t.Errorf("rank %d: got %v, want ErrMismatch", r, err)
				}
			}
			if err := snap.changed(); err != nil {
				t.Error(err)
			}
			if err := tensor.Equal(got, good); err != nil {
				t.Errorf("message after the mismatch: %v", err)
			}
		})
	}
	t.Run("nil-tensor", func(t *testing.T) {
		errs := runRanks(t, smallOpts, 2, 0, func(ctx context.Context, c ccl.Comm) error {
			if err := c.Send(ctx, nil, 1-c.Rank()); !errors.Is(err, ccl.ErrBadArgs) {
				return fmt.Errorf("send nil: got %v, want ErrBadArgs", err)
			}
			if err := c.Recv(ctx, nil, 1-c.Rank()); !errors.Is(err, ccl.ErrBadArgs) {
				return fmt.Errorf("recv nil: got %v, want ErrBadArgs", err)
			}
			return nil
		})
		noErrors(t, errs)
	})
}

// TestTimeout: rank 2 never calls the collective; ranks 0 and 1 give up
// after Config.Timeout with a TimeoutError naming rank 2, and from then on
// every call on every rank fails with ErrFailed.
func TestTimeout(t *testing.T) {
	const n = 3
	for _, kind := range []string{"allreduce", "barrier", "broadcast"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			first := make([]error, n)
			later := make([][]error, n)
			recvs := make([]*tensor.Tensor, n)
			for r := range n {
				recvs[r] = f32(5)
			}
			var waiting sync.WaitGroup
			waiting.Add(2)
			errs := runRanks(t, smallOpts, n, 200*time.Millisecond, func(ctx context.Context, c ccl.Comm) error {
				r := c.Rank()
				if r == 2 {
					waiting.Wait() // until ranks 0 and 1 gave up
				} else {
					switch kind {
					case "allreduce":
						first[r] = c.AllReduce(ctx, filled(tensor.Float32, 5), recvs[r], reduce.Sum)
					case "barrier":
						first[r] = c.Barrier(ctx)
					case "broadcast":
						first[r] = c.Broadcast(ctx, filled(tensor.Float32, 5), recvs[r], 0)
					}
					waiting.Done()
				}
				x := filled(tensor.Float32, 5)
				later[r] = append(later[r],
					c.AllReduce(ctx, x, x, reduce.Sum),
					c.Barrier(ctx),
					c.AllGather(ctx, x, f32(5*n)),
					c.Send(ctx, x, (r+1)%n),
					c.Recv(ctx, x, (r+1)%n),
				)
				return nil
			})
			noErrors(t, errs)
			for r := range 2 {
				var te *ccl.TimeoutError
				if !errors.As(first[r], &te) {
					t.Errorf("rank %d: got %v, want a *ccl.TimeoutError", r, first[r])
					continue
				}
				if !slices.Equal(te.Missing, []int{2}) {
					t.Errorf("rank %d: Missing = %v, want [2]", r, te.Missing)
				}
				if te.Rank != r {
					t.Errorf("rank %d: TimeoutError.Rank = %d", r, te.Rank)
				}
				if !errors.Is(first[r], ccl.ErrTimeout) {
					t.Errorf("rank %d: %v does not match ErrTimeout", r, first[r])
				}
				if pc, _ := tensor.PoisonCount(recvs[r]); pc != 5 {
					t.Errorf("rank %d: a timed-out collective wrote its output", r)
				}
			}
			for r := range n {
				for i, err := range later[r] {
					if !errors.Is(err, ccl.ErrFailed) {
						t.Errorf("rank %d, later call %d: got %v, want ErrFailed", r, i, err)
					}
				}
			}
		})
	}
}

// TestContextCancel: cancelling the context of a rank that waits for
// others ends its call (well before the 60 s communicator timeout), and
// the communicator is failed for the other ranks.
func TestContextCancel(t *testing.T) {
	for _, kind := range []string{"allreduce", "recv", "send"} {
		t.Run(kind, func(t *testing.T) {
			const n = 2
			var first, later error
			var cancelled sync.WaitGroup
			cancelled.Add(1)
			errs := runRanks(t, smallOpts, n, time.Minute, func(ctx context.Context, c ccl.Comm) error {
				if c.Rank() == 1 {
					cancelled.Wait()
					later = c.Barrier(ctx)
					return nil
				}
				defer cancelled.Done()
				cctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(20*time.Millisecond, cancel)
				x := filled(tensor.Float32, 5)
				switch kind {
				case "allreduce":
					first = c.AllReduce(cctx, x, x, reduce.Sum)
				case "recv":
					first = c.Recv(cctx, x, 1)
				case "send":
					first = c.Send(cctx, x, 1)
				}
				return nil
			})
			noErrors(t, errs)
			if !errors.Is(first, context.Canceled) {
				t.Errorf("waiting rank: got %v, want context.Canceled", first)
			}
			if !errors.Is(later, ccl.ErrFailed) {
				t.Errorf("other rank's later call: got %v, want ErrFailed", later)
			}
		})
	}
}

// TestJoinErrors: ranks that disagree on the communicator, or a rank that
// never joins, end in errors within the join timeout, not a hang.
func TestJoinErrors(t *testing.T) {
	const timeout = 200 * time.Millisecond
	join := func(ctx context.Context, b *cpu.Backend, id []byte, rank, size int) error {
		c, err := b.Join(ctx, ccl.Config{ID: id, Rank: rank, Size: size, Timeout: timeout})
		if err == nil {
			c.Close()
		}
		return err
	}
	newID := func(t *testing.T) []byte {
		id, err := (&cpu.Backend{}).NewID()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	t.Run("different-size", func(t *testing.T) {
		t.Parallel()
		for _, sz := range [][2]int{{2, 3}, {3, 2}} {
			id := newID(t)
			b := &cpu.Backend{Options: smallOpts}
			errs := runEach(t, 2, func(ctx context.Context, r int) error { return join(ctx, b, id, r, sz[r]) })
			for r, err := range errs {
				if err == nil {
					t.Errorf("sizes %v: rank %d joined", sz, r)
				}
			}
		}
	})
	t.Run("different-options", func(t *testing.T) {
		t.Parallel()
		id := newID(t)
		errs := runEach(t, 2, func(ctx context.Context, r int) error {
			o := smallOpts
			o.SlotBytes *= 1 + r
			return join(ctx, &cpu.Backend{Options: o}, id, r, 2)
		})
		for r, err := range errs {
			if err == nil {
				t.Errorf("rank %d joined with different slot sizes", r)
			}
		}
	})
	for _, missing := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("rank-%d-never-joins", missing), func(t *testing.T) {
			t.Parallel()
			id := newID(t)
			b := &cpu.Backend{Options: smallOpts}
			errs := runEach(t, 3, func(ctx context.Context, r int) error {
				if r == missing {
					return nil
				}
				return join(ctx, b, id, r, 3)
			})
			for r, err := range errs {
				if r != missing && !errors.Is(err, ccl.ErrTimeout) {
					t.Errorf("rank %d: got %v, want ErrTimeout", r, err)
				}
			}
		})
	}
	// Rank 0 made the rendezvous file; a join that ends early, canceled
	// or timed out, removes it, so /dev/shm keeps nothing of it.
	for _, cancel := range []bool{true, false} {
		t.Run(fmt.Sprintf("rank-0-alone-canceled-%v-leaves-no-file", cancel), func(t *testing.T) {
			t.Parallel()
			id := newID(t)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			if cancel {
				time.AfterFunc(20*time.Millisecond, stop)
			}
			err := join(ctx, &cpu.Backend{Options: smallOpts}, id, 0, 2)
			if want := map[bool]error{true: context.Canceled, false: ccl.ErrTimeout}[cancel]; !errors.Is(err, want) {
				t.Fatalf("got %v, want %v", err, want)
			}
			if _, err := os.Stat(shmseg.Path("chorus-ccl-", id)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the rendezvous file is still there: %v", err)
			}
		})
	}
	t.Run("bad-config", func(t *testing.T) {
		b := &cpu.Backend{}
		id := newID(t)
		for _, cfg := range []ccl.Config{
			{ID: nil, Rank: 0, Size: 1},
			{ID: id, Rank: 0, Size: 0},
			{ID: id, Rank: 2, Size: 2},
			{ID: id, Rank: -1, Size: 2},
			{ID: id, Rank: 0, Size: 1, Timeout: -time.Second},
			{ID: id, Rank: 0, Size: 1, Device: tensor.CUDADevice(0)},
		} {
			if c, err := b.Join(context.Background(), cfg); !errors.Is(err, ccl.ErrBadArgs) {
				t.Errorf("Join(%+v): got %v, want ErrBadArgs", cfg, err)
				if c != nil {
					c.Close()
				}
			}
		}
	})
}

// TestClosed: calls after Close fail with ErrClosed.
func TestClosed(t *testing.T) {
	errs := runRanks(t, smallOpts, 1, 0, func(ctx context.Context, c ccl.Comm) error {
		if err := c.Close(); err != nil {
			return err
		}
		x := filled(tensor.Float32, 2)
		if err := c.AllReduce(ctx, x, x, reduce.Sum); !errors.Is(err, ccl.ErrClosed) {
			return fmt.Errorf("allreduce after Close: got %v, want ErrClosed", err)
		}
		if err := c.Barrier(ctx); !errors.Is(err, ccl.ErrClosed) {
			return fmt.Errorf("barrier after Close: got %v, want ErrClosed", err)
		}
		return nil
	})
	noErrors(t, errs)
}

// TestMismatchEveryRankBothParities: a disagreement by any one rank, in a
// collective of either slot parity (the descriptors of the two parities
// lie side by side in each control block), is seen by every rank: the
// disagreeing rank gets ErrMismatch naming rank 0's call, the others too,
// nothing is written, and agreeing calls before and after still work.
func TestMismatchEveryRankBothParities(t *testing.T) {
	const k = 6
	for _, n := range []int{2, 3, 4} {
		for odd := range n {
			for lead := range 2 { // agreeing calls before the mismatch: its parity
				t.Run(fmt.Sprintf("n=%d/odd=%d/lead=%d", n, odd, lead), func(t *testing.T) {
					errs := make([]error, n)
					snaps := make([]snapshot, n)
					runErrs := runRanks(t, smallOpts, n, 0, func(ctx context.Context, c ccl.Comm) error {
						r := c.Rank()
						for range lead {
							if err := followUp(ctx, c); err != nil {
								return err
							}
						}
						cnt := k
						if r == odd {
							cnt = k + 1
						}
						recv := f32(cnt)
						snaps[r].add(recv)
						errs[r] = c.AllReduce(ctx, filled(tensor.Float32, cnt), recv, reduce.Sum)
						return followUp(ctx, c)
					})
					noErrors(t, runErrs)
					wantMismatchUnchanged(t, errs, snaps)
				})
			}
		}
	}
}

// wantMismatchUnchanged checks that every rank failed with ErrMismatch and
// that no rank's output changed.
func wantMismatchUnchanged(t *testing.T, errs []error, snaps []snapshot) {
	t.Helper()
	for r, err := range errs {
		if !errors.Is(err, ccl.ErrMismatch) {
			t.Errorf("rank %d: got %v, want ErrMismatch", r, err)
		}
		if err := snaps[r].changed(); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
