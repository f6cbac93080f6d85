package session_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/tensor"
)

// cclVal is element i of worker w's ccltest.fill tensor.
func cclVal(w, i int) float32 { return float32(w*100 + i + 1) }

func init() {
	// fill(n, grow, worker0_only, in_group): float32 tensor of n + grow*worker_id
	// elements, element i = worker_id*100 + i + 1; with worker0_only, only
	// worker 0 (of its group when in_group) makes one, the others return nil.
	registry.MustRegisterTyped("ccltest.fill", func(env registry.Env, n, grow int64, worker0Only, inGroup bool) (*tensor.Tensor, error) {
		rank := env.WorkerID()
		if inGroup {
			rank = env.WorkerRank()
		}
		if worker0Only && rank != 0 {
			return nil, nil
		}
		t, err := env.Alloc(tensor.Float32, tensor.Shape{n + grow*int64(env.WorkerID())}, env.Device(), "")
		if err != nil {
			return nil, err
		}
		d, _ := tensor.Data[float32](t)
		for i := range d {
			d[i] = cclVal(env.WorkerID(), i)
		}
		return t, nil
	})
	// poisoned(n, grow): float32 tensor of n + grow*worker_id poisoned elements.
	registry.MustRegisterTyped("ccltest.poisoned", func(env registry.Env, n, grow int64) (*tensor.Tensor, error) {
		t, err := env.Alloc(tensor.Float32, tensor.Shape{n + grow*int64(env.WorkerID())}, env.Device(), "")
		if err != nil {
			return nil, err
		}
		return t, tensor.Poison(t)
	})
	// pick(v0, v1, ...) returns v[worker_id]: a per-worker argument.
	registry.MustRegisterTyped("ccltest.pick", func(env registry.Env, vals ...any) (any, error) {
		if env.WorkerID() >= len(vals) {
			return nil, fmt.Errorf("pick: %d values for worker %d", len(vals), env.WorkerID())
		}
		return vals[env.WorkerID()], nil
	})
}

// cclHelper bundles a session with the functions the CCL tests call.
type cclHelper struct {
	t     *testing.T
	s     *session.Session
	funcs map[string]*session.DRef
}

// newCCLHelper looks every function up first: GetGlobalFunc waits for all
// workers, which must not happen while a send waits for its receive.
func newCCLHelper(t *testing.T, s *session.Session) *cclHelper {
	h := &cclHelper{t: t, s: s, funcs: map[string]*session.DRef{}}
	for _, name := range []string{"ccltest.fill", "ccltest.poisoned", "ccltest.pick", "chorus.empty",
		"chorus.allreduce", "chorus.allgather", "chorus.reduce_scatter", "chorus.broadcast_from_worker0",
		"chorus.scatter_from_worker0", "chorus.gather_to_worker0", "chorus.send_to_worker",
		"chorus.recv_from_worker", "chorus.recv_from_worker0", "chorus.send_to_next_group",
		"chorus.recv_from_prev_group", "chorus.barrier"} {
		h.funcs[name] = mustFunc(t, s, name)
	}
	return h
}

func (h *cclHelper) call(name string, args ...any) *session.DRef {
	h.t.Helper()
	f, ok := h.funcs[name]
	if !ok {
		h.t.Fatalf("function %q not looked up in newCCLHelper", name)
	}
	return mustCall(h.t, h.s, f, args...)
}

// floats fetches worker w's float32 tensor in r; nil if the register holds nil.
func (h *cclHelper) floats(r *session.DRef, w int) []float32 {
	h.t.Helper()
	v := get(h.t, h.s, r, w)
	if v == nil {
		return nil
	}
	tt, ok := v.(*tensor.Tensor)
	if !ok {
		h.t.Fatalf("worker %d: register holds %T, want a tensor", w, v)
	}
	d, err := tensor.Data[float32](tt)
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

func (h *cclHelper) sync() {
	h.t.Helper()
	if err := h.s.Sync(bg(h.t)); err != nil {
		h.t.Fatalf("Sync: %v", err)
	}
}

// expectEach checks worker w's tensor in r against want(w) (nil: the
// register must hold nil).
func (h *cclHelper) expectEach(what string, r *session.DRef, want func(w int) []float32) {
	h.t.Helper()
	for w := range h.s.NumWorkers() {
		got, exp := h.floats(r, w), want(w)
		if exp == nil {
			if got != nil {
				h.t.Errorf("%s: worker %d holds %v, want nil", what, w, got)
			}
			continue
		}
		if !slices.EqualFunc(got, exp, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			h.t.Errorf("%s: worker %d got %v, want %v", what, w, got, exp)
		}
	}
}

// vals returns cclVal(w, i) for i in [lo, hi).
func vals(w, lo, hi int) []float32 {
	var out []float32
	for i := lo; i < hi; i++ {
		out = append(out, cclVal(w, i))
	}
	return out
}

// members lists the workers that a collective spans for worker w: all
// four, or w's group of two.
func members(w int, inGroup bool) []int {
	if inGroup {
		return []int{w / 2 * 2, w/2*2 + 1}
	}
	return []int{0, 1, 2, 3}
}

// workerErrors returns the ids of the workers whose failures err holds,
// and fails the test unless every element of err is a worker's failure
// mentioning each of wantMsg.
func workerErrors(t *testing.T, err error, wantMsg ...string) []int {
	t.Helper()
	var es session.Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %v (%T) is not a session.Errors", err, err)
	}
	var ws []int
	for _, e := range es {
		var we *wire.WorkerError
		if !errors.As(e, &we) {
			t.Errorf("failure %v is not a worker's", e)
			continue
		}
		ws = append(ws, int(we.Worker))
		for _, m := range wantMsg {
			if !strings.Contains(we.Msg, m) {
				t.Errorf("worker %d: %q does not mention %q", we.Worker, we.Msg, m)
			}
		}
	}
	sort.Ints(ws)
	return ws
}

func TestCCLBuiltins(t *testing.T) {
	forKinds(t, 4, 2, func(t *testing.T, s *session.Session) {
		h := newCCLHelper(t, s)
		if err := s.InitCCL(bg(t), "cpu", 0); err != nil {
			t.Fatalf("InitCCL: %v", err)
		}
		const n = 8
		for _, inGroup := range []bool{false, true} {
			g := fmt.Sprintf("in_group=%v", inGroup)
			m := func(w int) []int { return members(w, inGroup) }
			k := len(m(0))

			send := h.call("ccltest.fill", n, 0, false, false)
			for _, op := range []string{"sum", "max", "prod"} {
				recv := h.call("ccltest.poisoned", n, 0)
				h.call("chorus.allreduce", send, op, inGroup, recv)
				h.expectEach("allreduce "+op+" "+g, recv, func(w int) []float32 {
					out := make([]float32, n)
					for i := range out {
						for j, p := range m(w) {
							v := cclVal(p, i)
							switch {
							case j == 0:
								out[i] = v
							case op == "sum":
								out[i] += v
							case op == "max":
								out[i] = max(out[i], v)
							case op == "prod":
								out[i] *= v
							}
						}
					}
					return out
				})
			}
			// In place.
			inplace := h.call("ccltest.fill", n, 0, false, false)
			h.call("chorus.allreduce", inplace, "sum", inGroup, inplace)
			h.expectEach("allreduce in place "+g, inplace, func(w int) []float32 {
				out := make([]float32, n)
				for i := range out {
					for _, p := range m(w) {
						out[i] += cclVal(p, i)
					}
				}
				return out
			})

			recv := h.call("ccltest.poisoned", n*k, 0)
			h.call("chorus.allgather", send, inGroup, recv)
			h.expectEach("allgather "+g, recv, func(w int) []float32 {
				var out []float32
				for _, p := range m(w) {
					out = append(out, vals(p, 0, n)...)
				}
				return out
			})

			recv = h.call("ccltest.poisoned", n/k, 0)
			h.call("chorus.reduce_scatter", send, "sum", inGroup, recv)
			h.expectEach("reduce_scatter "+g, recv, func(w int) []float32 {
				r := slices.Index(m(w), w)
				var out []float32
				for i := r * n / k; i < (r+1)*n/k; i++ {
					var sum float32
					for _, p := range m(w) {
						sum += cclVal(p, i)
					}
					out = append(out, sum)
				}
				return out
			})

			root := h.call("ccltest.fill", n, 0, true, inGroup) // nil on non-roots
			recv = h.call("ccltest.poisoned", n, 0)
			h.call("chorus.broadcast_from_worker0", root, inGroup, recv)
			h.expectEach("broadcast "+g, recv, func(w int) []float32 { return vals(m(w)[0], 0, n) })

			recv = h.call("ccltest.poisoned", n/k, 0)
			h.call("chorus.scatter_from_worker0", root, inGroup, recv)
			h.expectEach("scatter "+g, recv, func(w int) []float32 {
				r := slices.Index(m(w), w)
				return vals(m(w)[0], r*n/k, (r+1)*n/k)
			})

			gathered := h.call("chorus.empty", tensor.Shape{int64(n * k)}, tensor.Float32, nil, true, inGroup)
			h.call("chorus.gather_to_worker0", send, inGroup, gathered)
			h.expectEach("gather "+g, gathered, func(w int) []float32 {
				if m(w)[0] != w {
					return nil
				}
				var out []float32
				for _, p := range m(w) {
					out = append(out, vals(p, 0, n)...)
				}
				return out
			})

			h.call("chorus.barrier", inGroup)
			h.sync()
		}

		// Groups: workers 0 and 1 send to 2 and 3. Workers of the last group
		// cannot send, those of the first cannot receive; they fail at once.
		send := h.call("ccltest.fill", n, 0, false, false)
		recv := h.call("ccltest.poisoned", n, 0)
		h.call("chorus.send_to_next_group", send)
		h.call("chorus.recv_from_prev_group", recv)
		err := s.Sync(bg(t))
		if err == nil {
			t.Fatal("send_to_next_group in the last group and recv_from_prev_group in the first succeeded")
		}
		if got := workerErrors(t, err); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Errorf("errors from workers %v, want 0-3: %v", got, err)
		}
		for _, w := range []int{2, 3} {
			if want := fmt.Sprintf("worker %d is in the last group", w); !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
		for _, w := range []int{0, 1} {
			if want := fmt.Sprintf("worker %d is in the first group", w); !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
		h.expectEach("recv_from_prev_group", recv, func(w int) []float32 {
			if w < 2 {
				return slices.Repeat([]float32{poison32}, n) // untouched
			}
			return vals(w-2, 0, n)
		})

		// send_to_worker / recv_from_worker with per-worker peers: 0 -> 1
		// and 2 -> 3; the other half names itself and fails with bad args.
		dst := h.call("ccltest.pick", 1, 1, 3, 3)
		src := h.call("ccltest.pick", 0, 0, 2, 2)
		recv = h.call("ccltest.poisoned", n, 0)
		h.call("chorus.send_to_worker", send, dst)
		h.call("chorus.recv_from_worker", recv, src)
		err = s.Sync(bg(t))
		if got := workerErrors(t, err, "itself"); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Errorf("errors from workers %v, want 0-3 (each names itself once): %v", got, err)
		}
		h.expectEach("recv_from_worker", recv, func(w int) []float32 {
			if w%2 == 0 {
				return slices.Repeat([]float32{poison32}, n)
			}
			return vals(w-1, 0, n)
		})

		// recv_from_worker0: worker 0 sends to 1, 2 and 3 in turn (the
		// others' sends name themselves); worker 0 cannot receive from itself.
		recv = h.call("ccltest.poisoned", n, 0)
		for to := 1; to < 4; to++ {
			h.call("chorus.send_to_worker", send, h.call("ccltest.pick", to, 1, 2, 3))
		}
		h.call("chorus.recv_from_worker0", recv)
		err = s.Sync(bg(t))
		if got := workerErrors(t, err, "itself"); !slices.Equal(got, []int{0, 1, 1, 1, 2, 2, 2, 3, 3, 3}) {
			t.Errorf("errors from workers %v: %v", got, err)
		}
		h.expectEach("recv_from_worker0", recv, func(w int) []float32 {
			if w == 0 {
				return slices.Repeat([]float32{poison32}, n)
			}
			return vals(0, 0, n)
		})

		// Everything still works.
		recv = h.call("ccltest.poisoned", n, 0)
		h.call("chorus.allreduce", send, "min", false, recv)
		h.expectEach("allreduce after p2p errors", recv, func(int) []float32 { return vals(0, 0, n) })
		h.sync()
	})
}

func TestCCLErrors(t *testing.T) {
	forKinds(t, 4, 2, func(t *testing.T, s *session.Session) {
		h := newCCLHelper(t, s)
		ctx := bg(t)

		// A collective before InitCCL fails on every worker.
		send := h.call("ccltest.fill", 4, 0, false, false)
		recv := h.call("ccltest.poisoned", 4, 0)
		h.call("chorus.allreduce", send, "sum", false, recv)
		h.call("chorus.barrier", true)
		err := s.Sync(ctx)
		if err == nil || !strings.Contains(err.Error(), "InitCCL") {
			t.Fatalf("collective before InitCCL: %v, want an error mentioning InitCCL", err)
		}
		if got := workerErrors(t, err, "InitCCL"); !slices.Equal(got, []int{0, 0, 1, 1, 2, 2, 3, 3}) {
			t.Errorf("errors from workers %v, want two from each: %v", got, err)
		}

		if err := s.InitCCL(ctx, "no-such-backend", 0); !errors.Is(err, ccl.ErrUnknownBackend) {
			t.Errorf("InitCCL with an unknown backend: %v, want ErrUnknownBackend", err)
		}
		if err := s.InitCCL(ctx, "cpu", 0); err != nil {
			t.Fatalf("InitCCL: %v", err)
		}

		// Rank-dependent sizes: every worker reports the mismatch.
		bad := h.call("ccltest.fill", 4, 1, false, false)
		badRecv := h.call("ccltest.poisoned", 4, 1)
		h.call("chorus.allreduce", bad, "sum", false, badRecv)
		err = s.Sync(ctx)
		if err == nil {
			t.Fatal("allreduce of different sizes succeeded")
		}
		if got := workerErrors(t, err, ccl.ErrMismatch.Error()); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Errorf("errors from workers %v, want 0-3: %v", got, err)
		}
		for w := range 4 {
			got := h.floats(badRecv, w)
			for i, v := range got {
				if v == v { // not NaN: written
					t.Errorf("worker %d: mismatched allreduce wrote element %d", w, i)
					break
				}
			}
		}
		// The same in groups, then a correct allreduce: the session and
		// the communicators stay usable.
		h.call("chorus.allreduce", bad, "sum", true, badRecv)
		if err := s.Sync(ctx); err == nil {
			t.Error("in-group allreduce of different sizes succeeded")
		}
		recv = h.call("ccltest.poisoned", 4, 0)
		h.call("chorus.allreduce", send, "sum", false, recv)
		h.expectEach("allreduce after a mismatch", recv, func(int) []float32 {
			out := make([]float32, 4)
			for i := range out {
				for w := range 4 {
					out[i] += cclVal(w, i)
				}
			}
			return out
		})
		h.sync()

		// InitCCL again replaces the communicators.
		if err := s.InitCCL(ctx, "cpu", 0); err != nil {
			t.Fatalf("second InitCCL: %v", err)
		}
		recv = h.call("ccltest.poisoned", 4, 0)
		h.call("chorus.allreduce", send, "max", true, recv)
		h.expectEach("allreduce after a second InitCCL", recv, func(w int) []float32 { return vals(w/2*2+1, 0, 4) })
		h.sync()
	})
}

// poison32 is a float32 element as tensor.Poison leaves it.
var poison32 = math.Float32frombits(0x7fda5a5a)
