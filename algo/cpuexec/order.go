package cpuexec

import (
	"github.com/chorus-rt/chorus/algo/plan"
)

// What Join learns from the whole plan (every rank's ops) to take work off
// the call path.

// bufferUse says, for one rank's buffer, how the plan's ops touch it.
type bufferUse struct {
	remote  bool // some op of another rank reads or writes it
	written bool // some op writes it
	packet  bool // some op reads or writes it as LL packets
}

// bufferUses returns rank's use of its input, output and scratch buffers
// (by plan.BufferType), from plan.Access over every op of every rank.
func bufferUses(p *plan.Plan, rank int) ([4]bufferUse, error) {
	var u [4]bufferUse
	for g := range p.GPUs {
		for t := range p.GPUs[g].ThreadBlocks {
			for i := range p.GPUs[g].ThreadBlocks[t].Ops {
				acc, err := p.Access(g, t, i)
				if err != nil {
					return u, err
				}
				for _, a := range acc {
					if a.Rank != rank || int(a.Buffer) >= len(u) {
						continue
					}
					b := &u[a.Buffer]
					b.remote = b.remote || g != rank
					b.written = b.written || a.Mode == plan.AccessWrite
					b.packet = b.packet || a.Packet
				}
			}
		}
	}
	return u, nil
}

// opID names one top-level op of the plan.
type opID struct{ g, t, i int }

// selfSynced reports whether the plan's own synchronisation orders every
// access that an op of one rank makes to another rank's buffers before the
// completion of some op of the owner (so before the owner's Run returns):
// then the executor's end-of-call barrier adds nothing, because a rank that
// returned can reuse its buffers (copy in the next input, copy out its
// output, hand the caller its tensors back) without a peer still touching
// them, and the start barrier of the next call keeps the peers' next ops
// out of them until it copied its output out.
//
// The happens-before relation used is deliberately partial, and sound for
// this executor: program order within a thread block (one goroutine or
// coroutine runs its ops in order; puts complete before they return);
// intra-rank barriers (the k-th arrival of every participating block is one
// generation, only when every participant arrives equally often and the
// participant count is the barrier's); and signal/wait on memory and port
// channels, only for a directed channel whose signals all come from one
// thread block and whose waits all come from one thread block, with as
// many signals as waits per call (so counters never carry over into the
// next call): the j-th wait completes after the j-th signal. Semaphores,
// LL packets and anything inside a pipeline body that synchronises add no
// edges (the latter makes the plan not self-synced), so plans relying on
// them keep the end barrier.
func selfSynced(p *plan.Plan, progs []*program) bool {
	ids := map[opID]int{}
	var nodes []opID
	for g := range p.GPUs {
		for t := range p.GPUs[g].ThreadBlocks {
			for i := range p.GPUs[g].ThreadBlocks[t].Ops {
				ids[opID{g, t, i}] = len(nodes)
				nodes = append(nodes, opID{g, t, i})
			}
		}
	}
	// succ: edges "completion of a precedes completion of b" (barrier
	// nodes are extra, numbered after the ops).
	succ := make([][]int, len(nodes))
	edge := func(a, b int) { succ[a] = append(succ[a], b) }
	extra := func() int {
		succ = append(succ, nil)
		return len(succ) - 1
	}
	type chanUse struct {
		tb  int // the only thread block using the end (-1 none yet)
		ops []int
		bad bool // more than one thread block uses it
	}
	type slotUse struct{ sig, wait chanUse }
	slots := map[int]*slotUse{}
	use := func(s int) *slotUse {
		u := slots[s]
		if u == nil {
			u = &slotUse{sig: chanUse{tb: -1}, wait: chanUse{tb: -1}}
			slots[s] = u
		}
		return u
	}
	add := func(c *chanUse, g, t, node int) {
		key := g*1_000_000 + t
		if c.tb >= 0 && c.tb != key {
			c.bad = true
		}
		c.tb = key
		c.ops = append(c.ops, node)
	}
	for g := range p.GPUs {
		pr := progs[g]
		bars := map[int]map[int][]int{} // barrier id -> tb -> op nodes
		for t, insts := range pr.tbs {
			for i := range insts {
				in := &insts[i]
				node := ids[opID{g, t, i}]
				if i > 0 {
					edge(ids[opID{g, t, i - 1}], node)
				}
				if in.name == plan.OpPipeline {
					for b := range in.body {
						if synchronises(in.body[b].name) {
							return false
						}
					}
					continue
				}
				switch in.name {
				case plan.OpBarrier:
					if bars[in.barrier] == nil {
						bars[in.barrier] = map[int][]int{}
					}
					bars[in.barrier][t] = append(bars[in.barrier][t], node)
				case plan.OpSignal, plan.OpRelaxedSignal, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush:
					for _, ch := range in.chans {
						add(&use(ch.slot).sig, g, t, node)
					}
				case plan.OpWait, plan.OpRelaxedWait:
					for _, ch := range in.chans {
						add(&use(ch.slot).wait, g, t, node)
					}
				}
			}
		}
		for id, byTB := range bars {
			want := pr.barriers[id]
			if len(byTB) != want {
				return false
			}
			count := -1
			for _, arr := range byTB {
				if count >= 0 && len(arr) != count {
					return false
				}
				count = len(arr)
			}
			for k := range count {
				x := extra()
				for _, arr := range byTB {
					edge(arr[k], x)
					edge(x, arr[k])
				}
			}
		}
	}
	for _, u := range slots {
		if u.sig.bad || u.wait.bad || len(u.sig.ops) != len(u.wait.ops) {
			return false
		}
		for j := range u.sig.ops {
			edge(u.sig.ops[j], u.wait.ops[j])
		}
	}
	// reaches[r]: nodes with a path to some op of rank r.
	pred := make([][]int, len(succ))
	for a, bs := range succ {
		for _, b := range bs {
			pred[b] = append(pred[b], a)
		}
	}
	reaches := make([][]bool, len(p.GPUs))
	for r := range p.GPUs {
		seen := make([]bool, len(succ))
		var stack []int
		for n, id := range nodes {
			if id.g == r {
				seen[n] = true
				stack = append(stack, n)
			}
		}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, m := range pred[n] {
				if !seen[m] {
					seen[m] = true
					stack = append(stack, m)
				}
			}
		}
		reaches[r] = seen
	}
	for n, id := range nodes {
		acc, err := p.Access(id.g, id.t, id.i)
		if err != nil {
			return false
		}
		for _, a := range acc {
			if a.Rank != id.g && (a.Rank < 0 || a.Rank >= len(reaches) || !reaches[a.Rank][n]) {
				return false
			}
		}
	}
	return true
}

// synchronises: ops that order thread blocks or ranks.
func synchronises(n plan.OpName) bool {
	switch n {
	case plan.OpBarrier, plan.OpSignal, plan.OpRelaxedSignal, plan.OpWait, plan.OpRelaxedWait,
		plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush, plan.OpSemAcquire, plan.OpSemRelease, plan.OpPipeline:
		return true
	}
	return false
}

// prologue returns the length of the prologue of every thread block of
// rank's program: the longest prefix of signals, waits, nops and flushes
// (ops that touch no buffer).
func prologue(pr *program) []int {
	pro := make([]int, len(pr.tbs))
	for t, insts := range pr.tbs {
		for _, in := range insts {
			switch in.name {
			case plan.OpSignal, plan.OpRelaxedSignal, plan.OpWait, plan.OpRelaxedWait, plan.OpNop, plan.OpFlush:
				pro[t]++
				continue
			}
			break
		}
	}
	return pro
}

// checkInPrologue reports whether calls can do without the start barrier:
// every rank runs the prologues of its thread blocks (signals and waits
// only) before any other op, and checks the descriptors of the call
// there. That is sound when
//
//   - the plan is self-synced (selfSynced: every directed channel is
//     signalled from one block and waited on from one block, as often per
//     call, so the j-th wait of a call pairs with the j-th signal of the
//     same call);
//   - every rank's prologues wait on every other rank: once they are
//     done, every peer has published its descriptor and staged and
//     published its buffers for this call (it does so before its first
//     signal), and has finished its previous call;
//   - the prologues signal every directed channel as often as they wait on
//     it, so a call that stops after them (a mismatch) leaves the counters
//     as balanced as a whole call does;
//   - the prologues complete on their own (checked by running them on
//     counters: with one waiting block per channel, the outcome does not
//     depend on the schedule).
//
// Every rank computes the same answer from the whole plan.
func checkInPrologue(progs []*program, synced bool) bool {
	if !synced {
		return false
	}
	n := len(progs)
	pros := make([][]int, n)
	sig, wait := map[int]int{}, map[int]int{}
	for g, pr := range progs {
		pros[g] = prologue(pr)
		peers := map[int]bool{}
		for t, insts := range pr.tbs {
			for _, in := range insts[:pros[g][t]] {
				for _, ch := range in.chans {
					switch in.name {
					case plan.OpSignal, plan.OpRelaxedSignal:
						sig[ch.slot]++
					case plan.OpWait, plan.OpRelaxedWait:
						wait[ch.slot]++
						peers[ch.peer] = true
					}
				}
			}
		}
		for r := range n {
			if r != g && !peers[r] {
				return false
			}
		}
	}
	for s, k := range wait {
		if sig[s] != k {
			return false
		}
	}
	for s, k := range sig {
		if wait[s] != k {
			return false
		}
	}
	// Run the prologues on counters.
	count, taken := map[int]int{}, map[int]int{}
	type pos struct{ pc, sub int }
	at := make([][]pos, n)
	for g := range n {
		at[g] = make([]pos, len(pros[g]))
	}
	for {
		moved, done := false, true
		for g, pr := range progs {
			for t, insts := range pr.tbs {
				p := &at[g][t]
				for p.pc < pros[g][t] {
					in := &insts[p.pc]
					blocked := false
					for ; p.sub < len(in.chans); p.sub++ {
						ch := in.chans[p.sub]
						switch in.name {
						case plan.OpSignal, plan.OpRelaxedSignal:
							count[ch.slot]++
						case plan.OpWait, plan.OpRelaxedWait:
							if count[ch.slot] <= taken[ch.slot] {
								blocked = true
							} else {
								taken[ch.slot]++
							}
						}
						if blocked {
							break
						}
					}
					if blocked {
						break
					}
					p.pc, p.sub = p.pc+1, 0
					moved = true
				}
				done = done && p.pc >= pros[g][t]
			}
		}
		if done {
			return true
		}
		if !moved {
			return false
		}
	}
}
