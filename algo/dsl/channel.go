package dsl

import (
	"slices"

	"github.com/chorus-rt/chorus/algo/plan"
)

// channel is one memory or port channel: it lives on src and connects to
// dst. id is its GPU channel id of its type on src (before instance
// replication). Signals on a channel from a to b are waited for on the
// channel from b to a with the same ordinal among the a-b channels of the
// type (that is how MSCCL++ sets up the semaphores).
type channel struct {
	typ      plan.ChannelType
	src, dst int
	id       int
	ordinal  int // index among src's channels of typ to dst
	bad      bool
	p        *Program
	typeName string // "memory" or "port", for messages
}

func (c *channel) srcRank() int {
	if c == nil {
		return -1
	}
	return c.src
}

func (c *channel) dstRank() int {
	if c == nil {
		return -1
	}
	return c.dst
}

func (p *Program) newChannel(typ plan.ChannelType, dst, src int) *channel {
	name := "MemoryChannel"
	if typ == plan.ChannelPort {
		name = "PortChannel"
	}
	c := &channel{typ: typ, src: src, dst: dst, p: p, typeName: typ.String()}
	switch {
	case !p.rankOK(src):
		p.fail(-1, -1, name, "source rank %d out of range (program has %d ranks)", src, len(p.ranks))
		c.bad = true
	case !p.rankOK(dst):
		p.fail(-1, -1, name, "destination rank %d out of range (program has %d ranks)", dst, len(p.ranks))
		c.bad = true
	case src == dst:
		p.fail(src, -1, name, "channel from rank %d to itself", src)
		c.bad = true
	}
	if c.bad {
		return c
	}
	k := chanKey{src, typ}
	c.id = p.chanIDs[k]
	p.chanIDs[k]++
	for _, o := range p.channels {
		if o.typ == typ && o.src == src && o.dst == dst {
			c.ordinal++
		}
	}
	p.channels = append(p.channels, c)
	return c
}

// syncOp records a signal/wait/flush on the channel.
func (c *channel) syncOp(name plan.OpName, label string, tb Blocks, sync SyncType) {
	if c == nil || c.bad {
		return
	}
	p := c.p
	tbs, _, ok := p.blocks(c.src, label, tb, true)
	if !ok || !p.checkSync(c.src, tbs[0], label, sync) {
		return
	}
	p.add(&op{name: name, rank: c.src, sync: sync, chType: c.typ, chans: []*channel{c}}, tbs, nil)
}

// putOp records a put-like op from a local chunk to the peer's chunk.
func (c *channel) putOp(name plan.OpName, label string, dst, src Chunk, tb Blocks) {
	if c == nil || c.bad {
		return
	}
	p := c.p
	tbs, g, ok := p.blocks(c.src, label, tb, c.typ == plan.ChannelPort)
	if !ok {
		return
	}
	t := firstTB(tbs)
	if !p.checkChunk(c.src, t, label, "source", src) || !p.checkChunk(c.src, t, label, "destination", dst) {
		return
	}
	if src.Rank != c.src {
		p.fail(c.src, t, label, "source chunk rank %d does not match the channel's source rank %d", src.Rank, c.src)
		return
	}
	if dst.Rank != c.dst {
		p.fail(c.src, t, label, "destination chunk rank %d does not match the channel's destination rank %d", dst.Rank, c.dst)
		return
	}
	if !p.sameSize(c.src, t, label, []string{"destination", "source"}, []Chunk{dst, src}) {
		return
	}
	if name == plan.OpPutPackets || name == plan.OpReadPutPackets {
		if !p.needLL(c.src, t, label) || !p.needScratch(c.src, t, label, "destination", dst) {
			return
		}
		if name == plan.OpReadPutPackets && !p.needScratch(c.src, t, label, "source", src) {
			return
		}
	}
	d := chunkRef(dst)
	d.via = c
	p.add(&op{name: name, rank: c.src, chType: c.typ, chans: []*channel{c}, src: []ref{chunkRef(src)}, dst: []ref{d}}, tbs, g)
}

// MemoryChannel is a channel through which the source rank's threads read
// and write the destination rank's memory directly (CUDA IPC).
type MemoryChannel struct{ c *channel }

// MemoryChannel makes a new memory channel on src that connects to dst.
// Every call makes a new channel; the k-th memory channel from a to b pairs
// with the k-th from b to a (signals on one are waited for on the other).
func (p *Program) MemoryChannel(dst, src int) *MemoryChannel {
	return &MemoryChannel{p.newChannel(plan.ChannelMemory, dst, src)}
}

// ch is the channel, nil for a nil *MemoryChannel (whose ops do nothing).
func (m *MemoryChannel) ch() *channel {
	if m == nil {
		return nil
	}
	return m.c
}

// Src and Dst are the ranks the channel connects (-1 for a nil channel).
func (m *MemoryChannel) Src() int { return m.ch().srcRank() }
func (m *MemoryChannel) Dst() int { return m.ch().dstRank() }

// Signal increments the semaphore the destination rank waits on, releasing
// the source rank's earlier writes to it.
func (m *MemoryChannel) Signal(tb Blocks, sync SyncType) {
	m.ch().syncOp(plan.OpSignal, "memory signal", tb, sync)
}

// Wait waits for one signal from the destination rank.
func (m *MemoryChannel) Wait(tb Blocks, sync SyncType) {
	m.ch().syncOp(plan.OpWait, "memory wait", tb, sync)
}

// RelaxedSignal is Signal without the release of data (a readiness
// handshake).
func (m *MemoryChannel) RelaxedSignal(tb Blocks, sync SyncType) {
	m.ch().syncOp(plan.OpRelaxedSignal, "memory relaxed signal", tb, sync)
}

// RelaxedWait is Wait without the acquire of data.
func (m *MemoryChannel) RelaxedWait(tb Blocks, sync SyncType) {
	m.ch().syncOp(plan.OpRelaxedWait, "memory relaxed wait", tb, sync)
}

// Put copies src (on the source rank) to dst (on the destination rank).
func (m *MemoryChannel) Put(dst, src Chunk, tb Blocks) {
	m.ch().putOp(plan.OpPut, "memory put", dst, src, tb)
}

// PutPackets copies src to the destination rank's scratch chunk dst as LL
// packets (the reader polls their flags; no signal needed).
func (m *MemoryChannel) PutPackets(dst, src Chunk, tb Blocks) {
	m.ch().putOp(plan.OpPutPackets, "memory put_packets", dst, src, tb)
}

// ReadPutPackets forwards packets already in the source rank's scratch
// chunk src to the destination rank's scratch chunk dst.
func (m *MemoryChannel) ReadPutPackets(dst, src Chunk, tb Blocks) {
	m.ch().putOp(plan.OpReadPutPackets, "memory read_put_packets", dst, src, tb)
}

// Get copies src (on the destination rank) to dst (on the source rank).
func (m *MemoryChannel) Get(dst, src Chunk, tb Blocks) {
	c := m.ch()
	if c == nil || c.bad {
		return
	}
	p, label := c.p, "memory get"
	tbs, g, ok := p.blocks(c.src, label, tb, false)
	if !ok {
		return
	}
	t := firstTB(tbs)
	if !p.checkChunk(c.src, t, label, "source", src) || !p.checkChunk(c.src, t, label, "destination", dst) {
		return
	}
	if dst.Rank != c.src {
		p.fail(c.src, t, label, "destination chunk rank %d does not match the channel's source rank %d", dst.Rank, c.src)
		return
	}
	if src.Rank != c.dst {
		p.fail(c.src, t, label, "source chunk rank %d does not match the channel's destination rank %d", src.Rank, c.dst)
		return
	}
	if !p.sameSize(c.src, t, label, []string{"destination", "source"}, []Chunk{dst, src}) {
		return
	}
	s := chunkRef(src)
	s.via = c
	p.add(&op{name: plan.OpGet, rank: c.src, chType: c.typ, chans: []*channel{c}, src: []ref{s}, dst: []ref{chunkRef(dst)}}, tbs, g)
}

// Reduce reads remote chunks of the destination rank and stores
// op(src, remote...) in dst; src and dst are on the source rank (pass the
// same chunk for an in-place reduction). A zero op means Sum.
func (m *MemoryChannel) Reduce(dst, src Chunk, remote []Chunk, rop plan.ReduceOp, tb Blocks) {
	c := m.ch()
	if c == nil || c.bad {
		return
	}
	p, label := c.p, "memory reduce"
	tbs, g, ok := p.blocks(c.src, label, tb, false)
	if !ok {
		return
	}
	t := firstTB(tbs)
	if !p.checkReduceOp(c.src, t, label, rop) || !p.checkChunk(c.src, t, label, "local source", src) || !p.checkChunk(c.src, t, label, "local destination", dst) {
		return
	}
	if len(remote) == 0 {
		p.fail(c.src, t, label, "no remote source chunks")
		return
	}
	if src.Rank != c.src {
		p.fail(c.src, t, label, "local source chunk rank %d does not match the channel's source rank %d", src.Rank, c.src)
		return
	}
	if dst.Rank != c.src {
		p.fail(c.src, t, label, "local destination chunk rank %d does not match the channel's source rank %d", dst.Rank, c.src)
		return
	}
	if dst.Size != src.Size {
		p.fail(c.src, t, label, "local source chunk size %d does not match local destination chunk size %d", src.Size, dst.Size)
		return
	}
	o := &op{name: plan.OpReadReduce, rank: c.src, chType: c.typ, reduce: rop, src: []ref{chunkRef(src)}, dst: []ref{chunkRef(dst)}}
	for i, r := range remote {
		what := "remote source"
		if !p.checkChunk(c.src, t, label, what, r) {
			return
		}
		if r.Rank != c.dst {
			p.fail(c.src, t, label, "remote source chunk %d rank %d does not match the channel's destination rank %d", i, r.Rank, c.dst)
			return
		}
		if r.Size != src.Size {
			p.fail(c.src, t, label, "remote source chunk %d size %d does not match local source chunk size %d", i, r.Size, src.Size)
			return
		}
		rr := chunkRef(r)
		rr.via = c
		o.src = append(o.src, rr)
		o.chans = append(o.chans, c)
	}
	p.add(o, tbs, g)
}

// PortChannel is a channel whose copies a proxy (a host thread or a DMA
// engine) performs; completion needs Flush. Port channel operations run on
// a single thread block.
type PortChannel struct{ c *channel }

// PortChannel makes a new port channel on src that connects to dst (paired
// like memory channels).
func (p *Program) PortChannel(dst, src int) *PortChannel {
	return &PortChannel{p.newChannel(plan.ChannelPort, dst, src)}
}

func (c *PortChannel) ch() *channel {
	if c == nil {
		return nil
	}
	return c.c
}

// Src and Dst are the ranks the channel connects (-1 for a nil channel).
func (c *PortChannel) Src() int { return c.ch().srcRank() }
func (c *PortChannel) Dst() int { return c.ch().dstRank() }

// Signal signals the destination rank (after earlier puts on the channel).
func (c *PortChannel) Signal(tb Blocks, sync SyncType) {
	c.ch().syncOp(plan.OpSignal, "port signal", tb, sync)
}

// Wait waits for one signal from the destination rank.
func (c *PortChannel) Wait(tb Blocks, sync SyncType) {
	c.ch().syncOp(plan.OpWait, "port wait", tb, sync)
}

// Flush waits until the channel's earlier puts completed.
func (c *PortChannel) Flush(tb Blocks, sync SyncType) {
	c.ch().syncOp(plan.OpFlush, "port flush", tb, sync)
}

// Put copies src (source rank) to dst (destination rank).
func (c *PortChannel) Put(dst, src Chunk, tb Blocks) {
	c.ch().putOp(plan.OpPut, "port put", dst, src, tb)
}

// PutWithSignal is Put followed by Signal, in one op.
func (c *PortChannel) PutWithSignal(dst, src Chunk, tb Blocks) {
	c.ch().putOp(plan.OpPutWithSignal, "port put_with_signal", dst, src, tb)
}

// PutWithSignalAndFlush is Put, Signal and Flush in one op.
func (c *PortChannel) PutWithSignalAndFlush(dst, src Chunk, tb Blocks) {
	c.ch().putOp(plan.OpPutWithSignalAndFlush, "port put_with_signal_and_flush", dst, src, tb)
}

// PutPackets copies src to the destination rank's scratch chunk dst as
// packets.
func (c *PortChannel) PutPackets(dst, src Chunk, tb Blocks) {
	c.ch().putOp(plan.OpPutPackets, "port put_packets", dst, src, tb)
}

// ReadPutPackets forwards packets from the source rank's scratch to the
// destination rank's scratch.
func (c *PortChannel) ReadPutPackets(dst, src Chunk, tb Blocks) {
	c.ch().putOp(plan.OpReadPutPackets, "port read_put_packets", dst, src, tb)
}

// SwitchChannel is an NVLink multicast object over a group of ranks, each
// binding the same buffer type. Use At to act as one rank.
type SwitchChannel struct {
	p     *Program
	ranks []int
	buf   plan.BufferType
	ids   map[int]int // switch channel id on each rank
	bad   bool
}

// SwitchChannel makes a switch channel over ranks (distinct, in range),
// binding buffer buf on each.
func (p *Program) SwitchChannel(ranks []int, buf plan.BufferType) *SwitchChannel {
	s := &SwitchChannel{p: p, ranks: slices.Clone(ranks), buf: buf, ids: map[int]int{}}
	const name = "SwitchChannel"
	if len(ranks) == 0 {
		p.fail(-1, -1, name, "no ranks")
		s.bad = true
	}
	if buf != Input && buf != Output && buf != Scratch {
		p.fail(-1, -1, name, "invalid buffer type %v", buf)
		s.bad = true
	}
	seen := map[int]bool{}
	for _, r := range ranks {
		if !p.rankOK(r) {
			p.fail(-1, -1, name, "rank %d out of range (program has %d ranks)", r, len(p.ranks))
			s.bad = true
		} else if seen[r] {
			p.fail(-1, -1, name, "rank %d listed twice", r)
			s.bad = true
		}
		seen[r] = true
	}
	if s.bad {
		return s
	}
	for _, r := range ranks {
		s.ids[r] = p.switchID[r]
		p.switchID[r]++
	}
	p.switches = append(p.switches, s)
	return s
}

// Ranks returns the ranks of the group.
func (s *SwitchChannel) Ranks() []int {
	if s == nil {
		return nil
	}
	return slices.Clone(s.ranks)
}

// SwitchView is a switch channel seen from one of its ranks.
type SwitchView struct {
	s    *SwitchChannel
	rank int
	bad  bool
}

// At returns the view of rank r, which must belong to the group.
func (s *SwitchChannel) At(r int) SwitchView {
	if s == nil || s.bad {
		return SwitchView{s: s, rank: r, bad: true}
	}
	if !slices.Contains(s.ranks, r) {
		s.p.fail(r, -1, "SwitchChannel.At", "rank %d is not in the switch channel's group %v", r, s.ranks)
		return SwitchView{s: s, rank: r, bad: true}
	}
	return SwitchView{s: s, rank: r}
}

// groupRange checks that [offset, offset+size) fits the switch buffer on
// every rank of the group.
func (v SwitchView) groupRange(t int, label string, offset, size int) bool {
	p := v.s.p
	if offset < 0 || size < 1 {
		p.fail(v.rank, t, label, "buffer offset %d size %d (want offset >= 0, size >= 1)", offset, size)
		return false
	}
	for _, r := range v.s.ranks {
		rk := p.ranks[r]
		n := map[plan.BufferType]int{Input: rk.in, Output: rk.out, Scratch: rk.scratch}[v.s.buf]
		if offset+size > n {
			p.fail(v.rank, t, label, "%s range [%d:%d) beyond rank %d's %d %s chunks", v.s.buf.Short(), offset, offset+size, r, n, v.s.buf.Short())
			return false
		}
	}
	return true
}

func (v SwitchView) groupOp(name plan.OpName, label string, c Chunk, offset, size int, rop plan.ReduceOp, tb Blocks) {
	if v.bad || v.s == nil || v.s.bad {
		return
	}
	p := v.s.p
	// A thread-block group splits the range: block i of n does part i (as
	// MSCCL++'s DSL emits with tbg_info on switch ops).
	tbs, g, ok := p.blocks(v.rank, label, tb, false)
	if !ok {
		return
	}
	t := tbs[0]
	what := "destination"
	if name == plan.OpGroupStore || name == plan.OpGroupStorePackets {
		what = "source"
	}
	if name == plan.OpGroupStorePackets {
		if !p.needLL(v.rank, t, label) || !p.needScratch(v.rank, t, label, what, c) {
			return
		}
		if v.s.buf != Scratch {
			p.fail(v.rank, t, label, "the switch channel binds %s, but packets live in scratch (bind the scratch buffer)", v.s.buf.Short())
			return
		}
	}
	if !p.checkReduceOp(v.rank, t, label, rop) || !p.checkChunk(v.rank, t, label, what, c) {
		return
	}
	if c.Rank != v.rank {
		p.fail(v.rank, t, label, "%s chunk rank %d is not the executing rank %d", what, c.Rank, v.rank)
		return
	}
	if c.Size != size {
		p.fail(v.rank, t, label, "%s chunk size %d does not match the size %d", what, c.Size, size)
		return
	}
	if !v.groupRange(t, label, offset, size) {
		return
	}
	p.add(&op{name: name, rank: v.rank, chType: plan.ChannelSwitch, reduce: rop, sw: v.s, goff: offset, gsize: size, gchunk: chunkRef(c), hasGChunk: true}, tbs, g)
}

// Reduce loads [offset, offset+size) of the switch buffer from every rank
// of the group, reduces it (multimem load-reduce) and stores the result in
// dst on this rank. A zero op means Sum.
func (v SwitchView) Reduce(dst Chunk, offset, size int, rop plan.ReduceOp, tb Blocks) {
	v.groupOp(plan.OpGroupLoadReduce, "switch reduce", dst, offset, size, rop, tb)
}

// Broadcast stores src (on this rank) into [offset, offset+size) of the
// switch buffer on every rank of the group (multimem store).
func (v SwitchView) Broadcast(src Chunk, offset, size int, tb Blocks) {
	v.groupOp(plan.OpGroupStore, "switch broadcast", src, offset, size, plan.ReduceNone, tb)
}

// BroadcastPackets stores the LL packets in src (scratch, on this rank)
// into [offset, offset+size) of the switch buffer (scratch) on every rank
// of the group: MSCCL++'s broadcast_packets (gstorepkt, chorus's reading,
// docs/plans.md). The packets carry their flags, so readers on every
// rank (upkt, repkt...) wait for them without a signal.
func (v SwitchView) BroadcastPackets(src Chunk, offset, size int, tb Blocks) {
	v.groupOp(plan.OpGroupStorePackets, "switch broadcast_packets", src, offset, size, plan.ReduceNone, tb)
}

// Signal arrives at the switch channel's barrier (a multimem add to the
// group's arrival counter that every group rank sees); with release
// semantics: this block's writes before it (after SyncBefore's nop) are
// visible to a rank that waited for it.
func (v SwitchView) Signal(tb Blocks, sync SyncType) {
	v.syncOp(plan.OpSignal, "switch signal", tb, sync)
}

// Wait waits until every group rank signalled the switch channel as often
// as this rank waited on it so far, this wait included (the k-th wait
// needs every rank's k-th signal), and acquires their writes.
func (v SwitchView) Wait(tb Blocks, sync SyncType) {
	v.syncOp(plan.OpWait, "switch wait", tb, sync)
}

// RelaxedSignal and RelaxedWait are Signal and Wait without data ordering
// (readiness only), as rlxsignal/rlxwait on memory channels.
func (v SwitchView) RelaxedSignal(tb Blocks, sync SyncType) {
	v.syncOp(plan.OpRelaxedSignal, "switch relaxed signal", tb, sync)
}

// RelaxedWait: see RelaxedSignal.
func (v SwitchView) RelaxedWait(tb Blocks, sync SyncType) {
	v.syncOp(plan.OpRelaxedWait, "switch relaxed wait", tb, sync)
}

// Barrier is MSCCL++'s SwitchChannel.barrier(tb_list): every group rank
// waits until all of them arrived, with release/acquire ordering. One
// block: Signal(SyncBefore) then Wait(SyncAfter) on it. Several blocks: a
// barrier of those blocks on this rank, the switch signal and wait on the
// first of them, and the rank barrier again, so every listed block's
// writes before are ordered before every group rank's ops after.
func (v SwitchView) Barrier(tbs ...int) {
	if v.bad || v.s == nil || v.s.bad {
		return
	}
	p := v.s.p
	if len(tbs) == 0 {
		p.fail(v.rank, -1, "switch barrier", "needs at least one thread block")
		return
	}
	if len(tbs) == 1 {
		v.Signal(TB(tbs[0]), SyncBefore)
		v.Wait(TB(tbs[0]), SyncAfter)
		return
	}
	rk := p.Rank(v.rank)
	rk.Barrier(tbs...)
	v.Signal(TB(tbs[0]), SyncNone)
	v.Wait(TB(tbs[0]), SyncNone)
	rk.Barrier(tbs...)
}

func (v SwitchView) syncOp(name plan.OpName, label string, tb Blocks, sync SyncType) {
	if v.bad || v.s == nil || v.s.bad {
		return
	}
	p := v.s.p
	tbs, _, ok := p.blocks(v.rank, label, tb, true)
	if !ok || !p.checkSync(v.rank, tbs[0], label, sync) {
		return
	}
	p.add(&op{name: name, rank: v.rank, sync: sync, chType: plan.ChannelSwitch, sw: v.s}, tbs, nil)
}
