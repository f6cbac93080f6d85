package cpuexec

import (
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/shmem"
)

// tbRun runs one thread block's ops; it keeps its scratch space across
// calls so that ops allocate nothing once sizes are steady.
type tbRun struct {
	x    *Executor
	tb   int
	c    *call
	tmp  [][]byte // unpacked packets, reduce results
	srcs [][]byte // reduce sources
}

func (t *tbRun) run(c *call) (err error) {
	t.c = c
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cpuexec: rank %d tb %d: panic: %v\n%s", t.x.rank, t.tb, p, debug.Stack())
		}
		if err != nil {
			c.abort.Store(true)
			atomic.AddUint32(t.x.seg.bell(t.x.rank), 1)
			shmem.FutexWake(t.x.seg.bell(t.x.rank))
		}
		t.c = nil
	}()
	for i := range t.x.pr.tbs[t.tb] {
		in := &t.x.pr.tbs[t.tb][i]
		if err := t.exec(in, -1, 0); err != nil {
			return err
		}
	}
	return nil
}

func (t *tbRun) errf(in *inst, format string, args ...any) error {
	return fmt.Errorf("cpuexec: rank %d call #%d %s: %s", t.x.rank, t.c.seq, in.where, fmt.Sprintf(format, args...))
}

func (t *tbRun) waiter(in *inst) waiter {
	return waiter{ctx: t.c.ctx, abort: &t.c.abort, tb: t.tb, where: in.where}
}

// span returns the bytes of r for op in (its thread-block-group part,
// pipeline iteration it of unit bytes when it >= 0). Packet ranges span
// twice their data size.
func (t *tbRun) span(in *inst, r ref, it, unit int64) ([]byte, error) {
	lay := t.c.lay
	off, n := lay.Range(r.index, r.size)
	off, n = lay.Part(off, n, in.part, in.parts)
	if it >= 0 {
		lo := it * unit
		if lo >= n {
			return nil, nil
		}
		off, n = off+lo, min(unit, n-lo)
	}
	lo, hi := off, off+n
	if t.c.ll && r.buf == plan.Scratch {
		// LL scratch: chunk c occupies [2cC, 2(c+1)C); plain data uses
		// the first half of its range, packets all of it.
		lo = 2 * off
		hi = lo + n
		if r.packet {
			hi = lo + 2*n
		}
	}
	if r.rank < 0 || r.rank >= len(t.c.bufs) {
		return nil, t.errf(in, "rank %d out of range", r.rank)
	}
	b := t.c.bufs[r.rank][r.buf]
	if lo < 0 || hi > int64(len(b)) {
		return nil, t.errf(in, "rank %d %s[%d:%d] is bytes [%d, %d), beyond the buffer's %d bytes", r.rank, r.buf.Short(), r.index, r.index+r.size, lo, hi, len(b))
	}
	return b[lo:hi:hi], nil
}

// tmpBuf returns scratch buffer i of at least n bytes (8-byte aligned).
func (t *tbRun) tmpBuf(i, n int) []byte {
	for len(t.tmp) <= i {
		t.tmp = append(t.tmp, nil)
	}
	if cap(t.tmp[i]) < n {
		t.tmp[i] = make([]byte, n, max(n, 2*cap(t.tmp[i])))
	}
	return t.tmp[i][:n]
}

func (t *tbRun) exec(in *inst, it, unit int64) error {
	switch in.name {
	case plan.OpNop, plan.OpFlush:
		// A thread block is one goroutine: its ops are already ordered,
		// and port-channel puts complete before put returns.
		return nil
	case plan.OpBarrier:
		return t.barrier(in)
	case plan.OpSignal, plan.OpRelaxedSignal:
		t.signal(in)
		return nil
	case plan.OpWait, plan.OpRelaxedWait:
		return t.wait(in)
	case plan.OpSemAcquire:
		return t.semAcquire(in)
	case plan.OpSemRelease:
		for _, s := range in.sems {
			t.x.sems[s].Add(1)
		}
		t.x.seg.ring(t.x.rank)
		return nil
	case plan.OpPipeline:
		total := int64(in.nchunks) * t.c.lay.ChunkBytes
		iters := (total + in.unit - 1) / in.unit
		for i := range iters {
			for b := range in.body {
				if err := t.exec(&in.body[b], i, in.unit); err != nil {
					return err
				}
			}
		}
		return nil
	case plan.OpCopy, plan.OpPut, plan.OpGet, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush,
		plan.OpCopyPackets, plan.OpPutPackets, plan.OpUnpackPackets, plan.OpReadPutPackets:
		if err := t.move(in, it, unit); err != nil {
			return err
		}
		if in.name == plan.OpPutWithSignal || in.name == plan.OpPutWithSignalAndFlush {
			t.signal(in)
		}
		return nil
	case plan.OpReduce, plan.OpReadReduce, plan.OpReduceSend, plan.OpReadReduceSend,
		plan.OpReducePackets, plan.OpReduceSendPackets, plan.OpReduceCopyPackets, plan.OpReduceCopySendPackets:
		return t.reduceOp(in, it, unit)
	case plan.OpGroupLoadReduce, plan.OpGroupStore, plan.OpGroupLoadReduceStore:
		return t.switchOp(in, it, unit)
	}
	return t.errf(in, "op %s is not supported by the CPU executor", in.name)
}

func (t *tbRun) signal(in *inst) {
	for _, ch := range in.chans {
		atomic.AddUint64(t.x.seg.slot(ch.slot), 1)
		t.x.seg.ring(ch.peer)
	}
}

func (t *tbRun) wait(in *inst) error {
	for _, ch := range in.chans {
		target := atomic.AddUint64(&t.x.expect[ch.expect], 1)
		slot := t.x.seg.slot(ch.slot)
		if atomic.LoadUint64(slot) >= target {
			continue
		}
		peer := ch.peer
		err := t.x.await(t.waiter(in), func() bool { return atomic.LoadUint64(slot) >= target },
			fmt.Sprintf("signal #%d from rank %d", target, peer), func() []int { return []int{peer} })
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *tbRun) barrier(in *inst) error {
	b := &t.x.bars[in.barrier]
	g := b.gen.Load()
	if b.count.Add(1) == int64(in.barrierN) {
		b.count.Store(0)
		b.gen.Add(1)
		t.x.seg.ring(t.x.rank)
		return nil
	}
	return t.x.await(t.waiter(in), func() bool { return b.gen.Load() != g },
		fmt.Sprintf("barrier %d of %d thread blocks", in.barrier, in.barrierN), nil)
}

func (t *tbRun) semAcquire(in *inst) error {
	for _, s := range in.sems {
		sem := &t.x.sems[s]
		take := func() bool {
			for {
				v := sem.Load()
				if v <= 0 {
					return false
				}
				if sem.CompareAndSwap(v, v-1) {
					return true
				}
			}
		}
		if err := t.x.await(t.waiter(in), take, fmt.Sprintf("a release of semaphore %d", s), nil); err != nil {
			return err
		}
	}
	return nil
}

// move runs copy, put, get (plain or packets): dst[i] = src[i].
func (t *tbRun) move(in *inst, it, unit int64) error {
	if len(in.srcs) != len(in.dsts) {
		return t.errf(in, "%d sources for %d destinations", len(in.srcs), len(in.dsts))
	}
	for i := range in.srcs {
		s, err := t.span(in, in.srcs[i], it, unit)
		if err != nil {
			return err
		}
		d, err := t.span(in, in.dsts[i], it, unit)
		if err != nil {
			return err
		}
		sp, dp := in.srcs[i].packet, in.dsts[i].packet
		switch {
		case !sp && !dp:
			if len(s) != len(d) {
				return t.errf(in, "source has %d bytes, destination %d", len(s), len(d))
			}
			copy(d, s)
		case !sp && dp:
			if err := t.writePackets(in, d, s); err != nil {
				return err
			}
			t.x.seg.ring(in.dsts[i].rank)
		case sp && !dp:
			if err := t.readPackets(in, d, s, in.srcs[i].rank); err != nil {
				return err
			}
		default:
			if err := t.forwardPackets(in, d, s, in.srcs[i].rank); err != nil {
				return err
			}
			t.x.seg.ring(in.dsts[i].rank)
		}
	}
	return nil
}

// reduceOp runs re, rre, res, rres and the packet reduces: the result of
// reducing every source (packets unpacked first) goes to dst[0], and is
// copied (or sent as packets) to every other destination.
func (t *tbRun) reduceOp(in *inst, it, unit int64) error {
	if len(in.dsts) == 0 || len(in.srcs) == 0 {
		return t.errf(in, "reduce without sources or destination")
	}
	d0, err := t.span(in, in.dsts[0], it, unit)
	if err != nil {
		return err
	}
	t.srcs = t.srcs[:0]
	for i, r := range in.srcs {
		s, err := t.span(in, r, it, unit)
		if err != nil {
			return err
		}
		if r.packet {
			plain := t.tmpBuf(i, len(s)/2)
			if err := t.readPackets(in, plain, s, r.rank); err != nil {
				return err
			}
			s = plain
		}
		if len(s) != len(d0) {
			return t.errf(in, "source %d has %d bytes, destination %d", i, len(s), len(d0))
		}
		t.srcs = append(t.srcs, s)
	}
	if err := t.reduceInto(in, d0, t.srcs); err != nil {
		return err
	}
	return t.scatter(in, d0, in.dsts[1:], it, unit)
}

// scatter writes result to every destination (packets where they hold
// packets).
func (t *tbRun) scatter(in *inst, result []byte, dsts []ref, it, unit int64) error {
	for _, r := range dsts {
		d, err := t.span(in, r, it, unit)
		if err != nil {
			return err
		}
		if r.packet {
			if err := t.writePackets(in, d, result); err != nil {
				return err
			}
			t.x.seg.ring(r.rank)
			continue
		}
		if len(d) != len(result) {
			return t.errf(in, "destination has %d bytes, the result %d", len(d), len(result))
		}
		if len(d) > 0 && &d[0] != &result[0] {
			copy(d, result)
		}
	}
	return nil
}

// reduceInto reduces srcs into dst with the op's reduction: through a
// temporary when dst overlaps a source without being it.
func (t *tbRun) reduceInto(in *inst, dst []byte, srcs [][]byte) error {
	if len(dst) == 0 {
		return nil
	}
	op := t.c.op
	if in.red != plan.ReduceNone {
		op = reduceOp(in.red)
	}
	out := dst
	for _, s := range srcs {
		if overlapNotSame(s, dst) {
			out = t.tmpBuf(len(in.srcs)+1, len(dst))
			break
		}
	}
	if err := reduce.Reduce(op, t.c.dt, out, srcs...); err != nil {
		return t.errf(in, "%v", err)
	}
	if &out[0] != &dst[0] {
		copy(dst, out)
	}
	return nil
}

// switchOp emulates NVLink multicast: glre reduces the range over the
// group's ranks into a local chunk, gstore writes a local chunk to every
// group rank, glres does both for each source/destination pair.
func (t *tbRun) switchOp(in *inst, it, unit int64) error {
	g := in.group
	if g == 0 {
		return t.errf(in, "empty switch group")
	}
	switch in.name {
	case plan.OpGroupStore:
		s, err := t.span(in, in.srcs[0], it, unit)
		if err != nil {
			return err
		}
		return t.scatter(in, s, in.dsts, it, unit)
	case plan.OpGroupLoadReduce:
		d, err := t.span(in, in.dsts[0], it, unit)
		if err != nil {
			return err
		}
		if err := t.gather(in, in.srcs, len(d), it, unit); err != nil {
			return err
		}
		return t.reduceInto(in, d, t.srcs)
	}
	for p := 0; p+g <= len(in.srcs); p += g {
		var n int
		if s, err := t.span(in, in.srcs[p], it, unit); err != nil {
			return err
		} else {
			n = len(s)
		}
		if err := t.gather(in, in.srcs[p:p+g], n, it, unit); err != nil {
			return err
		}
		res := t.tmpBuf(len(in.srcs)+2, n)
		if err := t.reduceInto(in, res, t.srcs); err != nil {
			return err
		}
		if err := t.scatter(in, res, in.dsts[p:p+g], it, unit); err != nil {
			return err
		}
	}
	return nil
}

func (t *tbRun) gather(in *inst, refs []ref, n int, it, unit int64) error {
	t.srcs = t.srcs[:0]
	for _, r := range refs {
		s, err := t.span(in, r, it, unit)
		if err != nil {
			return err
		}
		if len(s) != n {
			return t.errf(in, "rank %d's range has %d bytes, want %d", r.rank, len(s), n)
		}
		t.srcs = append(t.srcs, s)
	}
	return nil
}

// LL packets: every 4 data bytes travel as one 8-byte word, data in the
// low half and the call's flag in the high half, written and read with
// one atomic 64-bit access, so a reader that sees the flag sees the data.

func words(b []byte) []uint64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
}

func (t *tbRun) checkPackets(in *inst, pk, data []byte) error {
	if len(pk) != 2*len(data) || len(data)%4 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(pk)))%8 != 0 {
		return t.errf(in, "packet range of %d bytes for %d data bytes (want twice, in 8-byte words)", len(pk), len(data))
	}
	return nil
}

func (t *tbRun) writePackets(in *inst, pk, data []byte) error {
	if err := t.checkPackets(in, pk, data); err != nil {
		return err
	}
	w := words(pk)
	hi := uint64(t.c.flag) << 32
	for i := range w {
		atomic.StoreUint64(&w[i], hi|uint64(binary.NativeEndian.Uint32(data[4*i:])))
	}
	return nil
}

// awaitPacket waits until word i holds this call's flag.
func (t *tbRun) awaitPacket(in *inst, w []uint64, i int, from int) error {
	flag := t.c.flag
	p := &w[i]
	return t.x.await(t.waiter(in), func() bool { return uint32(atomic.LoadUint64(p)>>32) == flag },
		fmt.Sprintf("packet %d (flag %d) from rank %d", i, flag, from), func() []int { return []int{from} })
}

func (t *tbRun) readPackets(in *inst, data, pk []byte, owner int) error {
	if err := t.checkPackets(in, pk, data); err != nil {
		return err
	}
	w := words(pk)
	flag := t.c.flag
	for i := range w {
		v := atomic.LoadUint64(&w[i])
		if uint32(v>>32) != flag {
			if err := t.awaitPacket(in, w, i, owner); err != nil {
				return err
			}
			v = atomic.LoadUint64(&w[i])
		}
		binary.NativeEndian.PutUint32(data[4*i:], uint32(v))
	}
	return nil
}

func (t *tbRun) forwardPackets(in *inst, dst, src []byte, owner int) error {
	if len(dst) != len(src) || len(src)%8 != 0 {
		return t.errf(in, "packet ranges of %d and %d bytes", len(src), len(dst))
	}
	ws, wd := words(src), words(dst)
	flag := t.c.flag
	for i := range ws {
		v := atomic.LoadUint64(&ws[i])
		if uint32(v>>32) != flag {
			if err := t.awaitPacket(in, ws, i, owner); err != nil {
				return err
			}
			v = atomic.LoadUint64(&ws[i])
		}
		atomic.StoreUint64(&wd[i], v)
	}
	return nil
}

// overlaps reports whether a and b share a byte.
func overlaps(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
