package hier

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// EnvMultiRing set to "0" makes communicators joined afterwards in this
// process take the leader path even where the multi-ring path applies
// (for measurements and as an escape hatch). Every rank must agree: the
// agreement round compares the paths and fails a collective whose ranks
// differ with ccl.ErrMismatch.
const EnvMultiRing = "CHORUS_HIER_MULTIRING"

// Paths of large allreduces (descriptor byte 1).
const (
	pathLeader byte = 1
	pathMulti  byte = 2
)

// choosePath decides, at Join, how this communicator moves large
// allreduces; every rank decides the same from the id's host table
// (and EnvMultiRing, checked in every agreement).
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
	case os.Getenv(EnvMultiRing) == "0":
		c.pathWhy = "leader: multi-ring disabled (" + EnvMultiRing + "=0)"
	default:
		c.path = pathMulti
		c.pathWhy = fmt.Sprintf("multi-ring: %d rings", c.l)
	}
}

// Path says how this communicator moves allreduces above SmallMax:
// "multi-ring: L rings" (every local rank runs a ring over its share
// with its counterparts on the other hosts), or "leader: " and why not
// (one leader per host runs the only ring), or "local: one host".
func (c *Comm) Path() string { return c.pathWhy }

// PathFor says how a collective of kind over bytes bytes (of one rank's
// send buffer) moves: for allreduces "inline" (with the agreement),
// "gathered" (every rank reduces every input), or Path's "multi-ring" or
// "leader" with the algorithm between hosts ("ring" or "rhd");
// reduce-scatter as the allreduce of its whole buffer (never inline);
// other collectives "leader" (host leaders exchange whole host blocks).
func (c *Comm) PathFor(kind ccl.Kind, bytes int) string {
	if c.k == 1 {
		return c.pathWhy
	}
	switch kind {
	case ccl.KindAllReduce, ccl.KindReduceScatter:
	default:
		return "leader"
	}
	switch {
	case kind == ccl.KindAllReduce && bytes <= c.block-descBytes:
		return "inline"
	case bytes <= SmallMax:
		return "gathered"
	}
	per, name := bytes, "leader"
	if c.path == pathMulti {
		// The largest share (the last local rank's, with the tail).
		per, name = bytes/c.l+bytes%c.l, "multi-ring"
	}
	if c.useRHD(per) {
		return name + " rhd"
	}
	return name + " ring"
}

// useRHD: recursive halving/doubling between a power of two (> 2) of
// hosts for messages of at most RHDMax bytes; the pipelined ring
// otherwise.
func (c *Comm) useRHD(bytes int) bool {
	return c.k > 2 && c.k&(c.k-1) == 0 && bytes <= RHDMax
}

// multiRing is an agreed allreduce above SmallMax on a communicator whose
// hosts all hold l ranks: local rank j
//
//  1. gets the host's sum of share j (elements [j*per, (j+1)*per), per =
//     count/l; the last share also takes the count%l tail) through a
//     shared-memory reduce-scatter (and an allreduce of the tail);
//  2. allreduces that share with local rank j of every other host (a
//     pipelined ring, or RHD by the share's size): l rings at once, each
//     on its own links, so every rank's core and connection works;
//  3. shares its result with its host through a shared-memory allgather
//     (and a broadcast of the tail).
//
// Every element is reduced along exactly one ring and then copied, so
// every rank gets the same bits.
func (c *Comm) multiRing(ctx context.Context, a ccl.Args, send, recv *tensor.Tensor, op reduce.Op) error {
	dt := a.DType
	es := dt.Size()
	elems := len(a.Send) / es
	per := elems / c.l
	tail := elems - per*c.l
	mine := per
	if c.lrank == c.l-1 {
		mine += tail
	}
	sum := op
	if op == reduce.Avg {
		sum = reduce.Sum
	}
	shard := c.shardBuf(mine * es)
	typed := func(t *tensor.Tensor, off, n int) *tensor.Tensor {
		v, err := t.View(int64(off*es), dt, tensor.Shape{int64(n)})
		if err != nil {
			panic(fmt.Sprintf("ccl/hier: internal view [%d, +%d) of %s: %v", off, n, dt, err))
		}
		return v
	}
	// 1. The host's sum of my share into shard.
	if per > 0 {
		if err := c.local.ReduceScatter(ctx, typed(send, 0, per*c.l), typed(shard, 0, per), sum); err != nil {
			return err
		}
	}
	var tailT *tensor.Tensor
	if tail > 0 {
		if c.lrank == c.l-1 {
			tailT = typed(shard, per, tail)
		} else {
			tailT = tensor.MustNew(dt, tensor.Shape{int64(tail)})
		}
		if err := c.local.AllReduce(ctx, typed(send, per*c.l, tail), tailT, sum); err != nil {
			return err
		}
	}
	// 2. My ring, in place in shard.
	sb := shard.Bytes()[:mine*es]
	if mine > 0 {
		var err error
		if c.useRHD(len(sb)) {
			err = c.rhd(sb, sb, dt, sum)
		} else {
			err = c.ring(sb, sb, dt, sum)
		}
		if err != nil {
			return err
		}
		if op == reduce.Avg {
			if err := reduce.Divide(dt, sb, c.n); err != nil {
				return err
			}
		}
	}
	// 3. Every share to every local rank.
	if per > 0 {
		if err := c.local.AllGather(ctx, typed(shard, 0, per), typed(recv, 0, per*c.l)); err != nil {
			return err
		}
	}
	if tail > 0 {
		var src *tensor.Tensor
		if c.lrank == c.l-1 {
			src = tailT
		}
		if err := c.local.Broadcast(ctx, src, typed(recv, per*c.l, tail), c.l-1); err != nil {
			return err
		}
	}
	return nil
}

// shardBuf returns a reusable uint8 tensor of at least n bytes (the
// multi-ring's share; apart from scratch, which the ring uses).
func (c *Comm) shardBuf(n int) *tensor.Tensor {
	if c.shard == nil || c.shard.NumBytes() < int64(n) {
		c.shard = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(max(n, 16))})
	}
	return c.shard
}

func pathName(p byte) string {
	switch p {
	case pathLeader:
		return "leader"
	case pathMulti:
		return "multi-ring"
	}
	return fmt.Sprintf("unknown (%d)", p)
}
