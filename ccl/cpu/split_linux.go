package cpu

import (
	"context"
	"fmt"
	"math"

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
	return c.AllReducePiped(ctx, send, recv, op, 0, mid)
}

// AllReducePiped is AllReduceSplit in groups: the buffer is cut into
// groups of at most group bytes (PipeCuts: a short first and last group,
// the others alike), every rank owns Part of each group, and mid runs on
// this rank's part of one group after another on a goroutine of this
// call, while this rank reduces the next groups' parts and pushes the
// parts mid has finished into the peers' outputs. ccl/hier's rings
// between hosts then overlap the host's reductions and copies instead of
// following them: with two ranks per host those were 7-16% of a 64-256
// MiB allreduce across hosts (docs/multi-host.md). Where the outputs
// cannot be pushed (the single-copy path with an output outside its
// arena) the parts are copied after the last group, as AllReduceSplit
// does. group 0, or a buffer of at most two short groups: one group,
// which is AllReduceSplit. Every rank must cut alike: ranks whose group
// counts differ fail with ccl.ErrMismatch before anything moves. Errors
// as AllReduceSplit's; the goroutine has ended when the call returns.
func (c *Comm) AllReducePiped(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op, group int, mid func(part []byte) error) error {
	if !c.Split() {
		return fmt.Errorf("%w: ccl/cpu: rank %d: AllReduceSplit needs the direct or single-copy path (%s)", ccl.ErrBadArgs, c.rank, c.Path())
	}
	if mid == nil {
		return fmt.Errorf("%w: ccl/cpu: rank %d: AllReduceSplit without mid", ccl.ErrBadArgs, c.rank)
	}
	if group < 0 {
		return fmt.Errorf("%w: ccl/cpu: rank %d: AllReducePiped: group of %d bytes", ccl.ErrBadArgs, c.rank, group)
	}
	a, local := ccl.CheckAllReduce(ccl.KindAllReduce, send, recv, op, c.n)
	if local != nil {
		a.Desc = ccl.Desc{Kind: ccl.KindAllReduce, Op: op}
		if send != nil {
			a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
		}
	}
	sp := &split{mid: mid}
	if cuts := PipeCuts(len(a.Send), group, a.DType.Size()); len(cuts) > 2 {
		sp.cuts = cuts
		// The group count travels in the descriptor (Root, unused by an
		// allreduce), so ranks that would cut differently disagree.
		a.Desc.Root = int32(min(len(cuts)-1, math.MaxInt32))
	}
	if c.peers != nil {
		return c.directAllReduce(ctx, a, local, op, sp)
	}
	// With process_vm_readv every peer buffer outside an arena is read
	// with it: the single-copy path never falls back to staging.
	return c.singleCopyAllReduce(ctx, a, local, op, sp)
}

// split is what AllReduceSplit and AllReducePiped add to an allreduce:
// mid between the halves, and the groups' bounds (nil: one group).
type split struct {
	mid  func(part []byte) error
	cuts []int // group g is [cuts[g], cuts[g+1]) (PipeCuts)
}

// groups is the number of groups a size-byte buffer is cut into.
func (sp *split) groups(size int) int {
	if sp == nil || len(sp.cuts) < 3 {
		return 1
	}
	return len(sp.cuts) - 1
}

// bounds is group g's byte range of a size-byte buffer.
func (sp *split) bounds(g, size int) (lo, hi int) {
	if sp.groups(size) == 1 {
		return 0, size
	}
	return sp.cuts[g], sp.cuts[g+1]
}

// pipeEdgeDiv: AllReducePiped's first and last groups are 1/pipeEdgeDiv
// of the largest (PipeCuts).
const pipeEdgeDiv = 4

// PipeCuts is where AllReducePiped cuts a buffer of size bytes of
// es-byte elements for groups of at most group bytes (whole elements):
// group g is [cuts[g], cuts[g+1]), cuts[0] = 0 and the last is size.
// The first and the last group are short (edge: a quarter of group),
// the groups between them alike and at most group bytes; a buffer of at
// most two edges, or group 0, is one group. Why short edges: nothing
// overlaps the reduction of the first group (the links between hosts
// wait for it) or the copies of the last (the rings are done), so each
// call paid a whole group's host-local work with its links idle; on 2
// hosts x 2 ranks the uplink idled at every call boundary, and short
// edges made 8-32 MiB 1.02-1.057x faster (docs/multi-host.md). A function of its arguments only, so every rank
// with the same group cuts alike.
func PipeCuts(size, group, es int) []int {
	es = max(1, es)
	if group <= 0 {
		return []int{0, size}
	}
	group = chunkSize(group, es)
	edge := chunkSize(group/pipeEdgeDiv, es)
	if size <= 2*edge {
		return []int{0, size}
	}
	// m groups of per bytes (the last may be shorter) between the edges:
	// per <= group, so (m-1)*per < mid and every group is non-empty.
	mid := size - 2*edge
	m := (mid + group - 1) / group
	per := (mid/es + m - 1) / m * es
	cuts := make([]int, 0, m+3)
	cuts = append(cuts, 0, edge)
	for i := 1; i < m; i++ {
		cuts = append(cuts, edge+i*per)
	}
	return append(cuts, size-edge, size)
}

// runMid runs mid on part; its failure fails the communicator, so that
// the ranks waiting at the barrier after it stop.
func (c *Comm) runMid(mid func([]byte) error, part []byte) error {
	if err := mid(part); err != nil {
		return c.midFailed(err)
	}
	return nil
}

func (c *Comm) midFailed(err error) error {
	c.seg.failWith(c.rank, ccl.KindAllReduce, c.seq, causeMid, nil)
	return fmt.Errorf("ccl/cpu: rank %d: allreduce #%d: %w", c.rank, c.seq, err)
}

// testReduced, when set (tests only), is called on the reducing
// goroutine after each group of a pipeline with several groups.
var testReduced func(rank, g int)

// pipeline runs a split allreduce's halves over ng groups: reduce(g)
// reduces this rank's part of group g into own (its output) and returns
// the part's range; mid runs on the parts in group order; push(lo, hi)
// (nil: none) hands a part to the peers once mid is done with it. With one group all
// of it runs on this goroutine. With more, mid runs on a goroutine of
// this call while this one reduces the next groups and pushes the
// finished ones; that goroutine has ended when pipeline returns. A
// failed mid fails the communicator (as runMid) and stops both; a failed
// reduce is returned as it is (the caller fails the communicator) once
// mid has finished the groups it was given.
func (c *Comm) pipeline(ng int, own []byte, reduce func(g int) (lo, hi int, err error), mid func([]byte) error, push func(lo, hi int)) error {
	if ng == 1 {
		lo, hi, err := reduce(0)
		if err == nil {
			err = c.runMid(mid, own[lo:hi])
		}
		if err == nil && push != nil {
			push(lo, hi)
		}
		return err
	}
	todo := make(chan []byte, ng)
	done := make(chan error, ng)
	go func() {
		defer close(done)
		failed := false
		for part := range todo {
			if failed {
				continue // after a failure no group is run
			}
			err := mid(part)
			failed = err != nil
			done <- err
		}
	}()
	parts := make([][2]int, 0, ng)
	pushed := 0
	var err, midErr error
	settle := func(e error) {
		switch {
		case e != nil:
			midErr = e
		case err == nil && push != nil:
			push(parts[pushed][0], parts[pushed][1])
		}
		pushed++
	}
	for g := 0; g < ng && err == nil && midErr == nil; g++ {
		var lo, hi int
		if lo, hi, err = reduce(g); err != nil {
			break
		}
		parts = append(parts, [2]int{lo, hi})
		if testReduced != nil {
			testReduced(c.rank, g)
		}
		todo <- own[lo:hi]
		// Push whatever mid has finished, without waiting for it.
		for more := true; more && midErr == nil; {
			select {
			case e := <-done:
				settle(e)
			default:
				more = false
			}
		}
	}
	close(todo)
	for e := range done {
		if midErr == nil {
			settle(e)
		}
	}
	if midErr != nil {
		return c.midFailed(midErr)
	}
	return err
}
