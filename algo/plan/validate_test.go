package plan

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateCatches(t *testing.T) {
	type mut func(p *Plan)
	tb0 := func(p *Plan, g int) *ThreadBlock { return &p.GPUs[g].ThreadBlocks[0] }
	cases := []struct {
		name string
		file string // default allreduce_allpairs_2.json
		mut  mut
		want string
	}{
		{"gpu order", "", func(p *Plan) { p.GPUs[0].ID, p.GPUs[1].ID = 1, 0 }, "gpu 0: id 1, want 0"},
		{"no gpus", "", func(p *Plan) { p.GPUs = nil }, "plan: no gpus"},
		{"empty name", "", func(p *Plan) { p.Name = "" }, "plan: empty name"},
		{"threads", "", func(p *Plan) { p.NumThreadsPerBlock = 2048 }, "num_threads_per_block 2048 not in 1..1024"},
		{"alignment", "", func(p *Plan) { p.BufferAlignment = 0 }, "buffer_alignment 0 not positive"},
		{"message sizes", "", func(p *Plan) { p.MinMessageSize, p.MaxMessageSize = 10, 5 }, "min_message_size 10 > max_message_size 5"},
		{"no chunks", "", func(p *Plan) { p.GPUs[1].InputChunks, p.GPUs[1].OutputChunks = 0, 0 }, "gpu 1 tb 0 op 3 (put) src_buff[0]: in[0:1] beyond rank 1's 0 in chunks"},
		{"rank on local ref", "", func(p *Plan) { r := &tb0(p, 0).Ops[3].Src[0]; r.HasRank, r.Rank = true, 1 },
			"gpu 0 tb 0 op 3 (put) src_buff[0]: \"rank\": 1 on a local (type) reference"},
		{"rank on remote ref", "", func(p *Plan) { r := &tb0(p, 0).Ops[3].Dst[0]; r.HasRank, r.Rank = true, 0 },
			"gpu 0 tb 0 op 3 (put) dst_buff[0]: \"rank\": 0 on a remote (buffer_id) reference"},
		{"peer self", "", func(p *Plan) { p.GPUs[0].Channels[0].ConnectedTo[0] = 0 }, "gpu 0 channel 0: connected_to itself (rank 0)"},
		{"peer range", "", func(p *Plan) { p.GPUs[1].Channels[0].ConnectedTo[0] = 7 }, "gpu 1 channel 0: connected_to rank 7 out of range 0..1"},
		{"remote buffer self", "", func(p *Plan) { p.GPUs[0].RemoteBuffers[1].Rank = 0 }, "gpu 0 remote buffer 1: is rank 0's own buffer"},
		{"remote buffer access", "", func(p *Plan) { p.GPUs[0].RemoteBuffers[0].AccessChannelTypes = []ChannelType{ChannelPort} },
			"gpu 0 tb 0 remote_buffer_refs[0]: remote buffer 0 does not allow memory access"},
		{"local chunk range", "", func(p *Plan) { tb0(p, 0).Ops[3].Src[0].Index = 5 },
			"gpu 0 tb 0 op 3 (put) src_buff[0]: in[5:6] beyond rank 0's 2 in chunks"},
		{"remote chunk range", "", func(p *Plan) { tb0(p, 1).Ops[3].Dst[0].Size, tb0(p, 1).Ops[3].Src[0].Size = 2, 2 },
			"gpu 1 tb 0 op 3 (put) dst_buff[0]: rank 0 scr[0:2] beyond its 1 scr chunks"},
		{"zero size", "", func(p *Plan) { tb0(p, 0).Ops[3].Src[0].Size = 0 }, "gpu 0 tb 0 op 3 (put) src_buff[0]: chunk range index 1 size 0"},
		{"sizes differ", "", func(p *Plan) { tb0(p, 0).Ops[8].Src[0].Size = 2; tb0(p, 0).Ops[8].Src[0].Index = 0 },
			"gpu 0 tb 0 op 8 (res): src_buff/dst_buff sizes differ"},
		{"tb channel id", "", func(p *Plan) { tb0(p, 0).Channels[0].ChannelIDs[0] = 3 },
			"gpu 0 tb 0 channels[0]: memory channel 3 does not exist (gpu has 1)"},
		{"op channel index", "", func(p *Plan) { tb0(p, 0).Ops[0].ChannelIDs = []int{2} },
			"gpu 0 tb 0 op 0 (rlxsignal): channel_ids entry 2: gpu 0 tb 0 has no memory channel index 2 (it has 1)"},
		{"tb remote ref", "", func(p *Plan) { tb0(p, 1).RemoteBufferRefs[0].RemoteBufferIDs[1] = 9 },
			"gpu 1 tb 0 remote_buffer_refs[0]: remote buffer 9 does not exist (gpu has 2)"},
		{"op remote id", "", func(p *Plan) { tb0(p, 0).Ops[3].Dst[0].ID = 4 },
			"gpu 0 tb 0 op 3 (put) dst_buff[0]: gpu 0 tb 0 has no memory remote buffer ref 4 (it has 2)"},
		{"remote without channel", "", func(p *Plan) { tb0(p, 0).Ops[3].ChannelType = ChannelNone },
			"gpu 0 tb 0 op 3 (put): put on channel type none"},
		{"signal with buffers", "", func(p *Plan) { tb0(p, 0).Ops[5].Src = []BufRef{Local(Input, 0, 1)} },
			"gpu 0 tb 0 op 5 (signal): signal takes no src_buff/dst_buff"},
		{"signal without channels", "", func(p *Plan) { tb0(p, 0).Ops[5].ChannelIDs = nil },
			"gpu 0 tb 0 op 5 (signal): signal without channel_ids"},
		{"nop with channel", "", func(p *Plan) { tb0(p, 0).Ops[2].ChannelType = ChannelMemory },
			"gpu 0 tb 0 op 2 (nop): nop takes no channel_type (has memory)"},
		{"reduce op on put", "", func(p *Plan) { tb0(p, 0).Ops[3].ReduceOp = ReduceMax },
			"gpu 0 tb 0 op 3 (put): put takes no reduce_op"},
		{"put to local", "", func(p *Plan) { tb0(p, 0).Ops[3].Dst[0] = Local(Scratch, 0, 1) },
			"gpu 0 tb 0 op 3 (put) dst_buff[0]: put wants remote (buffer_id) references here"},
		{"pws on memory", "", func(p *Plan) { tb0(p, 0).Ops[3].Name = OpPutWithSignal },
			"gpu 0 tb 0 op 3 (pws): pws on channel type memory (allowed: [port])"},
		{"packet in simple", "", func(p *Plan) { tb0(p, 0).Ops[3].Name = OpPutPackets },
			"gpu 0 tb 0 op 3 (ppkt): packet op ppkt in a Simple plan (needs protocol LL)"},
		{"res without remote", "", func(p *Plan) { tb0(p, 0).Ops[8].Dst = tb0(p, 0).Ops[8].Dst[:1] },
			"gpu 0 tb 0 op 8 (res): res needs remote dst_buff entries"},
		{"tbg", "", func(p *Plan) { tb0(p, 0).Ops[3].TBG = &TBGroup{ID: 2, Size: 2} },
			"gpu 0 tb 0 op 3 (put): tbg_info tb_id 2 / tbg_size 2"},
		{"tbg on signal", "", func(p *Plan) { tb0(p, 0).Ops[5].TBG = &TBGroup{ID: 0, Size: 2} },
			"gpu 0 tb 0 op 5 (signal): signal takes no tbg_info"},
		{"barrier on nop", "", func(p *Plan) { tb0(p, 0).Ops[2].BarrierID = 1 },
			"gpu 0 tb 0 op 2 (nop): nop takes no barrier_id/num_threadblocks"},
		// every_op_kind.json: tb0 op 20 and tb1 op 6 are barrier 0 of 2 tbs,
		// tb1 op 7 sem_acquire, tb0 op 22 the pipeline, tb1 op 8 glre,
		// tb0 op 4 ppkt with channel_ids.
		{"barrier count", "every_op_kind.json", func(p *Plan) {
			ops := p.GPUs[0].ThreadBlocks[1].Ops
			p.GPUs[0].ThreadBlocks[1].Ops = append(ops[:6:6], ops[7:]...)
		}, "gpu 0: barrier 0 expects 2 thread blocks but 1 use it"},
		{"barrier disagreement", "every_op_kind.json", func(p *Plan) { p.GPUs[1].ThreadBlocks[1].Ops[6].NumThreadBlocks = 3 },
			"gpu 1 tb 1 op 6 (barrier): barrier 0 with num_threadblocks 3, but gpu 1 tb 0 op 20 (barrier) says 2"},
		{"barrier too many", "every_op_kind.json", func(p *Plan) {
			p.GPUs[1].ThreadBlocks[1].Ops[6].NumThreadBlocks = 4
			p.GPUs[1].ThreadBlocks[0].Ops[20].NumThreadBlocks = 4
		}, "gpu 1 tb 0 op 20 (barrier): num_threadblocks 4 not in 1..3"},
		{"semaphore", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[1].Ops[7].SemaphoreIDs = []int{3} },
			"gpu 0 tb 1 op 7 (sem_acquire): semaphore 3 does not exist (gpu has 1)"},
		{"semaphore on copy", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[2].Ops[0].SemaphoreIDs = []int{0} },
			"gpu 0 tb 2 op 0 (copy): copy takes no semaphore_ids"},
		{"pipeline body", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[22].Ops = nil },
			"gpu 0 tb 0 op 22 (pipeline): pipeline with an empty body"},
		{"pipeline body op", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[22].Ops[1].Dst[0].Index = 4 },
			"gpu 0 tb 0 op 22 body op 1 (put) dst_buff[0]: rank 1 scr[4:5] beyond its 4 scr chunks"},
		{"pipeline iter", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[22].Iter.UnitSize = 0 },
			"iter_context unit_size 0 num_chunks 1"},
		{"glre buffer", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[1].Ops[8].GroupBuffer = Output },
			"gpu 0 tb 1 op 8 (glre): buffer_type o but the switch channel binds i"},
		{"glre chunk rank", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[1].Ops[8].DstChunk.Rank = 1 },
			"gpu 0 tb 1 op 8 (glre) dst_chunk: rank 1 is not the executing rank 0"},
		{"switch group range", "every_op_kind.json", func(p *Plan) { p.GPUs[1].ThreadBlocks[1].Ops[10].Src[0].Index = 2 },
			"gpu 1 tb 1 op 10 (glres) src_buff[0]: rank 0 in[2:3] beyond its 2 in chunks"},
		{"rank group self", "every_op_kind.json", func(p *Plan) { p.GPUs[0].Channels[2].RankGroups[0] = RankGroup{Size: 1, Ranks: []int{1}} },
			"gpu 0 channel 2 rank group 0: does not include rank 0 itself"},
		{"rank group size", "every_op_kind.json", func(p *Plan) { p.GPUs[0].Channels[2].RankGroups[0].Size = 3 },
			"gpu 0 channel 2 rank group 0: size 3 but 2 ranks"},
		{"packet dst not scratch", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[4].Dst[0].ID = 1 },
			"gpu 0 tb 0 op 4 (ppkt) dst_buff[0]: packet destination must be a scratch buffer (is in)"},
		{"cpkt dst not scratch", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[16].Dst[0].Type = Output },
			"gpu 0 tb 0 op 16 (cpkt) dst_buff[0]: packet destination must be a scratch buffer (is out)"},
		{"put peer", "every_op_kind.json", func(p *Plan) {
			g2 := p.GPUs[1]
			g2.ID = 2
			p.GPUs = append(p.GPUs, g2)
			p.GPUs[0].RemoteBuffers[0].Rank = 2
		}, "gpu 0 tb 0 op 4 (ppkt) dst_buff[0]: remote buffer of rank 2 but channel_ids[0] connects to rank 1"},
		{"get count", "every_op_kind.json", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[6].ChannelIDs = []int{0, 0} },
			"gpu 0 tb 0 op 6 (get): 2 channel_ids for 1 src_buff entries"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := c.file
			if file == "" {
				file = "allreduce_allpairs_2.json"
			}
			p := load(t, file)
			c.mut(p)
			err := p.Validate()
			if err == nil {
				t.Fatal("Validate accepted the plan")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got:\n%v\nwant a line with %q", err, c.want)
			}
		})
	}
}

func TestValidateCapsErrors(t *testing.T) {
	p := load(t, "allreduce_allpairs_2.json")
	for i := 0; i < 100; i++ {
		p.GPUs[0].ThreadBlocks[0].Ops = append(p.GPUs[0].ThreadBlocks[0].Ops, Op{Name: OpSignal})
	}
	err := p.Validate()
	if err == nil || !strings.Contains(err.Error(), "and 150 more problems") {
		t.Errorf("got %v", err)
	}
}

// A "rank" on a local reference decodes, validates when it names the
// executing rank and is written back; on a remote reference it is a format
// error.
func TestRankOnBufRef(t *testing.T) {
	p := load(t, "allreduce_allpairs_2.json")
	r := &p.GPUs[0].ThreadBlocks[0].Ops[3].Src[0]
	r.HasRank, r.Rank = true, 0
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"rank": 0,`) {
		t.Fatalf("rank not written")
	}
	q, err := Parse(raw)
	if err != nil || !q.GPUs[0].ThreadBlocks[0].Ops[3].Src[0].HasRank {
		t.Fatalf("rank lost: %v", err)
	}
	bad := strings.Replace(string(raw), `"buffer_id": 0,`, `"rank": 1, "buffer_id": 0,`, 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), `"rank" on a remote`) {
		t.Fatalf("rank on a remote ref: %v", err)
	}
}
