package plan

import (
	"errors"
	"reflect"
	"testing"
)

func acc(mode AccessMode, rank int, buf BufferType, index, size int, packet bool, via ChannelType) Access {
	return Access{Mode: mode, Rank: rank, Buffer: buf, Index: index, Size: size, Packet: packet, Via: via, Part: 0, Parts: 1}
}

func TestAccess(t *testing.T) {
	p := load(t, "every_op_kind.json")
	R, W := AccessRead, AccessWrite
	none, mem, port, sw := ChannelNone, ChannelMemory, ChannelPort, ChannelSwitch
	cases := []struct {
		gpu, tb, op int
		want        []Access
	}{
		{0, 0, 0, nil}, // rlxsignal
		{0, 0, 2, nil}, // nop
		// put from rank 0 writes rank 1's input through the memory channel.
		{0, 0, 3, []Access{acc(R, 0, Input, 0, 1, false, none), acc(W, 1, Input, 1, 1, false, mem)}},
		{1, 0, 3, []Access{acc(R, 1, Input, 0, 1, false, none), acc(W, 0, Input, 1, 1, false, mem)}},
		{0, 0, 4, []Access{acc(R, 0, Input, 0, 1, false, none), acc(W, 1, Scratch, 0, 1, true, mem)}},                                      // ppkt
		{0, 0, 5, []Access{acc(R, 0, Scratch, 1, 1, true, none), acc(W, 1, Scratch, 1, 1, true, mem)}},                                     // rppkt
		{0, 0, 6, []Access{acc(R, 1, Input, 0, 1, false, mem), acc(W, 0, Scratch, 2, 1, false, none)}},                                     // get
		{0, 0, 9, []Access{acc(R, 0, Input, 0, 1, false, none), acc(R, 1, Input, 0, 1, false, mem), acc(W, 0, Output, 0, 1, false, none)}}, // rre
		{0, 0, 10, []Access{acc(R, 0, Input, 0, 1, false, none), acc(R, 1, Input, 0, 1, false, mem),
			acc(W, 0, Output, 0, 1, false, none), acc(W, 1, Input, 1, 1, false, mem)}}, // rres
		{0, 0, 12, []Access{acc(R, 0, Input, 0, 1, false, none), acc(R, 0, Scratch, 0, 1, true, none),
			acc(W, 0, Output, 0, 1, false, none), acc(W, 1, Scratch, 2, 1, true, mem)}}, // respkt
		{0, 0, 13, []Access{acc(R, 0, Input, 1, 1, false, none), acc(R, 0, Scratch, 0, 1, true, none),
			acc(W, 0, Output, 1, 1, false, none), acc(W, 0, Scratch, 3, 1, true, none), acc(W, 1, Scratch, 2, 1, true, mem)}}, // recspkt
		{0, 0, 14, []Access{acc(R, 0, Input, 0, 1, false, none), acc(R, 0, Scratch, 0, 1, true, none),
			acc(R, 0, Scratch, 1, 1, true, none), acc(W, 0, Output, 0, 1, false, none)}}, // repkt
		{0, 0, 16, []Access{acc(R, 0, Input, 1, 1, false, none), acc(W, 0, Scratch, 3, 1, true, none)}},  // cpkt
		{0, 0, 17, []Access{acc(R, 0, Scratch, 3, 1, true, none), acc(W, 0, Output, 1, 1, false, none)}}, // upkt
		{0, 0, 20, nil}, // barrier
		// pipeline: its body's accesses.
		{1, 0, 22, []Access{acc(R, 1, Input, 0, 1, false, none), acc(W, 1, Scratch, 1, 1, false, none),
			acc(R, 1, Scratch, 1, 1, false, none), acc(W, 0, Scratch, 3, 1, false, mem)}},
		// port put resolves through the tb's port remote-buffer refs.
		{0, 1, 3, []Access{acc(R, 0, Input, 1, 1, false, none), acc(W, 1, Output, 1, 1, false, port)}}, // pws
		{0, 1, 5, nil}, // flush
		{1, 1, 8, []Access{acc(R, 0, Input, 1, 1, false, sw), acc(R, 1, Input, 1, 1, false, sw), acc(W, 1, Output, 1, 1, false, none)}},                                  // glre
		{1, 1, 9, []Access{acc(R, 1, Output, 1, 1, false, none), acc(W, 0, Input, 1, 1, false, sw), acc(W, 1, Input, 1, 1, false, sw)}},                                  // gstore
		{0, 1, 10, []Access{acc(R, 0, Input, 0, 1, false, sw), acc(R, 1, Input, 0, 1, false, sw), acc(W, 0, Input, 0, 1, false, sw), acc(W, 1, Input, 0, 1, false, sw)}}, // glres
	}
	for _, c := range cases {
		got, err := p.Access(c.gpu, c.tb, c.op)
		if err != nil {
			t.Errorf("gpu %d tb %d op %d: %v", c.gpu, c.tb, c.op, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("gpu %d tb %d op %d (%v):\n got %+v\nwant %+v", c.gpu, c.tb, c.op, p.GPUs[c.gpu].ThreadBlocks[c.tb].Ops[c.op].Name, got, c.want)
		}
	}
	// thread-block group parts
	got, err := p.Access(0, 2, 0)
	if err != nil || len(got) != 2 || got[0].Part != 1 || got[0].Parts != 2 || got[1].Part != 1 {
		t.Errorf("tbg access %+v %v", got, err)
	}
	// bad indices are errors, not panics
	for _, a := range [][3]int{{2, 0, 0}, {0, 3, 0}, {0, 0, 99}, {-1, 0, 0}} {
		if _, err := p.Access(a[0], a[1], a[2]); !errors.Is(err, ErrResolve) {
			t.Errorf("Access%v: %v", a, err)
		}
	}
	peers, err := p.Peers(1, 1, &p.GPUs[1].ThreadBlocks[1].Ops[0])
	if err != nil || !reflect.DeepEqual(peers, []int{0}) {
		t.Errorf("Peers = %v, %v", peers, err)
	}
}

func TestLayout(t *testing.T) {
	p := load(t, "every_op_kind.json") // LL, double scratch, alignment 16, 1024..1048576, in 2 out 2 scr 4
	l, err := p.Layout(0, 4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if l.ChunkBytes != 2048 || l.ScratchBytes != 2048*4*2*2 {
		t.Errorf("layout %+v", l)
	}
	if off, n := l.Range(1, 1); off != 2048 || n != 2048 {
		t.Errorf("Range(1,1) = %d,%d", off, n)
	}
	// 48 bytes = 3 units of 16 over 2 parts: 32 + 16.
	if off, n := l.Part(100, 48, 0, 2); off != 100 || n != 32 {
		t.Errorf("part 0 = %d,%d", off, n)
	}
	if off, n := l.Part(100, 48, 1, 2); off != 132 || n != 16 {
		t.Errorf("part 1 = %d,%d", off, n)
	}
	if off, n := l.AccessBytes(Access{Index: 1, Size: 1, Part: 1, Parts: 2}); off != 3072 || n != 1024 {
		t.Errorf("AccessBytes = %d,%d", off, n)
	}
	for _, c := range []struct{ in, out int64 }{
		{4100, 4100}, // not aligned
		{4096, 2048}, // chunk sizes differ
		{48, 48},     // 3 units into 2 chunks
		{512, 512},   // below min_message_size
		{1 << 22, 1 << 22},
	} {
		if _, err := p.Layout(0, c.in, c.out); !errors.Is(err, ErrMessageSize) {
			t.Errorf("Layout(%d, %d) = %v", c.in, c.out, err)
		}
	}
}

// ChannelPeer numbers a GPU's channels of one type across all entries of
// that type, in order, and agrees with ChannelPeers; ids past the end, a
// missing GPU and switch channels are errors.
func TestChannelPeer(t *testing.T) {
	p := &Plan{GPUs: []GPU{{Channels: []Channel{
		{Type: ChannelMemory, ConnectedTo: []int{1, 2}},
		{Type: ChannelPort, ConnectedTo: []int{3}},
		{Type: ChannelMemory, ConnectedTo: []int{3, 1}},
	}}}}
	for _, typ := range []ChannelType{ChannelMemory, ChannelPort} {
		want := p.GPUs[0].ChannelPeers(typ)
		for id, peer := range want {
			got, err := p.ChannelPeer(0, typ, id)
			if err != nil || got != peer {
				t.Errorf("%s channel %d: %d, %v; want %d", typ, id, got, err, peer)
			}
		}
		for _, id := range []int{-1, len(want)} {
			if _, err := p.ChannelPeer(0, typ, id); err == nil {
				t.Errorf("%s channel %d: no error", typ, id)
			}
		}
	}
	if _, err := p.ChannelPeer(1, ChannelMemory, 0); err == nil {
		t.Error("gpu 1: no error")
	}
	if _, err := p.ChannelPeer(0, ChannelSwitch, 0); err == nil {
		t.Error("switch channel: no error")
	}
}

// TestScratchUse: every_op_kind has packet ops and plain data in scratch
// (its copies into scratch); the all-pairs allreduce gathers plain data
// in scratch and has no packets.
func TestScratchUse(t *testing.T) {
	for _, c := range []struct {
		file           string
		packets, plain bool
	}{
		{"every_op_kind.json", true, true},
		{"allreduce_allpairs_2.json", false, true},
	} {
		packets, plain, err := load(t, c.file).ScratchUse()
		if err != nil || packets != c.packets || plain != c.plain {
			t.Errorf("%s: ScratchUse = %v, %v, %v; want %v, %v", c.file, packets, plain, err, c.packets, c.plain)
		}
	}
}
