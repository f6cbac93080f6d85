package mscclpptests

import (
	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
)

// The all-to-all programs (tests/single_node/alltoall/): in place, every
// rank puts block q of its input into a scratch slot of rank q and copies
// the blocks it received from its scratch into its input.

// slotOf is the slot of rank a among the peers of rank b (MSCCL++'s
// "a if a < b else a - 1").
func slotOf(a, b int) int {
	if a < b {
		return a
	}
	return a - 1
}

// alltoallScratch: one thread block per peer (tb = the peer's slot):
// relaxed handshake, put into the peer's scratch slot with a signal, then
// wait and copy out of the own scratch. zeroCopy is the same program with
// reuse_resources (alltoall_zero_copy.py).
func alltoallScratchGen(name string, reuse bool) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := newProgram(name, plan.AllToAll, n, plan.Simple, func(c *dsl.Config) { c.InPlace, c.ReuseResources = true, reuse })
		ch := mem(p, n)
		scr := make([]dsl.Buffer, n)
		for r := range n {
			scr[r] = p.Rank(r).NewScratch(n - 1)
		}
		for r := range n {
			for _, q := range peersOf(r, n) {
				ch[r][q].RelaxedSignal(dsl.TB(slotOf(q, r)), dsl.SyncBoth)
			}
			for _, q := range peersOf(r, n) {
				ch[r][q].RelaxedWait(dsl.TB(slotOf(q, r)), dsl.SyncAfter)
			}
		}
		for r := range n {
			in := p.Rank(r).Input()
			for _, q := range peersOf(r, n) {
				tb := dsl.TB(slotOf(q, r))
				ch[r][q].Put(scr[q].Chunk(slotOf(r, q), 1), in.Chunk(q, 1), tb)
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
		return p.Lower()
	}
}

var (
	alltoallScratch  = alltoallScratchGen("alltoall", false)
	alltoallZeroCopy = alltoallScratchGen("alltoall_zero_copy", true)
)

// alltoallRing: a second set of memory channels for the readiness
// handshake (tb 0); tb 0 puts to the peers in ring order (r+1, r+2, ...)
// and releases a semaphore per peer; tb 1 acquires it, waits for the
// peer's signal and copies the block out of scratch, in reverse ring order.
// reuse sets reuse_resources (alltoall_ring_naive.py).
func alltoallRingGen(name string, reuse bool) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) { return alltoallRingN(name, reuse, n) }
}

var alltoallRing = alltoallRingGen("alltoall_ring", false)

func alltoallRingN(name string, reuse bool, n int) (*plan.Plan, error) {
	p := newProgram(name, plan.AllToAll, n, plan.Simple, func(c *dsl.Config) { c.InPlace, c.ReuseResources = true, reuse })
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
		for _, q := range peersOf(r, n) {
			sync[r][q].RelaxedSignal(dsl.TB(0), dsl.SyncBoth)
		}
		for _, q := range peersOf(r, n) {
			sync[r][q].RelaxedWait(dsl.TB(0), dsl.SyncAfter)
		}
	}
	for r := range n {
		in := p.Rank(r).Input()
		for k := 1; k < n; k++ {
			q := (r + k) % n
			ch[r][q].Put(scr[q].Chunk(slotOf(r, q), 1), in.Chunk(q, 1), dsl.TB(0))
			ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
			sem[r][q].Release(dsl.TB(0), dsl.SyncBoth)
		}
	}
	for r := range n {
		in := p.Rank(r).Input()
		for k := 1; k < n; k++ {
			q := (r - k + n) % n
			sem[r][q].Acquire(dsl.TB(1), dsl.SyncBoth)
			ch[r][q].Wait(dsl.TB(1), dsl.SyncAfter)
			p.Rank(r).Copy(in.Chunk(q, 1), scr[r].Chunk(slotOf(q, r), 1), dsl.TB(1))
		}
	}
	return p.Lower()
}
