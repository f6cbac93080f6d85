package cpuexec

import (
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
)

// ref is one resolved chunk range: buffer buf of rank, chunks
// [index, index+size); packet says the range holds LL packets.
type ref struct {
	rank   int
	buf    plan.BufferType
	index  int
	size   int
	packet bool
}

// chanRef is one channel end an op signals or waits on.
type chanRef struct {
	slot   int // index of the counter in the segment's slot area
	peer   int // the rank at the other end
	expect int // index into the rank's wait counters (wait only)
}

// inst is one compiled op of a thread block.
type inst struct {
	name  plan.OpName
	where string // "tb 1 op 3 (put)", for errors

	srcs, dsts  []ref
	red         plan.ReduceOp
	part, parts int

	chans []chanRef // signal / wait / pws / pwsf

	// switch ops: srcs/dsts hold one ref per group rank per BufRef;
	// group is the group size (0 otherwise).
	group int

	barrier, barrierN int
	sems              []int

	body    []inst // pipeline
	unit    int64
	nchunks int

	packetSrc bool // some source holds packets: the op waits for them
}

// slotKey is a directed channel instance (plan.ChannelSlot).
type slotKey = plan.ChannelSlot

// program is what Join compiles from a plan for one rank.
type program struct {
	tbs       [][]inst
	nslots    int
	nexpect   int   // wait counters of this rank
	barriers  []int // thread blocks per barrier id (0: unused)
	semInit   []int
	explicit  []plan.ReduceOp // distinct explicit reduce ops of the whole plan
	explWhere string          // where the first explicit op is, for errors
	reduces   bool            // some op reduces
	packets   bool            // some op uses packets
	tbg       bool            // some op is split over a thread-block group
	units     []int64         // pipeline unit sizes
	hash      [32]byte
	// outCovered: every output chunk of this rank is written by some op
	// (of any rank) in every call, so the output need not be preloaded.
	outCovered bool
}

// compile turns rank's part of p into instructions. p must be valid.
func compile(p *plan.Plan, rank int) (*program, error) {
	raw, err := p.Marshal()
	if err != nil {
		return nil, err
	}
	return compileRank(p, rank, sha256.Sum256(raw))
}

// compileRank is compile with the plan's hash already computed (an
// executor compiles every rank's program to analyse the plan; hashing
// the whole plan once per rank would make that quadratic in the ranks).
func compileRank(p *plan.Plan, rank int, hash [sha256.Size]byte) (*program, error) {
	pr := &program{hash: hash}
	slots := p.ChannelSlots()
	pr.nslots = len(slots)
	g := &p.GPUs[rank]
	for _, s := range g.Semaphores {
		pr.semInit = append(pr.semInit, s.InitValue)
	}
	// Wait counters: one per (type, GPU channel id) of this rank.
	expectBase := map[plan.ChannelType]int{}
	for _, t := range []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort} {
		expectBase[t] = pr.nexpect
		pr.nexpect += len(g.ChannelPeers(t))
	}
	// Switch channels: one wait counter per (switch channel, group rank).
	groups := g.SwitchGroups()
	swExpect := make([]int, len(groups))
	for i, sg := range groups {
		swExpect[i] = pr.nexpect
		pr.nexpect += len(sg.Ranks)
	}
	c := &compiler{p: p, rank: rank, slots: slots, expectBase: expectBase, pr: pr,
		swGroups: groups, swExpect: swExpect, swInst: p.SwitchInstances()}
	for ti := range g.ThreadBlocks {
		tb := &g.ThreadBlocks[ti]
		var insts []inst
		for oi := range tb.Ops {
			in, err := c.op(ti, &tb.Ops[oi], fmt.Sprintf("tb %d op %d", ti, oi))
			if err != nil {
				return nil, err
			}
			insts = append(insts, in)
		}
		pr.tbs = append(pr.tbs, insts)
	}
	// Reduce ops and the coverage of this rank's output, over all ranks.
	for gi := range p.GPUs {
		for ti := range p.GPUs[gi].ThreadBlocks {
			for oi := range p.GPUs[gi].ThreadBlocks[ti].Ops {
				op := &p.GPUs[gi].ThreadBlocks[ti].Ops[oi]
				visit := []*plan.Op{op}
				if op.Name == plan.OpPipeline {
					visit = visit[:0]
					for i := range op.Ops {
						visit = append(visit, &op.Ops[i])
					}
				}
				for _, o := range visit {
					if isReduce(o.Name) {
						pr.reduces = true
						if o.ReduceOp != plan.ReduceNone && !slices.Contains(pr.explicit, o.ReduceOp) {
							pr.explicit = append(pr.explicit, o.ReduceOp)
							if pr.explWhere == "" {
								pr.explWhere = fmt.Sprintf("gpu %d tb %d op %d", gi, ti, oi)
							}
						}
					}
				}
			}
		}
	}
	var err error
	if pr.outCovered, err = outputCovered(p, rank); err != nil {
		return nil, err
	}
	return pr, nil
}

func isReduce(n plan.OpName) bool {
	switch n {
	case plan.OpReduce, plan.OpReadReduce, plan.OpReduceSend, plan.OpReadReduceSend,
		plan.OpReducePackets, plan.OpReduceSendPackets, plan.OpReduceCopyPackets, plan.OpReduceCopySendPackets,
		plan.OpGroupLoadReduce, plan.OpGroupLoadReduceStore:
		return true
	}
	return false
}

func isPacket(n plan.OpName) bool {
	switch n {
	case plan.OpPutPackets, plan.OpReadPutPackets, plan.OpGroupStorePackets, plan.OpCopyPackets, plan.OpUnpackPackets,
		plan.OpReducePackets, plan.OpReduceSendPackets, plan.OpReduceCopyPackets, plan.OpReduceCopySendPackets:
		return true
	}
	return false
}

type compiler struct {
	p          *plan.Plan
	rank       int
	slots      map[slotKey]int
	expectBase map[plan.ChannelType]int
	pr         *program
	swGroups   []plan.SwitchGroup // this rank's switch channels
	swExpect   []int              // first wait counter of each
	swInst     [][]int            // plan.SwitchInstances
}

func (c *compiler) op(tb int, op *plan.Op, where string) (inst, error) {
	in := inst{name: op.Name, where: fmt.Sprintf("%s (%s)", where, op.Name), red: op.ReduceOp, parts: 1}
	if op.TBG != nil {
		in.part, in.parts = op.TBG.ID, op.TBG.Size
		if in.parts > 1 {
			c.pr.tbg = true
		}
	}
	if isPacket(op.Name) {
		c.pr.packets = true
	}
	fail := func(err error) (inst, error) {
		return inst{}, fmt.Errorf("cpuexec: rank %d %s: %w", c.rank, in.where, err)
	}
	switch op.Name {
	case plan.OpPipeline:
		if op.Iter == nil {
			return fail(fmt.Errorf("pipeline without iter_context"))
		}
		in.unit, in.nchunks = int64(op.Iter.UnitSize), op.Iter.NumChunks
		c.pr.units = append(c.pr.units, in.unit)
		for i := range op.Ops {
			b, err := c.op(tb, &op.Ops[i], fmt.Sprintf("%s body %d", where, i))
			if err != nil {
				return inst{}, err
			}
			in.body = append(in.body, b)
		}
		return in, nil
	case plan.OpBarrier:
		in.barrier, in.barrierN = op.BarrierID, op.NumThreadBlocks
		for len(c.pr.barriers) <= op.BarrierID {
			c.pr.barriers = append(c.pr.barriers, 0)
		}
		c.pr.barriers[op.BarrierID] = op.NumThreadBlocks
		return in, nil
	case plan.OpSemAcquire, plan.OpSemRelease:
		in.sems = slices.Clone(op.SemaphoreIDs)
		return in, nil
	case plan.OpSignal, plan.OpRelaxedSignal, plan.OpWait, plan.OpRelaxedWait, plan.OpFlush,
		plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush:
		wait := op.Name == plan.OpWait || op.Name == plan.OpRelaxedWait
		if op.ChannelType == plan.ChannelSwitch {
			// The switch barrier, emulated on pair counters: a signal
			// counts on (r -> q) for every group rank q (itself
			// included), the k-th wait waits until every (q -> r) counter
			// reached k.
			for _, i := range op.ChannelIDs {
				id, err := c.p.TBChannel(c.rank, tb, plan.ChannelSwitch, i)
				if err != nil {
					return fail(err)
				}
				if id < 0 || id >= len(c.swGroups) {
					return fail(fmt.Errorf("no switch channel %d", id))
				}
				inst := c.swInst[c.rank][id]
				for qi, q := range c.swGroups[id].Ranks {
					key := slotKey{Type: plan.ChannelSwitch, Src: c.rank, Dst: q, K: inst}
					if wait {
						key = slotKey{Type: plan.ChannelSwitch, Src: q, Dst: c.rank, K: inst}
					}
					slot, ok := c.slots[key]
					if !ok {
						return fail(fmt.Errorf("no counter for switch channel %d between ranks %d and %d", id, key.Src, key.Dst))
					}
					in.chans = append(in.chans, chanRef{slot: slot, peer: q, expect: c.swExpect[id] + qi})
				}
			}
			return in, nil
		}
		if op.Name != plan.OpFlush {
			for _, i := range op.ChannelIDs {
				id, err := c.p.TBChannel(c.rank, tb, op.ChannelType, i)
				if err != nil {
					return fail(err)
				}
				peers := c.p.GPUs[c.rank].ChannelPeers(op.ChannelType)
				if id < 0 || id >= len(peers) {
					return fail(fmt.Errorf("no %s channel %d", op.ChannelType, id))
				}
				peer, k := peers[id], plan.Occurrence(peers, id)
				key := slotKey{Type: op.ChannelType, Src: c.rank, Dst: peer, K: k}
				if wait {
					key = slotKey{Type: op.ChannelType, Src: peer, Dst: c.rank, K: k}
				}
				in.chans = append(in.chans, chanRef{slot: c.slots[key], peer: peer, expect: c.expectBase[op.ChannelType] + id})
			}
		}
		if op.Name != plan.OpPutWithSignal && op.Name != plan.OpPutWithSignalAndFlush {
			return in, nil
		}
	case plan.OpGroupLoadReduce, plan.OpGroupStore, plan.OpGroupLoadReduceStore:
		return c.switchOp(tb, op, in)
	}
	acc, err := c.p.OpAccess(c.rank, tb, op)
	if err != nil {
		return fail(err)
	}
	if op.Name == plan.OpGroupStorePackets {
		// One packet source (either form), then the group range on every
		// group rank.
		for _, a := range acc {
			r := ref{rank: a.Rank, buf: a.Buffer, index: a.Index, size: a.Size, packet: a.Packet}
			if a.Mode == plan.AccessRead {
				in.srcs = append(in.srcs, r)
				in.packetSrc = true
			} else {
				in.dsts = append(in.dsts, r)
			}
		}
		if len(in.srcs) != 1 || len(in.dsts) == 0 {
			return fail(fmt.Errorf("gstorepkt with %d sources and %d destinations", len(in.srcs), len(in.dsts)))
		}
		return in, nil
	}
	if len(acc) != len(op.Src)+len(op.Dst) {
		return fail(fmt.Errorf("%d accesses for %d buffer references", len(acc), len(op.Src)+len(op.Dst)))
	}
	for i, a := range acc {
		r := ref{rank: a.Rank, buf: a.Buffer, index: a.Index, size: a.Size, packet: a.Packet}
		if i < len(op.Src) {
			in.srcs = append(in.srcs, r)
			in.packetSrc = in.packetSrc || r.packet
		} else {
			in.dsts = append(in.dsts, r)
		}
	}
	return in, nil
}

// switchOp resolves glre / gstore / glres: srcs and dsts hold one ref per
// group rank (in the group's rank order) per buffer reference.
func (c *compiler) switchOp(tb int, op *plan.Op, in inst) (inst, error) {
	fail := func(err error) (inst, error) {
		return inst{}, fmt.Errorf("cpuexec: rank %d %s: %w", c.rank, in.where, err)
	}
	groupRefs := func(ch int, buf plan.BufferType, index, size int) ([]ref, error) {
		sg, err := c.p.SwitchGroupOf(c.rank, tb, ch)
		if err != nil {
			return nil, err
		}
		if buf == plan.BufferNone {
			buf = sg.Buffer
		}
		out := make([]ref, len(sg.Ranks))
		for i, r := range sg.Ranks {
			out[i] = ref{rank: r, buf: buf, index: index, size: size}
		}
		return out, nil
	}
	switch op.Name {
	case plan.OpGroupLoadReduce, plan.OpGroupStore:
		if op.GroupBuffer == plan.BufferNone && len(op.Src) == 1 && len(op.Dst) == 1 {
			// Buffer form: gstore local src -> switch dst, glre switch
			// src -> local dst.
			loc, sw := op.Src[0], op.Dst[0]
			if op.Name == plan.OpGroupLoadReduce {
				loc, sw = op.Dst[0], op.Src[0]
			}
			if loc.Kind != plan.RefLocal || sw.Kind != plan.RefSwitch {
				return fail(fmt.Errorf("%s wants a local and a switch reference", op.Name))
			}
			refs, err := groupRefs(sw.ID, plan.BufferNone, sw.Index, sw.Size)
			if err != nil {
				return fail(err)
			}
			in.group = len(refs)
			l := []ref{{rank: c.rank, buf: loc.Type, index: loc.Index, size: loc.Size}}
			if op.Name == plan.OpGroupLoadReduce {
				in.srcs, in.dsts = refs, l
			} else {
				in.srcs, in.dsts = l, refs
			}
			return in, nil
		}
		if len(op.ChannelIDs) == 0 {
			return fail(fmt.Errorf("no switch channel"))
		}
		refs, err := groupRefs(op.ChannelIDs[0], op.GroupBuffer, op.GroupOffset, op.GroupSize)
		if err != nil {
			return fail(err)
		}
		in.group = len(refs)
		if op.Name == plan.OpGroupLoadReduce {
			if op.DstChunk == nil {
				return fail(fmt.Errorf("glre without dst_chunk"))
			}
			in.srcs = refs
			in.dsts = []ref{{rank: c.rank, buf: op.DstChunk.Type, index: op.DstChunk.Index, size: op.DstChunk.Size}}
		} else {
			if op.SrcChunk == nil {
				return fail(fmt.Errorf("gstore without src_chunk"))
			}
			in.srcs = []ref{{rank: c.rank, buf: op.SrcChunk.Type, index: op.SrcChunk.Index, size: op.SrcChunk.Size}}
			in.dsts = refs
		}
	case plan.OpGroupLoadReduceStore:
		if len(op.Src) != len(op.Dst) {
			return fail(fmt.Errorf("glres with %d sources and %d destinations (want pairs)", len(op.Src), len(op.Dst)))
		}
		for i := range op.Src {
			s, d := op.Src[i], op.Dst[i]
			if s.Kind != plan.RefSwitch || d.Kind != plan.RefSwitch {
				return fail(fmt.Errorf("glres references must be switch references"))
			}
			sr, err := groupRefs(s.ID, plan.BufferNone, s.Index, s.Size)
			if err != nil {
				return fail(err)
			}
			dr, err := groupRefs(d.ID, plan.BufferNone, d.Index, d.Size)
			if err != nil {
				return fail(err)
			}
			if len(sr) != len(dr) {
				return fail(fmt.Errorf("glres source group has %d ranks, destination group %d", len(sr), len(dr)))
			}
			in.group = len(sr)
			in.srcs = append(in.srcs, sr...)
			in.dsts = append(in.dsts, dr...)
		}
	}
	return in, nil
}

// outputCovered reports whether every chunk of rank's output buffer is
// written by some op in every call (whole chunks, or all parts of a
// thread-block group).
func outputCovered(p *plan.Plan, rank int) (bool, error) {
	oc := p.GPUs[rank].OutputChunks
	if oc == 0 {
		return true, nil
	}
	target := plan.Output
	if p.InPlace && p.Collective != plan.AllGather {
		// The input region is the output: the copy-in writes it all.
		return true, nil
	}
	type key struct{ index, size, parts int }
	parts := map[key]map[int]bool{}
	covered := make([]bool, oc)
	mark := func(a plan.Access) {
		for i := max(a.Index, 0); i < min(a.End(), oc); i++ {
			covered[i] = true
		}
	}
	if p.InPlace && p.Collective == plan.AllGather {
		ic := p.GPUs[rank].InputChunks
		mark(plan.Access{Index: rank * ic, Size: ic})
	}
	for gi := range p.GPUs {
		for ti := range p.GPUs[gi].ThreadBlocks {
			for oi := range p.GPUs[gi].ThreadBlocks[ti].Ops {
				acc, err := p.Access(gi, ti, oi)
				if err != nil {
					return false, err
				}
				for _, a := range acc {
					if a.Mode != plan.AccessWrite || a.Rank != rank || a.Buffer != target {
						continue
					}
					if a.Parts <= 1 {
						mark(a)
						continue
					}
					k := key{a.Index, a.Size, a.Parts}
					if parts[k] == nil {
						parts[k] = map[int]bool{}
					}
					parts[k][a.Part] = true
					if len(parts[k]) == a.Parts {
						mark(a)
					}
				}
			}
		}
	}
	return !slices.Contains(covered, false), nil
}

// reduceOp maps a plan reduce op to ccl/reduce's.
func reduceOp(r plan.ReduceOp) reduce.Op {
	switch r {
	case plan.ReduceMin:
		return reduce.Min
	case plan.ReduceMax:
		return reduce.Max
	}
	return reduce.Sum
}

// planReduceOp maps ccl/reduce's op to a plan reduce op (sum, min, max).
func planReduceOp(op reduce.Op) (plan.ReduceOp, bool) {
	switch op {
	case reduce.Sum:
		return plan.ReduceSum, true
	case reduce.Min:
		return plan.ReduceMin, true
	case reduce.Max:
		return plan.ReduceMax, true
	}
	return plan.ReduceNone, false
}

// WithReduceOp returns a copy of p whose reduce ops all reduce with op
// (sum, min or max): a plan is a schedule, and the same schedule computes
// any of the three. p is not modified.
func WithReduceOp(p *plan.Plan, op reduce.Op) (*plan.Plan, error) {
	r, ok := planReduceOp(op)
	if !ok {
		return nil, fmt.Errorf("cpuexec: plans reduce with sum, min or max, not %v", op)
	}
	raw, err := p.Marshal()
	if err != nil {
		return nil, err
	}
	q, err := plan.Parse(raw)
	if err != nil {
		return nil, err
	}
	var set func(ops []plan.Op)
	set = func(ops []plan.Op) {
		for i := range ops {
			if isReduce(ops[i].Name) {
				ops[i].ReduceOp = r
			}
			set(ops[i].Ops)
		}
	}
	for gi := range q.GPUs {
		for ti := range q.GPUs[gi].ThreadBlocks {
			set(q.GPUs[gi].ThreadBlocks[ti].Ops)
		}
	}
	return q, nil
}
