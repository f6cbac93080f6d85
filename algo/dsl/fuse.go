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

// fuse2 returns the fusion of a and b, or nil. The switch is the table
// of rules, in order: the first whose pattern matches decides (its fusion
// may still decline with nil).
func (p *Program) fuse2(a, b *op) *op {
	if a.name == plan.OpPipeline || b.name == plan.OpPipeline {
		return nil
	}
	switch {
	case sameSyncs(a, b):
		return merged(a, b)
	case sameSems(a, b):
		return fuseSems(a, b)
	case parallelPuts(a, b):
		return fusePuts(a, b)
	case forwardsSamePackets(a, b):
		return fuseForwards(a, b)
	case portPutThen(a, b, plan.OpPut, plan.OpSignal):
		return renamed(a, b, plan.OpPutWithSignal)
	case portPutThen(a, b, plan.OpPutWithSignal, plan.OpFlush):
		return renamed(a, b, plan.OpPutWithSignalAndFlush)
	case chainedReduces(a, b):
		return fuseReduces(a, b)
	case reduceThenPut(a, b):
		return fuseReduceSend(a, b)
	case packetReduceThenPut(a, b):
		return withDsts(a, b, plan.OpReduceSendPackets, plan.ChannelMemory)
	case packetReduceThenCopy(a, b):
		f := a.clone()
		f.name = plan.OpReduceCopyPackets
		f.dst = append(f.dst, b.dst[0])
		return f
	case reduceCopyThenSend(a, b):
		return withDsts(a, b, plan.OpReduceCopySendPackets, plan.ChannelMemory)
	case p.loadReduceThenStore(a, b):
		return loadReduceStore(a, b)
	}
	return nil
}

// sameSyncs: signal+signal, wait+wait, flush+flush on other channels of
// one type become one op that signals (waits for) each channel once.
func sameSyncs(a, b *op) bool {
	return isSyncOp(a.name) && a.name == b.name && a.chType == b.chType && a.chType != plan.ChannelSwitch && disjointChans(a.chans, b.chans)
}

// merged is a with b's channels and sync flags.
func merged(a, b *op) *op {
	f := a.clone()
	f.chans = append(f.chans, b.chans...)
	f.sync |= b.sync
	return f
}

// sameSems: two semaphore acquires (releases) become one, unless they
// name a semaphore twice.
func sameSems(a, b *op) bool {
	return (a.name == plan.OpSemAcquire || a.name == plan.OpSemRelease) && a.name == b.name
}

func fuseSems(a, b *op) *op {
	for _, s := range b.sems {
		if slices.Contains(a.sems, s) {
			return nil
		}
	}
	f := a.clone()
	f.sems = append(f.sems, b.sems...)
	f.sync |= b.sync
	return f
}

// parallelPuts: put+put (and ppkt, pws, pwsf, get) of one size become one
// op with several buffers, when they touch nothing in common.
func parallelPuts(a, b *op) bool {
	switch a.name {
	case plan.OpPut, plan.OpPutPackets, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush, plan.OpGet:
	default:
		return false
	}
	return a.name == b.name && a.chType == b.chType && tbgEqual(a.tbg, b.tbg) && a.src[0].size == b.src[0].size &&
		a.sync == SyncNone && b.sync == SyncNone && !conflicts(a.accesses(), b.accesses())
}

func fusePuts(a, b *op) *op {
	f := a.clone()
	f.src = append(f.src, b.src...)
	f.dst = append(f.dst, b.dst...)
	f.chans = append(f.chans, b.chans...)
	return f
}

// forwardsSamePackets: rppkt+rppkt forwarding the same packets to other
// peers become one rppkt from one source to several destinations
// (MSCCL++'s executor reads src_buff[0] once and writes every dst_buff
// entry).
func forwardsSamePackets(a, b *op) bool {
	return a.name == plan.OpReadPutPackets && b.name == a.name && a.chType == b.chType && tbgEqual(a.tbg, b.tbg) &&
		len(a.src) == 1 && len(b.src) == 1 && a.src[0].same(b.src[0]) && a.sync == SyncNone && b.sync == SyncNone &&
		!conflicts(a.accesses(), b.accesses())
}

func fuseForwards(a, b *op) *op {
	f := a.clone()
	f.dst = append(f.dst, b.dst...)
	f.chans = append(f.chans, b.chans...)
	return f
}

// portPutThen: a port-channel put (first) followed by a signal or flush
// (then) of the same channel: put then signal is put_with_signal,
// put_with_signal then flush is pwsf.
func portPutThen(a, b *op, first, then plan.OpName) bool {
	return a.name == first && (first != plan.OpPut || a.chType == plan.ChannelPort) && b.name == then && b.chType == plan.ChannelPort &&
		len(a.dst) == 1 && len(b.chans) == 1 && a.chans[0] == b.chans[0]
}

// renamed is a under another name, with both ops' sync flags.
func renamed(a, b *op, name plan.OpName) *op {
	f := a.clone()
	f.name = name
	f.sync = a.sync | b.sync
	return f
}

func isPlainReduce(n plan.OpName) bool { return n == plan.OpReduce || n == plan.OpReadReduce }

// chainedReduces: d = reduce(x...) then d = reduce(d, y...) become
// d = reduce(x..., y...).
func chainedReduces(a, b *op) bool {
	return isPlainReduce(a.name) && isPlainReduce(b.name) &&
		a.reduce.Effective() == b.reduce.Effective() && tbgEqual(a.tbg, b.tbg) && len(a.dst) == 1 && len(b.dst) == 1 &&
		b.dst[0].same(a.dst[0]) && b.src[0].same(a.dst[0])
}

func fuseReduces(a, b *op) *op {
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
}

// reduceThenPut: a reduce then a memory put of its result become
// reduce-and-send (res / rres).
func reduceThenPut(a, b *op) bool {
	return (isPlainReduce(a.name) || a.name == plan.OpReduceSend || a.name == plan.OpReadReduceSend) &&
		b.name == plan.OpPut && b.chType == plan.ChannelMemory && tbgEqual(a.tbg, b.tbg) && b.sync == SyncNone && allSame(b.src, a.dst[0])
}

func fuseReduceSend(a, b *op) *op {
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
}

// withDsts is a, named name on channel type ct, also writing b's
// destinations over b's channels.
func withDsts(a, b *op, name plan.OpName, ct plan.ChannelType) *op {
	f := a.clone()
	f.name, f.chType = name, ct
	f.dst = append(f.dst, b.dst...)
	f.chans = append(f.chans, b.chans...)
	return f
}

// packetReduceThenPut: a packet reduce then a packet put of its result
// become respkt.
func packetReduceThenPut(a, b *op) bool {
	return (a.name == plan.OpReducePackets || a.name == plan.OpReduceSendPackets) && b.name == plan.OpPutPackets &&
		b.chType == plan.ChannelMemory && tbgEqual(a.tbg, b.tbg) && allSame(b.src, a.dst[0])
}

// packetReduceThenCopy: a packet reduce then packing its result into
// scratch become recpkt.
func packetReduceThenCopy(a, b *op) bool {
	return a.name == plan.OpReducePackets && b.name == plan.OpCopyPackets && tbgEqual(a.tbg, b.tbg) && len(b.src) == 1 && b.src[0].same(a.dst[0])
}

// reduceCopyThenSend: recpkt then sending its result (plain, as packets)
// or its packet copy (forwarded) become recspkt.
func reduceCopyThenSend(a, b *op) bool {
	return (a.name == plan.OpReduceCopyPackets || a.name == plan.OpReduceCopySendPackets) && b.chType == plan.ChannelMemory && tbgEqual(a.tbg, b.tbg) &&
		((b.name == plan.OpPutPackets && allSame(b.src, a.dst[0])) || (b.name == plan.OpReadPutPackets && allSame(b.src, a.dst[1])))
}

// loadReduceThenStore: a switch load-reduce into a chunk then a broadcast
// of that chunk become load-reduce-store (glres), which skips the local
// chunk; so only when nothing else in the program touches it.
func (p *Program) loadReduceThenStore(a, b *op) bool {
	return a.name == plan.OpGroupLoadReduce && b.name == plan.OpGroupStore && a.sw == b.sw && a.gsize == b.gsize &&
		a.gchunk.same(b.gchunk) && a.sync == SyncNone && b.sync == SyncNone && p.refCount(a.gchunk) == 2
}

func loadReduceStore(a, b *op) *op {
	f := a.clone()
	f.name = plan.OpGroupLoadReduceStore
	f.src = []ref{{sw: a.sw, buf: a.sw.buf, index: a.goff, size: a.gsize}}
	f.dst = []ref{{sw: a.sw, buf: a.sw.buf, index: b.goff, size: b.gsize}}
	f.hasGChunk = false
	return f
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
