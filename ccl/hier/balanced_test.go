package hier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// TestChunkQueue: chunks of step 0 are ready at once, chunk n+nch once n
// is received, lowest first; claims refuse repeats and strangers; take
// ends when every chunk is taken or the queue is halted.
func TestChunkQueue(t *testing.T) {
	q := newChunkQueue(3, 2) // chunks 0-5
	take := func(want int) {
		t.Helper()
		if n, ok := q.take(); !ok || n != want {
			t.Fatalf("take = %d, %v; want %d", n, ok, want)
		}
	}
	take(0)
	take(1)
	for _, tc := range []struct {
		n    uint64
		want bool
	}{{1, true}, {1, false}, {6, false}, {1 << 63, false}, {0, true}} {
		if got := q.claim(tc.n); got != tc.want {
			t.Fatalf("claim(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	q.done(1)
	q.done(0)
	take(2) // ready after 3, but lower
	take(3)
	if q.claim(0) {
		t.Fatal("claim of a received chunk succeeded")
	}
	// Chunk 4 waits for chunk 2.
	got := make(chan int)
	go func() {
		n, _ := q.take()
		got <- n
	}()
	q.claim(2)
	q.done(2)
	if n := <-got; n != 4 {
		t.Fatalf("take after 2 = %d, want 4", n)
	}
	q.claim(3)
	q.done(3)
	take(5)
	if n, ok := q.take(); ok {
		t.Fatalf("take with every chunk taken = %d", n)
	}
	// A halted queue wakes its waiters.
	h := newChunkQueue(2, 1)
	take2 := func() (int, bool) { return h.take() }
	if n, ok := take2(); !ok || n != 0 {
		t.Fatalf("take = %d, %v", n, ok)
	}
	ended := make(chan bool)
	go func() {
		_, ok := h.take()
		ended <- ok
	}()
	h.halt()
	if <-ended {
		t.Fatal("take on a halted queue succeeded")
	}
}

// balanced sets the package's tuning so that every allreduce of more
// than 64 bytes between leaders with stripes is a balanced ring, in
// chunks of chunk bytes.
func balanced(t *testing.T, chunk int) {
	sm, rhd, ch, ri, mc, in := smallMax, rhdMax, chunkBytes, ringInlineMax, ringMinChunk, agreeInlineMax
	t.Cleanup(func() {
		smallMax, rhdMax, chunkBytes, ringInlineMax, ringMinChunk, agreeInlineMax = sm, rhd, ch, ri, mc, in
	})
	smallMax, rhdMax, chunkBytes, ringInlineMax, ringMinChunk, agreeInlineMax = 64, 0, chunk, 0, chunk, 0
	stripesFrom(t, 0)
}

// fracFill fills x with values whose float sums depend on their order.
func fracFill(x *tensor.Tensor, r int) {
	rng := rand.New(rand.NewPCG(9, uint64(r)))
	v := make([]float64, x.NumElements())
	for i := range v {
		v[i] = rng.NormFloat64() * 1e3
	}
	if err := tensor.SetFromFloat64(x, v); err != nil {
		panic(err)
	}
}

// TestBalancedMatchesRing: a balanced ring reduces every element in the
// order an unstriped ring does, so float results are the same bits; and
// every leader receives every chunk of its plan exactly once.
func TestBalancedMatchesRing(t *testing.T) {
	leaktest.Check(t)
	balanced(t, 1000)
	var got [MaxStripes]atomic.Int64
	testRingHook = func(c *Comm, s, step, chunk int) { got[s].Add(1) }
	defer func() { testRingHook = nil }()
	for _, lay := range [][]int{{1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1}} {
		results := map[string][][]byte{}
		for _, S := range []string{"1", "3"} {
			stripesByRank(t, S)
			comms := world(t, lay, 10*time.Second)
			for _, count := range []int64{30011, 15007} {
				for i := range got {
					got[i].Store(0)
				}
				out := make([][]byte, len(comms))
				must(t, each(comms, func(r int, c *Comm) error {
					x := tensor.MustNew(tensor.Float32, tensor.Shape{count})
					fracFill(x, r)
					if err := c.AllReduce(context.Background(), x, x, reduce.Sum); err != nil {
						return err
					}
					out[r] = x.Bytes()
					return nil
				}))
				key := fmt.Sprint(count)
				if prev, ok := results[key]; ok {
					for r := range out {
						if string(out[r]) != string(prev[r]) {
							t.Fatalf("%v/%d elements: rank %d: balanced (3 links) and unstriped rings differ", lay, count, r)
						}
					}
				} else {
					results[key] = out
				}
				if S == "3" {
					k := len(lay)
					pl := newRingPlan(k, 0, int(count)*4, 4, balancedChunk(3))
					var sum int64
					for s := range got {
						sum += got[s].Load()
					}
					if want := int64(k * pl.steps() * pl.nch); sum != want {
						t.Fatalf("%v/%d elements: %d chunks received, want %d", lay, count, sum, want)
					}
				}
			}
			if S == "3" {
				if p := comms[0].PathFor(ccl.KindAllReduce, 30011*4); p != "leader ring, 3 stripes" {
					t.Fatalf("PathFor = %q", p)
				}
			}
		}
	}
}

// smallBuffers shrinks every link's socket buffers, so that a link whose
// receiver stops holds few chunks (loopback's autotuned buffers take
// megabytes before a writer blocks).
func smallBuffers(t *testing.T, comms []*Comm) {
	for _, c := range comms {
		c.eachLink(func(p *peer) {
			conn := p.c
			for {
				if x, ok := conn.(interface{ NetConn() net.Conn }); ok {
					conn = x.NetConn()
					continue
				}
				if x, ok := conn.(interface{ Unwrap() net.Conn }); ok {
					conn = x.Unwrap()
					continue
				}
				break
			}
			sc, ok := conn.(syscall.Conn)
			if !ok {
				t.Fatalf("rank %d: link to %d is a %T", c.rank, p.rank, conn)
			}
			rc, _ := sc.SyscallConn()
			_ = rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10)
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 32<<10)
			})
		})
	}
}

// TestBalancedRingWorkConserving: while one leader's receiver on stripe
// 1 is stuck, the other links carry the chunks that stripe would have:
// more than a fixed share (what separate stripe rings could deliver)
// arrives on the others before it is released.
func TestBalancedRingWorkConserving(t *testing.T) {
	leaktest.Check(t)
	balanced(t, 2048)
	usePlainEndpoint(t) // bare sockets: no TLS or link buffers in front of them
	stripesByRank(t, "2")
	comms := world(t, []int{1, 1, 1}, time.Minute)
	smallBuffers(t, comms)
	const count = 1 << 20 // 4 MiB: 683 chunks of 2 KiB per segment
	pl := newRingPlan(3, 0, count*4, 4, balancedChunk(2))
	total := int64(pl.steps() * pl.nch)
	var others atomic.Int64
	release, enough := make(chan struct{}), make(chan struct{})
	var stuck, reached sync.Once
	testRingHook = func(c *Comm, s, step, chunk int) {
		if c != comms[0] {
			return
		}
		if s == 1 {
			stuck.Do(func() { <-release })
			return
		}
		if others.Add(1) >= total*3/4 {
			reached.Do(func() { close(enough) })
		}
	}
	defer func() { testRingHook = nil }()
	errs := make(chan []error, 1)
	go func() {
		errs <- each(comms, func(r int, c *Comm) error {
			x := tensor.MustNew(tensor.Float32, tensor.Shape{count})
			fill(x, r, 3)
			return c.AllReduce(context.Background(), x, x, reduce.Sum)
		})
	}()
	select {
	case <-enough:
	case <-time.After(30 * time.Second): // a hang guard, not a measurement
		close(release)
		<-errs
		t.Fatalf("rank 0 got %d of %d chunks on stripe 0 while stripe 1 was stuck, want %d", others.Load(), total, total*3/4)
	}
	close(release)
	for r, err := range <-errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestBalancedProtocol: a leader that numbers its chunks wrongly (twice
// the same, or beyond the plan) fails every rank with ccl.ErrFailed, the
// receiving one naming the link protocol; one that ends before its last
// chunk fails the receiving one so (the others may have finished); none
// waits for the timeout.
func TestBalancedProtocol(t *testing.T) {
	leaktest.Check(t)
	balanced(t, 1000)
	stripesByRank(t, "2")
	const count = 20000
	pl := newRingPlan(3, 1, count*4, 4, balancedChunk(2))
	last := uint64(pl.steps()*pl.nch - 1)
	for _, tc := range []struct {
		name string
		num  func(n uint64) uint64
		want string
	}{
		{"repeat", func(uint64) uint64 { return 0 }, "sent twice"},
		{"beyond", func(n uint64) uint64 { return n + 1<<40 }, "out of range"},
		// The last chunk left out: nothing waits for it but its
		// receiver, which sees the end messages come first. (A chunk
		// left out earlier stalls the ring until the timeout, as any
		// message a peer withholds.)
		{"missing", func(n uint64) uint64 {
			if n == last {
				return dropChunk
			}
			return n
		}, "ended the ring after"},
	} {
		comms := world(t, []int{1, 1, 1}, time.Minute)
		testChunkNumber = func(c *Comm, n uint64) uint64 {
			if c == comms[1] {
				return tc.num(n)
			}
			return n
		}
		errs := each(comms, func(r int, c *Comm) error {
			x := tensor.MustNew(tensor.Float32, tensor.Shape{count})
			return c.AllReduce(context.Background(), x, x, reduce.Sum)
		})
		testChunkNumber = nil
		for r, err := range errs {
			var te *ccl.TimeoutError
			if tc.name == "missing" && r != 2 && err == nil {
				continue // it had all it needed before rank 2 failed
			}
			if !errors.Is(err, ccl.ErrFailed) || errors.As(err, &te) {
				t.Fatalf("%s: rank %d: %v, want ErrFailed", tc.name, r, err)
			}
		}
		if !strings.Contains(errs[2].Error(), tc.want) || !strings.Contains(errs[2].Error(), "link protocol") {
			t.Fatalf("%s: rank 2 (rank 1's next): %v, want %q", tc.name, errs[2], tc.want)
		}
	}
}
