package hier

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/tensor"
)

// Striped leader rings (as NCCL's several sockets and threads per
// connection): one TLS connection per direction is one core encrypting
// and one decrypting, so a single leader ring is bound by two cores'
// AES-GCM however many the host has. From stripeMinBytes bytes up, the leader
// ring splits the message into S stripes (cpu.Part: ceil(count/S)
// elements each, the same split on every rank) and runs S rings at once,
// each on its own connection to the next and the previous leader, with
// its own sender and receiver goroutines and scratch.
const (
	// MaxStripes bounds the stripes (and a hello's stripe count).
	MaxStripes = 16
	// DefaultStripes: the leader path's stripes (links to each
	// neighbouring leader). A constant,
	// not the host's core count: hosts may differ, and every rank must
	// stripe alike. Messages below wideMin use at most narrowStripes.
	DefaultStripes = 8
	// narrowStripes: a leader ring below wideMin bytes runs on at most
	// this many of the links. Eight stripes made 256 KiB on 4x1 13%
	// slower than four (465 against 412 us) and tied with them at 1-4
	// MiB; from 16 MiB they were 1.00-1.05x faster (docs/multi-host.md,
	// "The link model").
	narrowStripes = 4
	// DefaultMultiStripes: the multi-ring path's stripes (links from each
	// local rank to its counterparts on the neighbouring hosts) unless
	// its rings run in them from
	// multiStripeMin. Two stripes made 2x2 at 64-256 MiB 1.2-3.4% faster
	// (1.006-1.015x the wire bound instead of 1.035-1.046x) and 4x2 0-2%;
	// below, they were 1-6% slower on 4x2 at 1 and 16 MiB and mixed on
	// 2x2 at 16 MiB (two calls, docs/multi-host.md).
	DefaultMultiStripes = 2
	// multiFactor: on the multi-ring path rings are striped only for
	// messages from multiFactor x stripeMinBytes bytes (64 MiB by default).
	multiFactor = 256
	// wideFactor: wideMin is wideFactor x the communicator's stripeMinBytes
	// (8 MiB by default), so it needs no variable of its own: stripeMinBytes
	// is checked in every agreement round, so every rank agrees on it.
	wideFactor = 32
)

// stripeMinBytes: leader-ring allreduces from this many bytes up are striped
// (when the communicator has more than one stripe); smaller ones run one
// ring (or RHD). 256 KiB: there TLS cost the most against plaintext
// links on the 16-core host (one worker per host, 2x1: 431 us against
// 259 us; gloo 381 us), while up to 64 KiB chorus was already faster than
// gloo. A
// communicator keeps the value it was joined with; every rank must have
// the same (checked in every agreement round).
var stripeMinBytes = 256 << 10

// chooseStripes decides, at Join, after choosePath, the leader ring's
// stripes: DefaultStripes on the leader path and DefaultMultiStripes on
// the multi-ring path (1 on one host), or the tests' testStripes.
func (c *Comm) chooseStripes() error {
	c.stripes, c.stripeMin = 1, stripeMinBytes
	v := ""
	if testStripes != nil {
		v = testStripes(c.rank)
	}
	if v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 1 || s > MaxStripes {
			return fmt.Errorf("%w: ccl/hier: stripes %q: want 1 to %d (unset: %d on the leader path)", ccl.ErrBadArgs, v, MaxStripes, DefaultStripes)
		}
		c.stripes = s
	} else if c.k > 1 {
		c.stripes = DefaultStripes
		if c.path == pathMulti {
			c.stripes = DefaultMultiStripes
		}
	}
	if c.k > 1 && c.stripes > 1 {
		if c.path == pathMulti {
			c.pathWhy += fmt.Sprintf("; rings in %d stripes from %s", c.stripes, byteSize(c.multiStripeMin()))
			return nil
		}
		c.pathWhy += fmt.Sprintf("; leader ring in %d stripes from %s", min(c.stripes, narrowStripes), byteSize(c.stripeMin))
		if c.stripes > narrowStripes {
			c.pathWhy += fmt.Sprintf(", %d from %s", c.stripes, byteSize(c.wideMin()))
		}
	}
	return nil
}

// testStripes, when set (tests only), gives rank's stripes ("": the
// default): ranks of one test process that differ as processes could.
var testStripes func(rank int) string

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

// stripeMinHosts: stripeMinBytes was measured on 2 and 4 hosts. With more,
// a message of stripeMinBytes bytes makes segments too small for stripes, so
// a ring is striped only where its segment (bytes/k) is at least
// stripeMinBytes/stripeMinHosts too: on 8 hosts from 512 KiB. There a 256
// KiB ring took 735-770 us in one stripe and 1171-1190 us in 4 over
// TLS, 384 and 852 us over plaintext links
// (docs/multi-host.md).
const stripeMinHosts = 4

// striped reports whether a ring over bytes bytes of a message of total
// bytes runs in stripes. On the multi-ring path (its rings, and the
// leader ring below multiRingMin) only for messages from multiStripeMin:
// what decides there is the message (how many groups it pipelines), not
// the ring's part, which is at most pipeBytes / L.
func (c *Comm) striped(bytes, total int) bool {
	if c.path == pathMulti && total < c.multiStripeMin() {
		return false
	}
	return c.stripes > 1 && bytes >= c.stripeMin && bytes/c.k >= c.stripeMin/stripeMinHosts
}

// multiStripeMin: on the multi-ring path rings of messages from this
// many bytes up run in stripes. Derived from stripeMinBytes, which every agreement round
// checks, so that every rank stripes alike.
func (c *Comm) multiStripeMin() int { return multiFactor * c.stripeMin }

// wideMin: leader rings from this many bytes up run on all c.stripes
// links, smaller striped ones on at most narrowStripes.
func (c *Comm) wideMin() int { return wideFactor * c.stripeMin }

// ringStripes is the number of links a striped leader ring over bytes
// bytes runs on. With bbr, four flows sharing a 10 Gbit/s uplink left
// it idle long enough to make a 16 MiB allreduce on 2 hosts 4-8% slower
// than gloo's one flow, eight 0-1%; below 16 MiB the extra flows cost
// more than they balance. A function of the message and of
// checked settings only, so every leader picks the same.
func (c *Comm) ringStripes(bytes int) int {
	if bytes >= c.wideMin() {
		return c.stripes
	}
	return min(c.stripes, narrowStripes)
}

// stripeLinks reports whether this rank keeps stripe links: leaders
// (they run the leader ring) and, on the multi-ring path, every rank
// (local rank j's ring runs between the hosts' ranks j).
func (c *Comm) stripeLinks() bool { return c.lrank == 0 || c.path == pathMulti }

// linkStripes is the number of links this rank keeps to rank r: the
// communicator's stripes to its counterpart (the same local rank) on a
// neighbouring host where stripeLinks, else 1. Both ends compute the
// same from the id (and their stripes, which the dialer's hello tells
// the acceptor).
func (c *Comm) linkStripes(r int) int {
	if c.stripes <= 1 || !c.stripeLinks() || r-c.hostLo[c.hostOf[r]] != c.lrank {
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
		p, err := newPeer(r, conn, ep.mode == modePlain)
		if err != nil {
			conn.Close()
			return err
		}
		p.stripe = s
		if want > 1 && notSentLowat > 0 {
			if err := link.SetNotSentLowat(p.c, notSentLowat); err != nil {
				p.c.Close()
				return err
			}
		}
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
				conn, err := dialPeer(ctx, ep.cfg, addr, connKey{key, uint32(c.rank), uint32(r), uint16(s)}, want, c.block-descBytes, ep.mode)
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
	conn, theirs, inline, err := ep.claim(ctx, connKey{key, uint32(r), uint32(c.rank), 0})
	if err != nil {
		return err
	}
	if my := c.block - descBytes; inline != my {
		// Every agreement message is sized by it: the first collective
		// would break the link protocol. The dialer learns it from the
		// closed link; the join fails here.
		conn.Close()
		return fmt.Errorf("%w: ccl/hier: rank %d: rank %d has an agreement inline maximum of %d bytes, rank %d of %d (it differs between their processes)", ccl.ErrMismatch, c.rank, r, inline, c.rank, my)
	}
	if err := keep(0, conn); err != nil {
		return err
	}
	for s := 1; s < theirs; s++ {
		conn, n, _, err := ep.claim(ctx, connKey{key, uint32(r), uint32(c.rank), uint16(s)})
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

// stripedRing is the leader ring over ringStripes links to each
// neighbour (the first ones). Where a stripe's segments would be at most ringInlineMax
// bytes, stripe s (cpu.Part of the message, the same split on every
// leader) runs its own ring on the stripe-s links, all at once. Where
// each link's share of a segment is at least ringMinChunks chunks of
// ringMinChunk (128 KiB: a 2 MiB message on 4 hosts, 1 MiB on 2), one
// balanced ring (balancedRing) runs over all the links instead: below,
// its chunks are small and its hand-offs between goroutines as costly
// as what balancing gains (4 hosts, 1 MiB: p50 0.5-1.3% slower than
// fixed stripes in two runs, means 4-8%; docs/multi-host.md). Every element is reduced along the ring in one order, so
// every rank gets the same bits (striped and unstriped rings cut the
// message into segments differently: float results may differ between
// stripe counts in the last bits). A failure on any link fails the
// communicator (c.fail: every link closed), so every goroutine of every
// rank ends promptly; the first cause is returned.
func (c *Comm) stripedRing(dst, src []byte, dt tensor.DType, op reduce.Op) error {
	k, es, S := c.k, dt.Size(), c.ringStripes(len(dst))
	nextR, prevR := c.hostLo[(c.me+1)%k]+c.lrank, c.hostLo[(c.me+k-1)%k]+c.lrank
	nexts, prevs := make([]*peer, S), make([]*peer, S)
	for s := range S {
		nexts[s], prevs[s] = c.link(s, nextR), c.link(s, prevR)
		if nexts[s] == nil || prevs[s] == nil {
			err := fmt.Errorf("%w: ccl/hier: rank %d: no stripe-%d link to rank %d or %d", ccl.ErrFailed, c.rank, s, nextR, prevR)
			c.fail(err)
			return err
		}
	}
	for len(c.tmps) < S-1 {
		c.tmps = append(c.tmps, nil) // before the goroutines start: each then touches its own
	}
	if share := (len(dst)/es + k - 1) / k * es / S; share > ringInlineMax && share >= ringMinChunks*ringMinChunk {
		return c.balancedRing(nexts, prevs, dst, src, dt, op)
	}
	errs := make([]error, S)
	eachStripe(S, func(s int) {
		if lo, hi := cpu.Part(len(dst), es, S, s); lo < hi { // else empty on every leader alike
			errs[s] = c.ringOn(s, nexts[s], prevs[s], dst[lo:hi], src[lo:hi], dt, op)
		}
	})
	return c.firstErr(errs)
}

// eachStripe runs fn(s) for every stripe s < S at once: stripe 0 on
// this goroutine after starting the others, and returns when all are
// done.
func eachStripe(S int, fn func(s int)) {
	var wg sync.WaitGroup
	for s := S - 1; s > 0; s-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(s)
		}()
	}
	fn(0)
	wg.Wait()
}

// Balanced rings. Stripes with a fixed share each leave a link idle
// when its flow is slower than the others (TCP flows sharing a link
// never get equal shares; one may stall for a loss or a congestion
// control's probe) and end the ring only when the slowest share is
// through. A balanced ring is one ring over the whole message whose
// chunks go out on whichever link to the next leader is free: S sender
// goroutines take the lowest-numbered chunk that is ready (chunk i of
// step t once chunk i of step t-1 is in) and write it, with its number,
// on their own link; S receiver goroutines read whatever their link
// from the previous leader brings and reduce or copy it in place. A
// link's socket holds at most notSentLowat bytes unsent
// (TCP_NOTSENT_LOWAT, set on every stripe link), so a sender whose flow
// is slow stays in its write and the chunks go to the others. Every
// sender ends with an end message; a receiver ends at its link's.
//
// Chunk messages: the link header (kind allreduce, status chunkMsg,
// 8+n bytes), the chunk's number (uint64: step*nch + chunk), its n
// bytes. The receiver checks the number (in range, not seen before) and
// n against its own plan before it reads a byte of the chunk.
const (
	chunkMsg = 'c'
	endMsg   = 'e'
)

// notSentLowat is TCP_NOTSENT_LOWAT on stripe links (bytes; 0: the
// kernel's default, unbounded): about
// a millisecond of a 10 Gbit/s link's share per stripe, enough that no
// flow runs dry while its sender takes the next chunk.
var notSentLowat = 256 << 10

// balancedChunk is a balanced ring's chunk (elements of es bytes) for
// segments of seg bytes over S links: ringMinChunks per link and step,
// between ringMinChunk and chunkBytes.
func balancedChunk(S int) func(seg, es int) int {
	return func(seg, es int) int {
		b := min(chunkBytes, max(seg/(ringMinChunks*S), ringMinChunk))
		return max(1, b/es)
	}
}

// chunkQueue hands a balanced ring's chunks to its senders: chunk n
// (step n/nch) is ready at step 0, else once chunk n-nch is received.
type chunkQueue struct {
	mu     sync.Mutex
	cond   sync.Cond
	nch    int
	ready  chunkHeap // ready chunks not yet taken
	state  []uint8   // per chunk: 0, claimed (being received), received
	taken  int       // chunks handed to senders
	got    int       // chunks received
	halted bool
}

const (
	chunkClaimed = 1
	chunkIn      = 2
)

func newChunkQueue(steps, nch int) *chunkQueue {
	q := &chunkQueue{nch: nch, state: make([]uint8, steps*nch)}
	q.cond.L = &q.mu
	for i := range nch {
		q.ready = append(q.ready, i) // ascending: a heap
	}
	return q
}

// take returns the lowest ready chunk, waiting for one; false when
// every chunk is taken or the queue is halted.
func (q *chunkQueue) take() (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !q.halted && q.taken < len(q.state) {
		q.cond.Wait()
	}
	if q.halted || len(q.ready) == 0 {
		return 0, false
	}
	q.taken++
	return heap.Pop(&q.ready).(int), true
}

// claim marks chunk n as being received; false if it is out of range or
// was received or claimed before (a peer that breaks the protocol).
func (q *chunkQueue) claim(n uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n >= uint64(len(q.state)) || q.state[n] != 0 {
		return false
	}
	q.state[n] = chunkClaimed
	return true
}

// done marks chunk n received: chunk n+nch (the next step's) is ready.
func (q *chunkQueue) done(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.state[n] = chunkIn
	q.got++
	if n+q.nch < len(q.state) {
		heap.Push(&q.ready, n+q.nch)
	}
	q.cond.Broadcast()
}

// complete reports whether every chunk was received.
func (q *chunkQueue) complete() (got, all int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.got, len(q.state)
}

// halt wakes every waiting sender for good (a failure).
func (q *chunkQueue) halt() {
	q.mu.Lock()
	q.halted = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// chunkHeap is a min-heap of chunk numbers (container/heap).
type chunkHeap []int

func (h chunkHeap) Len() int           { return len(h) }
func (h chunkHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h chunkHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *chunkHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *chunkHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// balancedRing is the leader ring over every link in nexts and prevs
// (one per stripe), its chunks balanced between them (see above).
func (c *Comm) balancedRing(nexts, prevs []*peer, dst, src []byte, dt tensor.DType, op reduce.Op) error {
	S := len(nexts)
	pl := newRingPlan(c.k, c.me, len(dst), dt.Size(), balancedChunk(S))
	q := newChunkQueue(pl.steps(), pl.nch)
	errs := make([]error, 2*S)
	var senders sync.WaitGroup
	for s := range S {
		senders.Add(1)
		go func() {
			defer senders.Done()
			if errs[S+s] = c.balancedSend(nexts[s], q, pl, dst, src); errs[S+s] != nil {
				c.fail(errs[S+s])
				q.halt()
			}
		}()
	}
	eachStripe(S, func(s int) {
		if errs[s] = c.balancedRecv(s, prevs[s], q, pl, dst, src, dt, op); errs[s] != nil {
			c.fail(errs[s])
			q.halt()
		}
	})
	if got, all := q.complete(); got != all && c.firstErr(errs[:S]) == nil {
		// Every link from the previous leader ended early: its senders
		// stopped (which fails it, and so its links) or it broke the
		// protocol. Nothing more will arrive; the senders must not wait.
		errs[0] = fmt.Errorf("%w: ccl/hier: rank %d: link protocol: the previous leader (rank %d) ended the ring after %d of %d chunks", ccl.ErrFailed, c.rank, prevs[0].rank, got, all)
		c.fail(errs[0])
		q.halt()
	}
	senders.Wait()
	return c.firstErr(errs)
}

// balancedSend writes the chunks q hands it on p, then the end message.
func (c *Comm) balancedSend(p *peer, q *chunkQueue, pl ringPlan, dst, src []byte) error {
	var head [hdrBytes + 8]byte
	for {
		n, ok := q.take()
		if !ok {
			break
		}
		t, i := n/pl.nch, n%pl.nch
		b := pl.chunk(pl.from(dst, src, t), pl.sendSeg(t), i)
		num := uint64(n)
		if testChunkNumber != nil {
			if num = testChunkNumber(c, num); num == dropChunk {
				continue
			}
		}
		copy(head[:], c.header(p, ccl.KindAllReduce, 0, chunkMsg, 8+len(b)))
		binary.LittleEndian.PutUint64(head[hdrBytes:], num)
		p.hold(head[:])
		if err := c.sendChunk(p, b); err != nil {
			return err
		}
	}
	q.mu.Lock()
	halted := q.halted
	q.mu.Unlock()
	if halted {
		return nil // a failure elsewhere: its error is the one returned
	}
	p.hold(c.header(p, ccl.KindAllReduce, 0, endMsg, 0))
	return c.flush(p)
}

// testChunkNumber, when set (tests only), rewrites the number of every
// chunk a balanced ring sends (a peer that breaks the protocol);
// dropChunk: the chunk is not sent.
var testChunkNumber func(c *Comm, n uint64) uint64

const dropChunk = ^uint64(0)

// balancedRecv receives chunks on p, stripe s's link from the previous
// leader, until its end message.
func (c *Comm) balancedRecv(s int, p *peer, q *chunkQueue, pl ringPlan, dst, src []byte, dt tensor.DType, op reduce.Op) error {
	tmp := c.scratchOf(s, min(pl.ce*pl.es, reducePiece(pl.es)))
	var num [8]byte
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ccl/hier: rank %d: link protocol: rank %d (stripe %d): %s", ccl.ErrFailed, c.rank, p.rank, s, fmt.Sprintf(format, args...))
	}
	for {
		_, status, size, err := c.recvHdr(p, ccl.KindAllReduce, -1)
		if err != nil {
			return err
		}
		switch {
		case status == endMsg && size == 0:
			return nil
		case status != chunkMsg:
			return bad("message status %q (%d bytes) in a balanced ring", status, size)
		case size < 8:
			return bad("a %d-byte chunk message", size)
		}
		if err := c.recvInto(p, num[:], nil); err != nil {
			return err
		}
		n := binary.LittleEndian.Uint64(num[:])
		if !q.claim(n) {
			return bad("chunk %d: out of range (%d chunks) or sent twice", n, len(q.state))
		}
		t, i := int(n)/pl.nch, int(n)%pl.nch
		if want := len(pl.chunk(dst, pl.recvSeg(t), i)); size-8 != want {
			return bad("chunk %d has %d bytes, this rank's plan %d", n, size-8, want)
		}
		if err := c.recvChunk(p, pl, t, i, dst, src, tmp, dt, op); err != nil {
			return err
		}
		if testRingHook != nil {
			testRingHook(c, s, t, i)
		}
		q.done(int(n))
	}
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
