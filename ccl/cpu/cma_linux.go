package cpu

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/shmem"
)

// Ranks in different processes read each other's buffers for large
// allreduces with process_vm_readv (cross-memory attach): one kernel copy
// from the peer's memory, where staging needs a copy into the shared
// segment and a read out of it. Whether it works (same user, Yama's
// ptrace_scope, seccomp) is probed once at Join; all ranks use it or none
// does, and Comm.Path says which, and why not.

// cmaProbeMagic is what a rank's probe word holds, xor its rank.
const cmaProbeMagic = 0x43484f5255534d41 // "CHORUSMA"

// probe words are heap objects that never move; one per communicator rank.
type probeWord struct{ v uint64 }

// joinCMA publishes this rank's pid and probe word, reads every peer's,
// and agrees with all ranks on whether single-copy reads work. Every rank
// takes part (two barriers) whatever its options, so that ranks whose
// options differ still pass the same barriers; NoCMA only votes no.
func (c *Comm) joinCMA(ctx context.Context) error {
	pw := &probeWord{v: cmaProbeMagic ^ uint64(c.rank)}
	me := c.seg.ctrl(c.rank)
	atomic.StoreUint64(c.seg.u64(me+ctlPid), uint64(os.Getpid()))
	atomic.StoreUint64(c.seg.u64(me+ctlProbe), uint64(uintptr(unsafe.Pointer(pw))))
	if err := c.barrier(ctx, ccl.KindBarrier); err != nil {
		return err
	}
	c.pids = make([]int, c.n)
	verdict, why := uint32(1), ""
	if c.opts.NoCMA {
		verdict, why = 2, "disabled (Options.NoCMA or CHORUS_CCL_CMA=0)"
	}
	for r := range c.n {
		ctl := c.seg.ctrl(r)
		c.pids[r] = int(atomic.LoadUint64(c.seg.u64(ctl + ctlPid)))
		if verdict != 1 {
			continue
		}
		var got [8]byte
		addr := uintptr(atomic.LoadUint64(c.seg.u64(ctl + ctlProbe)))
		if err := shmem.ReadProcess(c.pids[r], got[:], addr); err != nil {
			verdict, why = 2, fmt.Sprintf("rank %d cannot read rank %d (pid %d): %v", c.rank, r, c.pids[r], err)
		} else if v := *(*uint64)(unsafe.Pointer(&got[0])); v != cmaProbeMagic^uint64(r) {
			verdict, why = 2, fmt.Sprintf("rank %d read %#x from rank %d's probe, not its magic", c.rank, v, r)
		}
	}
	atomic.StoreUint32(c.seg.u32(me+ctlCMA), verdict)
	if err := c.barrier(ctx, ccl.KindBarrier); err != nil {
		return err
	}
	runtime.KeepAlive(pw)
	c.cma = true
	for r := range c.n {
		if atomic.LoadUint32(c.seg.u32(c.seg.ctrl(r)+ctlCMA)) != 1 {
			c.cma = false
			if why == "" {
				why = fmt.Sprintf("rank %d could not read its peers", r)
			}
		}
	}
	if !c.cma {
		c.cmaWhy = why
	}
	return nil
}

// Path says how this communicator moves large allreduces: "direct" (all
// ranks in this process read each other's buffers), "cma" (single-copy
// reads across processes), or "staged: " and the reason neither applies.
func (c *Comm) Path() string {
	switch {
	case c.peers != nil:
		return "direct"
	case c.cma:
		return "cma"
	case c.opts.NoDirect && c.cmaWhy == "":
		return "staged: direct reads disabled"
	}
	return "staged: " + c.cmaWhy
}

// PathFor says how a collective of kind over bytes bytes (of one rank's
// send buffer) moves: Path for allreduces above Options.OneShotMax,
// "staged" for everything else.
func (c *Comm) PathFor(kind ccl.Kind, bytes int) string {
	if kind == ccl.KindAllReduce && bytes > c.opts.OneShotMax {
		return c.Path()
	}
	return "staged"
}

// threads is threadsFor for this rank and bytes of work.
func (c *Comm) threads(bytes int) int {
	here := 1
	if c.peers != nil {
		here = c.n
	}
	return threadsFor(bytes, c.opts.ThreadMinBytes, c.n, here, runtime.NumCPU(), runtime.GOMAXPROCS(0), c.opts.Threads)
}

// cmaChunk is the piece of a peer's part read into scratch before it is
// reduced: small enough that the n-1 pieces of a thread stay in its L2.
func (c *Comm) cmaChunk(es int) int {
	if c.opts.CMAChunk > 0 {
		return chunkSize(max(es, c.opts.CMAChunk), es)
	}
	return chunkSize(max(es, min(c.opts.SlotBytes/4, (256<<10)/max(1, c.n-1))), es)
}

// cmaAllReduce: publish the buffers' addresses, barrier (in begin); each
// rank reduces its part of every rank's input, reading the peers' pieces
// chunk by chunk into scratch, into its output; barrier; each rank reads
// the other parts straight from their owners' outputs into its own;
// barrier (no rank reuses its buffers while others read them). Per byte
// reduced that is about 2.5 bytes of memory traffic per rank with two
// ranks, where staging moves 5.
//
// mid (if set) runs on this rank's reduced part before the barrier
// (AllReduceSplit).
func (c *Comm) cmaAllReduce(ctx context.Context, a ccl.Args, local error, op reduce.Op, mid func([]byte) error) error {
	me := c.seg.ctrl(c.rank)
	publish := func([]byte) {
		atomic.StoreUint64(c.seg.u64(me+ctlSendAddr), uint64(uintptr(unsafe.Pointer(unsafe.SliceData(a.Send)))))
		atomic.StoreUint64(c.seg.u64(me+ctlRecvAddr), uint64(uintptr(unsafe.Pointer(unsafe.SliceData(a.Recv)))))
	}
	if _, err := c.begin(ctx, a.Desc, local, publish); err != nil {
		return err
	}
	defer runtime.KeepAlive(a.Send)
	defer runtime.KeepAlive(a.Recv)
	sendAt := func(r int) uintptr { return uintptr(atomic.LoadUint64(c.seg.u64(c.seg.ctrl(r) + ctlSendAddr))) }
	recvAt := func(r int) uintptr { return uintptr(atomic.LoadUint64(c.seg.u64(c.seg.ctrl(r) + ctlRecvAddr))) }
	es := max(1, a.DType.Size())
	parts := partitionInto(c.parts, len(a.Send), c.n, es)
	pl, ph := parts[c.rank], parts[c.rank+1]
	chunk := c.cmaChunk(es)
	t := c.threads(ph - pl)
	for len(c.scratch) < t {
		c.scratch = append(c.scratch, make([]byte, c.n*chunk))
	}
	err := parallel(t, ph-pl, es, func(i, lo, hi int) error {
		scratch := c.scratch[i]
		ins := make([][]byte, c.n)
		for off := pl + lo; off < pl+hi; off += chunk {
			end := min(pl+hi, off+chunk)
			for r := range c.n {
				if r == c.rank {
					ins[r] = a.Send[off:end]
					continue
				}
				ins[r] = scratch[r*chunk : r*chunk+end-off]
				if err := shmem.ReadProcess(c.pids[r], ins[r], sendAt(r)+uintptr(off)); err != nil {
					return c.cmaFailed(r, err)
				}
			}
			if err := reduceInto(op, a.DType, a.Recv[off:end], ins, c.n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.seg.failWith(c.rank, ccl.KindAllReduce, c.seq, causeCopy, nil)
		return err
	}
	if mid != nil {
		if err := c.runMid(mid, a.Recv[pl:ph]); err != nil {
			return err
		}
	}
	if err := c.barrier(ctx, ccl.KindAllReduce); err != nil {
		return err
	}
	// The other ranks' parts, each split over the threads.
	total := len(a.Send) - (ph - pl)
	err = parallel(c.threads(total), total, es, func(_, lo, hi int) error {
		// [lo, hi) counts bytes of the other parts laid end to end.
		pos := 0
		for r := range c.n {
			if r == c.rank {
				continue
			}
			ql, qh := parts[r], parts[r+1]
			s, e := max(lo, pos), min(hi, pos+qh-ql)
			if s < e {
				off := ql + s - pos
				if err := shmem.ReadProcess(c.pids[r], a.Recv[off:off+e-s], recvAt(r)+uintptr(off)); err != nil {
					return c.cmaFailed(r, err)
				}
			}
			pos += qh - ql
		}
		return nil
	})
	if err != nil {
		c.seg.failWith(c.rank, ccl.KindAllReduce, c.seq, causeCopy, nil)
		return err
	}
	return c.barrier(ctx, ccl.KindAllReduce)
}

func (c *Comm) cmaFailed(peer int, err error) error {
	return fmt.Errorf("%w: rank %d: allreduce #%d: reading rank %d's buffer: %w", ccl.ErrFailed, c.rank, c.seq, peer, err)
}
