package mscclpptests

import (
	"fmt"

	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
)

// The two-node packet programs of MSCCL++'s DSL tests (tests/multi_node):
// n = 2 * gpus-per-node ranks, memory channels inside a node, port
// channels to the rank of the same local index on the other node.

func nodesOf(name string, n int) (gpn int, err error) {
	if n < 2 || n%2 != 0 {
		return 0, fmt.Errorf("%s: %d ranks do not form two nodes", name, n)
	}
	return n / 2, nil
}

// allgatherPkt2: every rank packs its chunk into its scratch slot, forwards
// it with rppkt to the node's peers (memory) and to its counterpart on the
// other node (port); the counterpart's chunk is then forwarded to the
// node's peers (a second memory channel each), and every rank unpacks the
// slots it received.
func allgatherPkt2(n int) (*plan.Plan, error) {
	gpn, err := nodesOf("multi_node/allgather_pkt", n)
	if err != nil {
		return nil, err
	}
	p := newProgram("allgather_pkt", plan.AllGather, n, plan.LL, func(c *dsl.Config) { c.InPlace, c.DoubleScratch = true, true })
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n)
	}
	for r := range n {
		p.Rank(r).CopyPackets(scr[r].Chunk(r, 1), p.Rank(r).Output().Chunk(r, 1), dsl.TB(r))
	}
	local := func(node, g int) int { return g + gpn*node }
	for node := range 2 {
		for g := range gpn {
			src := local(node, g)
			for q := range gpn {
				if q != g {
					dst := local(node, q)
					p.MemoryChannel(dst, src).ReadPutPackets(scr[dst].Chunk(src, 1), scr[src].Chunk(src, 1), dsl.TB(q))
				}
			}
		}
	}
	for node := range 2 {
		for g := range gpn {
			src, dst := local(node, g), local(1-node, g)
			p.PortChannel(dst, src).ReadPutPackets(scr[dst].Chunk(src, 1), scr[src].Chunk(src, 1), dsl.TB(g))
		}
	}
	for node := range 2 {
		for g := range gpn {
			src, off := local(node, g), local(1-node, g)
			for q := range gpn {
				if q != g {
					dst := local(node, q)
					p.MemoryChannel(dst, src).ReadPutPackets(scr[dst].Chunk(off, 1), scr[src].Chunk(off, 1), dsl.TB(q))
				}
			}
		}
	}
	for r := range n {
		for k := 1; k < n; k++ {
			d := (r + k) % n
			p.Rank(r).UnpackPackets(p.Rank(r).Output().Chunk(d, 1), scr[r].Chunk(d, 1), dsl.TB(k))
		}
	}
	return p.Lower()
}

// reduceScatterPkt2 (in place): each rank puts, as packets, its chunk for
// every node peer and for that peer's counterpart on the other node into
// the peer's scratch; it reduces what it got for its own counterpart, packs
// the result and forwards it over the port channel; finally it reduces its
// own chunk with the node peers' packets and the other node's partial sum.
func reduceScatterPkt2(n int) (*plan.Plan, error) {
	gpn, err := nodesOf("multi_node/reducescatter_pkt", n)
	if err != nil {
		return nil, err
	}
	p := newProgram("reducescatter_pkt", plan.ReduceScatter, n, plan.LL, func(c *dsl.Config) { c.InPlace, c.DoubleScratch = true, true })
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n)
	}
	mc := map[[2]int]*dsl.MemoryChannel{}
	pc := make([]*dsl.PortChannel, n)
	for node := range 2 {
		for g := range gpn {
			src := g + gpn*node
			for q := range gpn {
				if q != g {
					dst := q + gpn*node
					mc[[2]int{dst, src}] = p.MemoryChannel(dst, src)
				}
			}
			pc[src] = p.PortChannel((src+gpn)%n, src)
		}
	}
	slot := func(a, b int) int { // the slot of local rank a among b's peers
		if a < b {
			return a
		}
		return a - 1
	}
	for node := range 2 {
		for g := range gpn {
			src := g + node*gpn
			in := p.Rank(src).Input()
			for q := range gpn {
				if q == g {
					continue
				}
				dst, nextDst := q+node*gpn, q+gpn*((node+1)%2)
				c := mc[[2]int{dst, src}]
				c.PutPackets(scr[dst].Chunk(g, 1), in.Chunk(dst, 1), dsl.TB(0))
				c.PutPackets(scr[dst].Chunk(slot(g, q)+gpn, 1), in.Chunk(nextDst, 1), dsl.TB(0))
			}
		}
	}
	for node := range 2 {
		for g := range gpn {
			src := g + node*gpn
			next := g + gpn*((node+1)%2)
			rk := p.Rank(src)
			in := rk.Input()
			var pk []dsl.Chunk
			for q := range gpn {
				if q != g {
					pk = append(pk, scr[src].Chunk(slot(q, g)+gpn, 1))
				}
			}
			if len(pk) > 0 {
				rk.ReducePackets(in.Chunk(next, 1), in.Chunk(next, 1), pk, dsl.Sum, dsl.TB(0))
			}
			rk.CopyPackets(scr[src].Chunk(g, 1), in.Chunk(next, 1), dsl.TB(0))
			pc[src].ReadPutPackets(scr[next].Chunk(n-1, 1), scr[src].Chunk(g, 1), dsl.TB(0))
		}
	}
	for node := range 2 {
		for g := range gpn {
			src := g + node*gpn
			rk := p.Rank(src)
			pk := []dsl.Chunk{scr[src].Chunk(n-1, 1)}
			for q := range gpn {
				if q != g {
					pk = append(pk, scr[src].Chunk(q, 1))
				}
			}
			rk.ReducePackets(rk.Input().Chunk(src, 1), rk.Input().Chunk(src, 1), pk, dsl.Sum, dsl.TB(0))
		}
	}
	return p.Lower()
}

// allreducePkt2 (in place, two chunks per local rank): packet
// reduce-scatter inside the node, the partial sums exchanged with the
// other node over a port channel (rppkt) and reduced, then a packet
// all-gather inside the node; the data ops run on a group of two blocks
// (tbs 1, 2), the port forward on tb 0.
func allreducePkt2(n int) (*plan.Plan, error) {
	gpn, err := nodesOf("multi_node/allreduce_pkt", n)
	if err != nil {
		return nil, err
	}
	const per = 2
	p := newProgram("allreduce_pkt", plan.AllReduce, n, plan.LL, func(c *dsl.Config) { c.InPlace, c.DoubleScratch = true, true })
	g := p.TBGroup(1, 2)
	scr := make([]dsl.Buffer, n)
	mc := map[[2]int]*dsl.MemoryChannel{}
	pc := make([]*dsl.PortChannel, n)
	for node := range 2 {
		for l := range gpn {
			r := l + gpn*node
			scr[r] = p.Rank(r).NewScratch(2 * n)
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
			in := rk.Input()
			mine := in.Chunk(l*per, per)
			for q := range gpn {
				if q != l {
					mc[[2]int{q + gpn*node, r}].PutPackets(scr[q+gpn*node].Chunk(l*per, per), in.Chunk(q*per, per), g)
				}
			}
			var pk []dsl.Chunk
			for q := range gpn {
				if q != l {
					pk = append(pk, scr[r].Chunk(q*per, per))
				}
			}
			if len(pk) > 0 {
				rk.ReducePackets(mine, mine, pk, dsl.Sum, g)
			}
			rk.CopyPackets(scr[r].Chunk(l*per, per), mine, g)
			pc[r].ReadPutPackets(scr[next].Chunk(n+l*per, per), scr[r].Chunk(l*per, per), dsl.TB(0))
			rk.ReducePackets(mine, mine, []dsl.Chunk{scr[r].Chunk(n+l*per, per)}, dsl.Sum, g)
			for q := range gpn {
				if q != l {
					mc[[2]int{q + gpn*node, r}].PutPackets(scr[q+gpn*node].Chunk(n+l*per, per), mine, g)
				}
			}
			for q := range gpn {
				if q != l {
					rk.UnpackPackets(in.Chunk(q*per, per), scr[r].Chunk(n+q*per, per), g)
				}
			}
		}
	}
	return p.Lower()
}

// allreduceNaivy (single node, in place, LL): packets of chunk q to rank q,
// a packet reduce of the own chunk, its result put as packets to every
// peer, unpacked there; all on tb 0.
func allreduceNaivy(n int) (*plan.Plan, error) {
	p := newProgram("allreduce_naivy", plan.AllReduce, n, plan.LL, func(c *dsl.Config) { c.InPlace = true })
	ch := mem(p, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(2 * n)
	}
	for r := range n {
		for _, q := range peersOf(r, n) {
			ch[r][q].PutPackets(scr[q].Chunk(r, 1), p.Rank(r).Input().Chunk(q, 1), dsl.TB(0))
		}
	}
	for r := range n {
		rk := p.Rank(r)
		var pk []dsl.Chunk
		for _, q := range peersOf(r, n) {
			pk = append(pk, scr[r].Chunk(q, 1))
		}
		rk.ReducePackets(rk.Input().Chunk(r, 1), rk.Input().Chunk(r, 1), pk, dsl.Sum, dsl.TB(0))
		for _, q := range peersOf(r, n) {
			ch[r][q].PutPackets(scr[q].Chunk(n+r, 1), rk.Input().Chunk(r, 1), dsl.TB(0))
		}
	}
	for r := range n {
		for _, q := range peersOf(r, n) {
			p.Rank(r).UnpackPackets(p.Rank(r).Input().Chunk(q, 1), scr[r].Chunk(n+q, 1), dsl.TB(0))
		}
	}
	return p.Lower()
}
