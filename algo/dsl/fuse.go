package dsl

import (
	"slices"

	"github.com/chorus-rt/chorus/algo/plan"
)

// fuse implements step 3 of Lower: left to right, it replaces two
// neighbouring ops by one when a rule applies, and tries the result with
// its neighbours again (so a reduce followed by three puts becomes one res,
// and put,signal,put,signal on port channels one pws with two buffers).
// Every rule keeps the program's meaning: ops that a rule would reorder or
// merge are fused only when they do not conflict, and producer/consumer
// fusions need the consumer to read exactly what the producer wrote.
func (p *Program) fuse(ops []*op) []*op {
	out := slices.Clone(ops)
	for i := 0; i+1 < len(out); {
		if f := p.fuse2(out[i], out[i+1]); f != nil {
			out[i] = f
			out = slices.Delete(out, i+1, i+2)
			i = max(i-1, 0)
			continue
		}
		i++
	}
	return out
}

func tbgEqual(a, b *plan.TBGroup) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func disjointChans(a, b []*channel) bool {
	for _, c := range a {
		if slices.Contains(b, c) {
			return false
		}
	}
	return true
}

func isSyncOp(n plan.OpName) bool {
	switch n {
	case plan.OpSignal, plan.OpWait, plan.OpRelaxedSignal, plan.OpRelaxedWait, plan.OpFlush:
		return true
	}
	return false
}

func splitRefs(rs []ref) (local, remote []ref) {
	for _, r := range rs {
		if r.via != nil {
			remote = append(remote, r)
		} else {
			local = append(local, r)
		}
	}
	return local, remote
}

func allSame(rs []ref, want ref) bool {
	for _, r := range rs {
		if !r.same(want) {
			return false
		}
	}
	return len(rs) > 0
}

// fuse2 returns the fusion of a and b, or nil.
func (p *Program) fuse2(a, b *op) *op {
	if a.name == plan.OpPipeline || b.name == plan.OpPipeline {
		return nil
	}
	switch {
	// signal+signal, wait+wait, flush+flush on other channels of one type:
	// one op that signals (waits for) each channel once.
	case isSyncOp(a.name) && a.name == b.name && a.chType == b.chType && a.chType != plan.ChannelSwitch && disjointChans(a.chans, b.chans):
		f := a.clone()
		f.chans = append(f.chans, b.chans...)
		f.sync |= b.sync
		return f

	case (a.name == plan.OpSemAcquire || a.name == plan.OpSemRelease) && a.name == b.name:
		for _, s := range b.sems {
			if slices.Contains(a.sems, s) {
				return nil
			}
		}
		f := a.clone()
		f.sems = append(f.sems, b.sems...)
		f.sync |= b.sync
		return f

	// put+put (and ppkt, pws, pwsf) of one size: one op with several
	// buffers, when they touch nothing in common.
	case (a.name == plan.OpPut || a.name == plan.OpPutPackets || a.name == plan.OpPutWithSignal || a.name == plan.OpPutWithSignalAndFlush || a.name == plan.OpGet) &&
		a.name == b.name && a.chType == b.chType && tbgEqual(a.tbg, b.tbg) && a.src[0].size == b.src[0].size &&
		a.sync == SyncNone && b.sync == SyncNone && !conflicts(a.accesses(), b.accesses()):
		f := a.clone()
		f.src = append(f.src, b.src...)
		f.dst = append(f.dst, b.dst...)
		f.chans = append(f.chans, b.chans...)
		return f

	// rppkt+rppkt forwarding the same packets to other peers: one rppkt
	// from one source to several destinations (MSCCL++'s executor reads
	// src_buff[0] once and writes every dst_buff entry).
	case a.name == plan.OpReadPutPackets && b.name == a.name && a.chType == b.chType && tbgEqual(a.tbg, b.tbg) &&
		len(a.src) == 1 && len(b.src) == 1 && a.src[0].same(b.src[0]) && a.sync == SyncNone && b.sync == SyncNone &&
		!conflicts(a.accesses(), b.accesses()):
		f := a.clone()
		f.dst = append(f.dst, b.dst...)
		f.chans = append(f.chans, b.chans...)
		return f

	// port put then signal on the same channel: put_with_signal.
	case a.name == plan.OpPut && a.chType == plan.ChannelPort && b.name == plan.OpSignal && b.chType == plan.ChannelPort &&
		len(a.dst) == 1 && len(b.chans) == 1 && a.chans[0] == b.chans[0]:
		f := a.clone()
		f.name = plan.OpPutWithSignal
		f.sync = a.sync | b.sync
		return f

	// put_with_signal then flush of the same channel: pwsf.
	case a.name == plan.OpPutWithSignal && b.name == plan.OpFlush && b.chType == plan.ChannelPort &&
		len(a.dst) == 1 && len(b.chans) == 1 && a.chans[0] == b.chans[0]:
		f := a.clone()
		f.name = plan.OpPutWithSignalAndFlush
		f.sync = a.sync | b.sync
		return f

	// d = reduce(x...) then d = reduce(d, y...): d = reduce(x..., y...).
	case (a.name == plan.OpReduce || a.name == plan.OpReadReduce) && (b.name == plan.OpReduce || b.name == plan.OpReadReduce) &&
		a.reduce.Effective() == b.reduce.Effective() && tbgEqual(a.tbg, b.tbg) && len(a.dst) == 1 && len(b.dst) == 1 &&
		b.dst[0].same(a.dst[0]) && b.src[0].same(a.dst[0]):
		for _, s := range b.src[1:] {
			if s.overlaps(a.dst[0]) && s.via == nil {
				return nil // it would read d before, not after, the first reduce
			}
		}
		al, ar := splitRefs(a.src)
		bl, br := splitRefs(b.src[1:])
		f := a.clone()
		f.src = slices.Concat(al, bl, ar, br)
		f.chans = append(f.chans, b.chans...)
		if len(ar)+len(br) > 0 {
			f.name, f.chType = plan.OpReadReduce, plan.ChannelMemory
		}
		return f

	// reduce then memory put of its result: reduce-and-send (res / rres).
	case (a.name == plan.OpReduce || a.name == plan.OpReadReduce || a.name == plan.OpReduceSend || a.name == plan.OpReadReduceSend) &&
		b.name == plan.OpPut && b.chType == plan.ChannelMemory && tbgEqual(a.tbg, b.tbg) && b.sync == SyncNone && allSame(b.src, a.dst[0]):
		f := a.clone()
		f.dst = append(f.dst, b.dst...)
		f.chans = append(f.chans, b.chans...)
		f.chType = plan.ChannelMemory
		switch a.name {
		case plan.OpReduce:
			f.name = plan.OpReduceSend
		case plan.OpReadReduce:
			f.name = plan.OpReadReduceSend
		}
		return f

	// packet reduce then packet put of its result: respkt.
	case (a.name == plan.OpReducePackets || a.name == plan.OpReduceSendPackets) && b.name == plan.OpPutPackets &&
		b.chType == plan.ChannelMemory && tbgEqual(a.tbg, b.tbg) && allSame(b.src, a.dst[0]):
		f := a.clone()
		f.name, f.chType = plan.OpReduceSendPackets, plan.ChannelMemory
		f.dst = append(f.dst, b.dst...)
		f.chans = append(f.chans, b.chans...)
		return f

	// packet reduce then packing its result into scratch: recpkt.
	case a.name == plan.OpReducePackets && b.name == plan.OpCopyPackets && tbgEqual(a.tbg, b.tbg) && len(b.src) == 1 && b.src[0].same(a.dst[0]):
		f := a.clone()
		f.name = plan.OpReduceCopyPackets
		f.dst = append(f.dst, b.dst[0])
		return f

	// recpkt then sending its result (plain, as packets) or its packet copy
	// (forwarded): recspkt.
	case (a.name == plan.OpReduceCopyPackets || a.name == plan.OpReduceCopySendPackets) && b.chType == plan.ChannelMemory && tbgEqual(a.tbg, b.tbg) &&
		((b.name == plan.OpPutPackets && allSame(b.src, a.dst[0])) || (b.name == plan.OpReadPutPackets && allSame(b.src, a.dst[1]))):
		f := a.clone()
		f.name, f.chType = plan.OpReduceCopySendPackets, plan.ChannelMemory
		f.dst = append(f.dst, b.dst...)
		f.chans = append(f.chans, b.chans...)
		return f

	// switch load-reduce into a chunk then broadcast of that chunk:
	// load-reduce-store (glres), which skips the local chunk; so only when
	// nothing else in the program touches it.
	case a.name == plan.OpGroupLoadReduce && b.name == plan.OpGroupStore && a.sw == b.sw && a.gsize == b.gsize &&
		a.gchunk.same(b.gchunk) && a.sync == SyncNone && b.sync == SyncNone && p.refCount(a.gchunk) == 2:
		f := a.clone()
		f.name = plan.OpGroupLoadReduceStore
		f.src = []ref{{sw: a.sw, buf: a.sw.buf, index: a.goff, size: a.gsize}}
		f.dst = []ref{{sw: a.sw, buf: a.sw.buf, index: b.goff, size: b.gsize}}
		f.hasGChunk = false
		return f
	}
	return nil
}

// refCount counts the accesses of the whole program that overlap r.
func (p *Program) refCount(r ref) int {
	n := 0
	p.visitOps(func(o *op) {
		for _, a := range o.accesses() {
			if a.r.overlaps(r) {
				n++
			}
		}
	})
	return n
}
