package cpu

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
)

// When every rank of a communicator lives in this process (a threaded
// session, or goroutine ranks), large allreduces skip the staging copies:
// ranks publish their buffers and read each other's memory directly.

// localWorld tracks the ranks of one communicator that joined in this
// process.
type localWorld struct {
	ranks []*Comm
	count int
	// hb orders direct reads in Go's memory model (and for the race
	// detector): each rank adds before it arrives at a barrier and loads
	// after the barrier. The barrier's own atomics live in the shared
	// mapping, outside what Go's memory model speaks about.
	hb atomic.Int64
}

var (
	localMu     sync.Mutex
	localWorlds = map[string]*localWorld{}
)

// buffers is what a rank publishes for a direct collective.
type buffers struct{ send, recv []byte }

// joinLocal registers c and, after a barrier that every rank passes,
// reports whether all ranks are in this process (all ranks reach the same
// answer: registration happens before the barrier).
func (c *Comm) joinLocal(ctx context.Context, key string) error {
	localMu.Lock()
	lw := localWorlds[key]
	if lw == nil {
		lw = &localWorld{ranks: make([]*Comm, c.n)}
		localWorlds[key] = lw
	}
	lw.ranks[c.rank] = c
	lw.count++
	localMu.Unlock()
	c.localKey = key
	if err := c.barrier(ctx, ccl.KindBarrier); err != nil {
		c.leaveLocal()
		return err
	}
	localMu.Lock()
	if lw.count == c.n {
		c.peers = lw.ranks
		c.hb = &lw.hb
	}
	localMu.Unlock()
	// A second barrier: nobody may leave (Close) while others still look.
	return c.barrier(ctx, ccl.KindBarrier)
}

func (c *Comm) leaveLocal() {
	localMu.Lock()
	defer localMu.Unlock()
	if lw := localWorlds[c.localKey]; lw != nil {
		lw.count--
		if lw.count == 0 {
			delete(localWorlds, c.localKey)
		}
	}
}

// directAllReduce: publish, barrier (in begin), reduce this rank's part of
// every rank's input into its output and push it into every peer's output
// (push.go), barrier (after which every output is complete and no rank
// touches another's buffers). With sp (AllReduceSplit, AllReducePiped)
// mid runs on this rank's reduced part of each group before its push.
func (c *Comm) directAllReduce(ctx context.Context, a ccl.Args, local error, op reduce.Op, sp *split) error {
	publish := func([]byte) {
		c.pub.Store(&buffers{send: a.Send, recv: a.Recv})
		c.hb.Add(1)
	}
	if _, err := c.begin(ctx, a.Desc, local, publish); err != nil {
		return err
	}
	c.hb.Load()
	sends, outs := c.peerSends[:c.n], c.peerRecvs[:c.n]
	for r := range c.n {
		b := c.peers[r].pub.Load()
		sends[r], outs[r] = b.send, b.recv
	}
	es := max(1, a.DType.Size())
	size := len(a.Send)
	reduceGroup := func(g int) (int, int, error) {
		gl, gh := sp.bounds(g, size)
		parts := partitionInto(c.parts, gh-gl, c.n, es)
		pl, ph := gl+parts[c.rank], gl+parts[c.rank+1]
		// Each rank's share of the host's cores works on its part (threads).
		err := parallel(c.threads(ph-pl), ph-pl, es, func(_, lo, hi int) error {
			return reducePush(op, a.DType, outs, c.rank, a.Recv, pl+lo, pl+hi, pushChunkFor(es), sp == nil,
				func(r, off, end int) ([]byte, error) { return sends[r][off:end], nil })
		})
		return pl, ph, err
	}
	var err error
	if sp == nil {
		_, _, err = reduceGroup(0)
	} else {
		err = c.pipeline(sp.groups(size), a.Recv, reduceGroup, sp.mid, func(lo, hi int) {
			pushPart(c.threads(hi-lo), outs, c.rank, a.Recv, lo, hi, es)
		})
	}
	clear(sends)
	clear(outs)
	if err != nil {
		return err
	}
	return c.directBarrier(ctx)
}

func (c *Comm) directBarrier(ctx context.Context) error {
	c.hb.Add(1)
	err := c.barrier(ctx, ccl.KindAllReduce)
	c.hb.Load()
	return err
}
