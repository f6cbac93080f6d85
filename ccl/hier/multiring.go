package hier

import (
	"context"
	"fmt"
	"strings"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// noMultiRing (tests only) makes communicators joined afterwards in this
// process take the leader path even where the multi-ring path applies.
// Every rank must agree: the agreement round compares the paths and
// fails a collective whose ranks differ with ccl.ErrMismatch.
var noMultiRing bool

// Paths of large allreduces (descriptor byte 1).
const (
	pathLeader byte = 1
	pathMulti  byte = 2
)

// choosePath decides, at Join, how this communicator moves large
// allreduces; every rank decides the same from the id's host table
// (and noMultiRing, checked in every agreement).
func (c *Comm) choosePath() {
	c.path = pathLeader
	counts := make([]string, c.k)
	equal := true
	for h := range c.k {
		l := c.hostLo[h+1] - c.hostLo[h]
		counts[h] = fmt.Sprint(l)
		equal = equal && l == c.l
	}
	switch {
	case c.k == 1:
		c.pathWhy = "local: one host (ccl/cpu)"
	case c.l == 1 && equal:
		c.pathWhy = "leader: one rank per host"
	case !equal:
		c.pathWhy = "leader: hosts have unequal rank counts (" + strings.Join(counts, ", ") + ")"
	case noMultiRing:
		c.pathWhy = "leader: multi-ring disabled"
	default:
		c.path = pathMulti
		c.pathWhy = fmt.Sprintf("multi-ring: %d rings", c.l)
	}
}

// Path says how this communicator moves allreduces above gatherMax:
// "multi-ring: L rings" (every local rank runs a ring over its share
// with its counterparts on the other hosts), or "leader: " and why not
// (one leader per host runs the only ring), or "local: one host";
// "; leader ring in S stripes from N" follows where the leader ring is
// striped (stripe.go).
func (c *Comm) Path() string { return c.pathWhy }

// PathFor says how a collective of kind over bytes bytes (of one rank's
// send buffer) moves: for allreduces "inline" (with the agreement),
// "carried" (every rank reduces every input, which came with the
// agreement: one rank per host, carry.go), "gathered" (every rank
// reduces every input, gathered after the agreement), or Path's "multi-ring"
// (from multiRingMin up; ", G groups" where it runs in groups:
// cpu.PipeCuts of pipeBytes) or "leader" with the algorithm between hosts ("ring", "ring,
// S stripes" from stripeMinBytes up, or "rhd");
// reduce-scatter as the allreduce of its whole buffer (never inline);
// other collectives "leader" (host leaders exchange whole host blocks);
// on one host, ccl/cpu's answer.
func (c *Comm) PathFor(kind ccl.Kind, bytes int) string {
	if c.k == 1 {
		return c.local.PathFor(kind, bytes) // ccl/cpu's answer
	}
	switch kind {
	case ccl.KindAllReduce, ccl.KindReduceScatter:
	default:
		return "leader"
	}
	switch {
	case kind == ccl.KindAllReduce && bytes <= c.block-descBytes:
		return "inline"
	case kind == ccl.KindAllReduce && c.n == c.k && c.carries(bytes, nil):
		return "carried"
	case bytes <= c.gatherMax():
		return "gathered"
	}
	if c.path != pathMulti || bytes < c.multiMin {
		switch {
		case c.useRHD(bytes):
			return "leader rhd"
		case c.striped(bytes, bytes):
			return fmt.Sprintf("leader ring, %d stripes", c.ringStripes(bytes))
		}
		return "leader ring"
	}
	group, groups := bytes, ""
	if c.local.Split() && !testNoSplit {
		// cpu.PipeCuts in bytes: pipeBytes is a power of two, so from 32
		// bytes up whole elements of any dtype cut into as many groups.
		if cuts := cpu.PipeCuts(bytes, c.pipe, 1); len(cuts) > 2 {
			group, groups = 0, fmt.Sprintf(", %d groups", len(cuts)-1)
			for g := range len(cuts) - 1 {
				group = max(group, cuts[g+1]-cuts[g])
			}
		}
	}
	// The largest part (the first local rank's) of the largest group.
	lo, hi := cpu.Part(group, 1, c.l, 0)
	switch {
	case c.useRHD(hi - lo):
		return "multi-ring rhd" + groups
	case c.striped(hi-lo, bytes):
		return fmt.Sprintf("multi-ring ring, %d stripes%s", c.ringStripes(hi-lo), groups)
	}
	return "multi-ring ring" + groups
}

// useRHD: recursive halving/doubling between a power of two (> 2) of
// hosts for messages of at most rhdMax bytes; the pipelined ring
// otherwise.
func (c *Comm) useRHD(bytes int) bool {
	return c.k > 2 && c.k&(c.k-1) == 0 && bytes <= rhdMax
}

// multiRing is an agreed allreduce above smallMax on a communicator whose
// hosts all hold l ranks. Local rank j owns part j of the message
// (cpu.Part: ceil(count/l) elements each, the last parts shorter or
// empty; the same on every host) and:
//
//  1. gets the host's sum of part j: the first half of the host's
//     direct or single-copy allreduce (cpu.Comm.AllReduceSplit), each
//     local rank reducing its part of every local rank's input;
//  2. allreduces part j with local rank j of every other host (a
//     pipelined ring, or RHD by the part's size) between the halves: l
//     rings at once, each on its own links, so every rank's core and
//     connection works;
//  3. the second half of the host's allreduce copies every part to every
//     local rank.
//
// That is the host's allreduce plus the rings: no broadcast after it,
// less memory traffic than the leader path. A host communicator without
// the direct or single-copy path (processes that cannot read each other,
// cpu.Options.NoCMA) takes the staged allreduce, the rings on the parts in
// recv, then a broadcast of each part from its owner.
//
// Every element is reduced along exactly one ring and then copied, so
// every rank gets the same bits.
func (c *Comm) multiRing(ctx context.Context, a ccl.Args, send, recv *tensor.Tensor, op reduce.Op) error {
	dt := a.DType
	sum := op
	if op == reduce.Avg {
		sum = reduce.Sum
	}
	between := func(part []byte) error {
		if len(part) == 0 {
			return nil // empty on every host alike
		}
		err := c.hostsAllReduce(part, part, dt, sum, len(a.Recv))
		if err == nil && op == reduce.Avg {
			err = reduce.Divide(dt, part, c.n)
		}
		return err
	}
	if c.local.Split() && !testNoSplit {
		return c.local.AllReducePiped(ctx, send, recv, sum, c.pipe, between)
	}
	if err := c.local.AllReduce(ctx, send, recv, sum); err != nil {
		return err
	}
	size, es := len(a.Recv), dt.Size()
	lo, hi := cpu.Part(size, es, c.l, c.lrank)
	if err := between(a.Recv[lo:hi]); err != nil {
		return err
	}
	for j := range c.l {
		lo, hi := cpu.Part(size, es, c.l, j)
		if hi == lo {
			continue
		}
		part := view(recv, lo, hi-lo)
		var src *tensor.Tensor
		if j == c.lrank {
			src = part
		}
		if err := c.local.Broadcast(ctx, src, part, j); err != nil {
			return err
		}
	}
	return nil
}

// testNoSplit makes multiRing take its staged fallback (tests only).
var testNoSplit bool

func pathName(p byte) string {
	switch p {
	case pathLeader:
		return "leader"
	case pathMulti:
		return "multi-ring"
	}
	return fmt.Sprintf("unknown (%d)", p)
}
