package plan

import (
	"fmt"
	"slices"
	"strings"
)

// ChannelSlot names one directed channel instance: the K-th channel of
// type Type from Src to Dst. The k-th channel from r to p pairs with the
// k-th channel from p to r, so a signal on one is the wait of the other.
type ChannelSlot struct {
	Type     ChannelType
	Src, Dst int
	K        int
}

// ChannelSlots numbers every directed memory and port channel instance of
// the plan the same way on every rank (executors use the number as the
// index of the receiver's signal counter). Switch channels that some
// signal or wait uses add one slot per ordered pair of their group ranks,
// the rank itself included, with K the switch instance (SwitchInstances):
// a switch signal of rank r counts on (r -> q) for every group rank q, and
// a switch wait of rank q waits on (r -> q) for every r (chorus's reading
// of the switch barrier, docs/plans.md). They sort after the memory
// and port slots, whose numbers they leave alone.
func (p *Plan) ChannelSlots() map[ChannelSlot]int {
	keys := map[ChannelSlot]bool{}
	inst, groups := p.SwitchInstances(), [][]SwitchGroup{}
	for r := range p.GPUs {
		groups = append(groups, p.GPUs[r].SwitchGroups())
	}
	for r := range p.GPUs {
		for t := range p.GPUs[r].ThreadBlocks {
			for _, op := range p.GPUs[r].ThreadBlocks[t].Ops {
				if op.ChannelType != ChannelSwitch || !isSignalWait(op.Name) {
					continue
				}
				for _, i := range op.ChannelIDs {
					id, err := p.TBChannel(r, t, ChannelSwitch, i)
					if err != nil || id < 0 || id >= len(inst[r]) {
						continue // Validate reports it
					}
					for _, q := range groups[r][id].Ranks {
						keys[ChannelSlot{Type: ChannelSwitch, Src: r, Dst: q, K: inst[r][id]}] = true
						keys[ChannelSlot{Type: ChannelSwitch, Src: q, Dst: r, K: inst[r][id]}] = true
					}
				}
			}
		}
	}
	for r := range p.GPUs {
		for _, t := range []ChannelType{ChannelMemory, ChannelPort} {
			peers := p.GPUs[r].ChannelPeers(t)
			for c, peer := range peers {
				k := Occurrence(peers, c)
				keys[ChannelSlot{Type: t, Src: r, Dst: peer, K: k}] = true // r signals peer
				keys[ChannelSlot{Type: t, Src: peer, Dst: r, K: k}] = true // r waits for peer
			}
		}
	}
	list := make([]ChannelSlot, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	slices.SortFunc(list, func(a, b ChannelSlot) int {
		switch {
		case a.Type != b.Type:
			return int(a.Type) - int(b.Type)
		case a.Src != b.Src:
			return a.Src - b.Src
		case a.Dst != b.Dst:
			return a.Dst - b.Dst
		}
		return a.K - b.K
	})
	out := make(map[ChannelSlot]int, len(list))
	for i, k := range list {
		out[k] = i
	}
	return out
}

// Occurrence is how many channels before peers[c] go to the same peer:
// the K of that channel's ChannelSlot.
func Occurrence(peers []int, c int) int {
	k := 0
	for _, q := range peers[:c] {
		if q == peers[c] {
			k++
		}
	}
	return k
}

func isSignalWait(n OpName) bool {
	return n == OpSignal || n == OpWait || n == OpRelaxedSignal || n == OpRelaxedWait
}

// SwitchInstances numbers the plan's switch channels across ranks:
// SwitchInstances()[r][id] is the instance of rank r's GPU switch channel
// id. The k-th switch channel of a rank with a given buffer and rank set is
// the same channel as the k-th one with that buffer and rank set on every
// other rank of the set (as the k-th memory channel from a to b pairs with
// the k-th from b to a); instances are numbered in the order of (buffer,
// ranks, k), the same on every rank.
func (p *Plan) SwitchInstances() [][]int {
	type key struct {
		buf   BufferType
		ranks string
		k     int
	}
	per := make([][]key, len(p.GPUs))
	all := map[key]bool{}
	for r := range p.GPUs {
		seen := map[string]int{}
		for _, g := range p.GPUs[r].SwitchGroups() {
			rs := slices.Clone(g.Ranks)
			slices.Sort(rs)
			var b strings.Builder
			for i, x := range rs {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprint(&b, x)
			}
			name := g.Buffer.String() + ":" + b.String()
			k := key{g.Buffer, name, seen[name]}
			seen[name]++
			per[r] = append(per[r], k)
			all[k] = true
		}
	}
	list := make([]key, 0, len(all))
	for k := range all {
		list = append(list, k)
	}
	slices.SortFunc(list, func(a, b key) int {
		switch {
		case a.ranks != b.ranks:
			return strings.Compare(a.ranks, b.ranks)
		}
		return a.k - b.k
	})
	num := make(map[key]int, len(list))
	for i, k := range list {
		num[k] = i
	}
	out := make([][]int, len(p.GPUs))
	for r := range per {
		for _, k := range per[r] {
			out[r] = append(out[r], num[k])
		}
	}
	return out
}
