package plan

import (
	"errors"
	"fmt"
	"slices"
)

// ErrInvalid is wrapped by every error Validate reports.
var ErrInvalid = errors.New("plan: invalid")

// maxErrors bounds how many problems Validate lists.
const maxErrors = 50

type checker struct {
	p       *Plan
	errs    []error
	dropped int
}

func (c *checker) bad(where, format string, args ...any) {
	if len(c.errs) >= maxErrors {
		c.dropped++
		return
	}
	msg := fmt.Sprintf(format, args...)
	if where != "" {
		msg = where + ": " + msg
	}
	c.errs = append(c.errs, fmt.Errorf("%w: %s", ErrInvalid, msg))
}

// Validate checks the plan's structure and returns every problem it finds
// (up to 50), joined; each wraps ErrInvalid and names the gpu, thread block
// and op index it is about. It checks:
//
//   - plan: a name and collective, a known protocol, 1..1024 threads per
//     block, a positive buffer alignment, min <= max message size, at least
//     one GPU, and GPUs[r].ID == r (the executor indexes gpus by rank);
//   - GPU: chunk counts >= 0 and input or output chunks > 0; thread block
//     ids equal to their index; memory/port channels to peers in range and
//     not the rank itself; switch channels with a buffer type and rank
//     groups of distinct in-range ranks that include the rank and match
//     their size; remote buffers of another in-range rank, with a buffer
//     type and memory/port access channel types; semaphore initial values
//     >= 0;
//   - thread block: channel ids that exist on the GPU for their type;
//     remote buffer refs to existing remote buffers that allow the access
//     channel type;
//   - op: the fields its kind uses and no others (docs/plans.md), a
//     channel type its kind allows, channel ids and remote buffer ids that
//     resolve in the thread block's tables, chunk ranges inside the
//     buffers (a remote range inside the owner's buffer, a switch range
//     inside every group rank's buffer), equal sizes across src and dst,
//     local/remote/switch references where the kind wants them, scratch
//     buffers for packet data and the LL protocol for packet ops, puts and
//     gets whose channel peer owns the remote buffer, thread-block-group
//     info with 0 <= tb_id < tbg_size, semaphore ids that exist, pipelines
//     with a positive unit size and chunk count and a non-empty body;
//   - barriers: per GPU, every op with one barrier id agrees on
//     num_threadblocks, and exactly that many thread blocks use the id.
func (p *Plan) Validate() error {
	c := &checker{p: p}
	c.plan()
	if c.dropped > 0 {
		c.errs = append(c.errs, fmt.Errorf("%w: and %d more problems", ErrInvalid, c.dropped))
	}
	return errors.Join(c.errs...)
}

func (c *checker) plan() {
	p := c.p
	if p.Name == "" {
		c.bad("plan", "empty name")
	}
	if p.Collective == "" {
		c.bad("plan", "empty collective")
	}
	if p.Protocol != Simple && p.Protocol != LL {
		c.bad("plan", "invalid protocol %v", p.Protocol)
	}
	if p.NumThreadsPerBlock < 1 || p.NumThreadsPerBlock > 1024 {
		c.bad("plan", "num_threads_per_block %d not in 1..1024", p.NumThreadsPerBlock)
	}
	if p.BufferAlignment < 1 {
		c.bad("plan", "buffer_alignment %d not positive", p.BufferAlignment)
	}
	if p.MinMessageSize > p.MaxMessageSize {
		c.bad("plan", "min_message_size %d > max_message_size %d", p.MinMessageSize, p.MaxMessageSize)
	}
	if len(p.GPUs) == 0 {
		c.bad("plan", "no gpus")
	}
	for gi := range p.GPUs {
		c.gpu(gi)
	}
}

func (c *checker) rankOK(r int) bool { return r >= 0 && r < len(c.p.GPUs) }

func (c *checker) gpu(gi int) {
	g := &c.p.GPUs[gi]
	where := fmt.Sprintf("gpu %d", gi)
	if g.ID != gi {
		c.bad(where, "id %d, want %d (gpus must be listed in rank order, each rank once)", g.ID, gi)
	}
	if g.InputChunks < 0 || g.OutputChunks < 0 || g.ScratchChunks < 0 {
		c.bad(where, "negative chunk count (input %d, output %d, scratch %d)", g.InputChunks, g.OutputChunks, g.ScratchChunks)
	}
	// A rank with neither input nor output chunks is fine (MSCCL++'s DSL
	// writes such ranks for synchronization-only programs); it has no
	// buffers, so any chunk range it names is out of range below.
	for ci, ch := range g.Channels {
		cw := fmt.Sprintf("%s channel %d", where, ci)
		switch ch.Type {
		case ChannelMemory, ChannelPort:
			if len(ch.RankGroups) > 0 || ch.BufferType != BufferNone {
				c.bad(cw, "%s channel with switch fields", ch.Type)
			}
			for _, peer := range ch.ConnectedTo {
				if !c.rankOK(peer) {
					c.bad(cw, "connected_to rank %d out of range 0..%d", peer, len(c.p.GPUs)-1)
				} else if peer == gi {
					c.bad(cw, "connected_to itself (rank %d)", peer)
				}
			}
		case ChannelSwitch:
			if len(ch.ConnectedTo) > 0 {
				c.bad(cw, "switch channel with connected_to")
			}
			if !validBuf(ch.BufferType) {
				c.bad(cw, "switch channel buffer_type %v", ch.BufferType)
			}
			if len(ch.RankGroups) == 0 {
				c.bad(cw, "switch channel without rank groups")
			}
			for ri, rg := range ch.RankGroups {
				rw := fmt.Sprintf("%s rank group %d", cw, ri)
				if rg.Size != len(rg.Ranks) {
					c.bad(rw, "size %d but %d ranks", rg.Size, len(rg.Ranks))
				}
				seen := map[int]bool{}
				for _, r := range rg.Ranks {
					if !c.rankOK(r) {
						c.bad(rw, "rank %d out of range 0..%d", r, len(c.p.GPUs)-1)
					}
					if seen[r] {
						c.bad(rw, "rank %d listed twice", r)
					}
					seen[r] = true
				}
				if !seen[gi] {
					c.bad(rw, "does not include rank %d itself", gi)
				}
			}
		default:
			c.bad(cw, "channel type %v is not a GPU channel type", ch.Type)
		}
	}
	for ri, rb := range g.RemoteBuffers {
		rw := fmt.Sprintf("%s remote buffer %d", where, ri)
		if !c.rankOK(rb.Rank) {
			c.bad(rw, "rank %d out of range 0..%d", rb.Rank, len(c.p.GPUs)-1)
		} else if rb.Rank == gi {
			c.bad(rw, "is rank %d's own buffer", gi)
		}
		if !validBuf(rb.Type) {
			c.bad(rw, "buffer type %v", rb.Type)
		}
		if len(rb.AccessChannelTypes) == 0 {
			c.bad(rw, "no access_channel_types")
		}
		for i, t := range rb.AccessChannelTypes {
			if t != ChannelMemory && t != ChannelPort {
				c.bad(rw, "access channel type %v (want memory or port)", t)
			}
			if slices.Contains(rb.AccessChannelTypes[:i], t) {
				c.bad(rw, "access channel type %v listed twice", t)
			}
		}
	}
	for si, s := range g.Semaphores {
		if s.InitValue < 0 {
			c.bad(fmt.Sprintf("%s semaphore %d", where, si), "init_value %d negative", s.InitValue)
		}
	}
	type barrierUse struct {
		n   int
		tbs map[int]bool
		at  string
	}
	barriers := map[int]*barrierUse{}
	var barrierIDs []int
	nMem, nPort, nSw := len(g.ChannelPeers(ChannelMemory)), len(g.ChannelPeers(ChannelPort)), len(g.SwitchGroups())
	for ti := range g.ThreadBlocks {
		tb := &g.ThreadBlocks[ti]
		tw := fmt.Sprintf("%s tb %d", where, ti)
		if tb.ID != ti {
			c.bad(tw, "id %d, want %d (thread blocks must be listed in id order)", tb.ID, ti)
		}
		for ci, ch := range tb.Channels {
			cw := fmt.Sprintf("%s channels[%d]", tw, ci)
			n := 0
			switch ch.Type {
			case ChannelMemory:
				n = nMem
			case ChannelPort:
				n = nPort
			case ChannelSwitch:
				n = nSw
			default:
				c.bad(cw, "channel type %v", ch.Type)
				continue
			}
			for _, id := range ch.ChannelIDs {
				if id < 0 || id >= n {
					c.bad(cw, "%s channel %d does not exist (gpu has %d)", ch.Type, id, n)
				}
			}
		}
		for ri, r := range tb.RemoteBufferRefs {
			rw := fmt.Sprintf("%s remote_buffer_refs[%d]", tw, ri)
			if r.AccessChannelType != ChannelMemory && r.AccessChannelType != ChannelPort {
				c.bad(rw, "access channel type %v (want memory or port)", r.AccessChannelType)
			}
			for _, id := range r.RemoteBufferIDs {
				if id < 0 || id >= len(g.RemoteBuffers) {
					c.bad(rw, "remote buffer %d does not exist (gpu has %d)", id, len(g.RemoteBuffers))
				} else if !slices.Contains(g.RemoteBuffers[id].AccessChannelTypes, r.AccessChannelType) {
					c.bad(rw, "remote buffer %d does not allow %s access", id, r.AccessChannelType)
				}
			}
		}
		var visit func(ops []Op, prefix string, inPipeline bool)
		visit = func(ops []Op, prefix string, inPipeline bool) {
			for oi := range ops {
				op := &ops[oi]
				ow := fmt.Sprintf("%s%s %d (%v)", tw, prefix, oi, op.Name)
				c.op(gi, ti, ow, op, inPipeline)
				if op.Name == OpBarrier {
					b := barriers[op.BarrierID]
					if b == nil {
						b = &barrierUse{n: op.NumThreadBlocks, tbs: map[int]bool{}, at: ow}
						barriers[op.BarrierID] = b
						barrierIDs = append(barrierIDs, op.BarrierID)
					} else if b.n != op.NumThreadBlocks {
						c.bad(ow, "barrier %d with num_threadblocks %d, but %s says %d", op.BarrierID, op.NumThreadBlocks, b.at, b.n)
					}
					b.tbs[ti] = true
				}
				if op.Name == OpPipeline && !inPipeline {
					visit(op.Ops, prefix+fmt.Sprintf(" %d body op", oi), true)
				}
			}
		}
		visit(tb.Ops, " op", false)
	}
	for _, id := range barrierIDs {
		b := barriers[id]
		if b.n >= 1 && len(b.tbs) != b.n {
			c.bad(where, "barrier %d expects %d thread blocks but %d use it", id, b.n, len(b.tbs))
		}
	}
}

func validBuf(b BufferType) bool { return b >= Input && b <= Scratch }

// opClass groups op kinds that take the same fields.
type opClass uint8

const (
	classNop opClass = iota
	classBarrier
	classSync     // signal, wait, rlxsignal, rlxwait, flush
	classCopy     // copy, cpkt, upkt
	classPut      // put, pws, pwsf, ppkt, rppkt
	classGet      // get
	classReduce   // re, rre, res, rres, repkt, respkt, recpkt, recspkt
	classGroupOne // glre, gstore
	classGroupLRS // glres
	classSem      // sem_acquire, sem_release
	classPipeline
)

type opSpec struct {
	class    opClass
	channels []ChannelType // allowed channel types (nil: ChannelNone only)
	// reduce ops: local srcs, remote srcs wanted (-1 none, 1 at least one);
	// local dsts exactly dstLocal; remote dsts (-1 none, 1 at least one).
	remoteSrc, remoteDst int
	dstLocal             int
	packet               bool // LL packet op
}

var (
	memPort = []ChannelType{ChannelMemory, ChannelPort}
	memOnly = []ChannelType{ChannelMemory}
	// Signal and wait on a switch channel: chorus's reading of MSCCL++'s
	// switch-channel barrier (docs/plans.md).
	memPortSw = []ChannelType{ChannelMemory, ChannelPort, ChannelSwitch}
	memSw     = []ChannelType{ChannelMemory, ChannelSwitch}
	port      = []ChannelType{ChannelPort}
	sw        = []ChannelType{ChannelSwitch}
)

var opSpecs = map[OpName]opSpec{
	OpNop:                   {class: classNop},
	OpBarrier:               {class: classBarrier},
	OpSignal:                {class: classSync, channels: memPortSw},
	OpWait:                  {class: classSync, channels: memPortSw},
	OpRelaxedSignal:         {class: classSync, channels: memSw},
	OpRelaxedWait:           {class: classSync, channels: memSw},
	OpFlush:                 {class: classSync, channels: port},
	OpCopy:                  {class: classCopy},
	OpCopyPackets:           {class: classCopy, packet: true},
	OpUnpackPackets:         {class: classCopy, packet: true},
	OpPut:                   {class: classPut, channels: memPort},
	OpPutWithSignal:         {class: classPut, channels: port},
	OpPutWithSignalAndFlush: {class: classPut, channels: port},
	OpPutPackets:            {class: classPut, channels: memPort, packet: true},
	OpReadPutPackets:        {class: classPut, channels: memPort, packet: true},
	OpGet:                   {class: classGet, channels: memOnly},
	OpReduce:                {class: classReduce, remoteSrc: -1, remoteDst: -1, dstLocal: 1},
	OpReadReduce:            {class: classReduce, channels: memOnly, remoteSrc: 1, remoteDst: -1, dstLocal: 1},
	OpReduceSend:            {class: classReduce, channels: memOnly, remoteSrc: -1, remoteDst: 1, dstLocal: 1},
	OpReadReduceSend:        {class: classReduce, channels: memOnly, remoteSrc: 1, remoteDst: 1, dstLocal: 1},
	OpReducePackets:         {class: classReduce, remoteSrc: -1, remoteDst: -1, dstLocal: 1, packet: true},
	OpReduceSendPackets:     {class: classReduce, channels: memOnly, remoteSrc: -1, remoteDst: 1, dstLocal: 1, packet: true},
	OpReduceCopyPackets:     {class: classReduce, remoteSrc: -1, remoteDst: -1, dstLocal: 2, packet: true},
	OpReduceCopySendPackets: {class: classReduce, channels: memOnly, remoteSrc: -1, remoteDst: 1, dstLocal: 2, packet: true},
	OpGroupLoadReduce:       {class: classGroupOne, channels: sw},
	OpGroupStore:            {class: classGroupOne, channels: sw},
	OpGroupStorePackets:     {class: classGroupOne, channels: sw, packet: true},
	OpGroupLoadReduceStore:  {class: classGroupLRS, channels: sw},
	OpSemAcquire:            {class: classSem},
	OpSemRelease:            {class: classSem},
	OpPipeline:              {class: classPipeline},
}

// opCheck is one op under check: where it is, its spec, and what the
// channel and reference checks found, for the checks of its class.
type opCheck struct {
	*checker
	gi, ti     int
	where      string
	op         *Op
	spec       opSpec
	g          *GPU
	bufferForm bool // glre/gstore written with src_buff/dst_buff
	hasBufs    bool // the op takes src_buff/dst_buff

	peers              []int // per channel_ids entry, memory/port
	chanOK             bool  // every channel_ids entry resolved
	size               int   // the first reference's size (-1: none yet)
	sameSize           bool
	srcRanks, dstRanks []int // the rank each reference names (-1: none)
}

func (c *checker) op(gi, ti int, where string, op *Op, inPipeline bool) {
	spec, ok := opSpecs[op.Name]
	if !ok {
		c.bad(where, "unknown op name %v", op.Name)
		return
	}
	cl := spec.class
	o := &opCheck{checker: c, gi: gi, ti: ti, where: where, op: op, spec: spec, g: &c.p.GPUs[gi],
		chanOK: true, size: -1, sameSize: true}
	o.bufferForm = cl == classGroupOne && op.GroupBuffer == BufferNone && op.SrcChunk == nil && op.DstChunk == nil
	o.hasBufs = cl == classCopy || cl == classPut || cl == classGet || cl == classReduce || cl == classGroupLRS || o.bufferForm
	o.unusedFields()
	o.channels()
	o.srcRanks = make([]int, len(op.Src))
	o.dstRanks = make([]int, len(op.Dst))
	for i, b := range op.Src {
		o.srcRanks[i], _ = o.ref("src_buff", i, b)
	}
	for i, b := range op.Dst {
		o.dstRanks[i], _ = o.ref("dst_buff", i, b)
	}
	if o.hasBufs && !o.sameSize {
		c.bad(where, "src_buff/dst_buff sizes differ")
	}

	switch cl {
	case classSync:
		if len(op.ChannelIDs) == 0 {
			c.bad(where, "%s without channel_ids", op.Name)
		}
	case classBarrier:
		if op.BarrierID < 0 {
			c.bad(where, "barrier_id %d negative", op.BarrierID)
		}
		if op.NumThreadBlocks < 1 || op.NumThreadBlocks > len(o.g.ThreadBlocks) {
			c.bad(where, "num_threadblocks %d not in 1..%d", op.NumThreadBlocks, len(o.g.ThreadBlocks))
		}
	case classCopy:
		o.copyOp()
	case classPut:
		o.putOp()
	case classGet:
		if len(op.Src) == 0 || len(op.Src) != len(op.Dst) {
			c.bad(where, "get needs as many src_buff as dst_buff entries, at least one (has %d, %d)", len(op.Src), len(op.Dst))
		}
		o.wantKinds("src_buff", op.Src, RefRemote)
		o.wantKinds("dst_buff", op.Dst, RefLocal)
		o.peerCheck("src_buff", o.srcRanks)
	case classReduce:
		o.reduceOp()
	case classGroupOne:
		o.groupOneOp()
	case classGroupLRS:
		if len(op.Src) == 0 || len(op.Dst) == 0 {
			c.bad(where, "glres needs src_buff and dst_buff entries")
		}
		o.wantKinds("src_buff", op.Src, RefSwitch)
		o.wantKinds("dst_buff", op.Dst, RefSwitch)
	case classSem:
		if len(op.SemaphoreIDs) == 0 {
			c.bad(where, "%s without semaphore_ids", op.Name)
		}
		for _, id := range op.SemaphoreIDs {
			if id < 0 || id >= len(o.g.Semaphores) {
				c.bad(where, "semaphore %d does not exist (gpu has %d)", id, len(o.g.Semaphores))
			}
		}
	case classPipeline:
		if inPipeline {
			c.bad(where, "nested pipeline")
		}
		if op.Iter == nil {
			c.bad(where, "pipeline without iter_context")
		} else if op.Iter.UnitSize < 1 || op.Iter.NumChunks < 1 {
			c.bad(where, "iter_context unit_size %d num_chunks %d (want both >= 1)", op.Iter.UnitSize, op.Iter.NumChunks)
		}
		if len(op.Ops) == 0 {
			c.bad(where, "pipeline with an empty body")
		}
	}
}

// unusedFields reports the fields the op's kind does not take.
func (o *opCheck) unusedFields() {
	c, where, op, spec, cl := o.checker, o.where, o.op, o.spec, o.spec.class
	isReduce := cl == classReduce || cl == classGroupLRS || op.Name == OpGroupLoadReduce
	if !o.hasBufs && (len(op.Src) > 0 || len(op.Dst) > 0) {
		c.bad(where, "%s takes no src_buff/dst_buff", op.Name)
	}
	if !isReduce && op.ReduceOp != ReduceNone {
		c.bad(where, "%s takes no reduce_op", op.Name)
	}
	if op.ReduceOp > ReduceMax {
		c.bad(where, "invalid reduce op %v", op.ReduceOp)
	}
	if op.TBG != nil {
		// glre/gstore in chunk form carry their ranges outside src_buff/
		// dst_buff; MSCCL++'s DSL gives them tbg_info too.
		if !o.hasBufs && cl != classGroupOne {
			c.bad(where, "%s takes no tbg_info", op.Name)
		} else if op.TBG.Size < 1 || op.TBG.ID < 0 || op.TBG.ID >= op.TBG.Size {
			c.bad(where, "tbg_info tb_id %d / tbg_size %d (want 0 <= tb_id < tbg_size)", op.TBG.ID, op.TBG.Size)
		}
	}
	if cl != classSem && len(op.SemaphoreIDs) > 0 {
		c.bad(where, "%s takes no semaphore_ids", op.Name)
	}
	if cl != classBarrier && (op.BarrierID != 0 || op.NumThreadBlocks != 0) {
		c.bad(where, "%s takes no barrier_id/num_threadblocks", op.Name)
	}
	if cl != classPipeline && (op.Iter != nil || len(op.Ops) > 0) {
		c.bad(where, "%s takes no iter_context/ops", op.Name)
	}
	if cl != classGroupOne && (op.GroupBuffer != BufferNone || op.GroupOffset != 0 || op.GroupSize != 0 || op.SrcChunk != nil || op.DstChunk != nil) {
		c.bad(where, "%s takes no buffer_type/buffer_offset/size/src_chunk/dst_chunk", op.Name)
	}
	if spec.packet && c.p.Protocol != LL {
		c.bad(where, "packet op %s in a %v plan (needs protocol LL)", op.Name, c.p.Protocol)
	}
}

// channels checks the channel type and resolves every channel_ids entry
// (the peer of each memory/port channel goes to o.peers).
func (o *opCheck) channels() {
	c, where, op, spec := o.checker, o.where, o.op, o.spec
	if spec.channels == nil {
		if op.ChannelType != ChannelNone {
			c.bad(where, "%s takes no channel_type (has %v)", op.Name, op.ChannelType)
		}
		if len(op.ChannelIDs) > 0 {
			c.bad(where, "%s takes no channel_ids", op.Name)
		}
	} else if !slices.Contains(spec.channels, op.ChannelType) {
		c.bad(where, "%s on channel type %v (allowed: %v)", op.Name, op.ChannelType, spec.channels)
	}
	for _, i := range op.ChannelIDs {
		if op.ChannelType == ChannelNone {
			break
		}
		if op.ChannelType == ChannelSwitch {
			if _, err := c.p.SwitchGroupOf(o.gi, o.ti, i); err != nil {
				c.bad(where, "channel_ids entry %d: %v", i, stripResolve(err))
				o.chanOK = false
			}
			continue
		}
		id, err := c.p.TBChannel(o.gi, o.ti, op.ChannelType, i)
		if err == nil {
			var peer int
			if peer, err = c.p.ChannelPeer(o.gi, op.ChannelType, id); err == nil {
				o.peers = append(o.peers, peer)
				continue
			}
		}
		c.bad(where, "channel_ids entry %d: %v", i, stripResolve(err))
		o.chanOK = false
	}
}

// ref checks one src_buff/dst_buff reference and returns the rank whose
// memory it names (-1 for none or a switch group).
func (o *opCheck) ref(field string, i int, b BufRef) (int, bool) {
	c, op, gi := o.checker, o.op, o.gi
	rw := fmt.Sprintf("%s %s[%d]", o.where, field, i)
	if o.size == -1 {
		o.size = b.Size
	} else if b.Size != o.size {
		o.sameSize = false
	}
	if b.Index < 0 || b.Size < 1 {
		c.bad(rw, "chunk range index %d size %d (want index >= 0, size >= 1)", b.Index, b.Size)
		return -1, false
	}
	if b.HasRank && (b.Kind != RefLocal || b.Rank != gi) {
		c.bad(rw, "\"rank\": %d on a %s reference (only a local reference may carry it, naming the executing rank %d)", b.Rank, kindName(b.Kind), gi)
	}
	switch b.Kind {
	case RefLocal:
		if !validBuf(b.Type) {
			c.bad(rw, "buffer type %v", b.Type)
			return -1, false
		}
		if n := o.g.Chunks(b.Type); b.Index+b.Size > n {
			c.bad(rw, "%v[%d:%d] beyond rank %d's %d %v chunks", b.Type.Short(), b.Index, b.Index+b.Size, gi, n, b.Type.Short())
		}
		return gi, true
	case RefRemote:
		if op.ChannelType != ChannelMemory && op.ChannelType != ChannelPort {
			c.bad(rw, "remote buffer_id needs a memory or port channel_type (has %v)", op.ChannelType)
			return -1, false
		}
		_, rb, err := c.p.RemoteBufferOf(gi, o.ti, op.ChannelType, b.ID)
		if err != nil {
			c.bad(rw, "%v", stripResolve(err))
			return -1, false
		}
		if !c.rankOK(rb.Rank) || !validBuf(rb.Type) {
			return -1, false // reported with the GPU's remote buffers
		}
		if n := c.p.GPUs[rb.Rank].Chunks(rb.Type); b.Index+b.Size > n {
			c.bad(rw, "rank %d %v[%d:%d] beyond its %d %v chunks", rb.Rank, rb.Type.Short(), b.Index, b.Index+b.Size, n, rb.Type.Short())
		}
		return rb.Rank, true
	case RefSwitch:
		sg, err := c.p.SwitchGroupOf(gi, o.ti, b.ID)
		if err != nil {
			c.bad(rw, "switch_channel_id: %v", stripResolve(err))
			return -1, false
		}
		c.groupRange(rw, sg, sg.Buffer, b.Index, b.Size)
		return -1, true
	}
	c.bad(rw, "bad reference kind %d", b.Kind)
	return -1, false
}

// wantKinds reports references of field that are not of kind k.
func (o *opCheck) wantKinds(field string, bs []BufRef, k RefKind) {
	for i, b := range bs {
		if b.Kind != k {
			o.bad(fmt.Sprintf("%s %s[%d]", o.where, field, i), "%s wants %s references here", o.op.Name, kindName(k))
		}
	}
}

// scratch reports a packet source or destination (what) outside a
// scratch buffer.
func (o *opCheck) scratch(field string, i int, b BufRef, what string) {
	t := b.Type
	if b.Kind == RefRemote {
		_, rb, err := o.p.RemoteBufferOf(o.gi, o.ti, o.op.ChannelType, b.ID)
		if err != nil {
			return
		}
		t = rb.Type
	}
	if t != Scratch {
		o.bad(fmt.Sprintf("%s %s[%d]", o.where, field, i), "%s must be a scratch buffer (is %v)", what, t.Short())
	}
}

// peerCheck reports remote references whose rank is not the peer of the
// channel_ids entry beside them.
func (o *opCheck) peerCheck(field string, ranks []int) {
	op := o.op
	if len(op.ChannelIDs) == 0 {
		return
	}
	if len(op.ChannelIDs) != len(ranks) {
		o.bad(o.where, "%d channel_ids for %d %s entries", len(op.ChannelIDs), len(ranks), field)
		return
	}
	if !o.chanOK {
		return
	}
	for i, r := range ranks {
		if r >= 0 && i < len(o.peers) && o.peers[i] != r {
			o.bad(fmt.Sprintf("%s %s[%d]", o.where, field, i), "remote buffer of rank %d but channel_ids[%d] connects to rank %d", r, i, o.peers[i])
		}
	}
}

// copyOp: copy, cpkt, upkt.
func (o *opCheck) copyOp() {
	op := o.op
	if len(op.Src) == 0 || len(op.Src) != len(op.Dst) {
		o.bad(o.where, "%s needs as many src_buff as dst_buff entries, at least one (has %d, %d)", op.Name, len(op.Src), len(op.Dst))
	}
	o.wantKinds("src_buff", op.Src, RefLocal)
	o.wantKinds("dst_buff", op.Dst, RefLocal)
	for i, b := range op.Dst {
		if op.Name == OpCopyPackets && b.Kind == RefLocal {
			o.scratch("dst_buff", i, b, "packet destination")
		}
	}
	for i, b := range op.Src {
		if op.Name == OpUnpackPackets && b.Kind == RefLocal {
			o.scratch("src_buff", i, b, "packet source")
		}
	}
}

// putOp: put, pws, pwsf, ppkt, rppkt.
func (o *opCheck) putOp() {
	op, where := o.op, o.where
	if op.Name == OpReadPutPackets {
		// MSCCL++'s executor forwards src_buff[0] to every dst_buff
		// entry (it reads no other source).
		if len(op.Src) == 0 || len(op.Dst) == 0 {
			o.bad(where, "rppkt needs src_buff and dst_buff entries (has %d, %d)", len(op.Src), len(op.Dst))
		}
		for i := 1; i < len(op.Src); i++ {
			if op.Src[i] != op.Src[0] {
				o.bad(fmt.Sprintf("%s src_buff[%d]", where, i), "rppkt forwards only src_buff[0] (MSCCL++'s executor reads no other source); use one rppkt per source")
			}
		}
	} else if len(op.Src) == 0 || len(op.Src) != len(op.Dst) {
		o.bad(where, "%s needs as many src_buff as dst_buff entries, at least one (has %d, %d)", op.Name, len(op.Src), len(op.Dst))
	}
	o.wantKinds("src_buff", op.Src, RefLocal)
	o.wantKinds("dst_buff", op.Dst, RefRemote)
	if op.ChannelType == ChannelPort && len(op.ChannelIDs) == 0 {
		o.bad(where, "%s on port channels needs channel_ids", op.Name)
	}
	o.peerCheck("dst_buff", o.dstRanks)
	for i, b := range op.Dst {
		if o.spec.packet && b.Kind == RefRemote {
			o.scratch("dst_buff", i, b, "packet destination")
		}
	}
	for i, b := range op.Src {
		if op.Name == OpReadPutPackets && b.Kind == RefLocal {
			o.scratch("src_buff", i, b, "packet source")
		}
	}
}

// reduceOp: re, rre, res, rres and their packet forms.
func (o *opCheck) reduceOp() {
	op := o.op
	o.reduceShape(o.where, op, o.spec)
	if !o.spec.packet {
		return
	}
	for i, b := range op.Src {
		if i > 0 && b.Kind == RefLocal {
			o.scratch("src_buff", i, b, "packet source")
		}
	}
	for i, b := range op.Dst {
		if (i > 0 && b.Kind == RefLocal) || b.Kind == RefRemote {
			o.scratch("dst_buff", i, b, "packet destination")
		}
	}
}

// groupOneOp: glre, gstore, gstorepkt, in buffer or chunk form.
func (o *opCheck) groupOneOp() {
	op, where := o.op, o.where
	if !o.bufferForm {
		o.groupOne(o.gi, o.ti, where, op)
		if op.Name == OpGroupStorePackets {
			if op.GroupBuffer != Scratch && validBuf(op.GroupBuffer) {
				o.bad(where, "packet destination buffer_type must be scratch (is %v)", op.GroupBuffer.Short())
			}
			if op.SrcChunk != nil && op.SrcChunk.Type != Scratch && validBuf(op.SrcChunk.Type) {
				o.bad(where+" src_chunk", "packet source must be a scratch buffer (is %v)", op.SrcChunk.Type.Short())
			}
		}
		return
	}
	// Newer MSCCL++ writes gstore as local src -> switch dst (and glre,
	// symmetrically, switch src -> local dst).
	if len(op.Src) != 1 || len(op.Dst) != 1 {
		o.bad(where, "%s in buffer form needs one src_buff and one dst_buff entry (has %d, %d)", op.Name, len(op.Src), len(op.Dst))
		return
	}
	srcK, dstK := RefLocal, RefSwitch
	if op.Name == OpGroupLoadReduce {
		srcK, dstK = RefSwitch, RefLocal
	}
	o.wantKinds("src_buff", op.Src, srcK)
	o.wantKinds("dst_buff", op.Dst, dstK)
	if len(op.ChannelIDs) > 1 {
		o.bad(where, "%s takes at most one channel_ids entry (has %d)", op.Name, len(op.ChannelIDs))
	}
	if op.Name == OpGroupStorePackets {
		if op.Src[0].Kind == RefLocal {
			o.scratch("src_buff", 0, op.Src[0], "packet source")
		}
		if op.Dst[0].Kind == RefSwitch {
			if sg, err := o.p.SwitchGroupOf(o.gi, o.ti, op.Dst[0].ID); err == nil && sg.Buffer != Scratch {
				o.bad(where+" dst_buff[0]", "packet destination must be a scratch buffer (the switch channel binds %v)", sg.Buffer.Short())
			}
		}
	}
}

func kindName(k RefKind) string {
	switch k {
	case RefLocal:
		return "local (type)"
	case RefRemote:
		return "remote (buffer_id)"
	}
	return "switch (switch_channel_id)"
}

func stripResolve(err error) string {
	s := err.Error()
	prefix := ErrResolve.Error() + ": "
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// reduceShape checks the src/dst layout of a reduce op: local srcs first
// (at least one), then remote srcs; exactly spec.dstLocal local dsts first,
// then remote dsts.
func (c *checker) reduceShape(where string, op *Op, spec opSpec) {
	nl := 0
	for nl < len(op.Src) && op.Src[nl].Kind == RefLocal {
		nl++
	}
	if nl == 0 {
		c.bad(where, "%s needs a local src_buff[0]", op.Name)
	}
	for i := nl; i < len(op.Src); i++ {
		if op.Src[i].Kind != RefRemote {
			c.bad(fmt.Sprintf("%s src_buff[%d]", where, i), "%s wants local then remote references", op.Name)
		}
	}
	nr := len(op.Src) - nl
	if spec.remoteSrc < 0 && nr > 0 {
		c.bad(where, "%s reads no remote chunks (has %d)", op.Name, nr)
	}
	if spec.remoteSrc > 0 && nr == 0 {
		c.bad(where, "%s needs remote src_buff entries", op.Name)
	}
	dl := 0
	for dl < len(op.Dst) && op.Dst[dl].Kind == RefLocal {
		dl++
	}
	if dl != spec.dstLocal {
		c.bad(where, "%s needs %d local dst_buff entries first (has %d)", op.Name, spec.dstLocal, dl)
	}
	for i := dl; i < len(op.Dst); i++ {
		if op.Dst[i].Kind != RefRemote {
			c.bad(fmt.Sprintf("%s dst_buff[%d]", where, i), "%s wants local then remote references", op.Name)
		}
	}
	rd := len(op.Dst) - dl
	if spec.remoteDst < 0 && rd > 0 {
		c.bad(where, "%s writes no remote chunks (has %d)", op.Name, rd)
	}
	if spec.remoteDst > 0 && rd == 0 {
		c.bad(where, "%s needs remote dst_buff entries", op.Name)
	}
}

func (c *checker) groupRange(where string, sg SwitchGroup, buf BufferType, index, size int) {
	for _, r := range sg.Ranks {
		if !c.rankOK(r) {
			continue // reported with the GPU's channels
		}
		if n := c.p.GPUs[r].Chunks(buf); index+size > n {
			c.bad(where, "rank %d %v[%d:%d] beyond its %d %v chunks", r, buf.Short(), index, index+size, n, buf.Short())
		}
	}
}

func (c *checker) groupOne(gi, ti int, where string, op *Op) {
	if len(op.ChannelIDs) != 1 {
		c.bad(where, "%s needs exactly one channel_ids entry (has %d)", op.Name, len(op.ChannelIDs))
	}
	if !validBuf(op.GroupBuffer) {
		c.bad(where, "buffer_type %v", op.GroupBuffer)
	}
	if op.GroupOffset < 0 || op.GroupSize < 1 {
		c.bad(where, "buffer_offset %d size %d (want offset >= 0, size >= 1)", op.GroupOffset, op.GroupSize)
	}
	if len(op.ChannelIDs) == 1 && op.ChannelType == ChannelSwitch {
		if sg, err := c.p.SwitchGroupOf(gi, ti, op.ChannelIDs[0]); err == nil {
			if sg.Buffer != op.GroupBuffer {
				c.bad(where, "buffer_type %v but the switch channel binds %v", op.GroupBuffer, sg.Buffer)
			}
			if validBuf(op.GroupBuffer) && op.GroupOffset >= 0 && op.GroupSize >= 1 {
				c.groupRange(where, sg, op.GroupBuffer, op.GroupOffset, op.GroupSize)
			}
		}
	}
	ch, field := op.DstChunk, "dst_chunk"
	if isGroupStore(op.Name) {
		ch, field = op.SrcChunk, "src_chunk"
	}
	if op.SrcChunk != nil && !isGroupStore(op.Name) || op.DstChunk != nil && op.Name != OpGroupLoadReduce {
		c.bad(where, "%s takes only %s", op.Name, field)
	}
	if ch == nil {
		c.bad(where, "%s without %s", op.Name, field)
		return
	}
	cw := where + " " + field
	if ch.Rank != gi {
		c.bad(cw, "rank %d is not the executing rank %d", ch.Rank, gi)
	}
	if !validBuf(ch.Type) {
		c.bad(cw, "buffer type %v", ch.Type)
	} else if ch.Index < 0 || ch.Size < 1 || ch.Index+ch.Size > c.p.GPUs[gi].Chunks(ch.Type) {
		c.bad(cw, "%v[%d:%d] outside rank %d's %d %v chunks", ch.Type.Short(), ch.Index, ch.Index+ch.Size, gi, c.p.GPUs[gi].Chunks(ch.Type), ch.Type.Short())
	}
	if ch.Size != op.GroupSize {
		c.bad(cw, "size %d != size %d", ch.Size, op.GroupSize)
	}
}
