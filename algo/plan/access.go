package plan

import (
	"errors"
	"fmt"
)

// ErrResolve is wrapped by the resolution helpers' errors: an id that does
// not resolve (Validate reports the same conditions as ErrInvalid).
var ErrResolve = errors.New("plan: unresolved reference")

func resolveErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrResolve, fmt.Sprintf(format, args...))
}

// SwitchGroup is one switch (multicast) channel: the ranks that share it
// and the buffer each of them binds.
type SwitchGroup struct {
	Buffer BufferType
	Ranks  []int
}

// ChannelPeers returns the peers of g's channels of type t (memory or
// port), indexed by GPU channel id: the connected_to lists of all entries of
// that type, in order.
func (g *GPU) ChannelPeers(t ChannelType) []int {
	var out []int
	for _, c := range g.Channels {
		if c.Type == t && t != ChannelSwitch {
			out = append(out, c.ConnectedTo...)
		}
	}
	return out
}

// SwitchGroups returns g's switch channels indexed by GPU switch channel
// id: every rank group of every switch entry, in order.
func (g *GPU) SwitchGroups() []SwitchGroup {
	var out []SwitchGroup
	for _, c := range g.Channels {
		if c.Type == ChannelSwitch {
			for _, rg := range c.RankGroups {
				out = append(out, SwitchGroup{Buffer: c.BufferType, Ranks: rg.Ranks})
			}
		}
	}
	return out
}

// TBChannelIDs returns the GPU channel ids of type t that tb uses, indexed
// by the thread-block-local channel index an op's channel_ids hold.
func (tb *ThreadBlock) TBChannelIDs(t ChannelType) []int {
	var out []int
	for _, c := range tb.Channels {
		if c.Type == t {
			out = append(out, c.ChannelIDs...)
		}
	}
	return out
}

// RemoteBufferIDs returns the GPU remote buffer indices tb reaches through
// channels of type t, indexed by a remote BufRef's buffer id.
func (tb *ThreadBlock) RemoteBufferIDs(t ChannelType) []int {
	var out []int
	for _, r := range tb.RemoteBufferRefs {
		if r.AccessChannelType == t {
			out = append(out, r.RemoteBufferIDs...)
		}
	}
	return out
}

func (p *Plan) tb(gpu, tb int) (*GPU, *ThreadBlock, error) {
	if gpu < 0 || gpu >= len(p.GPUs) {
		return nil, nil, resolveErr("no gpu %d", gpu)
	}
	g := &p.GPUs[gpu]
	if tb < 0 || tb >= len(g.ThreadBlocks) {
		return nil, nil, resolveErr("gpu %d has no tb %d", gpu, tb)
	}
	return g, &g.ThreadBlocks[tb], nil
}

// TBChannel resolves thread-block-local channel index i of type t (an entry
// of an op's channel_ids) to the GPU channel id.
func (p *Plan) TBChannel(gpu, tb int, t ChannelType, i int) (int, error) {
	_, b, err := p.tb(gpu, tb)
	if err != nil {
		return 0, err
	}
	ids := b.TBChannelIDs(t)
	if i < 0 || i >= len(ids) {
		return 0, resolveErr("gpu %d tb %d has no %s channel index %d (it has %d)", gpu, tb, t, i, len(ids))
	}
	return ids[i], nil
}

// ChannelPeer returns the rank that GPU channel id of type t (memory or
// port) on gpu connects to.
func (p *Plan) ChannelPeer(gpu int, t ChannelType, id int) (int, error) {
	if gpu < 0 || gpu >= len(p.GPUs) {
		return 0, resolveErr("no gpu %d", gpu)
	}
	if t != ChannelMemory && t != ChannelPort {
		return 0, resolveErr("gpu %d: %s channels have no single peer", gpu, t)
	}
	// Walk the channel entries instead of building ChannelPeers' slice:
	// this runs once per channel reference of every op (Validate, OpAccess).
	n := 0
	for _, c := range p.GPUs[gpu].Channels {
		if c.Type != t {
			continue
		}
		if id >= n && id < n+len(c.ConnectedTo) {
			return c.ConnectedTo[id-n], nil
		}
		n += len(c.ConnectedTo)
	}
	return 0, resolveErr("gpu %d has no %s channel %d (it has %d)", gpu, t, id, n)
}

// RemoteBufferOf resolves a remote BufRef's buffer id in an op of channel
// type t on (gpu, tb): it returns the GPU remote buffer index and the
// buffer (owner rank and type).
func (p *Plan) RemoteBufferOf(gpu, tb int, t ChannelType, bufferID int) (int, RemoteBuffer, error) {
	g, b, err := p.tb(gpu, tb)
	if err != nil {
		return 0, RemoteBuffer{}, err
	}
	ids := b.RemoteBufferIDs(t)
	if bufferID < 0 || bufferID >= len(ids) {
		return 0, RemoteBuffer{}, resolveErr("gpu %d tb %d has no %s remote buffer ref %d (it has %d)", gpu, tb, t, bufferID, len(ids))
	}
	id := ids[bufferID]
	if id < 0 || id >= len(g.RemoteBuffers) {
		return 0, RemoteBuffer{}, resolveErr("gpu %d has no remote buffer %d (it has %d)", gpu, id, len(g.RemoteBuffers))
	}
	return id, g.RemoteBuffers[id], nil
}

// SwitchGroupOf resolves thread-block-local switch channel index i (an op's
// channel_ids entry or a BufRef's switch_channel_id) to its group.
func (p *Plan) SwitchGroupOf(gpu, tb int, i int) (SwitchGroup, error) {
	id, err := p.TBChannel(gpu, tb, ChannelSwitch, i)
	if err != nil {
		return SwitchGroup{}, err
	}
	groups := p.GPUs[gpu].SwitchGroups()
	if id < 0 || id >= len(groups) {
		return SwitchGroup{}, resolveErr("gpu %d has no switch channel %d (it has %d)", gpu, id, len(groups))
	}
	return groups[id], nil
}

// Peers returns, for each entry of op.ChannelIDs, the rank at the other end
// (memory and port channels; nil for other channel types). This is whom a
// signal signals, a wait waits for and a flush flushes towards.
func (p *Plan) Peers(gpu, tb int, op *Op) ([]int, error) {
	if op.ChannelType != ChannelMemory && op.ChannelType != ChannelPort {
		return nil, nil
	}
	var out []int
	for _, i := range op.ChannelIDs {
		id, err := p.TBChannel(gpu, tb, op.ChannelType, i)
		if err != nil {
			return nil, err
		}
		peer, err := p.ChannelPeer(gpu, op.ChannelType, id)
		if err != nil {
			return nil, err
		}
		out = append(out, peer)
	}
	return out, nil
}

// AccessMode says whether an Access reads or writes.
type AccessMode uint8

const (
	AccessRead AccessMode = iota
	AccessWrite
)

func (m AccessMode) String() string {
	if m == AccessWrite {
		return "write"
	}
	return "read"
}

// Access is one chunk range that an op reads or writes.
type Access struct {
	Mode   AccessMode
	Rank   int        // the rank whose memory is accessed
	Buffer BufferType // which of its buffers
	Index  int        // first chunk
	Size   int        // number of chunks
	// Packet: the range holds LL packets (data interleaved with flags), not
	// plain data. Packet ranges are always scratch.
	Packet bool
	// Via is how the memory is reached: ChannelNone for the executing
	// rank's own buffers, else the channel type (memory, port, switch).
	Via ChannelType
	// Part/Parts: with a thread-block group the op touches only part Part
	// of Parts of the range (see Layout.Part); Parts is 1 otherwise.
	Part, Parts int
}

// End is Index+Size.
func (a Access) End() int { return a.Index + a.Size }

// Access returns the chunk ranges that op number op of thread block tb on
// gpu reads and writes (see OpAccess).
func (p *Plan) Access(gpu, tb, op int) ([]Access, error) {
	_, b, err := p.tb(gpu, tb)
	if err != nil {
		return nil, err
	}
	if op < 0 || op >= len(b.Ops) {
		return nil, resolveErr("gpu %d tb %d has no op %d", gpu, tb, op)
	}
	return p.OpAccess(gpu, tb, &b.Ops[op])
}

// ScratchUse reports whether an op of p (any rank) accesses LL packets,
// and whether one reads or writes plain data in a scratch buffer.
func (p *Plan) ScratchUse() (packets, plainScratch bool, err error) {
	for g := range p.GPUs {
		for t := range p.GPUs[g].ThreadBlocks {
			for i := range p.GPUs[g].ThreadBlocks[t].Ops {
				acc, err := p.OpAccess(g, t, &p.GPUs[g].ThreadBlocks[t].Ops[i])
				if err != nil {
					return false, false, err
				}
				for _, a := range acc {
					packets = packets || a.Packet
					plainScratch = plainScratch || (a.Buffer == Scratch && !a.Packet)
				}
			}
		}
	}
	return packets, plainScratch, nil
}

// OpAccess returns the chunk ranges op (run by thread block tb of gpu)
// reads and writes: reads first, in src_buff order, then writes in dst_buff
// order. These are the semantics every consumer of a plan uses:
//
//   - A src_buff entry is read, a dst_buff entry is written.
//   - A local entry ("type") is the executing rank's buffer.
//   - A remote entry ("buffer_id") is resolved through the thread block's
//     remote_buffer_refs of the op's channel type to the GPU's
//     remote_buffers entry: that rank's buffer of that type. So a put on
//     channel c from rank r writes into the peer ConnectedTo[c] (Validate
//     checks the remote buffer's rank is that peer when channel_ids are
//     given), a get reads from it.
//   - A switch entry ("switch_channel_id") stands for the same range of the
//     switch channel's buffer on every rank of its group.
//   - glre reads GroupBuffer[GroupOffset:+GroupSize] on every group rank and
//     writes DstChunk; gstore reads SrcChunk and writes the group range on
//     every group rank. In the buffer form (GroupBuffer BufferNone) they
//     use src_buff/dst_buff like any op: gstore local -> switch, glre
//     switch -> local.
//   - gstorepkt is gstore on LL packets: it reads its local source as
//     packets (waiting for their flags) and writes the group range on
//     every group rank as packets.
//   - rppkt with one src_buff and several dst_buff entries reads the
//     source once and writes every destination.
//   - Packet format: cpkt writes packets, upkt reads packets, ppkt writes
//     packets to the peer, rppkt reads and writes packets; the packet
//     reduces (repkt, respkt, recpkt, recspkt) read src_buff[1:] as packets
//     (src_buff[0] is plain data), write dst_buff[0] plain, a second local
//     dst (recpkt, recspkt) as packets, and remote dsts as packets.
//   - A pipeline's accesses are its body's, in order.
//   - Ops without buffers (nop, barrier, signal, wait, flush, semaphores)
//     access nothing.
//
// The reduce ops compute dst = reduce_op(all srcs, in order) and write that
// result to every dst.
func (p *Plan) OpAccess(gpu, tb int, op *Op) ([]Access, error) {
	if _, _, err := p.tb(gpu, tb); err != nil {
		return nil, err
	}
	if op.Name == OpPipeline {
		var out []Access
		for i := range op.Ops {
			a, err := p.OpAccess(gpu, tb, &op.Ops[i])
			if err != nil {
				return nil, err
			}
			out = append(out, a...)
		}
		return out, nil
	}
	part, parts := 0, 1
	if op.TBG != nil {
		part, parts = op.TBG.ID, op.TBG.Size
	}
	var out []Access
	add := func(mode AccessMode, rank int, buf BufferType, index, size int, packet bool, via ChannelType) {
		out = append(out, Access{Mode: mode, Rank: rank, Buffer: buf, Index: index, Size: size, Packet: packet, Via: via, Part: part, Parts: parts})
	}
	packetReduce := op.Name == OpReducePackets || op.Name == OpReduceSendPackets ||
		op.Name == OpReduceCopyPackets || op.Name == OpReduceCopySendPackets
	ref := func(mode AccessMode, i int, b BufRef) error {
		packet := false
		switch {
		case op.Name == OpReadPutPackets || op.Name == OpGroupStorePackets:
			packet = true
		case op.Name == OpCopyPackets || op.Name == OpPutPackets:
			packet = mode == AccessWrite
		case op.Name == OpUnpackPackets:
			packet = mode == AccessRead
		case packetReduce:
			packet = i > 0 || (mode == AccessWrite && b.Kind == RefRemote)
		}
		switch b.Kind {
		case RefLocal:
			add(mode, gpu, b.Type, b.Index, b.Size, packet, ChannelNone)
		case RefRemote:
			_, rb, err := p.RemoteBufferOf(gpu, tb, op.ChannelType, b.ID)
			if err != nil {
				return err
			}
			add(mode, rb.Rank, rb.Type, b.Index, b.Size, packet, op.ChannelType)
		case RefSwitch:
			sg, err := p.SwitchGroupOf(gpu, tb, b.ID)
			if err != nil {
				return err
			}
			for _, r := range sg.Ranks {
				add(mode, r, sg.Buffer, b.Index, b.Size, packet, ChannelSwitch)
			}
		default:
			return resolveErr("bad buffer reference kind %d", b.Kind)
		}
		return nil
	}
	for i, b := range op.Src {
		if err := ref(AccessRead, i, b); err != nil {
			return nil, err
		}
	}
	pktStore := op.Name == OpGroupStorePackets
	if isGroupStore(op.Name) && op.SrcChunk != nil {
		add(AccessRead, gpu, op.SrcChunk.Type, op.SrcChunk.Index, op.SrcChunk.Size, pktStore, ChannelNone)
	}
	if isGroupOne(op.Name) && op.GroupBuffer != BufferNone {
		if len(op.ChannelIDs) == 0 {
			return nil, resolveErr("%s without a switch channel", op.Name)
		}
		sg, err := p.SwitchGroupOf(gpu, tb, op.ChannelIDs[0])
		if err != nil {
			return nil, err
		}
		mode := AccessRead
		if isGroupStore(op.Name) {
			mode = AccessWrite
		}
		for _, r := range sg.Ranks {
			add(mode, r, op.GroupBuffer, op.GroupOffset, op.GroupSize, pktStore, ChannelSwitch)
		}
		if op.Name == OpGroupLoadReduce {
			if op.DstChunk != nil {
				add(AccessWrite, gpu, op.DstChunk.Type, op.DstChunk.Index, op.DstChunk.Size, false, ChannelNone)
			}
		}
	}
	for i, b := range op.Dst {
		if err := ref(AccessWrite, i, b); err != nil {
			return nil, err
		}
	}
	return out, nil
}
