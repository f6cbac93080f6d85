package run

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/mscclpptests"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/verify"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

func sendRecvPlan(t *testing.T, n int) *plan.Plan {
	t.Helper()
	for _, pr := range mscclpptests.Programs() {
		if pr.Name == "multi_node/send_recv.py" {
			p, err := pr.Build(n)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatal("no send_recv program")
	return nil
}

func threaded(t *testing.T, n int) *session.Session {
	t.Helper()
	s, err := session.NewThreaded(session.Options{NumWorkers: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// A sendrecv plan is checked against the data movement the verifier
// computed: a correct run has no wrong element, and one corrupted output
// element (on a rank the plan writes) is counted wrong, exactly once.
func TestMovementCheckCountsCorruption(t *testing.T) {
	leaktest.Check(t)
	p := sendRecvPlan(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inN, outN := Counts(p, tensor.Float32, 4<<10)
	for _, tc := range []struct {
		name    string
		corrupt func(rank int, got []float64)
		want    int64
	}{
		{"clean", nil, 0},
		{"one element", func(rank int, got []float64) {
			if rank == 1 {
				got[len(got)/2] += 1
			}
		}, 1},
		{"every rank", func(rank int, got []float64) { got[0] = -got[0] - 1 }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			corruptForTest = tc.corrupt
			defer func() { corruptForTest = nil }()
			s := threaded(t, 2)
			c, err := Load(ctx, s, p, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			res, err := c.Bench(ctx, tensor.Float32, inN, outN, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Wrong != tc.want {
				t.Fatalf("%d wrong elements, want %d", res.Wrong, tc.want)
			}
		})
	}
}

// The expectation of a movement-checked plan: every element a rank's
// output receives is the peer's input element, and changing any one of
// them is one wrong element.
func TestMovementExpectation(t *testing.T) {
	for _, n := range []int{2, 4} {
		p := sendRecvPlan(t, n)
		inN, outN := Counts(p, tensor.Float32, 1<<10)
		for r := range n {
			want, err := expectation(p, func() (*verify.Movement, error) { return movementOf(p) }, r, inN, outN, 4)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float64, outN)
			peer := (r + n/2) % n
			for i := range got {
				w, ok := want(int64(i))
				if !ok {
					t.Fatalf("n%d rank %d element %d: not checked", n, r, i)
				}
				if w != benchValue(peer, i) {
					t.Fatalf("n%d rank %d element %d: want %v, expect in(rank %d)[%d] = %v", n, r, i, w, peer, i, benchValue(peer, i))
				}
				got[i] = w
			}
			if k := countWrong(got, want); k != 0 {
				t.Fatalf("n%d rank %d: %d wrong in the expected output", n, r, k)
			}
			got[int64(r)%outN] += 0.5
			if k := countWrong(got, want); k != 1 {
				t.Fatalf("n%d rank %d: corrupted element counted %d times", n, r, k)
			}
		}
	}
}

// rejectedPlan: a "test" collective whose put into the peer's output is
// not ordered before the peer's kernel ends (no signal/wait): a race.
func rejectedPlan(t *testing.T) *plan.Plan {
	t.Helper()
	prog := dsl.NewProgram(dsl.Config{Name: "unordered_put", Collective: "test", Ranks: 2, Protocol: plan.Simple, InputChunks: 1, OutputChunks: 1})
	ch := prog.MemoryChannel(1, 0)
	ch.Put(prog.Rank(1).Output().Chunk(0, 1), prog.Rank(0).Input().Chunk(0, 1), dsl.TB(0))
	p, err := prog.Lower()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A plan without a fixed result that the verifier rejects has nothing to
// check against: ErrNoReference, from the check and from a bench run
// (before anything runs), never a guess.
func TestNoReference(t *testing.T) {
	leaktest.Check(t)
	p := rejectedPlan(t)
	if _, err := movementOf(p); !errors.Is(err, ErrNoReference) {
		t.Fatalf("movementOf: %v, want ErrNoReference", err)
	}
	if _, err := expectation(p, func() (*verify.Movement, error) { return movementOf(p) }, 1, 4, 4, 4); !errors.Is(err, ErrNoReference) {
		t.Fatalf("expectation: %v, want ErrNoReference", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := threaded(t, 2)
	c, err := Load(ctx, s, p, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inN, outN := Counts(p, tensor.Float32, 1<<10)
	// Worker errors cross the session as text (as every worker error
	// does), so the sentinel is matched by its message here.
	_, err = c.Bench(ctx, tensor.Float32, inN, outN, 1, 0)
	if err == nil || !strings.Contains(err.Error(), ErrNoReference.Error()) || !strings.Contains(err.Error(), "race") {
		t.Fatalf("bench: %v, want ErrNoReference naming the race", err)
	}
}
