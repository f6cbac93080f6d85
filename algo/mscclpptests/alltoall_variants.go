package mscclpptests

import (
	"fmt"

	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
)

// The remaining programs of tests/single_node/alltoall/. Common shape: the
// block for peer q lives in chunk q of a rank's input (and output), and
// rank q's scratch keeps one slot per sender, slotOf(r, q). MSCCL++'s
// signal, wait, semaphore release and acquire default to data_sync both;
// the programs spell that out.
//
// Several of these programs declare the collective out of place
// (AllToAll(n, 1, False)) but write their result into the input buffer, as
// an in-place program would; their output is never written, and the
// verifier says so (WrongResult). They are kept as MSCCL++ wrote them.

// a2aConfig is one all-to-all program's configuration.
type a2aConfig struct {
	name      string
	inPlace   bool
	reuse     bool
	instances int
	chunks    int // chunk factor (chunksperloop)
	proto     plan.Protocol
	dbl       bool // use_double_scratch_buffer
}

func (c a2aConfig) program(n int) *dsl.Program {
	return newProgram(c.name, plan.AllToAll, n, c.proto, func(cfg *dsl.Config) {
		cfg.InPlace, cfg.ReuseResources, cfg.DoubleScratch = c.inPlace, c.reuse, c.dbl
		cfg.Instances, cfg.ChunkFactor = c.instances, c.chunks
	})
}

// meshes makes k memory channels for every ordered pair of ranks, in
// MSCCL++'s creation order (per source rank, per peer, the k kinds in
// turn): ch[kind][r][q] lives on r and reaches q.
func meshes(p *dsl.Program, n, k int) [][][]*dsl.MemoryChannel {
	ch := make([][][]*dsl.MemoryChannel, k)
	for i := range ch {
		ch[i] = make([][]*dsl.MemoryChannel, n)
		for r := range n {
			ch[i][r] = make([]*dsl.MemoryChannel, n)
		}
	}
	for r := range n {
		for _, q := range peersOf(r, n) {
			for i := range k {
				ch[i][r][q] = p.MemoryChannel(q, r)
			}
		}
	}
	return ch
}

// peerSems makes one semaphore (initial 0) per ordered pair, on the
// first rank: s[r][q].
func peerSems(p *dsl.Program, n int) [][]*dsl.Semaphore {
	s := make([][]*dsl.Semaphore, n)
	for r := range n {
		s[r] = make([]*dsl.Semaphore, n)
		for _, q := range peersOf(r, n) {
			s[r][q] = p.Rank(r).Semaphore(0)
		}
	}
	return s
}

// scratches gives every rank a scratch buffer of size chunks.
func scratches(p *dsl.Program, n, size int) []dsl.Buffer {
	s := make([]dsl.Buffer, n)
	for r := range n {
		s[r] = p.Rank(r).NewScratch(size)
	}
	return s
}

// syncPeers: every rank signals, then waits for, every peer; peer q's
// signal and wait run on tbOf(r, q). relaxed picks rlxsignal/rlxwait.
func syncPeers(ch [][]*dsl.MemoryChannel, n int, tbOf func(r, q int) int, relaxed bool, sig, wait dsl.SyncType) {
	for r := range n {
		for _, q := range peersOf(r, n) {
			if relaxed {
				ch[r][q].RelaxedSignal(dsl.TB(tbOf(r, q)), sig)
			} else {
				ch[r][q].Signal(dsl.TB(tbOf(r, q)), sig)
			}
		}
		for _, q := range peersOf(r, n) {
			if relaxed {
				ch[r][q].RelaxedWait(dsl.TB(tbOf(r, q)), wait)
			} else {
				ch[r][q].Wait(dsl.TB(tbOf(r, q)), wait)
			}
		}
	}
}

func onTB(t int) func(r, q int) int { return func(int, int) int { return t } }

// perPeerTB: peer q's block is its slot.
func perPeerTB(r, q int) int { return slotOf(q, r) }

// ringOrder returns (r + dir*k) mod n for k in [from, to): MSCCL++'s ring
// loops ("for peer in range(from, to): dst = (src ± peer) % n"); k = 0
// and k = n are r itself.
func ringOrder(r, n, from, to, dir int) []int {
	var out []int
	for k := from; k < to; k++ {
		out = append(out, ((r+dir*k)%n+n)%n)
	}
	return out
}

// alltoallPipeline (alltoall_pipeline.py, in place, 2 instances): a
// relaxed handshake on the peer's block, then in a pipeline loop the put
// into the peer's scratch slot with a signal and a semaphore release on
// block slot(q); block n-1+slot(q) acquires, waits and copies the block out
// of scratch into the input (the semaphore orders the put's read of in[q]
// before the copy's write of it).
func alltoallPipeline(n int) (*plan.Plan, error) {
	p := a2aConfig{name: "alltoall_pipeline", inPlace: true, instances: 2, chunks: 1, proto: plan.Simple}.program(n)
	scr := make([]dsl.Buffer, n)
	sem := make([][]*dsl.Semaphore, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n - 1)
		for range n {
			sem[r] = append(sem[r], p.Rank(r).Semaphore(0))
		}
	}
	m := meshes(p, n, 2)
	ch, sync := m[0], m[1]
	syncPeers(sync, n, perPeerTB, true, dsl.SyncBoth, dsl.SyncAfter)
	off := n - 1
	p.Pipeline(1<<19, 1, func() {
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range peersOf(r, n) {
				tb := slotOf(q, r)
				ch[r][q].Put(scr[q].Chunk(slotOf(r, q), 1), in.Chunk(q, 1), dsl.TB(tb))
				ch[r][q].Signal(dsl.TB(tb), dsl.SyncBefore)
				sem[r][tb].Release(dsl.TB(tb), dsl.SyncBoth)
			}
		}
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range peersOf(r, n) {
				i := slotOf(q, r)
				sem[r][i].Acquire(dsl.TB(off+i), dsl.SyncBoth)
				ch[r][q].Wait(dsl.TB(off+i), dsl.SyncAfter)
				p.Rank(r).Copy(in.Chunk(q, 1), scr[r].Chunk(i, 1), dsl.TB(off+i))
			}
		}
	})
	return p.Lower()
}

// alltoallPipelineOp (alltoall_pipeline_op.py, out of place, 2
// instances): the same puts and signals without semaphores; the copies go
// to the output, and each rank copies its own block in[r] -> out[r]. In
// MSCCL++'s program that copy runs on block "tb - tb_offset" with tb left
// over from the previous loop iteration: slot(r-1) = r-1 for r > 0, and -1
// for rank 0, which Python's list indexing turns into the rank's last
// block so far, n-2. The same blocks are used here.
func alltoallPipelineOp(n int) (*plan.Plan, error) {
	p := a2aConfig{name: "alltoall_pipeline_op", reuse: true, instances: 2, chunks: 1, proto: plan.Simple}.program(n)
	scr := scratches(p, n, n-1)
	m := meshes(p, n, 2)
	ch, sync := m[0], m[1]
	syncPeers(sync, n, perPeerTB, true, dsl.SyncBoth, dsl.SyncAfter)
	off := n - 1
	p.Pipeline(1<<19, 1, func() {
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range peersOf(r, n) {
				tb := dsl.TB(slotOf(q, r))
				ch[r][q].Put(scr[q].Chunk(slotOf(r, q), 1), in.Chunk(q, 1), tb)
				ch[r][q].Signal(tb, dsl.SyncBefore)
			}
		}
		for r := range n {
			rk := p.Rank(r)
			for q := range n {
				if q == r {
					self := n - 2
					if r > 0 {
						self = r - 1
					}
					rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(r, 1), dsl.TB(self))
					continue
				}
				i := slotOf(q, r)
				ch[r][q].Wait(dsl.TB(off+i), dsl.SyncAfter)
				rk.Copy(rk.Output().Chunk(q, 1), scr[r].Chunk(i, 1), dsl.TB(off+i))
			}
		}
	})
	return p.Lower()
}

// alltoallHetPipeline (alltoall_het_pipeline.py, in place, 2 instances, 4
// chunks per peer block in two steps of two): step 0 sends its upper chunk
// on a second block set (first_step channels, blocks n-1+slot) and its
// lower chunk on the peer's block with a semaphore release; the last step
// sends its upper chunk first on a third channel (last_step, copied out on
// the sending block) and its lower chunk as before.
func alltoallHetPipeline(n int) (*plan.Plan, error) {
	const steps, per = 2, 2
	const cf = steps * per
	p := a2aConfig{name: "alltoall_het_pipeline", inPlace: true, reuse: true, instances: 2, chunks: cf, proto: plan.Simple}.program(n)
	scr := make([]dsl.Buffer, n)
	sem := make([][]*dsl.Semaphore, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(cf * (n - 1))
		for range n {
			sem[r] = append(sem[r], p.Rank(r).Semaphore(0))
		}
	}
	m := meshes(p, n, 4)
	ch, first, sync, last := m[0], m[1], m[2], m[3]
	syncPeers(sync, n, perPeerTB, true, dsl.SyncBoth, dsl.SyncAfter)
	off := n - 1
	half := per / 2
	for i := range steps {
		if i == 0 {
			for r := range n {
				in := p.Rank(r).Input()
				for _, q := range peersOf(r, n) {
					l, rem := q*cf+i*per+half, slotOf(r, q)*cf+i*per+half
					tb := dsl.TB(off + slotOf(q, r))
					first[r][q].Put(scr[q].Chunk(rem, half), in.Chunk(l, half), tb)
					first[r][q].Signal(tb, dsl.SyncBefore)
				}
				for _, q := range peersOf(r, n) {
					l, rem := q*cf+i*per, slotOf(r, q)*cf+i*per
					tb := slotOf(q, r)
					ch[r][q].Put(scr[q].Chunk(rem, half), in.Chunk(l, half), dsl.TB(tb))
					ch[r][q].Signal(dsl.TB(tb), dsl.SyncBefore)
					sem[r][tb].Release(dsl.TB(tb), dsl.SyncBoth)
				}
			}
			for r := range n {
				rk := p.Rank(r)
				in := rk.Input()
				for _, q := range peersOf(r, n) {
					s, d := slotOf(q, r)*cf+i*per+half, q*cf+i*per+half
					tb := dsl.TB(off + slotOf(q, r))
					first[r][q].Wait(tb, dsl.SyncAfter)
					rk.Copy(in.Chunk(d, half), scr[r].Chunk(s, half), tb)
				}
				for _, q := range peersOf(r, n) {
					s, d := slotOf(q, r)*cf+i*per, q*cf+i*per
					tb := off + slotOf(q, r)
					sem[r][slotOf(q, r)].Acquire(dsl.TB(tb), dsl.SyncBoth)
					ch[r][q].Wait(dsl.TB(tb), dsl.SyncAfter)
					rk.Copy(in.Chunk(d, half), scr[r].Chunk(s, half), dsl.TB(tb))
				}
			}
			continue
		}
		lastStep := i == steps-1
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range peersOf(r, n) {
				l, rem := q*cf+i*per, slotOf(r, q)*cf+i*per
				tb := slotOf(q, r)
				if lastStep {
					ch[r][q].Put(scr[q].Chunk(rem+half, per-half), in.Chunk(l+half, per-half), dsl.TB(tb))
					last[r][q].Signal(dsl.TB(tb), dsl.SyncBefore)
					ch[r][q].Put(scr[q].Chunk(rem, half), in.Chunk(l, half), dsl.TB(tb))
				} else {
					ch[r][q].Put(scr[q].Chunk(rem, per), in.Chunk(l, per), dsl.TB(tb))
				}
				ch[r][q].Signal(dsl.TB(tb), dsl.SyncBefore)
				sem[r][tb].Release(dsl.TB(tb), dsl.SyncBoth)
			}
		}
		for r := range n {
			rk := p.Rank(r)
			in := rk.Input()
			for _, q := range peersOf(r, n) {
				s, d := slotOf(q, r)*cf+i*per, q*cf+i*per
				tb := off + slotOf(q, r)
				if lastStep {
					last[r][q].Wait(dsl.TB(tb-off), dsl.SyncAfter)
					rk.Copy(in.Chunk(d+half, per-half), scr[r].Chunk(s+half, per-half), dsl.TB(tb-off))
					sem[r][tb-off].Acquire(dsl.TB(tb), dsl.SyncBoth)
					ch[r][q].Wait(dsl.TB(tb), dsl.SyncAfter)
					rk.Copy(in.Chunk(d, half), scr[r].Chunk(s, half), dsl.TB(tb))
				} else {
					sem[r][tb-off].Acquire(dsl.TB(tb), dsl.SyncBoth)
					ch[r][q].Wait(dsl.TB(tb), dsl.SyncAfter)
					rk.Copy(in.Chunk(d, per), scr[r].Chunk(s, per), dsl.TB(tb))
				}
			}
		}
	}
	return p.Lower()
}

// alltoallPkt (alltoall_pkt.py, in place, LL, 2 instances): put_packets of
// in[q] into rank q's scratch slot on block slot(q), unpack of every slot
// into the input on the same block; the packet flags are the only
// synchronization.
func alltoallPkt(n int) (*plan.Plan, error) {
	p := a2aConfig{name: "alltoall_pkt", inPlace: true, instances: 2, chunks: 1, proto: plan.LL, dbl: true}.program(n)
	scr := scratches(p, n, n-1)
	ch := meshes(p, n, 1)[0]
	for r := range n {
		in := p.Rank(r).Input()
		for _, q := range peersOf(r, n) {
			ch[r][q].PutPackets(scr[q].Chunk(slotOf(r, q), 1), in.Chunk(q, 1), dsl.TB(slotOf(q, r)))
		}
	}
	for r := range n {
		in := p.Rank(r).Input()
		for _, q := range peersOf(r, n) {
			p.Rank(r).UnpackPackets(in.Chunk(q, 1), scr[r].Chunk(slotOf(q, r), 1), dsl.TB(slotOf(q, r)))
		}
	}
	return p.Lower()
}

// alltoallRingGetGen (alltoall_ring_get.py, alltoall_ring_get_pipeline.py:
// declared out of place, 32 instances): block 0 copies in[q] into the own
// scratch slot for q, in ring order, signals q and releases a semaphore;
// block 1, in reverse ring order, acquires, waits for q's signal and gets
// q's slot for r into in[q]; a relaxed closing handshake on block 1. The
// result lands in the input, which an out-of-place all-to-all does not
// read back: the output is never written.
func alltoallRingGetGen(name string) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := a2aConfig{name: name, reuse: true, instances: 32, chunks: 1, proto: plan.Simple}.program(n)
		scr := make([]dsl.Buffer, n)
		ch := make([][]*dsl.MemoryChannel, n)
		sync := make([][]*dsl.MemoryChannel, n)
		sem := make([][]*dsl.Semaphore, n)
		for r := range n {
			scr[r] = p.Rank(r).NewScratch(n - 1)
			ch[r], sync[r], sem[r] = make([]*dsl.MemoryChannel, n), make([]*dsl.MemoryChannel, n), make([]*dsl.Semaphore, n)
			for _, q := range peersOf(r, n) {
				ch[r][q] = p.MemoryChannel(q, r)
				sync[r][q] = p.MemoryChannel(q, r)
				sem[r][q] = p.Rank(r).Semaphore(0)
			}
		}
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range ringOrder(r, n, 1, n, 1) {
				p.Rank(r).Copy(scr[r].Chunk(slotOf(q, r), 1), in.Chunk(q, 1), dsl.TB(0))
				ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
				sem[r][q].Release(dsl.TB(0), dsl.SyncBoth)
			}
		}
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range ringOrder(r, n, 1, n, -1) {
				sem[r][q].Acquire(dsl.TB(1), dsl.SyncBoth)
				ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
				ch[r][q].Get(in.Chunk(q, 1), scr[q].Chunk(slotOf(r, q), 1), dsl.TB(1))
			}
		}
		syncPeers(sync, n, onTB(1), true, dsl.SyncBoth, dsl.SyncBoth)
		return p.Lower()
	}
}

// alltoallRingGetOpGen (alltoall_ring_get_op.py,
// alltoall_ring_get_pipeline_op.py: out of place, 16 instances): as
// ring_get without semaphores, the gets landing in the output; block 0
// copies the own block in[r] -> out[r] after the ring.
func alltoallRingGetOpGen(name string) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := a2aConfig{name: name, reuse: true, instances: 16, chunks: 1, proto: plan.Simple}.program(n)
		scr := scratches(p, n, n-1)
		m := meshes(p, n, 2)
		ch, sync := m[0], m[1]
		for r := range n {
			rk := p.Rank(r)
			for _, q := range ringOrder(r, n, 1, n+1, 1) {
				if q == r {
					rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(r, 1), dsl.TB(0))
					continue
				}
				rk.Copy(scr[r].Chunk(slotOf(q, r), 1), rk.Input().Chunk(q, 1), dsl.TB(0))
				ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
			}
		}
		for r := range n {
			out := p.Rank(r).Output()
			for _, q := range ringOrder(r, n, 1, n, -1) {
				ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
				ch[r][q].Get(out.Chunk(q, 1), scr[q].Chunk(slotOf(r, q), 1), dsl.TB(1))
			}
		}
		syncPeers(sync, n, onTB(1), true, dsl.SyncBoth, dsl.SyncBoth)
		return p.Lower()
	}
}

// alltoallRingGetNaive (alltoall_ring_get_naive.py, declared out of
// place, 32 instances, one block): copy every in[q] into the own scratch
// slot, signal and wait for every peer, get every peer's slot for r into
// in[q] in ring order, a relaxed closing handshake on the same channels.
// Like ring_get, the result lands in the input: the output is never
// written.
func alltoallRingGetNaive(n int) (*plan.Plan, error) {
	p := a2aConfig{name: "alltoall_ring_get_naive", reuse: true, instances: 32, chunks: 1, proto: plan.Simple}.program(n)
	scr := scratches(p, n, n-1)
	ch := meshes(p, n, 1)[0]
	for r := range n {
		in := p.Rank(r).Input()
		for _, q := range peersOf(r, n) {
			p.Rank(r).Copy(scr[r].Chunk(slotOf(q, r), 1), in.Chunk(q, 1), dsl.TB(0))
		}
	}
	syncPeers(ch, n, onTB(0), false, dsl.SyncBefore, dsl.SyncAfter)
	for r := range n {
		in := p.Rank(r).Input()
		for _, q := range ringOrder(r, n, 1, n, 1) {
			ch[r][q].Get(in.Chunk(q, 1), scr[q].Chunk(slotOf(r, q), 1), dsl.TB(0))
		}
	}
	syncPeers(ch, n, onTB(0), true, dsl.SyncBoth, dsl.SyncBoth)
	return p.Lower()
}

// alltoallRingNaive (alltoall_ring_naive.py): alltoall_ring.py's program
// with reuse_resources (puts in ring order on block 0 releasing a
// semaphore per peer, block 1 acquires, waits and copies out of scratch).
func alltoallRingNaive(n int) (*plan.Plan, error) {
	return alltoallRingGen("alltoall_ring_naive", true)(n)
}

// alltoallRingOOPGen: the out-of-place ring programs (ring_naive_op,
// ring_naive_pipeline_op, ring_oop, ring_op; 16 instances): a handshake on
// block 0 (relaxed or not), block 0 puts in ring order with a signal each,
// block 1 waits and copies out of scratch into the output in reverse ring
// order, and block 0 copies the own block in[r] -> out[r] (first in the
// reverse ring order); pipelined programs put the puts and copies in one
// pipeline loop.
func alltoallRingOOPGen(name string, reuse, relaxed bool, unit int) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := a2aConfig{name: name, reuse: reuse, instances: 16, chunks: 1, proto: plan.Simple}.program(n)
		scr := scratches(p, n, n-1)
		m := meshes(p, n, 2)
		ch, sync := m[0], m[1]
		syncPeers(sync, n, onTB(0), relaxed, dsl.SyncBoth, dsl.SyncAfter)
		body := func() {
			for r := range n {
				in := p.Rank(r).Input()
				for _, q := range ringOrder(r, n, 1, n, 1) {
					ch[r][q].Put(scr[q].Chunk(slotOf(r, q), 1), in.Chunk(q, 1), dsl.TB(0))
					ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
				}
			}
			for r := range n {
				rk := p.Rank(r)
				for _, q := range ringOrder(r, n, 0, n, -1) {
					if q == r {
						rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(r, 1), dsl.TB(0))
						continue
					}
					ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
					rk.Copy(rk.Output().Chunk(q, 1), scr[r].Chunk(slotOf(q, r), 1), dsl.TB(1))
				}
			}
		}
		if unit > 0 {
			p.Pipeline(unit, 1, body)
		} else {
			body()
		}
		return p.Lower()
	}
}

// findPairs is MSCCL++'s find_pairs: n-1 steps, each greedily matching
// every rank with the lowest-numbered free rank it has not met yet. It
// fails where the greedy choice leaves a rank unmatched in some step.
func findPairs(n int) ([][]int, error) {
	met := make([][]bool, n)
	for i := range met {
		met[i] = make([]bool, n)
	}
	var steps [][]int
	for s := range n - 1 {
		pair := make([]int, n)
		for i := range pair {
			pair[i] = -1
		}
		for x := range n {
			if pair[x] >= 0 {
				continue
			}
			for y := x + 1; y < n; y++ {
				if pair[y] < 0 && !met[x][y] {
					pair[x], pair[y] = y, x
					met[x][y], met[y][x] = true, true
					break
				}
			}
		}
		for x, y := range pair {
			if y < 0 {
				return nil, fmt.Errorf("find_pairs(%d): rank %d has no partner in step %d", n, x, s)
			}
		}
		steps = append(steps, pair)
	}
	return steps, nil
}

// alltoallRingPeers (alltoall_ring_peers.py, in place, 16 instances): in
// each of n-1 steps every rank exchanges with its partner of that step:
// block 0 puts in[q] into q's scratch slot, signals and releases a
// semaphore; block 1 acquires, waits and copies the slot into in[q].
func alltoallRingPeers(n int) (*plan.Plan, error) {
	pairs, err := findPairs(n)
	if err != nil {
		return nil, err
	}
	p := a2aConfig{name: "alltoall_ring_peers", inPlace: true, instances: 16, chunks: 1, proto: plan.Simple}.program(n)
	scr := make([]dsl.Buffer, n)
	ch := make([][]*dsl.MemoryChannel, n)
	sync := make([][]*dsl.MemoryChannel, n)
	sem := make([][]*dsl.Semaphore, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n - 1)
		ch[r], sync[r], sem[r] = make([]*dsl.MemoryChannel, n), make([]*dsl.MemoryChannel, n), make([]*dsl.Semaphore, n)
		for _, q := range peersOf(r, n) {
			ch[r][q] = p.MemoryChannel(q, r)
			sync[r][q] = p.MemoryChannel(q, r)
			sem[r][q] = p.Rank(r).Semaphore(0)
		}
	}
	syncPeers(sync, n, onTB(0), true, dsl.SyncBoth, dsl.SyncAfter)
	for _, pair := range pairs {
		for r := range n {
			q := pair[r]
			ch[r][q].Put(scr[q].Chunk(slotOf(r, q), 1), p.Rank(r).Input().Chunk(q, 1), dsl.TB(0))
			ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
			sem[r][q].Release(dsl.TB(0), dsl.SyncBoth)
		}
		for r := range n {
			q := pair[r]
			sem[r][q].Acquire(dsl.TB(1), dsl.SyncBoth)
			ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
			p.Rank(r).Copy(p.Rank(r).Input().Chunk(q, 1), scr[r].Chunk(slotOf(q, r), 1), dsl.TB(1))
		}
	}
	return p.Lower()
}

// alltoallRingPeersGet (alltoall_ring_peers_get.py, declared out of
// place, 16 instances): per step, block 0 copies in[q] into the own
// scratch slot for the partner q, signals and releases; block 1 acquires,
// waits and gets q's slot for r into in[q]; a relaxed closing handshake on
// block 1. The output is never written.
func alltoallRingPeersGet(n int) (*plan.Plan, error) {
	pairs, err := findPairs(n)
	if err != nil {
		return nil, err
	}
	p := a2aConfig{name: "alltoall_ring_peers_get", reuse: true, instances: 16, chunks: 1, proto: plan.Simple}.program(n)
	scr := make([]dsl.Buffer, n)
	ch := make([][]*dsl.MemoryChannel, n)
	sync := make([][]*dsl.MemoryChannel, n)
	sem := make([][]*dsl.Semaphore, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n - 1)
		ch[r], sync[r], sem[r] = make([]*dsl.MemoryChannel, n), make([]*dsl.MemoryChannel, n), make([]*dsl.Semaphore, n)
		for _, q := range peersOf(r, n) {
			ch[r][q] = p.MemoryChannel(q, r)
			sync[r][q] = p.MemoryChannel(q, r)
			sem[r][q] = p.Rank(r).Semaphore(0)
		}
	}
	for _, pair := range pairs {
		for r := range n {
			q := pair[r]
			p.Rank(r).Copy(scr[r].Chunk(slotOf(q, r), 1), p.Rank(r).Input().Chunk(q, 1), dsl.TB(0))
			ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
			sem[r][q].Release(dsl.TB(0), dsl.SyncBoth)
		}
		for r := range n {
			q := pair[r]
			sem[r][q].Acquire(dsl.TB(1), dsl.SyncBoth)
			ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
			ch[r][q].Get(p.Rank(r).Input().Chunk(q, 1), scr[q].Chunk(slotOf(r, q), 1), dsl.TB(1))
		}
	}
	syncPeers(sync, n, onTB(1), true, dsl.SyncBoth, dsl.SyncBoth)
	return p.Lower()
}

// alltoallRingPeersHetPipeline (alltoall_ring_peers_het_pipeline.py, in
// place, 32 instances, 2 chunks per peer block): step 0 sends the lower
// chunk on block 0 (with a semaphore release) and the upper chunk on block
// 1 over a second channel (first_step); block 1 copies both out. Later
// steps send the whole block on block 0 and copy it out on block 1.
func alltoallRingPeersHetPipeline(n int) (*plan.Plan, error) {
	pairs, err := findPairs(n)
	if err != nil {
		return nil, err
	}
	const cf = 2
	const half = cf / 2
	p := a2aConfig{name: "alltoall_ring_peers_het_pipeline", inPlace: true, reuse: true, instances: 32, chunks: cf, proto: plan.Simple}.program(n)
	scr := scratches(p, n, cf*(n-1))
	m := meshes(p, n, 3)
	ch, first, sync := m[0], m[1], m[2]
	// MSCCL++ makes the semaphores in the same loop as the channels; a
	// rank's semaphores are numbered on their own, so the order is the same.
	sem := peerSems(p, n)
	syncPeers(sync, n, onTB(0), true, dsl.SyncBoth, dsl.SyncAfter)
	for s, pair := range pairs {
		if s == 0 {
			for r := range n {
				q := pair[r]
				ch[r][q].Put(scr[q].Chunk(slotOf(r, q)*cf, half), p.Rank(r).Input().Chunk(q*cf, half), dsl.TB(0))
				ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
				sem[r][q].Release(dsl.TB(0), dsl.SyncBoth)
			}
			for r := range n {
				q := pair[r]
				first[r][q].Put(scr[q].Chunk(slotOf(r, q)*cf+half, half), p.Rank(r).Input().Chunk(q*cf+half, half), dsl.TB(1))
				first[r][q].Signal(dsl.TB(1), dsl.SyncBefore)
			}
			for r := range n {
				q := pair[r]
				sem[r][q].Acquire(dsl.TB(1), dsl.SyncBoth)
				ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
				p.Rank(r).Copy(p.Rank(r).Input().Chunk(q*cf, half), scr[r].Chunk(slotOf(q, r)*cf, half), dsl.TB(1))
			}
			for r := range n {
				q := pair[r]
				first[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
				p.Rank(r).Copy(p.Rank(r).Input().Chunk(q*cf+half, half), scr[r].Chunk(slotOf(q, r)*cf+half, half), dsl.TB(1))
			}
			continue
		}
		for r := range n {
			q := pair[r]
			ch[r][q].Put(scr[q].Chunk(slotOf(r, q)*cf, cf), p.Rank(r).Input().Chunk(q*cf, cf), dsl.TB(0))
			ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
			sem[r][q].Release(dsl.TB(0), dsl.SyncBoth)
		}
		for r := range n {
			q := pair[r]
			sem[r][q].Acquire(dsl.TB(1), dsl.SyncBoth)
			ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
			p.Rank(r).Copy(p.Rank(r).Input().Chunk(q*cf, cf), scr[r].Chunk(slotOf(q, r)*cf, cf), dsl.TB(1))
		}
	}
	return p.Lower()
}

// alltoallRingZeroCopyGetOp (alltoall_ring_zero_copy_get_op.py, out of
// place, 32 instances, no scratch): a relaxed handshake, then every rank
// gets peer q's in[r] straight into its out[q] in ring order (the own block
// copied locally), and a relaxed closing handshake so no rank leaves while
// a peer still reads its input.
func alltoallRingZeroCopyGetOp(n int) (*plan.Plan, error) {
	p := a2aConfig{name: "alltoall_ring_zero_copy_get_op", instances: 32, chunks: 1, proto: plan.Simple}.program(n)
	ch := meshes(p, n, 1)[0]
	syncPeers(ch, n, onTB(0), true, dsl.SyncBoth, dsl.SyncAfter)
	for r := range n {
		rk := p.Rank(r)
		for _, q := range ringOrder(r, n, 0, n, 1) {
			if q == r {
				rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(r, 1), dsl.TB(0))
				continue
			}
			ch[r][q].Get(rk.Output().Chunk(q, 1), p.Rank(q).Input().Chunk(r, 1), dsl.TB(0))
		}
	}
	syncPeers(ch, n, onTB(0), true, dsl.SyncBoth, dsl.SyncBoth)
	return p.Lower()
}

// alltoallRingZeroCopyOp (alltoall_ring_zero_copy_op.py, out of place, 32
// instances, no scratch): a relaxed handshake, then every rank puts in[q]
// straight into peer q's out[r] in ring order, and nothing after: no
// signal tells q that the put into its output is complete before q's
// kernel ends.
func alltoallRingZeroCopyOp(n int) (*plan.Plan, error) {
	p := a2aConfig{name: "alltoall_ring_zero_copy_op", instances: 32, chunks: 1, proto: plan.Simple}.program(n)
	ch := meshes(p, n, 1)[0]
	syncPeers(ch, n, onTB(0), true, dsl.SyncBoth, dsl.SyncAfter)
	for r := range n {
		rk := p.Rank(r)
		for _, q := range ringOrder(r, n, 0, n, 1) {
			if q == r {
				rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(r, 1), dsl.TB(0))
				continue
			}
			ch[r][q].Put(p.Rank(q).Output().Chunk(r, 1), rk.Input().Chunk(q, 1), dsl.TB(0))
		}
	}
	return p.Lower()
}

// alltoallZeroCopyPipeline (alltoall_zero_copy_pipeline.py, in place, 4
// instances): a relaxed handshake on the peer's block, then in a pipeline
// loop, all on block slot(q): put into q's scratch slot, release and
// acquire a fresh semaphore (tb_offset is 0, so both on the same block),
// signal; wait for q's signal and copy the slot into in[q].
func alltoallZeroCopyPipeline(n int) (*plan.Plan, error) {
	p := a2aConfig{name: "alltoall_zero_copy_pipeline", inPlace: true, reuse: true, instances: 4, chunks: 1, proto: plan.Simple}.program(n)
	scr := scratches(p, n, n-1)
	m := meshes(p, n, 2)
	ch, sync := m[0], m[1]
	syncPeers(sync, n, perPeerTB, true, dsl.SyncBoth, dsl.SyncAfter)
	p.Pipeline(1<<18, 1, func() {
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range peersOf(r, n) {
				sem := p.Rank(r).Semaphore(0)
				tb := dsl.TB(slotOf(q, r))
				ch[r][q].Put(scr[q].Chunk(slotOf(r, q), 1), in.Chunk(q, 1), tb)
				sem.Release(tb, dsl.SyncBefore)
				sem.Acquire(tb, dsl.SyncAfter)
				ch[r][q].Signal(tb, dsl.SyncBefore)
			}
		}
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range peersOf(r, n) {
				tb := dsl.TB(slotOf(q, r))
				ch[r][q].Wait(tb, dsl.SyncAfter)
				p.Rank(r).Copy(in.Chunk(q, 1), scr[r].Chunk(slotOf(q, r), 1), tb)
			}
		}
	})
	return p.Lower()
}
