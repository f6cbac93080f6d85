package dsl

import (
	"slices"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

// opNames lists the op names of one thread block ("pipeline(a,b)" for a
// pipeline with body a, b).
func opNames(pl *plan.Plan, rank, tb int) []string {
	var out []string
	for _, o := range pl.GPUs[rank].ThreadBlocks[tb].Ops {
		s := o.Name.String()
		if o.Name == plan.OpPipeline {
			var body []string
			for _, b := range o.Ops {
				body = append(body, b.Name.String())
			}
			s += "(" + strings.Join(body, ",") + ")"
		}
		out = append(out, s)
	}
	return out
}

func lower(t *testing.T, p *Program) *plan.Plan {
	t.Helper()
	pl, err := p.Lower()
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Validate(); err != nil {
		t.Fatal(err)
	}
	return pl
}

func TestSignalWaitPairing(t *testing.T) {
	tests := []struct {
		name  string
		build func(p *Program)
		want  string // "" = lowers
	}{
		{"matched", func(p *Program) {
			p.MemoryChannel(1, 0).Signal(TB(0), SyncBoth)
			p.MemoryChannel(0, 1).Wait(TB(0), SyncBoth)
		}, ""},
		{"relaxed and strict count together", func(p *Program) {
			a, b := p.MemoryChannel(1, 0), p.MemoryChannel(0, 1)
			a.RelaxedSignal(TB(0), SyncNone)
			a.Signal(TB(0), SyncNone)
			b.Wait(TB(0), SyncNone)
			b.RelaxedWait(TB(0), SyncNone)
		}, ""},
		{"put_with_signal is a signal", func(p *Program) {
			p.PortChannel(1, 0).PutWithSignal(p.Rank(1).Output().Chunk(0, 1), p.Rank(0).Input().Chunk(0, 1), TB(0))
			p.PortChannel(0, 1).Wait(TB(0), SyncAfter)
		}, ""},
		{"more signals than waits", func(p *Program) {
			a, b := p.MemoryChannel(1, 0), p.MemoryChannel(0, 1)
			a.Signal(TB(0), SyncNone)
			a.Signal(TB(1), SyncNone)
			b.Wait(TB(0), SyncNone)
		}, "dsl: rank 0: signals rank 1 2 times on memory channel 0, but rank 1 waits 1 times on its paired memory channel 0"},
		{"wait without signal", func(p *Program) {
			p.MemoryChannel(1, 0)
			p.MemoryChannel(0, 1).Wait(TB(0), SyncNone)
		}, "dsl: rank 0: signals rank 1 0 times on memory channel 0, but rank 1 waits 1 times"},
		{"no channel back", func(p *Program) { p.PortChannel(1, 0).Signal(TB(0), SyncNone) },
			"rank 0: signals rank 1 1 times on port channel 0, but rank 1 has no matching port channel back to rank 0 to wait on (make one with PortChannel(0, 1))"},
		{"types do not pair", func(p *Program) {
			p.MemoryChannel(1, 0).Signal(TB(0), SyncNone)
			p.PortChannel(0, 1).Wait(TB(0), SyncNone)
		}, "has no matching memory channel back"},
		{"second channel pairs with second", func(p *Program) {
			p.MemoryChannel(1, 0)
			a2 := p.MemoryChannel(1, 0)
			b1 := p.MemoryChannel(0, 1)
			p.MemoryChannel(0, 1)
			a2.Signal(TB(0), SyncNone)
			b1.Wait(TB(0), SyncNone) // waits on the first channel: mismatch
		}, "signals rank 1 0 times on memory channel 0, but rank 1 waits 1 times"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base(2, plan.Simple)
			tc.build(p)
			_, err := p.Lower()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Lower: %v, want an error containing %q", err, tc.want)
			}
			if p.Err() != nil {
				t.Errorf("Lower's own errors stayed in the program: %v", p.Err())
			}
		})
	}
}

// UncheckedPairs emits what the pairing check would refuse (as MSCCL++'s
// DSL does), and only that check is skipped.
func TestUncheckedPairs(t *testing.T) {
	p := NewProgram(Config{Name: "x", Collective: "test", Ranks: 2, NoBuffers: true, UncheckedPairs: true})
	p.MemoryChannel(1, 0).Signal(TB(0), SyncNone)
	p.MemoryChannel(1, 0).Signal(TB(0), SyncNone)
	p.MemoryChannel(0, 1).Wait(TB(0), SyncNone)
	pl, err := p.Lower()
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.GPUs[0].ThreadBlocks[0].Ops[0]; got.Name != plan.OpSignal || len(got.ChannelIDs) != 2 {
		t.Fatalf("rank 0 op 0: %+v, want one signal on two channels", got)
	}
	q := NewProgram(Config{Name: "x", Collective: "test", Ranks: 2, NoBuffers: true, UncheckedPairs: true})
	q.MemoryChannel(1, 0).Signal(TB(0), SyncNone)
	q.MemoryChannel(0, 1).Put(q.Rank(0).Input().Chunk(0, 1), q.Rank(1).Input().Chunk(0, 1), TB(0))
	if _, err := q.Lower(); err == nil || strings.Contains(err.Error(), "signals rank") {
		t.Fatalf("other checks must stay: %v", err)
	}
}

// Switch ops on a thread-block group: every block gets its part.
func TestSwitchGroup(t *testing.T) {
	p := base(2, plan.Simple)
	p.SwitchChannel([]int{0, 1}, Input).At(0).Reduce(p.Rank(0).Output().Chunk(0, 1), 0, 1, Sum, p.TBGroup(0, 1, 2))
	pl, err := p.Lower()
	if err != nil {
		t.Fatal(err)
	}
	tbs := pl.GPUs[0].ThreadBlocks
	if len(tbs) != 3 {
		t.Fatalf("%d thread blocks, want 3", len(tbs))
	}
	for i, tb := range tbs {
		op := tb.Ops[0]
		if op.Name != plan.OpGroupLoadReduce || op.TBG == nil || op.TBG.ID != i || op.TBG.Size != 3 {
			t.Fatalf("tb %d: %+v, want glre part %d of 3", i, op, i)
		}
	}
	if err := pl.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestFusion(t *testing.T) {
	in := func(p *Program, r, i int) Chunk { return p.Rank(r).Input().Chunk(i, 1) }
	out := func(p *Program, r, i int) Chunk { return p.Rank(r).Output().Chunk(i, 1) }
	tests := []struct {
		name  string
		ranks int
		proto plan.Protocol
		build func(p *Program)
		want  []string // rank 0 tb 0
		check func(t *testing.T, pl *plan.Plan)
	}{
		{"put+put", 3, plan.Simple, func(p *Program) {
			p.MemoryChannel(1, 0).Put(out(p, 1, 0), in(p, 0, 1), TB(0))
			p.MemoryChannel(2, 0).Put(out(p, 2, 0), in(p, 0, 2), TB(0))
		}, []string{"put"}, func(t *testing.T, pl *plan.Plan) {
			if o := pl.GPUs[0].ThreadBlocks[0].Ops[0]; len(o.Src) != 2 || len(o.Dst) != 2 {
				t.Errorf("fused put has %d srcs, %d dsts", len(o.Src), len(o.Dst))
			}
		}},
		{"put+put of other sizes", 4, plan.Simple, func(p *Program) {
			ch := p.MemoryChannel(1, 0)
			ch.Put(out(p, 1, 0), in(p, 0, 0), TB(0))
			ch.Put(p.Rank(1).Output().Chunk(1, 2), p.Rank(0).Input().Chunk(1, 2), TB(0))
		}, []string{"put", "put"}, nil},
		{"put+put to one range", 2, plan.Simple, func(p *Program) {
			ch := p.MemoryChannel(1, 0)
			ch.Put(out(p, 1, 0), in(p, 0, 0), TB(0))
			ch.Put(out(p, 1, 0), in(p, 0, 1), TB(0))
		}, []string{"put", "nop", "put"}, nil}, // the second overwrites the first: ordered
		{"port put+signal+flush", 2, plan.Simple, func(p *Program) {
			ch := p.PortChannel(1, 0)
			ch.Put(out(p, 1, 0), in(p, 0, 0), TB(0))
			ch.Signal(TB(0), SyncNone)
			ch.Flush(TB(0), SyncNone)
			ch.Put(out(p, 1, 1), in(p, 0, 1), TB(0))
			ch.Signal(TB(0), SyncNone)
			back := p.PortChannel(0, 1)
			back.Wait(TB(0), SyncNone)
			back.Wait(TB(0), SyncNone)
		}, []string{"pwsf", "pws"}, nil},
		{"reduce+put: res", 3, plan.Simple, func(p *Program) {
			r := p.Rank(0)
			r.Reduce(out(p, 0, 0), []Chunk{in(p, 0, 0), in(p, 0, 1)}, Sum, TB(0))
			p.MemoryChannel(1, 0).Put(out(p, 1, 0), out(p, 0, 0), TB(0))
			p.MemoryChannel(2, 0).Put(out(p, 2, 0), out(p, 0, 0), TB(0))
		}, []string{"res"}, func(t *testing.T, pl *plan.Plan) {
			if o := pl.GPUs[0].ThreadBlocks[0].Ops[0]; len(o.Dst) != 3 {
				t.Errorf("res has %d dsts, want 3", len(o.Dst))
			}
		}},
		{"reduce then put of something else", 2, plan.Simple, func(p *Program) {
			p.Rank(0).Reduce(out(p, 0, 0), []Chunk{in(p, 0, 0), in(p, 0, 1)}, Sum, TB(0))
			p.MemoryChannel(1, 0).Put(out(p, 1, 0), in(p, 0, 1), TB(0))
		}, []string{"re", "put"}, nil},
		{"rre chain + put: rres", 3, plan.Simple, func(p *Program) {
			p.MemoryChannel(1, 0).Reduce(out(p, 0, 0), in(p, 0, 0), []Chunk{in(p, 1, 0)}, Sum, TB(0))
			p.MemoryChannel(2, 0).Reduce(out(p, 0, 0), out(p, 0, 0), []Chunk{in(p, 2, 0)}, Sum, TB(0))
			p.MemoryChannel(1, 0).Put(out(p, 1, 0), out(p, 0, 0), TB(0))
		}, []string{"rres"}, func(t *testing.T, pl *plan.Plan) {
			o := pl.GPUs[0].ThreadBlocks[0].Ops[0]
			if len(o.Src) != 3 || o.Src[0].Kind != plan.RefLocal || o.Src[1].Kind != plan.RefRemote || len(o.Dst) != 2 {
				t.Errorf("rres %+v", o)
			}
		}},
		{"reduce chain reading the partial elsewhere", 2, plan.Simple, func(p *Program) {
			r := p.Rank(0)
			r.Reduce(out(p, 0, 0), []Chunk{in(p, 0, 0), in(p, 0, 1)}, Sum, TB(0))
			r.Reduce(out(p, 0, 0), []Chunk{out(p, 0, 0), in(p, 0, 1)}, Max, TB(0)) // other op
		}, []string{"re", "nop", "re"}, nil},
		{"packets: respkt", 3, plan.LL, func(p *Program) {
			s := p.Rank(0).NewScratch(2)
			r1, r2 := p.Rank(1).NewScratch(1), p.Rank(2).NewScratch(1)
			p.Rank(0).ReducePackets(out(p, 0, 0), in(p, 0, 0), []Chunk{s.Chunk(0, 1), s.Chunk(1, 1)}, Sum, TB(0))
			p.MemoryChannel(1, 0).PutPackets(r1.Chunk(0, 1), out(p, 0, 0), TB(0))
			p.MemoryChannel(2, 0).PutPackets(r2.Chunk(0, 1), out(p, 0, 0), TB(0))
		}, []string{"respkt"}, nil},
		{"packets: recpkt, recspkt", 2, plan.LL, func(p *Program) {
			s := p.Rank(0).NewScratch(2)
			r1 := p.Rank(1).NewScratch(2)
			p.Rank(0).ReducePackets(out(p, 0, 0), in(p, 0, 0), []Chunk{s.Chunk(0, 1)}, Sum, TB(0))
			p.Rank(0).CopyPackets(s.Chunk(1, 1), out(p, 0, 0), TB(0))
			p.MemoryChannel(1, 0).ReadPutPackets(r1.Chunk(0, 1), s.Chunk(1, 1), TB(0))
			p.MemoryChannel(1, 0).PutPackets(r1.Chunk(1, 1), out(p, 0, 0), TB(0))
		}, []string{"recspkt"}, nil},
		{"switch: glres", 2, plan.Simple, func(p *Program) {
			sw := p.SwitchChannel([]int{0, 1}, Input)
			s := p.Rank(0).NewScratch(1)
			sw.At(0).Reduce(s.Chunk(0, 1), 0, 1, Sum, TB(0))
			sw.At(0).Broadcast(s.Chunk(0, 1), 0, 1, TB(0))
		}, []string{"glres"}, nil},
		{"switch: result used later, not fused", 2, plan.Simple, func(p *Program) {
			sw := p.SwitchChannel([]int{0, 1}, Input)
			sw.At(0).Reduce(out(p, 0, 0), 0, 1, Sum, TB(0))
			sw.At(0).Broadcast(out(p, 0, 0), 0, 1, TB(0))
			p.Rank(0).Copy(out(p, 0, 1), out(p, 0, 0), TB(0))
		}, []string{"glre", "nop", "gstore", "copy"}, nil},
		{"get+get", 3, plan.Simple, func(p *Program) {
			p.MemoryChannel(1, 0).Get(out(p, 0, 1), in(p, 1, 1), TB(0))
			p.MemoryChannel(2, 0).Get(out(p, 0, 2), in(p, 2, 2), TB(0))
		}, []string{"get"}, nil},
		{"semaphores", 2, plan.Simple, func(p *Program) {
			a, b := p.Rank(0).Semaphore(1), p.Rank(0).Semaphore(1)
			a.Acquire(TB(0), SyncNone)
			b.Acquire(TB(0), SyncNone)
			a.Release(TB(0), SyncNone)
			b.Release(TB(0), SyncNone)
		}, []string{"sem_acquire", "sem_release"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base(tc.ranks, tc.proto)
			tc.build(p)
			pl, err := p.Lower()
			if err != nil {
				t.Fatal(err)
			}
			if got := opNames(pl, 0, 0); !slices.Equal(got, tc.want) {
				t.Errorf("ops %v, want %v", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, pl)
			}
		})
	}
}

func TestSignalWaitFusion(t *testing.T) {
	p := base(3, plan.Simple)
	var to, from [3]*MemoryChannel
	for _, q := range []int{1, 2} {
		to[q], from[q] = p.MemoryChannel(q, 0), p.MemoryChannel(0, q)
	}
	for _, q := range []int{1, 2} {
		to[q].Signal(TB(0), SyncBefore)
	}
	for _, q := range []int{1, 2} {
		to[q].Wait(TB(0), SyncAfter)
	}
	for _, q := range []int{1, 2} {
		from[q].Wait(TB(0), SyncNone)
		from[q].Signal(TB(0), SyncNone)
	}
	pl := lower(t, p)
	if got, want := opNames(pl, 0, 0), []string{"nop", "signal", "wait", "nop"}; !slices.Equal(got, want) {
		t.Errorf("rank 0 ops %v, want %v", got, want)
	}
	if ids := pl.GPUs[0].ThreadBlocks[0].Ops[1].ChannelIDs; len(ids) != 2 {
		t.Errorf("fused signal on channels %v", ids)
	}
	if got, want := opNames(pl, 1, 0), []string{"wait", "signal"}; !slices.Equal(got, want) {
		t.Errorf("rank 1 ops %v, want %v", got, want)
	}
}

func TestDataSyncExpansion(t *testing.T) {
	tests := []struct {
		name  string
		build func(p *Program, a, b *MemoryChannel)
		want  []string
	}{
		{"none", func(p *Program, a, b *MemoryChannel) { a.Signal(TB(0), SyncNone) }, []string{"signal"}},
		{"before", func(p *Program, a, b *MemoryChannel) { a.Signal(TB(0), SyncBefore) }, []string{"nop", "signal"}},
		{"after", func(p *Program, a, b *MemoryChannel) { a.Signal(TB(0), SyncAfter) }, []string{"signal", "nop"}},
		{"both", func(p *Program, a, b *MemoryChannel) { a.Signal(TB(0), SyncBoth) }, []string{"nop", "signal", "nop"}},
		{"adjacent nops merge", func(p *Program, a, b *MemoryChannel) {
			a.Signal(TB(0), SyncBoth)
			b.Signal(TB(0), SyncBoth) // other type of op? same: signal on other channel is fused; use wait
		}, []string{"nop", "signal", "nop"}},
		{"next to a barrier", func(p *Program, a, b *MemoryChannel) {
			a.Signal(TB(0), SyncAfter)
			p.Rank(0).Barrier(0)
			a.Signal(TB(0), SyncBefore)
		}, []string{"signal", "barrier", "signal"}},
		{"between different ops", func(p *Program, a, b *MemoryChannel) {
			a.Signal(TB(0), SyncBoth)
			a.Wait(TB(0), SyncBoth)
		}, []string{"nop", "signal", "nop", "wait", "nop"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base(3, plan.Simple)
			a, b := p.MemoryChannel(1, 0), p.MemoryChannel(2, 0)
			tc.build(p, a, b)
			// Balance the signals and waits so the program lowers.
			ra, rb := p.MemoryChannel(0, 1), p.MemoryChannel(0, 2)
			for _, o := range p.ranks[0].ops[0] {
				for _, c := range o.chans {
					back := ra
					if c == b.c {
						back = rb
					}
					switch o.name {
					case plan.OpSignal:
						back.Wait(TB(0), SyncNone)
					case plan.OpWait:
						back.Signal(TB(0), SyncNone)
					}
				}
			}
			pl := lower(t, p)
			if got := opNames(pl, 0, 0); !slices.Equal(got, tc.want) {
				t.Errorf("ops %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAutoSync(t *testing.T) {
	c := func(p *Program, b plan.BufferType, i, n int) Chunk {
		return Chunk{Rank: 0, Buffer: b, Index: i, Size: n}
	}
	tests := []struct {
		name  string
		build func(p *Program)
		want  []string
	}{
		{"read after write", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 0, 1), c(p, Input, 0, 1), TB(0))
			p.Rank(0).Copy(c(p, Output, 1, 1), c(p, Output, 0, 1), TB(0))
		}, []string{"copy", "nop", "copy"}},
		{"write after read", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 1, 1), c(p, Output, 0, 1), TB(0))
			p.Rank(0).Copy(c(p, Output, 0, 1), c(p, Input, 0, 1), TB(0))
		}, []string{"copy", "nop", "copy"}},
		{"partial overlap", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 0, 2), c(p, Input, 0, 2), TB(0))
			p.Rank(0).Copy(c(p, Output, 3, 1), c(p, Output, 1, 1), TB(0))
		}, []string{"copy", "nop", "copy"}},
		{"read after read", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 0, 1), c(p, Input, 0, 1), TB(0))
			p.Rank(0).Copy(c(p, Output, 1, 1), c(p, Input, 0, 1), TB(0))
		}, []string{"copy", "copy"}},
		{"disjoint", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 0, 1), c(p, Input, 0, 1), TB(0))
			p.Rank(0).Copy(c(p, Output, 1, 1), c(p, Input, 1, 1), TB(0))
		}, []string{"copy", "copy"}},
		{"other block", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 0, 1), c(p, Input, 0, 1), TB(0))
			p.Rank(0).Copy(c(p, Output, 1, 1), c(p, Output, 0, 1), TB(1))
		}, []string{"copy"}},
		{"remote write then local read of the peer's chunk is no conflict", func(p *Program) {
			p.MemoryChannel(1, 0).Put(p.Rank(1).Output().Chunk(0, 1), c(p, Input, 0, 1), TB(0))
			p.Rank(0).Copy(c(p, Input, 1, 1), c(p, Output, 0, 1), TB(0))
		}, []string{"put", "copy"}},
		{"a barrier resets", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 0, 1), c(p, Input, 0, 1), TB(0))
			p.Rank(0).Barrier(0)
			p.Rank(0).Copy(c(p, Output, 1, 1), c(p, Output, 0, 1), TB(0))
		}, []string{"copy", "barrier", "copy"}},
		{"only since the last sync", func(p *Program) {
			p.Rank(0).Copy(c(p, Output, 0, 1), c(p, Input, 0, 1), TB(0))
			p.Rank(0).Copy(c(p, Output, 1, 1), c(p, Output, 0, 1), TB(0)) // nop before
			p.Rank(0).Copy(c(p, Input, 1, 1), c(p, Output, 0, 1), TB(0))  // reads out[0] again: fine
		}, []string{"copy", "nop", "copy", "copy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base(4, plan.Simple)
			tc.build(p)
			pl := lower(t, p)
			if got := opNames(pl, 0, 0); !slices.Equal(got, tc.want) {
				t.Errorf("ops %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInstances(t *testing.T) {
	const I = 3
	p := NewProgram(Config{Name: "inst", Collective: plan.AllReduce, Ranks: 4, Instances: I})
	s := []Buffer{p.Rank(0).NewScratch(2), p.Rank(1).NewScratch(2)}
	a, b := p.MemoryChannel(1, 0), p.MemoryChannel(0, 1)
	r0 := p.Rank(0)
	a.Put(s[1].Chunk(1, 1), r0.Input().Chunk(1, 1), TB(0))
	a.Signal(TB(0), SyncBefore)
	b.Wait(TB(0), SyncAfter)
	r0.Copy(r0.Output().Chunk(2, 2), r0.Input().Chunk(2, 2), p.TBGroup(1, 2))
	r0.Barrier(0, 1, 2)
	sem := r0.Semaphore(2)
	sem.Acquire(TB(1), SyncNone)
	pl := lower(t, p)

	g := pl.GPUs[0]
	if g.InputChunks != 4*I || g.OutputChunks != 4*I || g.ScratchChunks != 2*I {
		t.Errorf("chunks in %d out %d scr %d", g.InputChunks, g.OutputChunks, g.ScratchChunks)
	}
	if len(g.ThreadBlocks) != 3*I {
		t.Fatalf("%d thread blocks, want %d", len(g.ThreadBlocks), 3*I)
	}
	if peers := g.ChannelPeers(plan.ChannelMemory); len(peers) != I {
		t.Errorf("memory channels %v, want %d", peers, I)
	}
	if len(g.Semaphores) != I {
		t.Errorf("%d semaphores", len(g.Semaphores))
	}
	for i := range I {
		tb := g.ThreadBlocks[0*I+i] // tb 0, instance i
		put := tb.Ops[0]
		if put.Name != plan.OpPut || put.Src[0].Index != 1*I+i || put.Dst[0].Index != 1*I+i {
			t.Errorf("instance %d put %+v", i, put)
		}
		if id, _ := pl.TBChannel(0, i, plan.ChannelMemory, 0); id != i {
			t.Errorf("instance %d uses memory channel %d", i, id)
		}
		// The size-2 copy [2:4) of instance i is [2*I+i*2, +2).
		for k, tbid := range []int{1*I + i, 2*I + i} {
			cp := g.ThreadBlocks[tbid].Ops[0]
			if cp.Name == plan.OpSemAcquire {
				if cp.SemaphoreIDs[0] != i {
					t.Errorf("instance %d semaphore %v", i, cp.SemaphoreIDs)
				}
				cp = g.ThreadBlocks[tbid].Ops[1]
			}
			if cp.Name != plan.OpCopy || cp.Src[0].Index != 2*I+2*i || cp.Src[0].Size != 2 || cp.TBG == nil || cp.TBG.ID != k {
				t.Errorf("instance %d tb %d copy %+v", i, tbid, cp)
			}
		}
		last := g.ThreadBlocks[i].Ops[len(g.ThreadBlocks[i].Ops)-1]
		if last.Name != plan.OpBarrier || last.BarrierID != i || last.NumThreadBlocks != 3 {
			t.Errorf("instance %d barrier %+v", i, last)
		}
	}
}

func TestInstancesNeedEqualOrDisjointRanges(t *testing.T) {
	p := NewProgram(Config{Name: "inst", Collective: plan.AllReduce, Ranks: 2, Instances: 2})
	r := p.Rank(0)
	r.Copy(r.Output().Chunk(0, 2), r.Input().Chunk(0, 2), TB(0))
	r.Copy(r.Output().Chunk(1, 1), r.Input().Chunk(1, 1), TB(0))
	_, err := p.Lower()
	want := "rank 0: with 2 instances, in chunk ranges [0:2) and [1:2) overlap without being equal"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Lower: %v, want %q", err, want)
	}
	// With one instance the same program is fine.
	p.cfg.Instances = 1
	lower(t, p)
}

func TestPipeline(t *testing.T) {
	p := base(2, plan.Simple)
	r := p.Rank(0)
	r.Copy(r.Output().Chunk(0, 1), r.Input().Chunk(0, 1), TB(0))
	p.Pipeline(1<<20, 4, func() {
		r.Copy(r.Output().Chunk(1, 1), r.Output().Chunk(0, 1), TB(0))
		r.Copy(r.Input().Chunk(1, 1), r.Output().Chunk(1, 1), TB(0))
	})
	pl := lower(t, p)
	if got, want := opNames(pl, 0, 0), []string{"copy", "nop", "pipeline(copy,nop,copy)"}; !slices.Equal(got, want) {
		t.Errorf("ops %v, want %v", got, want)
	}
	it := pl.GPUs[0].ThreadBlocks[0].Ops[2].Iter
	if it == nil || it.UnitSize != 1<<20 || it.NumChunks != 4 {
		t.Errorf("iter context %+v", it)
	}
}

// The golden programs between them lower to most op kinds: a smoke test
// that emission handles them.
func TestEveryOpKindLowers(t *testing.T) {
	seen := map[plan.OpName]bool{}
	for _, prog := range []func() *Program{allPairs2, features2} {
		pl := lower(t, prog())
		for _, g := range pl.GPUs {
			for _, tb := range g.ThreadBlocks {
				for _, o := range tb.Ops {
					seen[o.Name] = true
					for _, b := range o.Ops {
						seen[b.Name] = true
					}
				}
			}
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n.String())
	}
	slices.Sort(names)
	if len(names) < 15 {
		t.Errorf("only %d op kinds: %v", len(names), names)
	}
}
