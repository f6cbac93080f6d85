package cpu

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/sys/shmarena"
	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

// Ranks in different processes whose large tensors live in their
// process's shared tensor arena (internal/sys/shmarena, installed by worker
// processes) read (and, to push, write) each other's buffers through
// mappings of the peers' arenas: plain loads and stores, as ranks of one
// process do ("shm"). Buffers
// outside an arena are read with process_vm_readv ("cma"), peer by peer;
// without cma, an allreduce in which some rank's buffer is outside its
// arena is staged (every rank sees the same published offsets, so all
// decide alike).

// arenaFor is the arena rank's buffers come from: the process's (tests
// give goroutine ranks different ones).
var arenaFor = func(rank int) *shmarena.Arena { return shmarena.Process() }

// joinShm publishes this rank's arena, maps every peer's, and agrees with
// all ranks on whether every rank mapped every peer's. Every rank takes
// part (two barriers) whether it has an arena or not.
func (c *Comm) joinShm(ctx context.Context) error {
	me := c.seg.ctrl(c.rank)
	c.arena = arenaFor(c.rank)
	if c.arena != nil {
		id := c.arena.Identity()
		atomic.StoreUint64(c.seg.u64(me+ctlArenaFD), uint64(id.FD))
		atomic.StoreUint64(c.seg.u64(me+ctlArenaToken), id.Token)
		atomic.StoreUint64(c.seg.u64(me+ctlArenaSize), uint64(id.Size))
	}
	if err := c.barrier(ctx, ccl.KindBarrier); err != nil {
		return err
	}
	verdict, why := uint32(1), ""
	if c.arena == nil {
		verdict, why = 2, fmt.Sprintf("rank %d has no shared tensor arena", c.rank)
	} else {
		c.anyArena = true
	}
	c.shmPeers = make([]*shmarena.Peer, c.n)
	for r := range c.n {
		if r == c.rank {
			continue
		}
		ctl := c.seg.ctrl(r)
		size := int64(atomic.LoadUint64(c.seg.u64(ctl + ctlArenaSize)))
		if size == 0 {
			verdict, why = 2, fmt.Sprintf("rank %d has no shared tensor arena", r)
			continue
		}
		c.anyArena = true
		p, err := shmarena.MapPeer(shmarena.Identity{
			PID:   int(atomic.LoadUint64(c.seg.u64(ctl + ctlPid))),
			FD:    int(atomic.LoadUint64(c.seg.u64(ctl + ctlArenaFD))),
			Size:  size,
			Token: atomic.LoadUint64(c.seg.u64(ctl + ctlArenaToken)),
		})
		if err != nil {
			verdict, why = 2, fmt.Sprintf("rank %d cannot map rank %d's arena: %v", c.rank, r, err)
			continue
		}
		c.shmPeers[r] = p
	}
	ok, why, err := c.agree(ctx, ctlShm, verdict, why, "could not map every peer's arena")
	if err != nil {
		return err
	}
	c.shmAll = ok
	if !ok {
		c.shmWhy = why
	}
	return nil
}

func (c *Comm) closeShm() {
	for _, p := range c.shmPeers {
		if p != nil {
			p.Close()
		}
	}
	c.shmPeers = nil
}

// Path says how this communicator moves large allreduces: "direct" (all
// ranks in this process read each other's buffers), "shm" (ranks in other
// processes read each other's arena buffers through mappings), "cma"
// (single-copy reads across processes; with the reason shared tensors are
// not used when some rank has an arena), or "staged: " and the reason
// none applies.
func (c *Comm) Path() string {
	switch {
	case c.peers != nil:
		return "direct"
	case c.shmAll:
		return "shm"
	case c.cma && c.anyArena:
		return "cma (shared tensors: " + c.shmWhy + ")"
	case c.cma:
		return "cma"
	case c.opts.NoDirect && c.cmaWhy == "":
		return "staged: direct reads disabled"
	case c.anyArena:
		return "staged: " + c.cmaWhy + "; shared tensors: " + c.shmWhy
	}
	return "staged: " + c.cmaWhy
}

// PathFor says how a collective of kind over bytes bytes (of one rank's
// send buffer) moves: for allreduces above Options.OneShotMax, the path
// the last such allreduce took ("shm", "cma", "mixed: ..." when some
// peers' buffers were outside their arenas, "staged: ...") or, before
// the first, Path; "staged" for everything else.
func (c *Comm) PathFor(kind ccl.Kind, bytes int) string {
	if kind == ccl.KindAllReduce && bytes > c.opts.OneShotMax {
		if c.lastPath != "" {
			return c.lastPath
		}
		return c.Path()
	}
	return "staged"
}

// arenaOff is where b lies in this rank's arena, plus one (0: not there).
func (c *Comm) arenaOff(b []byte) uint64 {
	if c.arena == nil {
		return 0
	}
	if off, ok := c.arena.Locate(b); ok {
		return uint64(off) + 1
	}
	return 0
}

// peerBuf is rank r's published buffer (field ctlSendOff or ctlRecvOff)
// of n bytes through its arena's mapping, or nil.
func (c *Comm) peerBuf(r, field, n int) []byte {
	if c.shmPeers[r] == nil {
		return nil
	}
	off := atomic.LoadUint64(c.seg.u64(c.seg.ctrl(r) + field))
	if off == 0 {
		return nil
	}
	b, ok := c.shmPeers[r].Slice(int64(off-1), int64(n))
	if !ok {
		return nil
	}
	return b
}

// errStaged: the allreduce must be staged (some rank's buffer is outside
// its arena and process_vm_readv is not available).
var errStaged = fmt.Errorf("ccl/cpu: staged")

// singleCopyAllReduce: publish the buffers (addresses for cma, arena
// offsets for shm), barrier (in begin); each rank reduces its part of
// every rank's input into its output, reading each peer's piece through
// the peer's arena mapping or, for buffers outside it, with
// process_vm_readv chunk by chunk into scratch. When every rank's output
// is in its arena the rank then pushes its part into every peer's output
// through the mappings (push.go) and one barrier ends the call. Else:
// barrier; each rank copies the other parts from their owners' outputs
// into its own (mapping or cma); barrier (no rank reuses its buffers while
// others read them). It returns errStaged, having done nothing after the
// first barrier, when the allreduce must be staged.
//
// With sp (AllReduceSplit, AllReducePiped) mid runs on this rank's
// reduced part of each group before its push, or before the barrier
// between the halves.
func (c *Comm) singleCopyAllReduce(ctx context.Context, a ccl.Args, local error, op reduce.Op, sp *split) error {
	me := c.seg.ctrl(c.rank)
	publish := func([]byte) {
		atomic.StoreUint64(c.seg.u64(me+ctlSendAddr), uint64(uintptr(unsafe.Pointer(unsafe.SliceData(a.Send)))))
		atomic.StoreUint64(c.seg.u64(me+ctlRecvAddr), uint64(uintptr(unsafe.Pointer(unsafe.SliceData(a.Recv)))))
		atomic.StoreUint64(c.seg.u64(me+ctlSendOff), c.arenaOff(a.Send))
		atomic.StoreUint64(c.seg.u64(me+ctlRecvOff), c.arenaOff(a.Recv))
	}
	if _, err := c.begin(ctx, a.Desc, local, publish); err != nil {
		return err
	}
	defer runtime.KeepAlive(a.Send)
	defer runtime.KeepAlive(a.Recv)
	if !c.cma {
		// Only shm: every rank's buffers must be in its arena. All ranks
		// read the same words, so all decide alike.
		for r := range c.n {
			ctl := c.seg.ctrl(r)
			if atomic.LoadUint64(c.seg.u64(ctl+ctlSendOff)) == 0 || atomic.LoadUint64(c.seg.u64(ctl+ctlRecvOff)) == 0 {
				c.lastPath = fmt.Sprintf("staged: rank %d's buffers are not all in its arena", r)
				return errStaged
			}
		}
	}
	sends, recvs := c.peerSends[:c.n], c.peerRecvs[:c.n]
	viaCMA := 0
	for r := range c.n {
		sends[r], recvs[r] = nil, nil
		if r == c.rank {
			continue
		}
		sends[r] = c.peerBuf(r, ctlSendOff, len(a.Send))
		recvs[r] = c.peerBuf(r, ctlRecvOff, len(a.Recv))
		for _, b := range [][]byte{sends[r], recvs[r]} {
			if b == nil {
				viaCMA++
			}
		}
	}
	if viaCMA > 0 && !c.cma {
		err := fmt.Errorf("%w: rank %d: allreduce #%d: a peer's published arena offset lies outside its arena", ccl.ErrFailed, c.rank, c.seq)
		c.seg.failWith(c.rank, ccl.KindAllReduce, c.seq, causeCopy, nil)
		return err
	}
	switch {
	case viaCMA == 0:
		c.lastPath = "shm"
	case viaCMA == 2*(c.n-1):
		c.lastPath = "cma"
	default:
		c.lastPath = fmt.Sprintf("mixed: %d of %d peer buffers read with process_vm_readv", viaCMA, 2*(c.n-1))
	}
	sendAt := func(r int) uintptr { return uintptr(atomic.LoadUint64(c.seg.u64(c.seg.ctrl(r) + ctlSendAddr))) }
	recvAt := func(r int) uintptr { return uintptr(atomic.LoadUint64(c.seg.u64(c.seg.ctrl(r) + ctlRecvAddr))) }
	es := max(1, a.DType.Size())
	size := len(a.Send)
	sendCMA := false
	for r := range c.n {
		sendCMA = sendCMA || (r != c.rank && sends[r] == nil)
	}
	// Push (push.go) when every rank's output is in its arena: every
	// rank reads the same published offsets, so all decide alike. A
	// peer's output that does not map then is an error, not a pull.
	push := c.shmAll
	for r := range c.n {
		push = push && atomic.LoadUint64(c.seg.u64(c.seg.ctrl(r)+ctlRecvOff)) != 0
	}
	if push {
		recvs[c.rank] = a.Recv
		defer func() { recvs[c.rank] = nil }()
		for r := range c.n {
			if recvs[r] == nil {
				c.seg.failWith(c.rank, ccl.KindAllReduce, c.seq, causeCopy, nil)
				return fmt.Errorf("%w: rank %d: allreduce #%d: rank %d's published output lies outside its arena", ccl.ErrFailed, c.rank, c.seq, r)
			}
		}
	}
	// Pieces read with cma go through scratch that stays in L2.
	chunk := pushChunkFor(es)
	if sendCMA {
		chunk = c.cmaChunk(es)
		// The chunk depends on the element size: an earlier scratch may
		// be a few bytes short.
		for i := range c.threads(size) {
			if i == len(c.scratch) {
				c.scratch = append(c.scratch, nil)
			}
			if len(c.scratch[i]) < c.n*chunk {
				c.scratch[i] = make([]byte, c.n*chunk)
			}
		}
	}
	reduceGroup := func(g int) (int, int, error) {
		gl, gh := sp.bounds(g, size)
		parts := partitionInto(c.parts, gh-gl, c.n, es)
		pl, ph := gl+parts[c.rank], gl+parts[c.rank+1]
		err := parallel(c.threads(ph-pl), ph-pl, es, func(i, lo, hi int) error {
			return reducePush(op, a.DType, recvs, c.rank, a.Recv, pl+lo, pl+hi, chunk, push && sp == nil,
				func(r, off, end int) ([]byte, error) {
					switch {
					case r == c.rank:
						return a.Send[off:end], nil
					case sends[r] != nil:
						return sends[r][off:end], nil
					}
					b := c.scratch[i][r*chunk : r*chunk+end-off]
					if err := shmem.ReadProcess(c.pids[r], b, sendAt(r)+uintptr(off)); err != nil {
						return nil, c.cmaFailed(r, err)
					}
					return b, nil
				})
		})
		if err != nil {
			c.seg.failWith(c.rank, ccl.KindAllReduce, c.seq, causeCopy, nil)
		}
		return pl, ph, err
	}
	var err error
	switch {
	case sp == nil:
		_, _, err = reduceGroup(0)
	case push:
		err = c.pipeline(sp.groups(size), a.Recv, reduceGroup, sp.mid, func(lo, hi int) {
			pushPart(c.threads(hi-lo), recvs, c.rank, a.Recv, lo, hi, es)
		})
	default:
		err = c.pipeline(sp.groups(size), a.Recv, reduceGroup, sp.mid, nil)
	}
	if err != nil {
		return err
	}
	if err := c.barrier(ctx, ccl.KindAllReduce); err != nil || push {
		return err
	}
	// The other ranks' parts of every group, each group's split over the
	// threads.
	for g := range sp.groups(size) {
		gl, gh := sp.bounds(g, size)
		parts := partitionInto(c.parts, gh-gl, c.n, es)
		total := gh - gl - (parts[c.rank+1] - parts[c.rank])
		err = parallel(c.threads(total), total, es, func(_, lo, hi int) error {
			// [lo, hi) counts bytes of the other parts laid end to end.
			pos := 0
			for r := range c.n {
				if r == c.rank {
					continue
				}
				ql, qh := gl+parts[r], gl+parts[r+1]
				s, e := max(lo, pos), min(hi, pos+qh-ql)
				if s < e {
					off := ql + s - pos
					if recvs[r] != nil {
						copy(a.Recv[off:off+e-s], recvs[r][off:off+e-s])
					} else if err := shmem.ReadProcess(c.pids[r], a.Recv[off:off+e-s], recvAt(r)+uintptr(off)); err != nil {
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
	}
	return c.barrier(ctx, ccl.KindAllReduce)
}
