package verify

import (
	"math"

	"github.com/chorus-rt/chorus/algo/plan"
)

// builder makes small plans by hand: every rank has `dup` memory and `dup`
// port channels to every peer (channel id i*(n-1)+peer index), every thread
// block lists all of them, and every remote buffer allows memory and port
// access and is listed by every thread block in creation order, so
// thread-block-local ids equal GPU ids.
type builder struct {
	p   *plan.Plan
	n   int
	dup int
}

func newBuilder(name string, c plan.Collective, n, ic, oc, sc int) *builder {
	p := &plan.Plan{Name: name, Collective: c, Protocol: plan.Simple, NumThreadsPerBlock: 1024,
		BufferAlignment: 16, MaxMessageSize: math.MaxUint64}
	for r := 0; r < n; r++ {
		p.GPUs = append(p.GPUs, plan.GPU{ID: r, InputChunks: ic, OutputChunks: oc, ScratchChunks: sc})
	}
	return &builder{p: p, n: n, dup: 1}
}

// ch is rank r's channel id of copy i to peer q.
func (b *builder) ch(r, q int, i ...int) int {
	idx := q
	if q > r {
		idx = q - 1
	}
	if len(i) > 0 {
		idx += i[0] * (b.n - 1)
	}
	return idx
}

func (b *builder) peers(r int) []int {
	var out []int
	for q := 0; q < b.n; q++ {
		if q != r {
			out = append(out, q)
		}
	}
	return out
}

func (b *builder) remote(r, q int, buf plan.BufferType) int {
	g := &b.p.GPUs[r]
	for i, rb := range g.RemoteBuffers {
		if rb.Rank == q && rb.Type == buf {
			return i
		}
	}
	g.RemoteBuffers = append(g.RemoteBuffers, plan.RemoteBuffer{Rank: q, Type: buf,
		AccessChannelTypes: []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort}})
	return len(g.RemoteBuffers) - 1
}

func (b *builder) add(r, t int, ops ...plan.Op) {
	g := &b.p.GPUs[r]
	for len(g.ThreadBlocks) <= t {
		g.ThreadBlocks = append(g.ThreadBlocks, plan.ThreadBlock{ID: len(g.ThreadBlocks)})
	}
	g.ThreadBlocks[t].Ops = append(g.ThreadBlocks[t].Ops, ops...)
}

func (b *builder) done() *plan.Plan {
	for r := range b.p.GPUs {
		g := &b.p.GPUs[r]
		var conn, ids []int
		for i := 0; i < b.dup; i++ {
			conn = append(conn, b.peers(r)...)
		}
		for i := range conn {
			ids = append(ids, i)
		}
		if b.n > 1 {
			g.Channels = []plan.Channel{{Type: plan.ChannelMemory, ConnectedTo: conn}, {Type: plan.ChannelPort, ConnectedTo: conn}}
		}
		var rbs []int
		for i := range g.RemoteBuffers {
			rbs = append(rbs, i)
		}
		for t := range g.ThreadBlocks {
			tb := &g.ThreadBlocks[t]
			if b.n > 1 {
				tb.Channels = []plan.TBChannel{{Type: plan.ChannelMemory, ChannelIDs: ids}, {Type: plan.ChannelPort, ChannelIDs: ids}}
			}
			if len(rbs) > 0 {
				tb.RemoteBufferRefs = []plan.RemoteBufRef{{AccessChannelType: plan.ChannelMemory, RemoteBufferIDs: rbs},
					{AccessChannelType: plan.ChannelPort, RemoteBufferIDs: rbs}}
			}
		}
	}
	return b.p
}

var (
	in  = plan.Input
	out = plan.Output
	scr = plan.Scratch
	mem = plan.ChannelMemory
	prt = plan.ChannelPort
)

func nop() plan.Op { return plan.Op{Name: plan.OpNop} }

// put copies rank r's src chunk to peer q's chunk dst[idx] over channel
// copy i of type t.
func (b *builder) put(name plan.OpName, t plan.ChannelType, r, q int, src plan.BufRef, dst plan.BufferType, idx int, i ...int) plan.Op {
	return plan.Op{Name: name, ChannelType: t, ChannelIDs: []int{b.ch(r, q, i...)},
		Src: []plan.BufRef{src}, Dst: []plan.BufRef{plan.Remote(b.remote(r, q, dst), idx, src.Size)}}
}

func (b *builder) sync(name plan.OpName, t plan.ChannelType, r int, qs []int, i ...int) plan.Op {
	op := plan.Op{Name: name, ChannelType: t}
	for _, q := range qs {
		op.ChannelIDs = append(op.ChannelIDs, b.ch(r, q, i...))
	}
	return op
}

func reduceOp(dst plan.BufRef, srcs ...plan.BufRef) plan.Op {
	return plan.Op{Name: plan.OpReduce, Src: srcs, Dst: []plan.BufRef{dst}, ReduceOp: plan.ReduceSum}
}

func loc(b plan.BufferType, i int) plan.BufRef { return plan.Local(b, i, 1) }

// allreduceAllPairs: every rank sends chunk q of its input to rank q's
// scratch slot r, reduces its own chunk r into out[r], and puts the result
// into every peer's out[r]. One thread block per rank; op indices for n
// ranks: puts 0..n-2, nop n-1, signal n, wait n+1, nop n+2, re n+3, nop
// n+4, puts n+5..2n+3, nop 2n+4, signal 2n+5, wait 2n+6.
func allreduceAllPairs(n int) *plan.Plan {
	b := newBuilder("allreduce_allpairs", plan.AllReduce, n, n, n, n)
	for r := 0; r < n; r++ {
		ps := b.peers(r)
		for _, q := range ps {
			b.add(r, 0, b.put(plan.OpPut, mem, r, q, loc(in, q), scr, r))
		}
		b.add(r, 0, nop(), b.sync(plan.OpSignal, mem, r, ps), b.sync(plan.OpWait, mem, r, ps), nop())
		srcs := []plan.BufRef{loc(in, r)}
		for _, q := range ps {
			srcs = append(srcs, loc(scr, q))
		}
		b.add(r, 0, reduceOp(loc(out, r), srcs...), nop())
		for _, q := range ps {
			b.add(r, 0, b.put(plan.OpPut, mem, r, q, loc(out, r), out, r))
		}
		b.add(r, 0, nop(), b.sync(plan.OpSignal, mem, r, ps), b.sync(plan.OpWait, mem, r, ps))
	}
	return b.done()
}

// allreduceTBG is allreduceAllPairs(2) split over a group of two thread
// blocks (tbg_info), each with its own channel; with pipeline the whole
// program of each thread block is a pipeline body.
func allreduceTBG(pipeline bool) *plan.Plan {
	b := newBuilder("allreduce_tbg", plan.AllReduce, 2, 2, 2, 2)
	b.dup = 2
	for r := 0; r < 2; r++ {
		q := 1 - r
		for t := 0; t < 2; t++ {
			g := &plan.TBGroup{ID: t, Size: 2}
			p1 := b.put(plan.OpPut, mem, r, q, loc(in, q), scr, r, t)
			p1.TBG = g
			re := reduceOp(loc(out, r), loc(in, r), loc(scr, q))
			re.TBG = g
			p2 := b.put(plan.OpPut, mem, r, q, loc(out, r), out, r, t)
			p2.TBG = g
			ops := []plan.Op{p1, nop(), b.sync(plan.OpSignal, mem, r, []int{q}, t), b.sync(plan.OpWait, mem, r, []int{q}, t), nop(),
				re, nop(), p2, nop(), b.sync(plan.OpSignal, mem, r, []int{q}, t), b.sync(plan.OpWait, mem, r, []int{q}, t)}
			if pipeline {
				ops = []plan.Op{{Name: plan.OpPipeline, Iter: &plan.IterContext{UnitSize: 1 << 20, NumChunks: 1}, Ops: ops}}
			}
			b.add(r, t, ops...)
		}
	}
	return b.done()
}

// allgatherPort: tb 0 copies the rank's chunk into its output; tb 1 puts it
// to every peer with put-with-signal over port channels and waits for the
// peers' signals. Ops: tb 0: copy 0; tb 1: pws 0..n-2, wait n-1.
func allgatherPort(n int) *plan.Plan {
	b := newBuilder("allgather_port", plan.AllGather, n, 1, n, 0)
	for r := 0; r < n; r++ {
		b.add(r, 0, plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{loc(in, 0)}, Dst: []plan.BufRef{loc(out, r)}})
		ps := b.peers(r)
		for _, q := range ps {
			b.add(r, 1, b.put(plan.OpPutWithSignal, prt, r, q, loc(in, 0), out, r))
		}
		b.add(r, 1, b.sync(plan.OpWait, prt, r, ps))
	}
	return b.done()
}

// allgatherSem: tb 0 copies the rank's chunk into out[r] and releases
// semaphore 0 (or reaches barrier 0); tb 1 acquires it and puts out[r] to
// every peer over memory channels. Ops: tb 0: copy 0, nop 1, sem_release /
// barrier 2; tb 1: sem_acquire / barrier 0, nop 1, puts 2..n, nop n+1,
// signal n+2, wait n+3.
func allgatherSem(n int, barrier bool) *plan.Plan {
	b := newBuilder("allgather_sem", plan.AllGather, n, 1, n, 0)
	for r := 0; r < n; r++ {
		rel := plan.Op{Name: plan.OpSemRelease, SemaphoreIDs: []int{0}}
		acq := plan.Op{Name: plan.OpSemAcquire, SemaphoreIDs: []int{0}}
		if barrier {
			rel = plan.Op{Name: plan.OpBarrier, BarrierID: 0, NumThreadBlocks: 2}
			acq = rel
		} else {
			b.p.GPUs[r].Semaphores = []plan.Semaphore{{InitValue: 0}}
		}
		b.add(r, 0, plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{loc(in, 0)}, Dst: []plan.BufRef{loc(out, r)}}, nop(), rel)
		ps := b.peers(r)
		b.add(r, 1, acq, nop())
		for _, q := range ps {
			b.add(r, 1, b.put(plan.OpPut, mem, r, q, loc(out, r), out, r))
		}
		b.add(r, 1, nop(), b.sync(plan.OpSignal, mem, r, ps), b.sync(plan.OpWait, mem, r, ps))
	}
	return b.done()
}

// reduceScatter: rank r sends in[q] to rank q's scratch slot r and reduces
// in[r] with its scratch into out[0]. Ops: puts 0..n-2, nop n-1, signal n,
// wait n+1, nop n+2, re n+3.
func reduceScatter(n int) *plan.Plan {
	b := newBuilder("reducescatter", plan.ReduceScatter, n, n, 1, n)
	for r := 0; r < n; r++ {
		ps := b.peers(r)
		for _, q := range ps {
			b.add(r, 0, b.put(plan.OpPut, mem, r, q, loc(in, q), scr, r))
		}
		b.add(r, 0, nop(), b.sync(plan.OpSignal, mem, r, ps), b.sync(plan.OpWait, mem, r, ps), nop())
		srcs := []plan.BufRef{loc(in, r)}
		for _, q := range ps {
			srcs = append(srcs, loc(scr, q))
		}
		b.add(r, 0, reduceOp(loc(out, 0), srcs...))
	}
	return b.done()
}

// allreduceLL: the LL all-pairs allreduce, no signals: packets carry the
// synchronization. Ops: ppkt 0..n-2, repkt n-1, nop n, ppkt n+1..2n-1,
// upkt 2n..3n-2.
func allreduceLL(n int) *plan.Plan {
	b := newBuilder("allreduce_ll", plan.AllReduce, n, n, n, 2*n)
	b.p.Protocol = plan.LL
	for r := 0; r < n; r++ {
		ps := b.peers(r)
		for _, q := range ps {
			b.add(r, 0, b.put(plan.OpPutPackets, mem, r, q, loc(in, q), scr, r))
		}
		srcs := []plan.BufRef{loc(in, r)}
		for _, q := range ps {
			srcs = append(srcs, loc(scr, q))
		}
		b.add(r, 0, plan.Op{Name: plan.OpReducePackets, Src: srcs, Dst: []plan.BufRef{loc(out, r)}, ReduceOp: plan.ReduceSum}, nop())
		for _, q := range ps {
			b.add(r, 0, b.put(plan.OpPutPackets, mem, r, q, loc(out, r), scr, n+r))
		}
		for _, q := range ps {
			b.add(r, 0, plan.Op{Name: plan.OpUnpackPackets, Src: []plan.BufRef{loc(scr, n+q)}, Dst: []plan.BufRef{loc(out, q)}})
		}
	}
	return b.done()
}

// alltoall: rank r copies in[r] to out[r] and puts in[q] to rank q's
// out[r]. Ops: copy 0, puts 1..n-1, nop n, signal n+1, wait n+2.
func alltoall(n int) *plan.Plan {
	b := newBuilder("alltoall", plan.AllToAll, n, n, n, 0)
	for r := 0; r < n; r++ {
		ps := b.peers(r)
		b.add(r, 0, plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{loc(in, r)}, Dst: []plan.BufRef{loc(out, r)}})
		for _, q := range ps {
			b.add(r, 0, b.put(plan.OpPut, mem, r, q, loc(in, q), out, r))
		}
		b.add(r, 0, nop(), b.sync(plan.OpSignal, mem, r, ps), b.sync(plan.OpWait, mem, r, ps))
	}
	return b.done()
}
