package cpuexec

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
)

// tbRun runs one thread block's ops as a coroutine: advance runs ops until
// one has to wait (a wait, an intra-rank barrier, a semaphore, packets not
// there yet) and returns; the worker that owns the block calls it again
// when something may have changed. The block keeps its position and the
// progress of the op it waits in, and its scratch space across calls, so
// that ops allocate nothing once sizes are steady.
type tbRun struct {
	x    *Executor
	tb   int
	c    *call
	tmp  [][]byte // unpacked packets, reduce results
	srcs [][]byte // reduce sources

	// position: top-level op pc; inside a pipeline, iteration it and body
	// op bi.
	pc, bi int
	it     int64
	// end: the block stops before op end (the prologue phase of a call
	// stops at the end of the block's prologue).
	end int
	// progress inside the current blocking op: channel or semaphore index
	// sub, the wait target of that channel (0: not taken yet), whether the
	// block arrived at the current barrier and that barrier's generation.
	sub     int
	target  uint64
	arrived bool
	gen     uint64
}

// begin starts the block on c's phase: the whole block, its prologue, or
// the ops after its prologue.
func (t *tbRun) begin(c *call) {
	t.c = c
	t.pc, t.end = 0, len(t.x.pr.tbs[t.tb])
	switch c.phase {
	case phasePrologue:
		t.end = t.x.pro[t.tb]
	case phaseBody:
		t.pc = t.x.pro[t.tb]
	}
	t.bi, t.it = 0, 0
	t.sub, t.target, t.arrived = 0, 0, false
}

func (t *tbRun) done() bool { return t.pc >= t.end }

// current is the op the block is at (nil when done), with its pipeline
// iteration and unit.
func (t *tbRun) current() (*inst, int64, int64) {
	ops := t.x.pr.tbs[t.tb]
	if t.pc >= t.end {
		return nil, -1, 0
	}
	in := &ops[t.pc]
	if in.name == plan.OpPipeline && t.bi < len(in.body) {
		return &in.body[t.bi], t.it, in.unit
	}
	return in, -1, 0
}

// advance runs ops until the block is done or has to wait; it reports
// whether it ran (or got further into) any op.
func (t *tbRun) advance() (progressed bool, err error) {
	ops := t.x.pr.tbs[t.tb]
	for t.pc < t.end {
		in := &ops[t.pc]
		if in.name == plan.OpPipeline {
			total := int64(in.nchunks) * t.c.lay.ChunkBytes
			iters := (total + in.unit - 1) / in.unit
			for t.it < iters {
				for t.bi < len(in.body) {
					ok, err := t.try(&in.body[t.bi], t.it, in.unit)
					if err != nil || !ok {
						return progressed, err
					}
					progressed = true
					t.bi++
				}
				t.bi = 0
				t.it++
			}
			t.it = 0
		} else {
			ok, err := t.try(in, -1, 0)
			if err != nil || !ok {
				return progressed, err
			}
		}
		progressed = true
		t.pc++
	}
	return progressed, nil
}

// try runs op in if it can run now; false: it has to wait (what it did
// so far is kept in the block's state).
func (t *tbRun) try(in *inst, it, unit int64) (bool, error) {
	switch in.name {
	case plan.OpWait, plan.OpRelaxedWait:
		return t.tryWait(in), nil
	case plan.OpBarrier:
		return t.tryBarrier(in), nil
	case plan.OpSemAcquire:
		return t.trySem(in), nil
	}
	if in.packetSrc {
		ok, err := t.packetsReady(in, it, unit)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, t.exec(in, it, unit)
}

// blockedOn describes what the block waits for, for a *WaitError.
func (t *tbRun) blockedOn() (where, what string, peers []int) {
	in, it, unit := t.current()
	if in == nil {
		return "", "", nil
	}
	where = in.where
	switch in.name {
	case plan.OpWait, plan.OpRelaxedWait:
		if t.sub < len(in.chans) {
			ch := in.chans[t.sub]
			return where, fmt.Sprintf("signal #%d from rank %d", t.target, ch.peer), []int{ch.peer}
		}
	case plan.OpBarrier:
		return where, fmt.Sprintf("barrier %d of %d thread blocks", in.barrier, in.barrierN), nil
	case plan.OpSemAcquire:
		if t.sub < len(in.sems) {
			return where, fmt.Sprintf("a release of semaphore %d", in.sems[t.sub]), nil
		}
	}
	if in.packetSrc {
		for _, r := range in.srcs {
			if !r.packet {
				continue
			}
			s, err := t.span(in, r, it, unit)
			if err != nil {
				continue
			}
			w := words(s)
			for i := range w {
				if uint32(atomic.LoadUint64(&w[i])>>32) != t.c.flag {
					return where, fmt.Sprintf("packet %d (flag %d) from rank %d", i, t.c.flag, r.rank), []int{r.rank}
				}
			}
		}
	}
	return where, "its turn", nil
}

func (t *tbRun) errf(in *inst, format string, args ...any) error {
	return fmt.Errorf("cpuexec: rank %d call #%d %s: %s", t.x.rank, t.c.seq, in.where, fmt.Sprintf(format, args...))
}

// span returns the bytes of r for op in (its thread-block-group part,
// pipeline iteration it of unit bytes when it >= 0). Packet ranges span
// twice their data size.
func (t *tbRun) span(in *inst, r ref, it, unit int64) ([]byte, error) {
	lay := &t.c.lay
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

// exec runs an op that does not wait (waits, barriers and semaphore
// acquires go through try; packet reads were checked ready by try).
func (t *tbRun) exec(in *inst, it, unit int64) error {
	switch in.name {
	case plan.OpNop, plan.OpFlush:
		// A thread block's ops run in order, and port-channel puts
		// complete before put returns.
		return nil
	case plan.OpSignal, plan.OpRelaxedSignal:
		t.signal(in)
		return nil
	case plan.OpSemRelease:
		for _, s := range in.sems {
			t.x.sems[s].Add(1)
		}
		t.x.seg.ring(t.x.rank)
		return nil
	case plan.OpCopy, plan.OpPut, plan.OpGet, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush,
		plan.OpCopyPackets, plan.OpPutPackets, plan.OpUnpackPackets, plan.OpReadPutPackets, plan.OpGroupStorePackets:
		// gstorepkt (emulated multicast): its source packets forwarded
		// to the group range of every group rank, its own included.
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
	case plan.OpPipeline:
		return t.errf(in, "nested pipeline")
	}
	return t.errf(in, "op %s is not supported by the CPU executor", in.name)
}

func (t *tbRun) signal(in *inst) {
	if w := t.x.world; w != nil {
		w.hb.Add(1)
	}
	for _, ch := range in.chans {
		atomic.AddUint64(t.x.seg.slot(ch.slot), 1)
		t.x.seg.ring(ch.peer)
	}
}

// tryWait: channel by channel, take the next wait number of the channel
// (once) and check that the peer signalled as often.
func (t *tbRun) tryWait(in *inst) bool {
	for t.sub < len(in.chans) {
		ch := &in.chans[t.sub]
		if t.target == 0 {
			t.target = atomic.AddUint64(&t.x.expect[ch.expect], 1)
		}
		if atomic.LoadUint64(t.x.seg.slot(ch.slot)) < t.target {
			return false
		}
		t.sub++
		t.target = 0
	}
	t.sub = 0
	if w := t.x.world; w != nil {
		w.hb.Load()
	}
	return true
}

// tryBarrier: arrive once, then wait for the barrier's generation to move.
func (t *tbRun) tryBarrier(in *inst) bool {
	b := &t.x.bars[in.barrier]
	if !t.arrived {
		t.gen = b.gen.Load()
		t.arrived = true
		if b.count.Add(1) == int64(in.barrierN) {
			b.count.Store(0)
			b.gen.Add(1)
			t.x.seg.ring(t.x.rank)
			t.arrived = false
			return true
		}
	}
	if b.gen.Load() == t.gen {
		return false
	}
	t.arrived = false
	return true
}

func (t *tbRun) trySem(in *inst) bool {
	for t.sub < len(in.sems) {
		sem := &t.x.sems[in.sems[t.sub]]
		for {
			v := sem.Load()
			if v <= 0 {
				return false
			}
			if sem.CompareAndSwap(v, v-1) {
				break
			}
		}
		t.sub++
	}
	t.sub = 0
	return true
}

// packetsReady reports whether every packet source of in holds this
// call's flag in every word.
func (t *tbRun) packetsReady(in *inst, it, unit int64) (bool, error) {
	flag := t.c.flag
	for _, r := range in.srcs {
		if !r.packet {
			continue
		}
		s, err := t.span(in, r, it, unit)
		if err != nil {
			return false, err
		}
		w := words(s)
		for i := len(w) - 1; i >= 0; i-- {
			if uint32(atomic.LoadUint64(&w[i])>>32) != flag {
				return false, nil
			}
		}
	}
	return true, nil
}

// move runs copy, put, get (plain or packets): dst[i] = src[i].
func (t *tbRun) move(in *inst, it, unit int64) error {
	// One source to several destinations: rppkt forwards src_buff[0] to
	// every destination.
	one := len(in.srcs) == 1 && len(in.dsts) > 1
	if len(in.srcs) != len(in.dsts) && !one {
		return t.errf(in, "%d sources for %d destinations", len(in.srcs), len(in.dsts))
	}
	for i := range in.dsts {
		si := i
		if one {
			si = 0
		}
		s, err := t.span(in, in.srcs[si], it, unit)
		if err != nil {
			return err
		}
		d, err := t.span(in, in.dsts[i], it, unit)
		if err != nil {
			return err
		}
		sp, dp := in.srcs[si].packet, in.dsts[i].packet
		switch {
		case !sp && !dp:
			if len(s) != len(d) {
				return t.errf(in, "source has %d bytes, destination %d", len(s), len(d))
			}
			t.copyData(d, s)
		case !sp && dp:
			if err := t.writePackets(in, d, s); err != nil {
				return err
			}
			t.x.seg.ring(in.dsts[i].rank)
		case sp && !dp:
			if err := t.readPackets(in, d, s, in.srcs[si].rank); err != nil {
				return err
			}
		default:
			if err := t.forwardPackets(in, d, s, in.srcs[si].rank); err != nil {
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
			t.copyData(d, result)
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
	if err := t.reduceData(op, out, srcs); err != nil {
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

// awaitPacket: word i does not hold this call's flag although try saw
// every word ready (it cannot happen: a word changes flag only in a later
// call).
func (t *tbRun) awaitPacket(in *inst, w []uint64, i int, from int) error {
	return t.errf(in, "packet %d from rank %d lost flag %d", i, from, t.c.flag)
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

// copyData copies s into d (the same length).
func (t *tbRun) copyData(d, s []byte) {
	if overlaps(d, s) {
		copy(d, s)
		return
	}
	t.x.copySpare(d, s)
}

// reduceData reduces srcs into out (none overlapping out but as
// itself): large ones in pieces on the rank's spare cores.
func (t *tbRun) reduceData(op reduce.Op, out []byte, srcs [][]byte) error {
	dt := t.c.dt
	if t.x.sp == nil || len(out) < spareMin {
		return reduce.Reduce(op, dt, out, srcs...)
	}
	return t.x.sp.each(t.x.rank, len(out), func(lo, hi int) error {
		ss := make([][]byte, len(srcs))
		for i, s := range srcs {
			ss[i] = s[lo:hi]
		}
		return reduce.Reduce(op, dt, out[lo:hi], ss...)
	})
}
