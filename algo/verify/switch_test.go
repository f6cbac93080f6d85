package verify

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

// switchAllgather builds the two NVLS allgathers of MSCCL++'s tests in
// chorus's reading of their ops. pkt: LL, every rank packs its chunk into
// scratch slot r (cpkt) and multicasts the packets to slot r of every rank
// (gstorepkt); block j unpacks slot j (upkt), no signals. Otherwise:
// Simple, a switch barrier (sync: signal/wait or rlxsignal/rlxwait), the
// multimem store of the own output chunk to every rank (gstore), and a
// second barrier.
func switchAllgather(n int, pkt bool, sig, wait plan.OpName) *plan.Plan {
	p := &plan.Plan{Name: "switch_allgather", Collective: plan.AllGather, Protocol: plan.Simple, InPlace: true,
		NumThreadsPerBlock: 256, BufferAlignment: 16, MaxMessageSize: math.MaxUint64}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	buf := plan.Output
	if pkt {
		p.Protocol, buf = plan.LL, plan.Scratch
	}
	swc := []plan.TBChannel{{Type: plan.ChannelSwitch, ChannelIDs: []int{0}}}
	for r := range n {
		g := plan.GPU{ID: r, InputChunks: 1, OutputChunks: n,
			Channels: []plan.Channel{{Type: plan.ChannelSwitch, BufferType: buf, RankGroups: []plan.RankGroup{{Size: n, Ranks: all}}}}}
		if pkt {
			g.ScratchChunks = n
			g.ThreadBlocks = append(g.ThreadBlocks, plan.ThreadBlock{ID: 0, Channels: swc, Ops: []plan.Op{
				{Name: plan.OpCopyPackets, Src: []plan.BufRef{plan.Local(plan.Output, r, 1)}, Dst: []plan.BufRef{plan.Local(plan.Scratch, r, 1)}},
				{Name: plan.OpGroupStorePackets, ChannelType: plan.ChannelSwitch,
					Src: []plan.BufRef{{Kind: plan.RefLocal, Type: plan.Scratch, Index: r, Size: 1, HasRank: true, Rank: r}},
					Dst: []plan.BufRef{plan.Switch(0, r, 1)}},
			}})
			for j := range n {
				for len(g.ThreadBlocks) <= j {
					g.ThreadBlocks = append(g.ThreadBlocks, plan.ThreadBlock{ID: len(g.ThreadBlocks)})
				}
				tb := &g.ThreadBlocks[j]
				tb.Ops = append(tb.Ops, plan.Op{Name: plan.OpUnpackPackets, Src: []plan.BufRef{plan.Local(plan.Scratch, j, 1)}, Dst: []plan.BufRef{plan.Local(plan.Output, j, 1)}})
			}
		} else {
			s := plan.Op{Name: sig, ChannelType: plan.ChannelSwitch, ChannelIDs: []int{0}}
			w := plan.Op{Name: wait, ChannelType: plan.ChannelSwitch, ChannelIDs: []int{0}}
			nop := plan.Op{Name: plan.OpNop}
			g.ThreadBlocks = append(g.ThreadBlocks, plan.ThreadBlock{ID: 0, Channels: swc, Ops: []plan.Op{
				s, w, nop,
				{Name: plan.OpGroupStore, ChannelType: plan.ChannelSwitch,
					Src: []plan.BufRef{{Kind: plan.RefLocal, Type: plan.Output, Index: r, Size: 1, HasRank: true, Rank: r}},
					Dst: []plan.BufRef{plan.Switch(0, r, 1)}},
				nop, s, w,
			}})
		}
		p.GPUs = append(p.GPUs, g)
	}
	return p
}

func TestSwitchPlansVerified(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, pkt := range []bool{true, false} {
			t.Run(fmt.Sprintf("n%d/pkt=%v", n, pkt), func(t *testing.T) {
				p := switchAllgather(n, pkt, plan.OpSignal, plan.OpWait)
				rep, err := Verify(p)
				if err != nil {
					t.Fatal(err)
				}
				if rep.OutputChunks != n*n || rep.SyncEdges == 0 {
					t.Errorf("report %v", rep)
				}
			})
		}
	}
}

// Every op of the packet allgather but the unpack of the own slot (in
// place, the output already holds it) is needed: dropping one is rejected.
// Duplicating the cpkt races with itself; a duplicated gstorepkt rewrites
// the same packets (chorus treats that as idempotent, as it treats the
// multicast's write of its own source range).
func TestSwitchPacketMutations(t *testing.T) {
	base := switchAllgather(3, true, 0, 0)
	for _, s := range slots(base) {
		op := (*listOf(base, s))[idx(s)]
		name := fmt.Sprintf("%+v (%v)", s, op.Name)
		if op.Name == plan.OpUnpackPackets && op.Src[0].Index == s.r {
			continue
		}
		p := mutate(t, base, func(p *plan.Plan) {
			l := listOf(p, s)
			*l = slices.Delete(*l, idx(s), idx(s)+1)
		})
		if _, err := Verify(p); err == nil {
			t.Errorf("drop %s: accepted", name)
		}
	}
	dup := func(r, tb, op int) error {
		p := mutate(t, base, func(p *plan.Plan) {
			l := &p.GPUs[r].ThreadBlocks[tb].Ops
			*l = slices.Insert(*l, op+1, (*l)[op])
		})
		_, err := Verify(p)
		return err
	}
	if err := dup(1, 0, 0); !errors.Is(err, ErrRace) {
		t.Errorf("duplicated cpkt: %v, want a race", err)
	}
	if err := dup(1, 0, 1); err != nil {
		t.Errorf("duplicated gstorepkt: %v, want verified (an idempotent rewrite)", err)
	}
	// The unpack of the own slot reads packets that cpkt wrote and the
	// multicast rewrote; moving the multicast after the unpack (same
	// block, same segment) changes nothing.
	p := mutate(t, base, func(p *plan.Plan) {
		l := p.GPUs[0].ThreadBlocks[0].Ops
		l[1], l[2] = l[2], l[1]
	})
	if _, err := Verify(p); err != nil {
		t.Errorf("gstorepkt after the own upkt: %v", err)
	}
}

func TestSwitchBarrierVerdicts(t *testing.T) {
	strong := func() *plan.Plan { return switchAllgather(4, false, plan.OpSignal, plan.OpWait) }
	cases := []struct {
		name string
		p    *plan.Plan
		kind error
		want string
	}{
		{"relaxed barrier", switchAllgather(4, false, plan.OpRelaxedSignal, plan.OpRelaxedWait), ErrRace,
			"a relaxed signal does not order the store before it"},
		{"no nop before the closing signal", mutate(t, strong(), func(p *plan.Plan) {
			for r := range p.GPUs {
				l := &p.GPUs[r].ThreadBlocks[0].Ops
				*l = slices.Delete(*l, 4, 5)
			}
		}), ErrRace, "kernel ends"},
		{"a rank misses the barrier", mutate(t, strong(), func(p *plan.Plan) {
			l := &p.GPUs[2].ThreadBlocks[0].Ops
			*l = slices.Delete(*l, 0, 1)
		}), ErrDeadlock, "waits for signal #1 from rank 2 on switch channel"},
		{"extra arrival", mutate(t, strong(), func(p *plan.Plan) {
			l := &p.GPUs[1].ThreadBlocks[0].Ops
			*l = append(*l, (*l)[0])
		}), ErrUnmatched, "on switch channel 0 is never waited for"},
		{"two blocks arrive", mutate(t, strong(), func(p *plan.Plan) {
			g := &p.GPUs[0]
			g.ThreadBlocks = append(g.ThreadBlocks, plan.ThreadBlock{ID: 1, Channels: g.ThreadBlocks[0].Channels,
				Ops: []plan.Op{{Name: plan.OpSignal, ChannelType: plan.ChannelSwitch, ChannelIDs: []int{0}}}})
		}), ErrUnsupported, "signalled by 2 and waited on by 1 thread blocks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Verify(c.p)
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant %v containing %q", err, c.kind, c.want)
			}
		})
	}
}
