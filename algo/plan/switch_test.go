package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// switch_ops.json: a 2-rank in-place LL allgather with chorus's reading of
// the packet switch store (gstorepkt: rank 0 in buffer form, rank 1 in
// chunk form) and of signal/wait on switch channels (a barrier on channel
// 1, then a relaxed one).

func TestSwitchOpsAccess(t *testing.T) {
	p := load(t, "switch_ops.json")
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	R, W := AccessRead, AccessWrite
	none, sw := ChannelNone, ChannelSwitch
	cases := []struct {
		gpu, tb, op int
		want        []Access
	}{
		{0, 0, 0, nil}, // signal (switch)
		{0, 0, 1, nil}, // wait (switch)
		{0, 0, 6, nil}, // rlxsignal (switch)
		// gstorepkt, buffer form: packets in, packets to every group rank.
		{0, 0, 4, []Access{acc(R, 0, Scratch, 0, 1, true, none), acc(W, 0, Scratch, 0, 1, true, sw), acc(W, 1, Scratch, 0, 1, true, sw)}},
		// gstorepkt, chunk form: the same accesses.
		{1, 0, 4, []Access{acc(R, 1, Scratch, 1, 1, true, none), acc(W, 0, Scratch, 1, 1, true, sw), acc(W, 1, Scratch, 1, 1, true, sw)}},
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
	// A switch signal has no single peer.
	if peers, err := p.Peers(0, 0, &p.GPUs[0].ThreadBlocks[0].Ops[0]); err != nil || peers != nil {
		t.Errorf("Peers of a switch signal = %v, %v", peers, err)
	}
}

func TestSwitchOpsValidate(t *testing.T) {
	op := func(p *Plan, g, tb, i int) *Op { return &p.GPUs[g].ThreadBlocks[tb].Ops[i] }
	cases := []struct {
		name string
		mut  func(p *Plan)
		want string
	}{
		{"gstorepkt in simple", func(p *Plan) { p.Protocol = Simple }, "gpu 0 tb 0 op 4 (gstorepkt): packet op gstorepkt in a Simple plan (needs protocol LL)"},
		{"gstorepkt source not scratch", func(p *Plan) { op(p, 0, 0, 4).Src[0].Type = Output },
			"gpu 0 tb 0 op 4 (gstorepkt) src_buff[0]: packet source must be a scratch buffer (is out)"},
		{"gstorepkt destination not scratch", func(p *Plan) { op(p, 0, 0, 4).Dst[0].ID = 1 },
			"gpu 0 tb 0 op 4 (gstorepkt) dst_buff[0]: packet destination must be a scratch buffer (the switch channel binds out)"},
		{"gstorepkt chunk not scratch", func(p *Plan) { op(p, 1, 0, 4).SrcChunk.Type = Output },
			"gpu 1 tb 0 op 4 (gstorepkt) src_chunk: packet source must be a scratch buffer (is out)"},
		{"gstorepkt group not scratch", func(p *Plan) { op(p, 1, 0, 4).GroupBuffer = Output; op(p, 1, 0, 4).ChannelIDs = []int{1} },
			"gpu 1 tb 0 op 4 (gstorepkt): packet destination buffer_type must be scratch (is out)"},
		{"gstorepkt chunk rank", func(p *Plan) { op(p, 1, 0, 4).SrcChunk.Rank = 0 },
			"gpu 1 tb 0 op 4 (gstorepkt) src_chunk: rank 0 is not the executing rank 1"},
		{"gstorepkt switch source", func(p *Plan) { op(p, 0, 0, 4).Src[0] = Switch(0, 0, 1) },
			"gpu 0 tb 0 op 4 (gstorepkt) src_buff[0]: gstorepkt wants local (type) references here"},
		{"gstorepkt two sources", func(p *Plan) { o := op(p, 0, 0, 4); o.Src = append(o.Src, o.Src[0]) },
			"gstorepkt in buffer form needs one src_buff and one dst_buff entry (has 2, 1)"},
		{"gstorepkt on memory", func(p *Plan) { op(p, 0, 0, 4).ChannelType = ChannelMemory },
			"gpu 0 tb 0 op 4 (gstorepkt): gstorepkt on channel type memory (allowed: [switch])"},
		{"switch signal channel", func(p *Plan) { op(p, 0, 0, 0).ChannelIDs = []int{2} },
			"gpu 0 tb 0 op 0 (signal): channel_ids entry 2: gpu 0 tb 0 has no switch channel index 2 (it has 2)"},
		{"switch signal without channel", func(p *Plan) { op(p, 0, 0, 1).ChannelIDs = nil },
			"gpu 0 tb 0 op 1 (wait): wait without channel_ids"},
		{"flush on switch", func(p *Plan) { op(p, 0, 0, 0).Name = OpFlush },
			"gpu 0 tb 0 op 0 (flush): flush on channel type switch (allowed: [port])"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := load(t, "switch_ops.json")
			c.mut(p)
			err := p.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant %q", err, c.want)
			}
		})
	}
}

// chorus's reading of gstorepkt and of switch signal/wait is strict: a
// plan whose op carries other fields (a different MSCCL++ shape) is
// refused with an error naming the field and the op.
func TestSwitchOpsOtherShapesRefused(t *testing.T) {
	p := load(t, "switch_ops.json")
	base, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	store := `"name": "gstorepkt",`
	signal := `"name": "signal",`
	cases := []struct {
		name     string
		old, new string
		want     string
	}{
		{"flag field", store, store + ` "flag_offset": 0,`, `gpu 0 tb 0 op 4: unknown field "flag_offset"`},
		{"dst_chunk on gstorepkt", `"src_chunk": {`, `"dst_chunk": {"rank": 1, "type": "s", "index": 0, "size": 1}, "src_chunk": {`, `gpu 1 tb 0 op 4 (gstorepkt): "dst_chunk" on a gstorepkt op`},
		{"barrier fields on a switch signal", signal, signal + ` "barrier_id": 0,`, `gpu 0 tb 0 op 0 (signal): barrier fields on a signal op`},
		{"group field on a switch signal", signal, signal + ` "buffer_offset": 0,`, `gpu 0 tb 0 op 0 (signal): switch group fields on a signal op`},
		{"other name", store, `"name": "multi_store_pkt",`, `gpu 0 tb 0 op 4: unknown op name "multi_store_pkt"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := strings.Replace(string(base), c.old, c.new, 1)
			if data == string(base) {
				t.Fatalf("mutation %q did not apply", c.old)
			}
			_, err := Parse([]byte(data))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant %q", err, c.want)
			}
		})
	}
}
