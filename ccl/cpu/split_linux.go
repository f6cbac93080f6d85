package cpu

import (
	"context"
	"fmt"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// Split reports whether AllReduceSplit runs on this communicator: it
// needs the direct path or process_vm_readv (Path "direct", "shm",
// "mixed" or "cma"; without process_vm_readv a call may have to stage). Every
// rank gets the same answer.
func (c *Comm) Split() bool { return c.peers != nil || c.cma }

// Part is the byte range [lo, hi) of a bytes-long buffer of es-byte
// elements that rank owns among n ranks in AllReduceSplit (and in the
// direct and single-copy allreduces): ceil(elements/n) elements per
// rank, the last parts shorter or empty.
func Part(bytes, es, n, rank int) (lo, hi int) {
	p := partitionInto(make([]int, n+1), bytes, n, es)
	return p[rank], p[rank+1]
}

// AllReduceSplit is AllReduce through the direct or single-copy path
// (whatever the size) with mid run between its halves: once this rank has
// reduced its part (Part) of every rank's input into recv, mid gets that
// part of recv, and what mid leaves there is what every rank gets. The
// other ranks wait for it at the barrier between the halves (up to the
// communicator's timeout). ccl/hier runs the ring between hosts there.
// An error from mid fails the communicator for every rank and is
// returned. On a communicator without Split it fails with ccl.ErrBadArgs
// before anything moves (every rank alike).
func (c *Comm) AllReduceSplit(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op, mid func(part []byte) error) error {
	if !c.Split() {
		return fmt.Errorf("%w: ccl/cpu: rank %d: AllReduceSplit needs the direct or single-copy path (%s)", ccl.ErrBadArgs, c.rank, c.Path())
	}
	if mid == nil {
		return fmt.Errorf("%w: ccl/cpu: rank %d: AllReduceSplit without mid", ccl.ErrBadArgs, c.rank)
	}
	a, local := ccl.CheckAllReduce(ccl.KindAllReduce, send, recv, op, c.n)
	if local != nil {
		a.Desc = ccl.Desc{Kind: ccl.KindAllReduce, Op: op}
		if send != nil {
			a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
		}
	}
	if c.peers != nil {
		return c.directAllReduce(ctx, a, local, op, mid)
	}
	// With process_vm_readv every peer buffer outside an arena is read
	// with it: the single-copy path never falls back to staging.
	return c.singleCopyAllReduce(ctx, a, local, op, mid)
}

// runMid runs mid on part; its failure fails the communicator, so that
// the ranks waiting at the barrier after it stop.
func (c *Comm) runMid(mid func([]byte) error, part []byte) error {
	if err := mid(part); err != nil {
		c.seg.failWith(c.rank, ccl.KindAllReduce, c.seq, causeMid, nil)
		return fmt.Errorf("ccl/cpu: rank %d: allreduce #%d: %w", c.rank, c.seq, err)
	}
	return nil
}
