package dsl

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

// pktAllgather is MSCCL++'s allgather_nvls_zero_copy_pkt in the DSL at 2
// ranks: cpkt into the own scratch slot, gstorepkt to every rank, upkt.
func pktAllgather(t *testing.T, noAutoSync bool) *plan.Plan {
	t.Helper()
	p := NewProgram(Config{Name: "pkt", Collective: plan.AllGather, Ranks: 2, Protocol: plan.LL, InPlace: true, NoAutoSync: noAutoSync})
	scr := []Buffer{p.Rank(0).NewScratch(2), p.Rank(1).NewScratch(2)}
	sw := p.SwitchChannel([]int{0, 1}, Scratch)
	for r := range 2 {
		out := p.Rank(r).Output()
		p.Rank(r).CopyPackets(scr[r].Chunk(r, 1), out.Chunk(r, 1), TB(0))
		sw.At(r).BroadcastPackets(scr[r].Chunk(r, 1), r, 1, TB(0))
		for j := range 2 {
			p.Rank(r).UnpackPackets(out.Chunk(j, 1), scr[r].Chunk(j, 1), TB(j))
		}
	}
	pl, err := p.Lower()
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func TestBroadcastPackets(t *testing.T) {
	pl := pktAllgather(t, false)
	ops := pl.GPUs[1].ThreadBlocks[0].Ops
	names := []plan.OpName{}
	for _, o := range ops {
		names = append(names, o.Name)
	}
	// Auto-sync puts a nop between the cpkt and the gstorepkt reading it.
	want := []plan.OpName{plan.OpCopyPackets, plan.OpNop, plan.OpGroupStorePackets, plan.OpUnpackPackets}
	if !slicesEqual(names, want) {
		t.Fatalf("rank 1 tb 0: %v, want %v", names, want)
	}
	st := ops[2]
	if st.ChannelType != plan.ChannelSwitch || len(st.ChannelIDs) != 1 || st.GroupBuffer != plan.Scratch || st.GroupOffset != 1 ||
		st.SrcChunk == nil || *st.SrcChunk != (plan.RankChunk{Rank: 1, Type: plan.Scratch, Index: 1, Size: 1}) {
		t.Errorf("gstorepkt %+v", st)
	}
	// NoAutoSync (MSCCL++'s auto_sync=False): no nops.
	pl = pktAllgather(t, true)
	for _, o := range pl.GPUs[1].ThreadBlocks[0].Ops {
		if o.Name == plan.OpNop {
			t.Errorf("NoAutoSync emitted a nop: %v", pl.GPUs[1].ThreadBlocks[0].Ops)
		}
	}
}

func slicesEqual(a, b []plan.OpName) bool {
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

func TestSwitchBarrier(t *testing.T) {
	p := NewProgram(Config{Name: "b", Collective: plan.AllGather, Ranks: 3, InPlace: true})
	sw := p.SwitchChannel([]int{0, 1, 2}, Output)
	for r := range 3 {
		sw.At(r).Barrier(0)
		sw.At(r).Broadcast(p.Rank(r).Output().Chunk(r, 1), r, 1, TB(0))
		sw.At(r).Barrier(0, 1)
	}
	pl, err := p.Lower()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range pl.GPUs[2].ThreadBlocks[0].Ops {
		s := o.Name.String()
		if o.ChannelType == plan.ChannelSwitch && (o.Name == plan.OpSignal || o.Name == plan.OpWait) {
			s += fmt.Sprintf("(sw%v)", o.ChannelIDs)
		}
		got = append(got, s)
	}
	want := "nop signal(sw[0]) wait(sw[0]) nop gstore barrier signal(sw[0]) wait(sw[0]) barrier"
	if strings.Join(got, " ") != want {
		t.Errorf("rank 2 tb 0: %s\nwant %s", strings.Join(got, " "), want)
	}
	if ops := pl.GPUs[2].ThreadBlocks[1].Ops; len(ops) != 2 || ops[0].Name != plan.OpBarrier || ops[1].Name != plan.OpBarrier {
		t.Errorf("rank 2 tb 1: %v", ops)
	}
}

func TestSwitchSyncChecks(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		build func(p *Program, sw *SwitchChannel)
		want  string
	}{
		{"packets in simple", Config{Protocol: plan.Simple}, func(p *Program, sw *SwitchChannel) {
			sw.At(0).BroadcastPackets(p.Rank(0).NewScratch(2).Chunk(0, 1), 0, 1, TB(0))
		}, "rank 0 tb 0: switch broadcast_packets: packet operation needs the LL protocol"},
		{"packets from output", Config{Protocol: plan.LL}, func(p *Program, sw *SwitchChannel) {
			sw.At(0).BroadcastPackets(p.Rank(0).Output().Chunk(0, 1), 0, 1, TB(0))
		}, "source chunk rank 0 out[0:1) must be in a scratch buffer"},
		{"uneven arrivals", Config{Protocol: plan.Simple}, func(p *Program, sw *SwitchChannel) {
			sw.At(0).Signal(TB(0), SyncNone)
			sw.At(0).Wait(TB(0), SyncNone)
			sw.At(1).Wait(TB(0), SyncNone)
		}, "rank 1: signals the switch channel of ranks [0 1] 0 times, but rank 0 signals it 1 times"},
		{"wait without signal", Config{Protocol: plan.Simple}, func(p *Program, sw *SwitchChannel) {
			sw.At(0).Signal(TB(0), SyncNone)
			sw.At(1).Signal(TB(0), SyncNone)
			sw.At(0).Wait(TB(0), SyncNone)
		}, "rank 1: waits 0 times on the switch channel of ranks [0 1] but signals it 1 times"},
		{"barrier on a group", Config{Protocol: plan.Simple}, func(p *Program, sw *SwitchChannel) {
			sw.At(0).Signal(p.TBGroup(0, 1), SyncNone)
		}, "switch signal: runs on a single thread block"},
		{"barrier without blocks", Config{Protocol: plan.Simple}, func(p *Program, sw *SwitchChannel) {
			sw.At(1).Barrier()
		}, "rank 1: switch barrier: needs at least one thread block"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Name, cfg.Collective, cfg.Ranks = "s", plan.AllGather, 2
			p := NewProgram(cfg)
			var sw *SwitchChannel
			if strings.Contains(c.name, "packets") {
				sw = p.SwitchChannel([]int{0, 1}, Scratch)
				p.Rank(1).NewScratch(2)
			} else {
				sw = p.SwitchChannel([]int{0, 1}, Output)
			}
			c.build(p, sw)
			_, err := p.Lower()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant %q", err, c.want)
			}
		})
	}
}
