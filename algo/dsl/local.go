package dsl

import (
	"fmt"
	"slices"

	"github.com/chorus-rt/chorus/algo/plan"
)

// local checks chunks of a local op: all valid and on this rank.
func (r *Rank) local(t int, label string, names []string, cs []Chunk) bool {
	for i, c := range cs {
		if !r.p.checkChunk(r.id, t, label, names[i], c) {
			return false
		}
		if c.Rank != r.id {
			r.p.fail(r.id, t, label, "%s chunk rank %d is not rank %d", names[i], c.Rank, r.id)
			return false
		}
	}
	return true
}

func (r *Rank) copyOp(name plan.OpName, label string, dst, src Chunk, tb Blocks) {
	if r == nil || r.bad {
		return
	}
	p := r.p
	tbs, g, ok := p.blocks(r.id, label, tb, false)
	if !ok {
		return
	}
	t := firstTB(tbs)
	names := []string{"destination", "source"}
	cs := []Chunk{dst, src}
	if !r.local(t, label, names, cs) || !p.sameSize(r.id, t, label, names, cs) {
		return
	}
	switch name {
	case plan.OpCopyPackets:
		if !p.needLL(r.id, t, label) || !p.needScratch(r.id, t, label, "destination", dst) {
			return
		}
	case plan.OpUnpackPackets:
		if !p.needLL(r.id, t, label) || !p.needScratch(r.id, t, label, "source", src) {
			return
		}
	}
	p.add(&op{name: name, rank: r.id, src: []ref{chunkRef(src)}, dst: []ref{chunkRef(dst)}}, tbs, g)
}

// Copy copies src to dst on this rank.
func (r *Rank) Copy(dst, src Chunk, tb Blocks) { r.copyOp(plan.OpCopy, "copy", dst, src, tb) }

// CopyPackets packs src into LL packets in the scratch chunk dst.
func (r *Rank) CopyPackets(dst, src Chunk, tb Blocks) {
	r.copyOp(plan.OpCopyPackets, "copy_packets", dst, src, tb)
}

// UnpackPackets waits for the packets in the scratch chunk src and unpacks
// their data into dst.
func (r *Rank) UnpackPackets(dst, src Chunk, tb Blocks) {
	r.copyOp(plan.OpUnpackPackets, "unpack_packets", dst, src, tb)
}

// Reduce stores op(srcs...) in dst, all on this rank (at least two srcs;
// dst may be one of them). A zero op means Sum.
func (r *Rank) Reduce(dst Chunk, srcs []Chunk, rop plan.ReduceOp, tb Blocks) {
	r.reduceOp(plan.OpReduce, "reduce", dst, srcs, rop, tb)
}

// ReducePackets stores op(src, packets...) in dst: src is plain data, the
// others LL packets in scratch (the op waits for their flags).
func (r *Rank) ReducePackets(dst, src Chunk, packets []Chunk, rop plan.ReduceOp, tb Blocks) {
	r.reduceOp(plan.OpReducePackets, "reduce_packets", dst, append([]Chunk{src}, packets...), rop, tb)
}

func (r *Rank) reduceOp(name plan.OpName, label string, dst Chunk, srcs []Chunk, rop plan.ReduceOp, tb Blocks) {
	if r == nil || r.bad {
		return
	}
	p := r.p
	tbs, g, ok := p.blocks(r.id, label, tb, false)
	if !ok {
		return
	}
	t := firstTB(tbs)
	if !p.checkReduceOp(r.id, t, label, rop) {
		return
	}
	if len(srcs) < 2 {
		p.fail(r.id, t, label, "%d source chunks (want at least 2)", len(srcs))
		return
	}
	names := append([]string{"destination"}, chunkNames("source", len(srcs))...)
	cs := append([]Chunk{dst}, srcs...)
	if !r.local(t, label, names, cs) || !p.sameSize(r.id, t, label, names, cs) {
		return
	}
	if name == plan.OpReducePackets {
		if !p.needLL(r.id, t, label) {
			return
		}
		for i, c := range srcs[1:] {
			if !p.needScratch(r.id, t, label, fmt.Sprintf("packet source[%d]", i), c) {
				return
			}
		}
	}
	o := &op{name: name, rank: r.id, reduce: rop, dst: []ref{chunkRef(dst)}}
	for _, c := range srcs {
		o.src = append(o.src, chunkRef(c))
	}
	p.add(o, tbs, g)
}

// Barrier makes the listed thread blocks of this rank wait for each other
// (a device-wide barrier over them). The same set of blocks always uses the
// same barrier id.
func (r *Rank) Barrier(tbs ...int) {
	if r == nil || r.bad {
		return
	}
	p := r.p
	const label = "barrier"
	if len(tbs) == 0 {
		p.fail(r.id, -1, label, "no thread blocks")
		return
	}
	set := slices.Clone(tbs)
	slices.Sort(set)
	for i, t := range set {
		if t < 0 {
			p.fail(r.id, t, label, "thread block %d negative", t)
			return
		}
		if i > 0 && set[i-1] == t {
			p.fail(r.id, t, label, "thread block %d listed twice", t)
			return
		}
	}
	if r.barrier == nil {
		r.barrier = map[string]int{}
	}
	key := fmt.Sprint(set)
	id, ok := r.barrier[key]
	if !ok {
		id = len(r.barrier)
		r.barrier[key] = id
	}
	p.add(&op{name: plan.OpBarrier, rank: r.id, barrierID: id, barrier: len(set), barrierTBs: set}, set, nil)
}

// Semaphore is a device semaphore of one rank, shared by its thread blocks.
type Semaphore struct {
	r   *Rank
	id  int
	bad bool
}

// Semaphore makes a semaphore on this rank with the given initial value
// (>= 0).
func (r *Rank) Semaphore(initValue int) *Semaphore {
	if r == nil || r.bad {
		return &Semaphore{r: r, bad: true}
	}
	if initValue < 0 {
		r.p.fail(r.id, -1, "Semaphore", "initial value %d negative", initValue)
		return &Semaphore{r: r, bad: true}
	}
	r.sems = append(r.sems, initValue)
	return &Semaphore{r: r, id: len(r.sems) - 1}
}

func (s *Semaphore) semOp(name plan.OpName, label string, tb Blocks, sync SyncType) {
	if s == nil || s.bad {
		return
	}
	p := s.r.p
	tbs, _, ok := p.blocks(s.r.id, label, tb, true)
	if !ok || !p.checkSync(s.r.id, tbs[0], label, sync) {
		return
	}
	p.add(&op{name: name, rank: s.r.id, sync: sync, sems: []int{s.id}}, tbs, nil)
}

// Acquire waits until the semaphore is positive and decrements it.
func (s *Semaphore) Acquire(tb Blocks, sync SyncType) {
	s.semOp(plan.OpSemAcquire, "sem_acquire", tb, sync)
}

// Release increments the semaphore, releasing the block's earlier writes to
// the rank's other blocks.
func (s *Semaphore) Release(tb Blocks, sync SyncType) {
	s.semOp(plan.OpSemRelease, "sem_release", tb, sync)
}
