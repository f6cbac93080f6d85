package hier

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// Striped leader rings (as NCCL's several sockets and threads per
// connection): one TLS connection per direction is one core encrypting
// and one decrypting, so a single leader ring is bound by two cores'
// AES-GCM however many the host has. From StripeMin bytes up, the leader
// ring splits the message into S stripes (cpu.Part: ceil(count/S)
// elements each, the same split on every rank) and runs S rings at once,
// each on its own connection to the next and the previous leader, with
// its own sender and receiver goroutines and scratch.
const (
	// EnvStripes sets the leader ring's stripes (1 to MaxStripes; unset:
	// DefaultStripes on the leader path, 1 on the multi-ring path, whose
	// rings already run on every local rank's core). Every process must
	// have the same: the agreement round fails a collective whose ranks
	// differ with ccl.ErrMismatch naming it.
	EnvStripes = "CHORUS_HIER_STRIPES"
	// EnvStripeMin overrides StripeMin (bytes; every process alike, as
	// EnvStripes).
	EnvStripeMin = "CHORUS_HIER_STRIPE_MIN"
	// MaxStripes bounds the stripes (and a hello's stripe count).
	MaxStripes = 16
	// DefaultStripes: the leader path's stripes unless EnvStripes says
	// otherwise. A constant, not the host's core count: hosts may differ,
	// and every rank must stripe alike.
	DefaultStripes = 4
)

// StripeMin: leader-ring allreduces from this many bytes up are striped
// (when the communicator has more than one stripe); smaller ones run one
// ring (or RHD). 256 KiB: there TLS cost the most against plaintext
// links on the 16-core host (one worker per host, 2x1: 431 us against
// 259 us; gloo 381 us), while up to 64 KiB chorus was already faster than
// gloo. A
// communicator keeps the value it was joined with; every rank must have
// the same (checked in every agreement round).
var StripeMin = envInt(EnvStripeMin, 256<<10)

// chooseStripes decides, at Join, after choosePath, the leader ring's
// stripes: EnvStripes, else DefaultStripes on the leader path and 1 on
// the multi-ring path (or one host).
func (c *Comm) chooseStripes() error {
	c.stripes, c.stripeMin = 1, StripeMin
	v := os.Getenv(EnvStripes)
	if testStripesEnv != nil {
		v = testStripesEnv(c.rank)
	}
	if v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 1 || s > MaxStripes {
			return fmt.Errorf("%w: ccl/hier: %s=%q: want 1 to %d (unset: %d on the leader path)", ccl.ErrBadArgs, EnvStripes, v, MaxStripes, DefaultStripes)
		}
		c.stripes = s
	} else if c.path == pathLeader && c.k > 1 {
		c.stripes = DefaultStripes
	}
	if c.k > 1 && c.stripes > 1 {
		c.pathWhy += fmt.Sprintf("; leader ring in %d stripes from %s", c.stripes, byteSize(c.stripeMin))
	}
	return nil
}

// testStripesEnv, when set (tests only), stands in for EnvStripes by
// rank: ranks of one test process that differ as processes could.
var testStripesEnv func(rank int) string

// byteSize writes n bytes as Path does: "1 MiB", "64 KiB", else bytes.
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// striped reports whether a leader ring over bytes bytes runs in stripes.
func (c *Comm) striped(bytes int) bool {
	return c.stripes > 1 && bytes >= c.stripeMin
}

// linkStripes is the number of links this rank keeps to rank r: the
// communicator's stripes between leaders of neighbouring hosts in the
// leader ring (the only ranks that run it), else 1. Both ends compute
// the same from the id (and their stripes, which the dialer's hello
// tells the acceptor).
func (c *Comm) linkStripes(r int) int {
	if c.stripes <= 1 || c.lrank != 0 || r != c.hostLo[c.hostOf[r]] {
		return 1
	}
	if h := c.hostOf[r]; h == (c.me+1)%c.k || h == (c.me+c.k-1)%c.k {
		return c.stripes
	}
	return 1
}

// link is stripe s's link to rank r (nil where there is none).
func (c *Comm) link(s, r int) *peer {
	if s == 0 {
		return c.peers[r]
	}
	if s-1 >= len(c.extra) {
		return nil
	}
	return c.extra[s-1][r]
}

// eachLink calls fn on every link: every stripe's.
func (c *Comm) eachLink(fn func(p *peer)) {
	for _, p := range c.peers {
		if p != nil {
			fn(p)
		}
	}
	for _, ps := range c.extra {
		for _, p := range ps {
			if p != nil {
				fn(p)
			}
		}
	}
}

// linkTo makes this rank's links to rank r of another host: stripe 0
// and, between neighbouring leaders, stripes 1 to linkStripes(r)-1. The
// higher rank dials every stripe, its hello naming the stripe and its
// count; the lower rank claims stripe 0, learns the dialer's count from
// it, claims the dialer's other stripes and keeps those below its own
// count (closing the rest). Ranks whose stripes differ then hold
// different numbers of links; the agreement round fails every collective
// of such a communicator with ccl.ErrMismatch before any link is used.
func (c *Comm) linkTo(ctx context.Context, key [32]byte, addr string, r int) error {
	want := c.linkStripes(r)
	keep := func(s int, conn net.Conn) error {
		p, err := newPeer(r, conn, ep.plain)
		if err != nil {
			conn.Close()
			return err
		}
		p.stripe = s
		if s == 0 {
			c.peers[r] = p
		} else {
			c.extra[s-1][r] = p
		}
		return nil
	}
	if r < c.rank {
		errs := make([]error, want)
		var wg sync.WaitGroup
		for s := range want {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := dialPeer(ctx, ep.cfg, addr, connKey{key, uint32(c.rank), uint32(r), uint16(s)}, want, ep.plain)
				if err == nil {
					err = keep(s, conn)
				}
				if err != nil && s > 0 {
					err = fmt.Errorf("stripe %d: %w", s, err)
				}
				errs[s] = err
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	conn, theirs, err := ep.claim(ctx, connKey{key, uint32(r), uint32(c.rank), 0})
	if err != nil {
		return err
	}
	if err := keep(0, conn); err != nil {
		return err
	}
	for s := 1; s < theirs; s++ {
		conn, n, err := ep.claim(ctx, connKey{key, uint32(r), uint32(c.rank), uint16(s)})
		if err != nil {
			return fmt.Errorf("stripe %d: %w", s, err)
		}
		if n != theirs {
			conn.Close()
			return fmt.Errorf("%w: ccl/hier: rank %d: stripe %d's hello says %d stripes, stripe 0's %d", ccl.ErrFailed, c.rank, s, n, theirs)
		}
		if s >= want {
			closeLink(conn) // this rank stripes less: the agreement round says so
			continue
		}
		if err := keep(s, conn); err != nil {
			return fmt.Errorf("stripe %d: %w", s, err)
		}
	}
	return nil
}

// stripedRing is the leader ring over c.stripes stripes: stripe s
// (cpu.Part of the message, the same split on every leader) runs its own
// pipelined ring on the stripe-s links to the next and previous leader,
// all at once. Every element belongs to one stripe and is reduced along
// that stripe's ring in one order, so every rank gets the same bits
// (striped and unstriped rings cut the message into segments
// differently: float results may differ between stripe counts in the
// last bits). A failure on any stripe fails the communicator (c.fail:
// every link closed), so every stripe of every rank ends promptly; the
// first cause is returned.
func (c *Comm) stripedRing(dst, src []byte, dt tensor.DType, op reduce.Op) error {
	k, es, S := c.k, dt.Size(), c.stripes
	nextR, prevR := c.hostLo[(c.me+1)%k]+c.lrank, c.hostLo[(c.me+k-1)%k]+c.lrank
	errs := make([]error, S)
	for len(c.tmps) < S-1 {
		c.tmps = append(c.tmps, nil) // before the stripes start: each then touches its own
	}
	var wg sync.WaitGroup
	for s := S - 1; s >= 0; s-- {
		lo, hi := cpu.Part(len(dst), es, S, s)
		if lo == hi {
			continue // empty on every leader alike
		}
		next, prev := c.link(s, nextR), c.link(s, prevR)
		if next == nil || prev == nil {
			errs[s] = fmt.Errorf("%w: ccl/hier: rank %d: no stripe-%d link to rank %d or %d", ccl.ErrFailed, c.rank, s, nextR, prevR)
			c.fail(errs[s])
			continue
		}
		run := func() { errs[s] = c.ringOn(s, next, prev, dst[lo:hi], src[lo:hi], dt, op) }
		if s == 0 {
			run() // on this goroutine, after starting the others
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
	return c.firstErr(errs)
}

// firstErr picks, of several goroutines' errors after a failure, the one
// that failed the communicator first (the others follow from it), else
// the first non-nil one.
func (c *Comm) firstErr(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		if p := c.failErr.Load(); p != nil && errors.Is(err, *p) {
			return err
		}
	}
	return first
}

// scratchOf is stripe s's scratch (s = 0: c.scratch, shared with RHD;
// stripedRing makes c.tmps long enough before its stripes start, so
// that each stripe's goroutine writes only its own element).
func (c *Comm) scratchOf(s, n int) []byte {
	if s == 0 {
		return c.scratch(n)
	}
	if cap(c.tmps[s-1]) < n {
		c.tmps[s-1] = make([]byte, max(n, 64))
	}
	return c.tmps[s-1][:n]
}
