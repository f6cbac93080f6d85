package dsl

import (
	"fmt"
	"slices"

	"github.com/chorus-rt/chorus/algo/plan"
)

// Lower turns the program into an execution plan. It returns the recorded
// argument errors, if any; otherwise it
//
//  1. pairs signals with waits: for every channel from a to b, the signals
//     a sends on it (signal, rlxsignal, pws, pwsf) must equal the waits b
//     does on its paired channel back to a (wait, rlxwait);
//  2. with Instances > 1, checks that the chunk ranges used on each buffer
//     are equal or disjoint (otherwise replication would not be a
//     consistent renaming of chunks);
//  3. per thread block, gathers pipeline bodies, then fuses neighbouring
//     ops (signal+signal, wait+wait, put+put, get+get, port put+signal ->
//     pws, pws+flush -> pwsf, chained reduces, reduce+put -> res/rres,
//     packet reduce+put/copy -> respkt/recpkt/recspkt, switch
//     reduce+broadcast -> glres);
//  4. expands data sync (SyncBefore/SyncAfter) into nop ops and drops
//     redundant ones (a nop next to a nop or a barrier);
//  5. auto-sync: inserts a nop between two ops of a thread block whose
//     chunk ranges overlap where one of them writes, unless a nop or
//     barrier already separates them (skipped with Config.NoAutoSync);
//  6. replicates Instances times: thread block t becomes t*I+i, channel,
//     semaphore and barrier id x becomes x*I+i, chunk range [idx, idx+s)
//     becomes [idx*I+i*s, idx*I+i*s+s) and buffers grow I times;
//
// and checks the result with plan.Validate. Lower does not change the
// program and may be called again.
func (p *Program) Lower() (*plan.Plan, error) {
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("dsl: program %q: %w", p.cfg.Name, err)
	}
	p.checkPairs()
	if p.cfg.Instances > 1 {
		p.checkReplicable()
	}
	if err := p.Err(); err != nil {
		// These errors come from lowering, not from a call: forget them so
		// that the program's own error list stays about its calls.
		p.errs, p.dropped = nil, 0
		return nil, fmt.Errorf("dsl: program %q: %w", p.cfg.Name, err)
	}
	lowered := make([][][]*op, len(p.ranks))
	for r, rk := range p.ranks {
		lowered[r] = make([][]*op, len(rk.ops))
		for t, ops := range rk.ops {
			lowered[r][t] = p.lowerSeq(gatherPipelines(ops))
		}
	}
	pl := p.emit(lowered)
	if err := pl.Validate(); err != nil {
		return nil, fmt.Errorf("dsl: program %q lowered to an invalid plan (an unchecked case in the DSL): %w", p.cfg.Name, err)
	}
	return pl, nil
}

// visitOps calls f for every op of the program, pipeline bodies included.
func (p *Program) visitOps(f func(o *op)) {
	for _, rk := range p.ranks {
		for _, ops := range rk.ops {
			for _, o := range ops {
				f(o)
			}
		}
	}
}

// checkPairs implements step 1 of Lower.
func (p *Program) checkPairs() {
	if p.cfg.UncheckedPairs {
		return
	}
	sig := map[*channel]int{}
	wt := map[*channel]int{}
	// Switch barriers: per switch channel and rank, signals and waits.
	type swRank struct {
		s    *SwitchChannel
		rank int
	}
	swSig, swWait := map[swRank]int{}, map[swRank]int{}
	p.visitOps(func(o *op) {
		if o.chType == plan.ChannelSwitch {
			switch o.name {
			case plan.OpSignal, plan.OpRelaxedSignal:
				swSig[swRank{o.sw, o.rank}]++
			case plan.OpWait, plan.OpRelaxedWait:
				swWait[swRank{o.sw, o.rank}]++
			}
			return
		}
		switch o.name {
		case plan.OpSignal, plan.OpRelaxedSignal, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush:
			for _, c := range o.chans {
				sig[c]++
			}
		case plan.OpWait, plan.OpRelaxedWait:
			for _, c := range o.chans {
				wt[c]++
			}
		}
	})
	// Every rank of a switch group must arrive as often as every other
	// and wait as often as it arrives (the k-th wait pairs with every
	// rank's k-th signal; a leftover arrival would shift the next call).
	for _, s := range p.switches {
		r0 := s.ranks[0]
		for _, r := range s.ranks {
			k := swRank{s, r}
			if swSig[k] != swSig[swRank{s, r0}] {
				p.fail(r, -1, "", "signals the switch channel of ranks %v %d times, but rank %d signals it %d times (every rank of the group must arrive equally often)", s.ranks, swSig[k], r0, swSig[swRank{s, r0}])
			} else if swWait[k] != swSig[k] {
				p.fail(r, -1, "", "waits %d times on the switch channel of ranks %v but signals it %d times (every wait needs one signal of every rank)", swWait[k], s.ranks, swSig[k])
			}
		}
	}
	partner := func(c *channel) *channel {
		for _, q := range p.channels {
			if q.typ == c.typ && q.src == c.dst && q.dst == c.src && q.ordinal == c.ordinal {
				return q
			}
		}
		return nil
	}
	for _, c := range p.channels {
		q := partner(c)
		if q == nil {
			if sig[c] > 0 {
				p.fail(c.src, -1, "", "signals rank %d %d times on %s channel %d, but rank %d has no matching %s channel back to rank %d to wait on (make one with %sChannel(%d, %d))",
					c.dst, sig[c], c.typeName, c.id, c.dst, c.typeName, c.src, typeTitle(c.typ), c.src, c.dst)
			}
			if wt[c] > 0 {
				p.fail(c.src, -1, "", "waits %d times on %s channel %d for rank %d, but rank %d has no matching %s channel to signal on",
					wt[c], c.typeName, c.id, c.dst, c.dst, c.typeName)
			}
			continue
		}
		if sig[c] != wt[q] {
			p.fail(c.src, -1, "", "signals rank %d %d times on %s channel %d, but rank %d waits %d times on its paired %s channel %d",
				c.dst, sig[c], c.typeName, c.id, c.dst, wt[q], c.typeName, q.id)
		}
	}
}

func typeTitle(t plan.ChannelType) string {
	if t == plan.ChannelPort {
		return "Port"
	}
	return "Memory"
}

// checkReplicable implements step 2 of Lower.
func (p *Program) checkReplicable() {
	type key struct {
		rank int
		buf  plan.BufferType
	}
	type rng struct{ index, size int }
	ranges := map[key]map[rng]bool{}
	p.visitOps(func(o *op) {
		for _, a := range o.accesses() {
			k := key{a.r.rank, a.r.buf}
			if ranges[k] == nil {
				ranges[k] = map[rng]bool{}
			}
			ranges[k][rng{a.r.index, a.r.size}] = true
		}
	})
	keys := make([]key, 0, len(ranges))
	for k := range ranges {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return int(a.buf) - int(b.buf)
	})
	for _, k := range keys {
		rs := make([]rng, 0, len(ranges[k]))
		for r := range ranges[k] {
			rs = append(rs, r)
		}
		slices.SortFunc(rs, func(a, b rng) int {
			if a.index != b.index {
				return a.index - b.index
			}
			return a.size - b.size
		})
		var top rng // the range reaching furthest so far
		for i, r := range rs {
			if i > 0 && r.index < top.index+top.size {
				p.fail(k.rank, -1, "", "with %d instances, %s chunk ranges [%d:%d) and [%d:%d) overlap without being equal; replication renames range [idx, idx+s) to [idx*I+i*s, +s), which needs ranges that are equal or disjoint",
					p.cfg.Instances, k.buf.Short(), top.index, top.index+top.size, r.index, r.index+r.size)
				break
			}
			if i == 0 || r.index+r.size > top.index+top.size {
				top = r
			}
		}
	}
}

// gatherPipelines turns each run of consecutive ops recorded in the same
// Pipeline call into one pipeline op holding them as its body.
func gatherPipelines(ops []*op) []*op {
	var out []*op
	for _, o := range ops {
		if o.loop == nil {
			out = append(out, o)
			continue
		}
		if n := len(out); n > 0 && out[n-1].name == plan.OpPipeline && out[n-1].loop == o.loop {
			out[n-1].body = append(out[n-1].body, o)
			continue
		}
		out = append(out, &op{name: plan.OpPipeline, rank: o.rank, tb: o.tb, loop: o.loop, body: []*op{o}})
	}
	return out
}

// lowerSeq runs steps 3-5 of Lower on one thread block's ops (and
// recursively on pipeline bodies). It never changes the ops it is given.
func (p *Program) lowerSeq(ops []*op) []*op {
	seq := make([]*op, len(ops))
	for i, o := range ops {
		seq[i] = o
		if o.name == plan.OpPipeline {
			c := o.clone()
			c.body = p.lowerSeq(o.body)
			seq[i] = c
		}
	}
	out := expandSync(p.fuse(seq))
	if p.cfg.NoAutoSync {
		return out
	}
	return autoSync(out)
}

// expandSync implements step 4.
func expandSync(ops []*op) []*op {
	var out []*op
	nop := func(o *op) *op { return &op{name: plan.OpNop, rank: o.rank, tb: o.tb} }
	for _, o := range ops {
		if o.sync&SyncBefore != 0 {
			out = append(out, nop(o))
		}
		out = append(out, o)
		if o.sync&SyncAfter != 0 {
			out = append(out, nop(o))
		}
	}
	// A nop right after a nop or a barrier, or right before a barrier,
	// adds nothing: a barrier synchronises the block's threads too.
	var clean []*op
	for i, o := range out {
		if o.name == plan.OpNop {
			if n := len(clean); n > 0 && clean[n-1].isSync() {
				continue
			}
			if i+1 < len(out) && out[i+1].name == plan.OpBarrier {
				continue
			}
		}
		clean = append(clean, o)
	}
	return clean
}

// autoSync implements step 5.
func autoSync(ops []*op) []*op {
	var out []*op
	var pending []access
	for _, o := range ops {
		if o.isSync() {
			pending = nil
			out = append(out, o)
			continue
		}
		acc := o.accesses()
		if conflicts(pending, acc) {
			out = append(out, &op{name: plan.OpNop, rank: o.rank, tb: o.tb})
			pending = nil
		}
		pending = append(pending, acc...)
		out = append(out, o)
	}
	return out
}
