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
// every rank's input into its output, barrier, copy the other parts from
// their owners' outputs, barrier (so no rank reuses its buffers while
// others read them). About 3 bytes of memory traffic per byte instead of 5.
// mid (if set) runs on this rank's reduced part before the barrier
// (AllReduceSplit).
func (c *Comm) directAllReduce(ctx context.Context, a ccl.Args, local error, op reduce.Op, mid func([]byte) error) error {
	publish := func([]byte) {
		c.pub.Store(&buffers{send: a.Send, recv: a.Recv})
		c.hb.Add(1)
	}
	if _, err := c.begin(ctx, a.Desc, local, publish); err != nil {
		return err
	}
	c.hb.Load()
	es := max(1, a.DType.Size())
	parts := partitionInto(c.parts, len(a.Send), c.n, es)
	pl, ph := parts[c.rank], parts[c.rank+1]
	// Each rank's share of the host's cores works on its part (threads).
	err := parallel(c.threads(ph-pl), ph-pl, es, func(_, lo, hi int) error {
		ins := make([][]byte, c.n)
		for r := range c.n {
			ins[r] = c.peers[r].pub.Load().send[pl+lo : pl+hi]
		}
		// In place (send == recv) only this rank touches its own part.
		return reduceInto(op, a.DType, a.Recv[pl+lo:pl+hi], ins, c.n)
	})
	if err == nil && mid != nil {
		err = c.runMid(mid, a.Recv[pl:ph])
	}
	if err != nil {
		return err
	}
	if err := c.directBarrier(ctx); err != nil {
		return err
	}
	total := len(a.Send) - (ph - pl)
	_ = parallel(c.threads(total), total, es, func(_, lo, hi int) error {
		pos := 0 // [lo, hi) counts bytes of the other parts laid end to end
		for r := range c.n {
			if r == c.rank {
				continue
			}
			ql, qh := parts[r], parts[r+1]
			if s, e := max(lo, pos), min(hi, pos+qh-ql); s < e {
				off := ql + s - pos
				copy(a.Recv[off:off+e-s], c.peers[r].pub.Load().recv[off:off+e-s])
			}
			pos += qh - ql
		}
		return nil
	})
	return c.directBarrier(ctx)
}

func (c *Comm) directBarrier(ctx context.Context) error {
	c.hb.Add(1)
	err := c.barrier(ctx, ccl.KindAllReduce)
	c.hb.Load()
	return err
}
