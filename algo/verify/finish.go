package verify

import (
	"fmt"
	"strings"

	"github.com/chorus-rt/chorus/algo/plan"
)

// finish turns the simulation's findings into a verdict, most fundamental
// first: deadlock, unsupported constructs, races, undefined reads, wrong
// results, unmatched synchronization.
func (v *verifier) finish() *Error {
	if e := v.deadlock(); e != nil {
		return e
	}
	if v.unsup != nil {
		return v.unsup
	}
	if v.race != nil {
		return v.race
	}
	// The kernel of rank r ends when all its thread blocks have: every
	// write to r's output must happen before that.
	end := make([]clock, v.p.NumRanks())
	for r := range end {
		end[r] = make(clock, len(v.agents))
	}
	for _, a := range v.agents[:v.nthr] {
		a.fence()
		end[a.rank].join(a.C)
	}
	for r := range v.p.GPUs {
		for i := 0; i < v.p.GPUs[r].OutputChunks*v.U; i++ {
			c := v.cell(r, plan.Output, i)
			if c.w.at != nil && end[r][c.w.th] < c.w.ep {
				a := plan.Access{Rank: r, Buffer: plan.Output}
				e := newErr(Race, c.w.at, "writes %s, but nothing orders the write before rank %d's kernel ends (rank %d waits for no signal sent after it); fix: after the write, signal rank %d (with a nop before the signal) and make rank %d wait for that signal", v.chunkName(a, i), r, r, r, r)
				if w := c.w.at.loc.Rank; w != r && v.relaxedBetween(w, r) {
					e.Msg += fmt.Sprintf("; rank %d does send rlxsignal to rank %d, but a relaxed signal does not order the store before it: use signal/wait", w, r)
				}
				return e
			}
		}
	}
	if v.undef != nil {
		return v.undef
	}
	if v.format != nil {
		return v.format
	}
	if e := v.results(); e != nil {
		return e
	}
	return v.unmatched()
}

// blocked describes why agent a cannot run its current step.
type blocked struct {
	msg     string
	other   *step
	starved bool // no schedule can ever unblock it
}

func (v *verifier) why(a *agent) blocked {
	s := a.steps[a.pc]
	op := s.op
	switch op.Name {
	case plan.OpWait, plan.OpRelaxedWait:
		need := map[sigKey]int{}
		for _, k := range s.keys {
			need[k]++
			st := v.keys[k]
			n := st.waits + need[k]
			if n <= len(st.sigs) {
				continue
			}
			what := fmt.Sprintf("waits for signal #%d from rank %d on %s channel %d between ranks %d and %d", n, k.src, k.t, k.k, k.src, k.dst)
			if st.total < n {
				return blocked{msg: fmt.Sprintf("%s, but rank %d sends only %d on it in the whole plan; fix: add the missing signal on rank %d's %s channel to rank %d, or drop this wait", what, k.src, st.total, k.src, k.t, k.dst), starved: true}
			}
			for id := range st.signalers {
				sa := v.agents[id]
				if !sa.done() {
					return blocked{msg: fmt.Sprintf("%s, which rank %d tb %d would send later, but it is blocked at %s", what, sa.rank, sa.tb, sa.steps[sa.pc]), other: sa.steps[sa.pc]}
				}
			}
			return blocked{msg: what}
		}
	case plan.OpBarrier:
		bs := v.bars[[2]int{a.rank, op.BarrierID}]
		g := bs.gens[a.barN[op.BarrierID]]
		return blocked{msg: fmt.Sprintf("barrier %d waits for %d thread blocks of rank %d, only %d arrive; fix: every thread block named by the barrier must reach it the same number of times", op.BarrierID, bs.n, a.rank, g.arrived)}
	case plan.OpSemAcquire:
		for _, id := range op.SemaphoreIDs {
			st := v.sems[a.rank][id]
			if st.value <= 0 {
				b := blocked{msg: fmt.Sprintf("acquires semaphore %d of rank %d, which stays 0 (initial value %d, %d releases, %d acquires)", id, a.rank, st.init, len(st.rel), st.acquires)}
				for rid := range st.releasers {
					if ra := v.agents[rid]; !ra.done() {
						b.other = ra.steps[ra.pc]
						b.msg += fmt.Sprintf("; the releasing tb %d is blocked at %s", ra.tb, b.other)
					}
				}
				if b.other == nil {
					b.starved = true
				}
				return b
			}
		}
	}
	for _, acc := range s.acc {
		if acc.Mode == plan.AccessRead && acc.Packet {
			off, n := v.span(s, acc)
			for i := off; i < off+n; i++ {
				if !v.cell(acc.Rank, acc.Buffer, i).pkt {
					return blocked{msg: fmt.Sprintf("polls LL packets in %s that are never written as packets (by no op, or only by blocked ones)", v.chunkName(acc, i))}
				}
			}
		}
	}
	return blocked{msg: "blocked"}
}

func (v *verifier) deadlock() *Error {
	var first *agent
	var firstWhy blocked
	for _, a := range v.agents[:v.nthr] {
		if a.done() {
			continue
		}
		b := v.why(a)
		if b.starved {
			return v.deadlockErr(a, b)
		}
		if first == nil {
			first, firstWhy = a, b
		}
	}
	if first == nil {
		return nil
	}
	return v.deadlockErr(first, firstWhy)
}

func (v *verifier) deadlockErr(a *agent, b blocked) *Error {
	s := a.steps[a.pc]
	msg := b.msg
	if b.other != nil {
		// Follow the chain of blocked ops to show the cycle.
		chain := []string{s.String()}
		seen := map[*step]bool{s: true}
		cur := b.other
		for cur != nil && !seen[cur] && len(chain) < 16 {
			seen[cur] = true
			chain = append(chain, cur.String())
			var next *step
			for _, x := range v.agents[:v.nthr] {
				if !x.done() && x.steps[x.pc] == cur {
					next = v.why(x).other
				}
			}
			cur = next
		}
		if cur != nil && seen[cur] {
			chain = append(chain, cur.String())
			msg += "; cyclic wait: " + strings.Join(chain, " -> ") + "; fix: break the cycle by moving one rank's signal before its wait"
		}
	}
	e := newErr(Deadlock, s, "%s", msg)
	if b.other != nil {
		l := b.other.loc
		e.Other = &l
	}
	return e
}

// expected returns the contributions output chunk j, cell u of rank r must
// hold, or an error when the plan's shape does not fit its collective or
// the collective is not one the verifier knows.
func (v *verifier) expected() (func(r, j, u int) []int32, *Error) {
	p := v.p
	n := p.NumRanks()
	g0 := &p.GPUs[0]
	same := func(ic, oc int, what string) *Error {
		for r := range p.GPUs {
			g := &p.GPUs[r]
			if g.InputChunks != ic || g.OutputChunks != oc {
				return v.shapeErr(r, "%s over %d ranks: rank %d has %d input and %d output chunks, want %d and %d", what, n, r, g.InputChunks, g.OutputChunks, ic, oc)
			}
		}
		return nil
	}
	id := v.ctb.id
	switch p.Collective {
	case plan.AllReduce:
		k := g0.InputChunks
		if e := same(k, k, "allreduce"); e != nil {
			return nil, e
		}
		return func(r, j, u int) []int32 {
			out := make([]int32, n)
			for q := range out {
				out[q] = id(q, j, u)
			}
			return out
		}, nil
	case plan.AllGather:
		k := g0.InputChunks
		if e := same(k, n*k, "allgather"); e != nil {
			return nil, e
		}
		return func(r, j, u int) []int32 { return []int32{id(j/k, j%k, u)} }, nil
	case plan.ReduceScatter:
		k := g0.OutputChunks
		if e := same(n*k, k, "reducescatter"); e != nil {
			return nil, e
		}
		return func(r, j, u int) []int32 {
			out := make([]int32, n)
			for q := range out {
				out[q] = id(q, r*k+j, u)
			}
			return out
		}, nil
	case plan.AllToAll:
		k := g0.InputChunks / n
		if g0.InputChunks%n != 0 {
			return nil, v.shapeErr(0, "alltoall over %d ranks with %d input chunks", n, g0.InputChunks)
		}
		if e := same(n*k, n*k, "alltoall"); e != nil {
			return nil, e
		}
		return func(r, j, u int) []int32 { return []int32{id(j/k, r*k+j%k, u)} }, nil
	}
	// Any other collective (broadcast, sendrecv, "test", custom names): the
	// result is what the program computes; results() reports it as the
	// Movement instead of judging it.
	return nil, nil
}

func (v *verifier) results() *Error {
	// Packet data left in an output is wrong whatever the collective.
	for r := range v.p.GPUs {
		for i := 0; i < v.p.GPUs[r].OutputChunks*v.U; i++ {
			if c := v.cell(r, plan.Output, i); c.val != nil && c.pkt {
				return newErr(WrongResult, c.w.at, "%s holds LL packets at the end, not plain data", v.chunkName(plan.Access{Rank: r, Buffer: plan.Output}, i))
			}
		}
	}
	v.rep.Movement = v.movement()
	want, e := v.expected()
	if e != nil {
		return e
	}
	if want == nil {
		for r := range v.p.GPUs {
			g := &v.p.GPUs[r]
			for i := 0; i < g.OutputChunks*v.U; i++ {
				if c := v.cell(r, plan.Output, i); c.val != nil && c.val.mixed != nil {
					return newErr(WrongResult, c.val.mixed, "combines values of different reduce ops: %s ends up as %s", v.chunkName(plan.Access{Rank: r, Buffer: plan.Output}, i), v.ctb.format(c.val, i%v.U))
				}
			}
			v.rep.OutputChunks += g.OutputChunks
		}
		v.rep.Custom = true
		return nil
	}
	// All reductions of the plan must use one reduce op (the executor
	// ignores reduce_op and always sums, so mixing cannot be meant).
	for r := range v.p.GPUs {
		g := &v.p.GPUs[r]
		for j := 0; j < g.OutputChunks; j++ {
			v.rep.OutputChunks++
			for u := 0; u < v.U; u++ {
				i := j*v.U + u
				c := v.cell(r, plan.Output, i)
				w := want(r, j, u)
				name := v.chunkName(plan.Access{Rank: r, Buffer: plan.Output}, i)
				exp := &value{elems: w}
				if len(w) > 1 {
					exp.op = plan.ReduceSum
				}
				if c.val == nil {
					return &Error{Kind: WrongResult, Rank: r, TB: -1, Op: -1, Body: -1, Iter: -1,
						Msg: fmt.Sprintf("%s is never written; want %s", name, v.ctb.format(exp, u))}
				}
				val := c.val
				at := c.w.at
				if val.made != nil {
					at = val.made
				}
				if c.pkt {
					return newErr(WrongResult, c.w.at, "%s holds LL packets at the end, not plain data", name)
				}
				if val.dup != nil {
					return newErr(WrongResult, val.dup, "counts a contribution twice: %s ends up as %s; want %s", name, v.ctb.format(val, u), v.ctb.format(exp, u))
				}
				if val.mixed != nil {
					return newErr(WrongResult, val.mixed, "combines values of different reduce ops: %s ends up as %s", name, v.ctb.format(val, u))
				}
				if !equal(val.elems, w) {
					e := newErr(WrongResult, at, "%s ends up as %s; want %s", name, v.ctb.format(val, u), v.ctb.format(exp, u))
					if at == nil {
						e.Rank = r
					}
					return e
				}
			}
		}
	}
	return nil
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (v *verifier) unmatched() *Error {
	for _, k := range v.korder {
		st := v.keys[k]
		if len(st.sigs) > st.waits {
			at := st.sigs[st.waits].at
			return newErr(Unmatched, at, "signal #%d from rank %d to rank %d on %s channel %d is never waited for (%d signals, %d waits); the next call of the plan would pair its waits with stale signals",
				st.waits+1, k.src, k.dst, k.t, k.k, len(st.sigs), st.waits)
		}
	}
	for r := range v.sems {
		for id, st := range v.sems[r] {
			if st.value != st.init {
				e := newErr(Unmatched, st.lastRel, "semaphore %d of rank %d ends at %d, not its initial value %d (%d releases, %d acquires)", id, r, st.value, st.init, len(st.rel), st.acquires)
				if st.lastRel == nil {
					e.Rank = r
				}
				return e
			}
		}
	}
	return nil
}
