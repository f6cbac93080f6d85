package mscclpptests

import (
	"fmt"

	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
)

// The hierarchical all-gathers of tests/multi_node (allgather_tbg.py,
// allgather_oop.py), the port-channel ring (allgather_mrc.py) and the
// two-node packet all-reduce (allreduce_brodcast_pkt.py).

func mod(a, n int) int { return (a%n + n) % n }

// hierGPN is the node size the hierarchical all-gathers are built with:
// 2 GPUs per node, so 4 ranks are 2 nodes (one port channel to the other
// node, used both ways) and 8 ranks are 4 nodes (separate channels to the
// next and the previous node).
const hierGPN = 2

// allgatherHier is allgather_tbg.py (tbg > 0: each intra-node peer is
// served by a group of tbg blocks, one memory channel per block of the
// group) and allgather_oop.py (tbg == 0: one block per peer, 4 instances).
// Out of place, gpn GPUs per node. Block 0 runs the inter-node ring over
// port channels: at step s it forwards, with put_with_signal_and_flush, the
// chunk it got at step s-1 (its own input at step 0) into the next node's
// scratch; then every block meets at a barrier. The peer blocks put that
// step's chunk into the node peers' scratch, signal and wait per block, and
// copy the peer's chunk of the step out of their own scratch into the
// output; the last group (block) copies the step's own chunk.
//
// MSCCL++'s allgather_tbg.py passes its arguments to the function in a
// different order than its signature (gpus_per_node and tbg_size are
// swapped); the program is built here as the signature reads.
func allgatherHier(name string, tbg, instances int) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		gpn := hierGPN
		if n < 2*gpn || n%gpn != 0 {
			return nil, fmt.Errorf("%s: %d ranks do not form at least two nodes of %d GPUs", name, n, gpn)
		}
		nodes := n / gpn
		size := max(tbg, 1)
		p := newProgram(name, plan.AllGather, n, plan.Simple, func(c *dsl.Config) { c.Instances = instances })
		scr := make([]dsl.Buffer, n)
		mc := map[[3]int]*dsl.MemoryChannel{}
		pc := make([][2]*dsl.PortChannel, n)
		for node := range nodes {
			for g := range gpn {
				src := g + gpn*node
				scr[src] = p.Rank(src).NewScratch(n)
				for peer := range gpn {
					if peer == g {
						continue
					}
					dst := peer + gpn*node
					for i := range size {
						mc[[3]int{dst, src, i}] = p.MemoryChannel(dst, src)
					}
				}
				pc[src][0] = p.PortChannel(mod(g+gpn*(node+1), n), src)
				if nodes != 2 {
					pc[src][1] = p.PortChannel(mod(g+gpn*(node-1), n), src)
				} else {
					pc[src][1] = pc[src][0]
				}
			}
		}
		// blocks[k] are the blocks serving intra-node peer slot k (k =
		// gpn-1: the local copy).
		blocks := make([][]int, gpn)
		groups := make([]dsl.Blocks, gpn)
		for k := range gpn {
			for i := range size {
				blocks[k] = append(blocks[k], 1+k*size+i)
			}
			if tbg > 0 {
				groups[k] = p.TBGroup(blocks[k]...)
			} else {
				groups[k] = dsl.TB(blocks[k][0])
			}
		}
		all := make([]int, 1+gpn*size)
		for i := range all {
			all[i] = i
		}
		eachNodePeer := func(f func(src, g, node, dst, peer int)) {
			for node := range nodes {
				for g := range gpn {
					for peer := range gpn {
						if peer != g {
							f(g+gpn*node, g, node, peer+gpn*node, peer)
						}
					}
				}
			}
		}
		eachNodePeer(func(src, g, _, dst, peer int) {
			for i, t := range blocks[slotOf(peer, g)] {
				mc[[3]int{dst, src, i}].RelaxedSignal(dsl.TB(t), dsl.SyncNone)
			}
		})
		eachNodePeer(func(src, g, _, dst, peer int) {
			for i, t := range blocks[slotOf(peer, g)] {
				mc[[3]int{dst, src, i}].RelaxedWait(dsl.TB(t), dsl.SyncAfter)
			}
		})
		for src := range n {
			pc[src][1].Signal(dsl.TB(0), dsl.SyncNone)
			pc[src][0].Wait(dsl.TB(0), dsl.SyncAfter)
		}
		for s := range nodes {
			for node := range nodes {
				for g := range gpn {
					src := g + gpn*node
					rk := p.Rank(src)
					next := mod(g+gpn*(node+1), n)
					index := mod(g+gpn*(node-s), n)
					if s != 0 {
						pc[src][1].Wait(dsl.TB(0), dsl.SyncBoth)
						rk.Barrier(all...)
					}
					if s != nodes-1 {
						from := rk.Input().Chunk(0, 1)
						if s != 0 {
							from = scr[src].Chunk(index, 1)
						}
						pc[src][0].PutWithSignalAndFlush(scr[next].Chunk(index, 1), from, dsl.TB(0))
					}
				}
			}
			for node := range nodes {
				for g := range gpn {
					src := g + gpn*node
					rk := p.Rank(src)
					local := mod(g+gpn*(node-s), n)
					mine := rk.Input().Chunk(0, 1)
					if s != 0 {
						mine = scr[src].Chunk(local, 1)
					}
					for peer := range gpn {
						if peer == g {
							continue
						}
						dst := peer + gpn*node
						k := slotOf(peer, g)
						remote := mod(peer+gpn*(node-s), n)
						mc[[3]int{dst, src, 0}].Put(scr[dst].Chunk(local, 1), mine, groups[k])
						for i, t := range blocks[k] {
							mc[[3]int{dst, src, i}].Signal(dsl.TB(t), dsl.SyncBefore)
							mc[[3]int{dst, src, i}].Wait(dsl.TB(t), dsl.SyncAfter)
						}
						rk.Copy(rk.Output().Chunk(remote, 1), scr[src].Chunk(remote, 1), groups[k])
					}
					rk.Copy(rk.Output().Chunk(local, 1), mine, groups[gpn-1])
				}
			}
		}
		return p.Lower()
	}
}

var (
	allgatherTBG2 = allgatherHier("allgather_tbg", 2, 1)
	allgatherOOP  = allgatherHier("allgather_oop", 0, 4)
)

// allgatherMRC (allgather_mrc.py, in place): a ring over port channels on
// block 0. Step 0 starts with a handshake (signal the previous rank, wait
// for the next); at every step each rank puts the chunk it holds for that
// step into the next rank's output, signals it, and waits for the previous
// rank's chunk. With 2 ranks the next and the previous rank are the same:
// MSCCL++'s dict keeps the second channel made to it, so each rank makes
// two port channels to its peer and uses the second.
func allgatherMRC(n int) (*plan.Plan, error) {
	if n < 2 {
		return nil, fmt.Errorf("allgather_mrc: %d ranks (want at least 2)", n)
	}
	p := newProgram("allgather_mrc", plan.AllGather, n, plan.Simple, func(c *dsl.Config) { c.InPlace = true })
	pc := map[[2]int]*dsl.PortChannel{}
	for r := range n {
		next, prev := (r+1)%n, mod(r-1, n)
		pc[[2]int{next, r}] = p.PortChannel(next, r)
		pc[[2]int{prev, r}] = p.PortChannel(prev, r)
	}
	for s := range n - 1 {
		for r := range n {
			next, prev := (r+1)%n, mod(r-1, n)
			toNext, fromPrev := pc[[2]int{next, r}], pc[[2]int{prev, r}]
			off := mod(r-s, n)
			if s == 0 {
				fromPrev.Signal(dsl.TB(0), dsl.SyncBoth)
				toNext.Wait(dsl.TB(0), dsl.SyncBoth)
			}
			toNext.Put(p.Rank(next).Output().Chunk(off, 1), p.Rank(r).Output().Chunk(off, 1), dsl.TB(0))
			toNext.Signal(dsl.TB(0), dsl.SyncBoth)
			fromPrev.Wait(dsl.TB(0), dsl.SyncBoth)
		}
	}
	return p.Lower()
}

// allreduceBroadcastPkt2 (allreduce_brodcast_pkt.py, two nodes, in place,
// LL): every rank packs its whole input into scratch slot r of itself and
// of its node peers (slots are n chunks wide), forwards its slot to its
// counterpart on the other node over a port channel (read_put_packets),
// forwards the counterpart's slot to its node peers, and reduces every
// other rank's slot into its input: each rank sums all n inputs itself.
// The data ops run on a group of 2 blocks (1, 2), the port forward on
// block 0.
func allreduceBroadcastPkt2(n int) (*plan.Plan, error) {
	gpn, err := nodesOf("multi_node/allreduce_brodcast_pkt", n)
	if err != nil {
		return nil, err
	}
	p := newProgram("allreduce_brodcast_pkt", plan.AllReduce, n, plan.LL, func(c *dsl.Config) { c.InPlace, c.DoubleScratch = true, true })
	g := p.TBGroup(1, 2)
	scr := make([]dsl.Buffer, n)
	mc := map[[2]int]*dsl.MemoryChannel{}
	pc := make([]*dsl.PortChannel, n)
	for node := range 2 {
		for l := range gpn {
			r := l + gpn*node
			scr[r] = p.Rank(r).NewScratch(n * n)
			for q := range gpn {
				if q != l {
					mc[[2]int{q + gpn*node, r}] = p.MemoryChannel(q+gpn*node, r)
				}
			}
			pc[r] = p.PortChannel((r+gpn)%n, r)
		}
	}
	for node := range 2 {
		for l := range gpn {
			r := l + gpn*node
			next := (r + gpn) % n
			rk := p.Rank(r)
			in := rk.Input().Chunk(0, n)
			for q := range gpn {
				dst := q + gpn*node
				if q == l {
					rk.CopyPackets(scr[dst].Chunk(r*n, n), in, g)
				} else {
					mc[[2]int{dst, r}].PutPackets(scr[dst].Chunk(r*n, n), in, g)
				}
			}
			pc[r].ReadPutPackets(scr[next].Chunk(r*n, n), scr[r].Chunk(r*n, n), dsl.TB(0))
			for q := range gpn {
				if q != l {
					dst := q + gpn*node
					mc[[2]int{dst, r}].ReadPutPackets(scr[dst].Chunk(next*n, n), scr[r].Chunk(next*n, n), g)
				}
			}
			var pk []dsl.Chunk
			for i := range n {
				if i != r {
					pk = append(pk, scr[r].Chunk(i*n, n))
				}
			}
			rk.ReducePackets(in, in, pk, dsl.Sum, g)
		}
	}
	return p.Lower()
}
