package plan

import "slices"

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
// index of the receiver's signal counter).
func (p *Plan) ChannelSlots() map[ChannelSlot]int {
	keys := map[ChannelSlot]bool{}
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
