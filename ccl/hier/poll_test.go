package hier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

func TestSpinFor(t *testing.T) {
	for _, tc := range []struct {
		mode       string
		cpus, l    int
		want       time.Duration
		wantErrSub string
	}{
		{"", 16, 1, 0, ""}, // off unless asked for
		{"auto", 16, 1, DefaultSpin, ""},
		{"auto", 16, 4, DefaultSpin, ""},
		{"auto", 16, 5, 0, ""}, // fewer than 4 cores per local rank
		{"auto", 2, 1, 0, ""},  // the 2-vCPU CI machine
		{"off", 64, 1, 0, ""},
		{"0", 64, 1, 0, ""},
		{"20us", 2, 8, 20 * time.Microsecond, ""}, // asked for: polls anyway
		{"1s", 2, 1, time.Second, ""},
		{"2s", 64, 1, 0, "spin budget"},
		{"-1us", 64, 1, 0, "spin budget"},
		{"50", 64, 1, 0, "spin budget"}, // no unit
		{"yes", 64, 1, 0, "spin budget"},
	} {
		got, err := spinFor(tc.mode, tc.cpus, tc.l)
		if tc.wantErrSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
				t.Errorf("spinFor(%q, %d, %d) = %v, %v; want an error naming %s", tc.mode, tc.cpus, tc.l, got, err, tc.wantErrSub)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("spinFor(%q, %d, %d) = %v, %v; want %v", tc.mode, tc.cpus, tc.l, got, err, tc.want)
		}
	}
}

// TestJoinRefusesBadSpin: a bad spin budget fails Join with
// ccl.ErrBadArgs naming it.
func TestJoinRefusesBadSpin(t *testing.T) {
	setSpin(t, "sometimes")
	wantJoinRefused(t, "spin budget")
}

// setSpin sets spinMode until the test ends.
func setSpin(t *testing.T, mode string) {
	old := spinMode
	spinMode = mode
	t.Cleanup(func() { spinMode = old })
}

// wantJoinRefused joins rank 0 of a two-host communicator, which must
// fail before it connects with ccl.ErrBadArgs naming what is wrong.
func wantJoinRefused(t *testing.T, name string) {
	t.Helper()
	addr, err := Endpoint(testOpts)
	if err != nil {
		t.Fatal(err)
	}
	nonce, _ := (&Backend{}).NewID()
	id, err := MakeID(nonce, []int{0, 1}, []string{addr, addr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Backend{}).Join(context.Background(), ccl.Config{ID: id, Rank: 0, Size: 2})
	if !errors.Is(err, ccl.ErrBadArgs) || !strings.Contains(err.Error(), name) {
		t.Fatalf("Join with a bad %s: %v; want ErrBadArgs naming it", name, err)
	}
}

// TestPolledCollectives: with a polling budget, every link (TLS and
// plaintext, every stripe) reads through a poller; collectives up to
// spinMax leave the budget on the links, larger ones take it off, and
// the results are those of the float64 reference either way.
func TestPolledCollectives(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b, ch, sp int) { smallMax, chunkBytes, spinMax, stripeMinBytes = a, ch, sp, b }(smallMax, stripeMinBytes, chunkBytes, spinMax)
	smallMax, chunkBytes, spinMax, stripeMinBytes = 256, 1000, 8000, 4000
	const budget = 200 * time.Microsecond
	setSpin(t, budget.String())
	for _, plain := range []bool{false, true} {
		if plain {
			usePlainEndpoint(t)
		}
		for _, lay := range [][]int{{1, 1, 1}, {2, 1}} {
			comms := world(t, lay, 10*time.Second)
			links := func(want time.Duration, when string) {
				t.Helper()
				for r, c := range comms {
					n := 0
					c.eachLink(func(p *peer) {
						n++
						if p.poll == nil {
							t.Fatalf("plain %v %v: rank %d's link to rank %d (stripe %d) has no poller", plain, lay, r, p.rank, p.stripe)
						}
						if got := p.poll.Spin(); got != want {
							t.Fatalf("plain %v %v: %s: rank %d's link to rank %d (stripe %d) polls %v, want %v", plain, lay, when, r, p.rank, p.stripe, got, want)
						}
					})
					if n == 0 && c.k > 1 && c.lrank == 0 {
						t.Fatalf("plain %v %v: rank %d has no links", plain, lay, r)
					}
				}
			}
			for _, step := range []struct {
				count int64 // float32 elements
				want  time.Duration
			}{
				{100, budget},  // gathered
				{2000, budget}, // 8000 bytes: the ring, polled
				{30000, 0},     // 120000 bytes: striped ring, not polled
				{10, budget},   // inline
				{2001, 0},      // 8004 bytes
			} {
				name := fmt.Sprintf("plain %v %v: %d bytes", plain, lay, step.count*4)
				checkAllReduce(t, name, comms, tensor.Float32, reduce.Sum, step.count, uint64(step.count), func(r int) bool { return r == 1 })
				links(step.want, fmt.Sprintf("after an allreduce of %d bytes", step.count*4))
			}
		}
	}
}
