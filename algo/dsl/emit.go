package dsl

import (
	"slices"

	"github.com/chorus-rt/chorus/algo/plan"
)

// emit builds the plan from the lowered ops (step 6 of Lower: instance
// replication happens here, as a renaming).
func (p *Program) emit(lowered [][][]*op) *plan.Plan {
	cfg := p.cfg
	I := cfg.Instances
	pl := &plan.Plan{
		Name:                   cfg.Name,
		Collective:             cfg.Collective,
		Protocol:               cfg.Protocol,
		InPlace:                cfg.InPlace,
		ReuseResources:         cfg.ReuseResources,
		NumThreadsPerBlock:     cfg.ThreadsPerBlock,
		UseDoubleScratchBuffer: cfg.DoubleScratch,
		BufferAlignment:        cfg.BufferAlignment,
		MinMessageSize:         cfg.MinMessageSize,
		MaxMessageSize:         cfg.MaxMessageSize,
	}
	for r, rk := range p.ranks {
		g := plan.GPU{ID: r, InputChunks: rk.in * I, OutputChunks: rk.out * I, ScratchChunks: rk.scratch * I}
		for _, typ := range []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort} {
			var peers []int
			for _, c := range p.channels { // channels of a rank and type are created in id order
				if c.src == r && c.typ == typ {
					for range I {
						peers = append(peers, c.dst)
					}
				}
			}
			if len(peers) > 0 {
				g.Channels = append(g.Channels, plan.Channel{Type: typ, ConnectedTo: peers})
			}
		}
		for _, s := range p.switches { // switch ids of a rank are in creation order too
			if _, ok := s.ids[r]; ok {
				for range I {
					g.Channels = append(g.Channels, plan.Channel{Type: plan.ChannelSwitch, BufferType: s.buf,
						RankGroups: []plan.RankGroup{{Size: len(s.ranks), Ranks: slices.Clone(s.ranks)}}})
				}
			}
		}
		for _, v := range rk.sems {
			for range I {
				g.Semaphores = append(g.Semaphores, plan.Semaphore{InitValue: v})
			}
		}
		ge := &gpuEmitter{p: p, g: &g, rank: r, rb: map[rbKey]int{}}
		if len(lowered[r]) > 0 { // a rank without thread blocks keeps nil, as Parse gives
			g.ThreadBlocks = make([]plan.ThreadBlock, len(lowered[r])*I)
		}
		for t, ops := range lowered[r] {
			for i := range I {
				g.ThreadBlocks[t*I+i] = ge.threadBlock(t*I+i, i, ops)
			}
		}
		pl.GPUs = append(pl.GPUs, g)
	}
	return pl
}

type rbKey struct {
	rank int
	buf  plan.BufferType
}

type gpuEmitter struct {
	p    *Program
	g    *plan.GPU
	rank int
	rb   map[rbKey]int
}

// remoteBuffer returns the GPU remote buffer index of (owner, buf),
// allowing access through typ.
func (ge *gpuEmitter) remoteBuffer(owner int, buf plan.BufferType, typ plan.ChannelType) int {
	k := rbKey{owner, buf}
	id, ok := ge.rb[k]
	if !ok {
		id = len(ge.g.RemoteBuffers)
		ge.rb[k] = id
		ge.g.RemoteBuffers = append(ge.g.RemoteBuffers, plan.RemoteBuffer{Rank: owner, Type: buf})
	}
	rb := &ge.g.RemoteBuffers[id]
	if !slices.Contains(rb.AccessChannelTypes, typ) {
		rb.AccessChannelTypes = append(rb.AccessChannelTypes, typ)
	}
	return id
}

// tbEmitter builds one thread block: its channel and remote buffer tables
// grow as ops use them (first use gets the next thread-block-local index).
type tbEmitter struct {
	ge    *gpuEmitter
	inst  int
	chans map[plan.ChannelType][]int
	rbufs map[plan.ChannelType][]int
}

func (ge *gpuEmitter) threadBlock(id, inst int, ops []*op) plan.ThreadBlock {
	te := &tbEmitter{ge: ge, inst: inst, chans: map[plan.ChannelType][]int{}, rbufs: map[plan.ChannelType][]int{}}
	tb := plan.ThreadBlock{ID: id}
	for _, o := range ops {
		tb.Ops = append(tb.Ops, te.op(o))
	}
	for _, typ := range []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort, plan.ChannelSwitch} {
		if ids := te.chans[typ]; len(ids) > 0 {
			tb.Channels = append(tb.Channels, plan.TBChannel{Type: typ, ChannelIDs: ids})
		}
	}
	for _, typ := range []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort} {
		if ids := te.rbufs[typ]; len(ids) > 0 {
			tb.RemoteBufferRefs = append(tb.RemoteBufferRefs, plan.RemoteBufRef{AccessChannelType: typ, RemoteBufferIDs: ids})
		}
	}
	return tb
}

func (te *tbEmitter) local(typ plan.ChannelType, gid int) int {
	i := slices.Index(te.chans[typ], gid)
	if i < 0 {
		i = len(te.chans[typ])
		te.chans[typ] = append(te.chans[typ], gid)
	}
	return i
}

func (te *tbEmitter) channel(c *channel) int {
	return te.local(c.typ, c.id*te.ge.p.cfg.Instances+te.inst)
}

func (te *tbEmitter) switchChannel(s *SwitchChannel) int {
	return te.local(plan.ChannelSwitch, s.ids[te.ge.rank]*te.ge.p.cfg.Instances+te.inst)
}

// index renames a chunk range's start for this instance.
func (te *tbEmitter) index(idx, size int) int {
	I := te.ge.p.cfg.Instances
	return idx*I + te.inst*size
}

func (te *tbEmitter) ref(r ref) plan.BufRef {
	switch {
	case r.sw != nil:
		return plan.Switch(te.switchChannel(r.sw), te.index(r.index, r.size), r.size)
	case r.via != nil:
		typ := r.via.typ
		gid := te.ge.remoteBuffer(r.rank, r.buf, typ)
		i := slices.Index(te.rbufs[typ], gid)
		if i < 0 {
			i = len(te.rbufs[typ])
			te.rbufs[typ] = append(te.rbufs[typ], gid)
		}
		return plan.Remote(i, te.index(r.index, r.size), r.size)
	}
	return plan.Local(r.buf, te.index(r.index, r.size), r.size)
}

func (te *tbEmitter) refs(rs []ref) []plan.BufRef {
	var out []plan.BufRef
	for _, r := range rs {
		out = append(out, te.ref(r))
	}
	return out
}

func (te *tbEmitter) rankChunk(r ref) *plan.RankChunk {
	return &plan.RankChunk{Rank: r.rank, Type: r.buf, Index: te.index(r.index, r.size), Size: r.size}
}

func (te *tbEmitter) op(o *op) plan.Op {
	I := te.ge.p.cfg.Instances
	out := plan.Op{Name: o.name}
	if o.tbg != nil {
		t := *o.tbg
		out.TBG = &t
	}
	chanIDs := func() []int {
		var ids []int
		for _, c := range o.chans {
			ids = append(ids, te.channel(c))
		}
		return ids
	}
	switch o.name {
	case plan.OpNop:
	case plan.OpBarrier:
		out.BarrierID = o.barrierID*I + te.inst
		out.NumThreadBlocks = o.barrier
	case plan.OpSignal, plan.OpWait, plan.OpRelaxedSignal, plan.OpRelaxedWait, plan.OpFlush:
		out.ChannelType = o.chType
		out.ChannelIDs = chanIDs()
		if o.chType == plan.ChannelSwitch {
			out.ChannelIDs = []int{te.switchChannel(o.sw)}
		}
	case plan.OpPut, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush, plan.OpPutPackets, plan.OpReadPutPackets, plan.OpGet:
		out.ChannelType = o.chType
		ids := chanIDs() // registers the channels with the thread block either way
		// MSCCL++ writes channel ids for port-channel puts and for gets;
		// a memory put finds its peer through the remote buffer.
		if o.chType == plan.ChannelPort || o.name == plan.OpGet {
			out.ChannelIDs = ids
		}
		out.Src = te.refs(o.src)
		out.Dst = te.refs(o.dst)
	case plan.OpCopy, plan.OpCopyPackets, plan.OpUnpackPackets:
		out.Src = te.refs(o.src)
		out.Dst = te.refs(o.dst)
	case plan.OpReduce, plan.OpReadReduce, plan.OpReduceSend, plan.OpReadReduceSend,
		plan.OpReducePackets, plan.OpReduceSendPackets, plan.OpReduceCopyPackets, plan.OpReduceCopySendPackets:
		chanIDs() // the thread block must hold the channels it reaches peers through
		out.Src = te.refs(o.src)
		out.Dst = te.refs(o.dst)
		remote := false
		for _, r := range slices.Concat(o.src, o.dst) {
			remote = remote || r.via != nil
		}
		if remote {
			out.ChannelType = plan.ChannelMemory
		}
		out.ReduceOp = o.reduce.Effective()
	case plan.OpGroupLoadReduce, plan.OpGroupStore, plan.OpGroupStorePackets:
		out.ChannelType = plan.ChannelSwitch
		out.ChannelIDs = []int{te.switchChannel(o.sw)}
		out.GroupBuffer = o.sw.buf
		out.GroupOffset = te.index(o.goff, o.gsize)
		out.GroupSize = o.gsize
		if o.name == plan.OpGroupLoadReduce {
			out.DstChunk = te.rankChunk(o.gchunk)
			out.ReduceOp = o.reduce.Effective()
		} else {
			out.SrcChunk = te.rankChunk(o.gchunk)
		}
	case plan.OpGroupLoadReduceStore:
		out.ChannelType = plan.ChannelSwitch
		out.Src = te.refs(o.src)
		out.Dst = te.refs(o.dst)
		out.ReduceOp = o.reduce.Effective()
	case plan.OpSemAcquire, plan.OpSemRelease:
		for _, s := range o.sems {
			out.SemaphoreIDs = append(out.SemaphoreIDs, s*I+te.inst)
		}
	case plan.OpPipeline:
		out.Iter = &plan.IterContext{UnitSize: o.loop.unitSize, NumChunks: o.loop.numChunks}
		for _, b := range o.body {
			out.Ops = append(out.Ops, te.op(b))
		}
	}
	return out
}
