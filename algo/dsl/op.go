package dsl

import (
	"fmt"
	"slices"

	"github.com/chorus-rt/chorus/algo/plan"
)

// ref is one chunk range an op names: local to the executing rank (via and
// sw nil), a peer's buffer reached through a channel (via), or the same
// range on every rank of a switch channel (sw; buf is the switch's buffer).
type ref struct {
	rank  int
	buf   plan.BufferType
	index int
	size  int
	via   *channel
	sw    *SwitchChannel
}

func chunkRef(c Chunk) ref { return ref{rank: c.Rank, buf: c.Buffer, index: c.Index, size: c.Size} }

func (r ref) overlaps(o ref) bool {
	return r.rank == o.rank && r.buf == o.buf && r.index < o.index+o.size && o.index < r.index+r.size
}

func (r ref) same(o ref) bool {
	return r.rank == o.rank && r.buf == o.buf && r.index == o.index && r.size == o.size && r.via == o.via && r.sw == o.sw
}

// op is one operation of one thread block, before lowering. Fused ops keep
// the same shape: src/dst hold local references first, then remote ones.
type op struct {
	name   plan.OpName
	rank   int
	tb     int
	sync   SyncType
	chType plan.ChannelType
	chans  []*channel // signal/wait/flush: the channels; port puts, gets: one per remote ref
	src    []ref
	dst    []ref
	reduce plan.ReduceOp
	tbg    *plan.TBGroup
	loop   *loop
	body   []*op // pipeline

	sems               []int
	barrierID, barrier int // barrier id and num_threadblocks
	barrierTBs         []int

	// glre/gstore: the switch channel, its range and the local chunk.
	sw        *SwitchChannel
	goff      int
	gsize     int
	gchunk    ref
	hasGChunk bool
}

func (o *op) clone() *op {
	c := *o
	c.chans = slices.Clone(o.chans)
	c.src = slices.Clone(o.src)
	c.dst = slices.Clone(o.dst)
	c.sems = slices.Clone(o.sems)
	if o.tbg != nil {
		t := *o.tbg
		c.tbg = &t
	}
	return &c
}

func (o *op) isSync() bool { return o.name == plan.OpNop || o.name == plan.OpBarrier }

// access is one range an op reads or writes, for hazard analysis.
type access struct {
	r     ref
	write bool
}

// accesses lists what o reads and writes, on which rank: every src and dst
// range, switch ranges on every rank of the group. It matches plan.Access
// up to packet flags and thread-block-group parts, which it ignores (whole
// ranges are a safe over-approximation for placing syncs).
func (o *op) accesses() []access {
	var out []access
	add := func(r ref, w bool) {
		if r.sw != nil {
			for _, rk := range r.sw.ranks {
				out = append(out, access{r: ref{rank: rk, buf: r.sw.buf, index: r.index, size: r.size}, write: w})
			}
			return
		}
		out = append(out, access{r: ref{rank: r.rank, buf: r.buf, index: r.index, size: r.size}, write: w})
	}
	for _, b := range o.body {
		out = append(out, b.accesses()...)
	}
	for _, r := range o.src {
		add(r, false)
	}
	for _, r := range o.dst {
		add(r, true)
	}
	switch o.name {
	case plan.OpGroupLoadReduce:
		add(ref{sw: o.sw, index: o.goff, size: o.gsize}, false)
		add(o.gchunk, true)
	case plan.OpGroupStore, plan.OpGroupStorePackets:
		add(o.gchunk, false)
		add(ref{sw: o.sw, index: o.goff, size: o.gsize}, true)
	}
	return out
}

// conflicts reports whether some access in a and some in b overlap with at
// least one of them a write.
func conflicts(a, b []access) bool {
	for _, x := range a {
		for _, y := range b {
			if (x.write || y.write) && x.r.overlaps(y.r) {
				return true
			}
		}
	}
	return false
}

// blocks resolves where an op runs. single: the op takes one thread block
// only (port channels, sync ops, switch ops, semaphores).
func (p *Program) blocks(rank int, opName string, b Blocks, single bool) ([]int, *TBGroup, bool) {
	if b == nil {
		p.fail(rank, -1, opName, "needs a thread block (dsl.TB) or a thread-block group, got nil")
		return nil, nil, false
	}
	tbs, g := b.blockList()
	if g != nil && g.bad {
		return nil, nil, false // already reported by TBGroup
	}
	if tbs == nil {
		p.fail(rank, -1, opName, "needs a thread block (dsl.TB) or a thread-block group, got a nil group")
		return nil, nil, false
	}
	if g != nil && single {
		p.fail(rank, -1, opName, "runs on a single thread block, not a thread-block group (blocks %v)", g.tbs)
		return nil, nil, false
	}
	for _, t := range tbs {
		if t < 0 {
			p.fail(rank, t, opName, "thread block %d negative", t)
			return nil, nil, false
		}
	}
	return tbs, g, true
}

// checkChunk reports whether c names chunks inside a buffer of an existing
// rank; what says which argument it is for the message.
func (p *Program) checkChunk(rank, tb int, opName, what string, c Chunk) bool {
	if c.bad {
		return false
	}
	if !p.rankOK(c.Rank) {
		p.fail(rank, tb, opName, "%s chunk on rank %d out of range (program has %d ranks)", what, c.Rank, len(p.ranks))
		return false
	}
	r := p.ranks[c.Rank]
	n := 0
	switch c.Buffer {
	case Input:
		n = r.in
	case Output:
		n = r.out
	case Scratch:
		n = r.scratch
	default:
		p.fail(rank, tb, opName, "%s chunk has no buffer type (%v)", what, c.Buffer)
		return false
	}
	if c.Index < 0 || c.Size < 1 || c.Index+c.Size > n {
		p.fail(rank, tb, opName, "%s chunk %v outside rank %d's %d %s chunks", what, c, c.Rank, n, c.Buffer.Short())
		return false
	}
	return true
}

// add appends o to every thread block of tbs (with its tbg part when g is a
// group), on o.rank.
func (p *Program) add(o *op, tbs []int, g *TBGroup) {
	r := p.ranks[o.rank]
	for i, t := range tbs {
		c := o.clone()
		c.tb = t
		c.loop = p.loop
		if g != nil {
			c.tbg = &plan.TBGroup{ID: i, Size: len(tbs)}
		}
		for len(r.ops) <= t {
			r.ops = append(r.ops, nil)
		}
		r.ops[t] = append(r.ops[t], c)
	}
}

// sameSize checks that every chunk has the size of the first one.
func (p *Program) sameSize(rank, tb int, opName string, names []string, cs []Chunk) bool {
	for i := 1; i < len(cs); i++ {
		if cs[i].Size != cs[0].Size {
			p.fail(rank, tb, opName, "%s chunk size %d does not match %s chunk size %d", names[i], cs[i].Size, names[0], cs[0].Size)
			return false
		}
	}
	return true
}

func (p *Program) needLL(rank, tb int, opName string) bool {
	if p.cfg.Protocol != plan.LL {
		p.fail(rank, tb, opName, "packet operation needs the LL protocol (program uses %v)", p.cfg.Protocol)
		return false
	}
	return true
}

func (p *Program) needScratch(rank, tb int, opName, what string, c Chunk) bool {
	if c.Buffer != Scratch {
		p.fail(rank, tb, opName, "%s chunk %v must be in a scratch buffer (packets live in scratch)", what, c)
		return false
	}
	return true
}

func firstTB(tbs []int) int {
	if len(tbs) == 1 {
		return tbs[0]
	}
	return -1
}

func (s SyncType) valid() bool { return s <= SyncBoth }

func (p *Program) checkSync(rank, tb int, opName string, s SyncType) bool {
	if !s.valid() {
		p.fail(rank, tb, opName, "invalid data sync %v", s)
		return false
	}
	return true
}

func (p *Program) checkReduceOp(rank, tb int, opName string, r plan.ReduceOp) bool {
	if r > plan.ReduceMax {
		p.fail(rank, tb, opName, "invalid reduce op %v", r)
		return false
	}
	return true
}

func chunkNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s[%d]", prefix, i)
	}
	return out
}
