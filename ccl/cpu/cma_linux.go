package cpu

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/internal/sys/shmem"
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
		verdict, why = 2, "disabled (Options.NoCMA)"
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
	ok, why, err := c.agree(ctx, ctlCMA, verdict, why, "could not read its peers")
	runtime.KeepAlive(pw)
	if err != nil {
		return err
	}
	c.cma = ok
	if !ok {
		c.cmaWhy = why
	}
	return nil
}

// agree publishes this rank's verdict (1: yes) in its control word at off,
// waits for every rank, and reports whether all said yes; if not, why is
// this rank's own reason, or else the first rank that said no, with
// failed ("could not read its peers"). Every rank gets the same answer.
func (c *Comm) agree(ctx context.Context, off int, verdict uint32, why, failed string) (bool, string, error) {
	atomic.StoreUint32(c.seg.u32(c.seg.ctrl(c.rank)+off), verdict)
	if err := c.barrier(ctx, ccl.KindBarrier); err != nil {
		return false, why, err
	}
	for r := range c.n {
		if atomic.LoadUint32(c.seg.u32(c.seg.ctrl(r)+off)) != 1 {
			if why == "" {
				why = fmt.Sprintf("rank %d %s", r, failed)
			}
			return false, why, nil
		}
	}
	return true, "", nil
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

func (c *Comm) cmaFailed(peer int, err error) error {
	return fmt.Errorf("%w: rank %d: allreduce #%d: reading rank %d's buffer: %w", ccl.ErrFailed, c.rank, c.seq, peer, err)
}
