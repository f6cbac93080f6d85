package mscclpptests

import (
	"fmt"
	"slices"

	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
)

// Verdict is the verifier's expected answer for a program: "ok" (verified;
// for collectives without a fixed result that means no deadlock, race or
// undefined read, with the data movement reported) or the kind of the
// rejection.
type Verdict string

const (
	OK            Verdict = "ok"
	Race          Verdict = "race"
	Deadlock      Verdict = "deadlock"
	UndefinedRead Verdict = "undefined read"
	Unmatched     Verdict = "unmatched"
	WrongResult   Verdict = "wrong result"
)

// Program is one MSCCL++ test program's equivalent.
type Program struct {
	Name   string // MSCCL++'s file, relative to python/mscclpp/language/tests
	Ranks  []int  // rank counts it is built and tested at
	Build  func(n int) (*plan.Plan, error)
	Expect Verdict
	Why    string // the reason for the verdict
	// More lists further rank counts the program supports that the
	// default test run leaves out because its plans are large (16 or 32
	// instances: about 10^4 ops at 8 ranks, a second or more to verify
	// and load each); CHORUS_MSCCLPP_FULL=1 tests them too.
	More []int
}

// Programs lists every program with its verdict and the reason (Why).
func Programs() []Program { return slices.Clone(programs) }

var programs = []Program{
	{"single_node/allgather.py", []int{2, 4, 8}, allgather, OK, "memory-channel puts into every peer's output, signal/wait after", nil},
	{"single_node/allgather_pkt.py", []int{2, 4, 8}, allgatherPkt, OK, "LL packets put into peers' scratch, unpacked locally; flags order the data", nil},
	{"single_node/allgather_pkt_rppkt.py", []int{4, 8}, allgatherPktRppkt, OK, "one rppkt forwards the own packets to several peers (one source, many destinations)", nil},
	{"single_node/allgather_ring.py", []int{2, 4, 8}, allgatherRing, OK, "ring forwarding with signal/wait per step", nil},
	{"single_node/allgather_tbg.py", []int{2, 4}, allgatherTBG, OK, "puts split over a thread-block group, barrier before the signal", nil},
	{"single_node/allgather_nvls_zero_copy.py", []int{2, 4, 8}, allgatherNVLS, Race, "the closing handshake uses rlxsignal: a relaxed signal does not order the multimem store before it, so the store into a peer's output is not ordered before that peer's kernel ends (fix: signal/wait)", nil},
	{"single_node/allgather_nvls_zero_copy_pkt.py", []int{2, 4, 8}, allgatherNVLSPkt, OK, "LL, in place, no auto-sync: cpkt of the own chunk into scratch slot r, gstorepkt (broadcast_packets) of those packets to slot r of every rank, upkt of slot j on block j; the packets' flags order the data, no signals", nil},
	{"single_node/allgather_nvls_zero_copy_barrier.py", []int{2, 4, 8}, allgatherNVLSBarrier, OK, "in place, 8 instances: switch barrier (signal/wait on the switch channel, release/acquire), multimem store of the own chunk to every rank's output, switch barrier; the second barrier orders the stores before every rank's kernel end", nil},
	{"single_node/allreduce.py", []int{2, 4, 8}, allreduceReadReduce, OK, "rre of the own chunk from every peer's input, then put of the result (rres)", nil},
	{"single_node/allreduce_pkt.py", []int{2, 4, 8}, allreducePkt, OK, "packet reduce-scatter then packet all-gather (respkt/recspkt, upkt)", nil},
	{"single_node/allreduce_naivy.py", []int{2, 4, 8}, allreduceNaivy, OK, "in place, LL: ppkt of chunk q to rank q, repkt + ppkt of the result (respkt), upkt", nil},
	{"single_node/allreduce_nvls_zero_copy.py", []int{2, 4, 8}, allreduceNVLS, OK, "glre+gstore fused into glres on the input group, signal/wait before and after", nil},
	{"single_node/allreduce_pipeline.py", []int{2, 4}, allreducePipeline, OK, "the read-reduce-send in a pipeline loop", nil},
	{"single_node/alltoall/alltoall.py", []int{2, 4, 8}, alltoallScratch, OK, "in place: relaxed handshake, put into the peer's scratch slot + signal, wait + copy out, one block per peer", nil},
	{"single_node/alltoall/alltoall_zero_copy.py", []int{2, 4, 8}, alltoallZeroCopy, OK, "the same ops as alltoall.py with reuse_resources", nil},
	{"single_node/alltoall/alltoall_ring.py", []int{2, 4, 8}, alltoallRing, OK, "puts in ring order on tb 0 releasing a semaphore per peer; tb 1 acquires, waits, copies out of scratch", nil},
	{"single_node/alltoall/alltoall_pipeline.py", []int{2, 4, 8}, alltoallPipeline, OK, "in place, 2 instances: the puts with signal and semaphore release, and the acquire, wait and copy out of scratch, in a pipeline loop on separate block sets", nil},
	{"single_node/alltoall/alltoall_pipeline_op.py", []int{2, 4, 8}, alltoallPipelineOp, OK, "out of place, 2 instances: pipelined puts with signal, wait and copy out of scratch into the output; the own block copied on the block MSCCL++'s leftover loop variable picks", nil},
	{"single_node/alltoall/alltoall_het_pipeline.py", []int{2, 4, 8}, alltoallHetPipeline, OK, "in place, 4 chunks per peer in two steps: halves sent on two block sets and three channel sets, semaphores order each put's read of the input before the copy into it", nil},
	{"single_node/alltoall/alltoall_pkt.py", []int{2, 4, 8}, alltoallPkt, OK, "in place, LL, 2 instances: put_packets into the peer's scratch slot, unpack into the input on the same block (a nop orders the put's read before the unpack's write)", nil},
	{"single_node/alltoall/alltoall_ring_get.py", []int{2, 4}, alltoallRingGetGen("alltoall_ring_get"), WrongResult, "declared out of place, but the gets land in the input as in an in-place program: the output is never written", []int{8}},
	{"single_node/alltoall/alltoall_ring_get_pipeline.py", []int{2, 4}, alltoallRingGetGen("alltoall_ring_get_pipeline"), WrongResult, "the same ops as alltoall_ring_get.py: the output is never written", []int{8}},
	{"single_node/alltoall/alltoall_ring_get_op.py", []int{2, 4}, alltoallRingGetOpGen("alltoall_ring_get_op"), OK, "out of place, 16 instances: copy into the own scratch slot + signal on block 0, wait + get from the peer's scratch into the output on block 1, relaxed closing handshake", []int{8}},
	{"single_node/alltoall/alltoall_ring_get_pipeline_op.py", []int{2, 4}, alltoallRingGetOpGen("alltoall_ring_get_pipeline_op"), OK, "the same ops as alltoall_ring_get_op.py", []int{8}},
	{"single_node/alltoall/alltoall_ring_get_naive.py", []int{2, 4}, alltoallRingGetNaive, WrongResult, "declared out of place, but the gets land in the input: the output is never written", []int{8}},
	{"single_node/alltoall/alltoall_ring_naive.py", []int{2, 4, 8}, alltoallRingNaive, OK, "alltoall_ring.py's ops with reuse_resources", nil},
	{"single_node/alltoall/alltoall_ring_naive_op.py", []int{2, 4}, alltoallRingOOPGen("alltoall_ring_naive_op", true, false, 0), OK, "out of place, 16 instances: signal/wait handshake, ring puts + signal on block 0, wait + copy into the output on block 1", []int{8}},
	{"single_node/alltoall/alltoall_ring_naive_pipeline_op.py", []int{2, 4}, alltoallRingOOPGen("alltoall_ring_naive_pipeline_op", true, true, 1<<30), OK, "as ring_op with the puts and copies in a pipeline loop", []int{8}},
	{"single_node/alltoall/alltoall_ring_oop.py", []int{2, 4}, alltoallRingOOPGen("alltoall_ring_oop", false, true, 0), OK, "out of place, 16 instances: relaxed handshake, ring puts + signal on block 0, wait + copy into the output on block 1", []int{8}},
	{"single_node/alltoall/alltoall_ring_op.py", []int{2, 4}, alltoallRingOOPGen("alltoall_ring_op", true, true, 0), OK, "alltoall_ring_oop.py's ops with reuse_resources", []int{8}},
	{"single_node/alltoall/alltoall_ring_peers.py", []int{2, 4}, alltoallRingPeers, OK, "in place, 16 instances: n-1 steps of pairwise exchange (MSCCL++'s greedy find_pairs); put + signal + semaphore release on block 0, acquire + wait + copy on block 1", []int{8}},
	{"single_node/alltoall/alltoall_ring_peers_get.py", []int{2, 4}, alltoallRingPeersGet, WrongResult, "declared out of place, but the gets land in the input: the output is never written", []int{8}},
	{"single_node/alltoall/alltoall_ring_peers_het_pipeline.py", []int{2, 4}, alltoallRingPeersHetPipeline, OK, "in place, 32 instances, 2 chunks per peer: step 0 sends the halves on two blocks and channel sets, later steps the whole block", []int{8}},
	{"single_node/alltoall/alltoall_ring_zero_copy_get_op.py", []int{2, 4}, alltoallRingZeroCopyGetOp, OK, "out of place, 32 instances, no scratch: relaxed handshake, get of the peer's input straight into the output, relaxed closing handshake", []int{8}},
	{"single_node/alltoall/alltoall_ring_zero_copy_op.py", []int{2, 4}, alltoallRingZeroCopyOp, Race, "puts straight into the peers' outputs after a relaxed handshake and no signal after them: a put into a peer's output is not ordered before that peer's kernel ends (fix: signal after the puts, wait before the end)", []int{8}},
	{"single_node/alltoall/alltoall_zero_copy_pipeline.py", []int{2, 4, 8}, alltoallZeroCopyPipeline, OK, "in place, 4 instances, pipelined, one block per peer: put, semaphore release/acquire on the same block, signal; wait and copy out of scratch", nil},
	{"multi_node/allgather.py", []int{4, 8}, allgatherPort, OK, "port-channel put_with_signal to every peer", nil},
	{"multi_node/reducescatter.py", []int{2, 4}, reduceScatterPort, OK, "port puts into peers' scratch, local reduce", nil},
	{"multi_node/send_recv.py", []int{2, 4, 8}, sendRecv, OK, "sendrecv: each group sends its input to the next group's output (reported as data movement)", nil},
	{"multi_node/allgather_pkt.py", []int{2, 4, 8}, allgatherPkt2, OK, "two nodes: cpkt into the own slot, rppkt to node peers (memory) and the counterpart (port), the counterpart's chunk forwarded to node peers, upkt of every slot", nil},
	{"multi_node/reducescatter_pkt.py", []int{2, 4, 8}, reduceScatterPkt2, OK, "two nodes, in place: ppkt to node peers, packet reduce for the counterpart, cpkt + port rppkt, final packet reduce", nil},
	{"multi_node/allreduce_pkt.py", []int{2, 4, 8}, allreducePkt2, OK, "two nodes, in place, on a group of 2 blocks: packet reduce-scatter in the node, partial sums exchanged by port rppkt, packet all-gather in the node", nil},
	{"multi_node/allgather_tbg.py", []int{4, 8}, allgatherTBG2, OK, "2 GPUs per node (4 ranks: 2 nodes, 8 ranks: 4 nodes): inter-node ring of pwsf into the next node's scratch on block 0 with a barrier of all blocks per step; intra-node puts into peers' scratch on 2-block groups, signal/wait per block, copies out", nil},
	{"multi_node/allgather_oop.py", []int{4, 8}, allgatherOOP, OK, "allgather_tbg.py's program with one block per peer and 4 instances", nil},
	{"multi_node/allgather_mrc.py", []int{2, 4, 8}, allgatherMRC, OK, "in place: ring over port channels on block 0, put + signal to the next rank, wait for the previous (2 ranks: two channels each, the second used)", nil},
	{"multi_node/allreduce_brodcast_pkt.py", []int{2, 4, 8}, allreduceBroadcastPkt2, OK, "two nodes, in place, LL: every rank's whole input packed into every node peer's scratch, forwarded over the port channel and on to the node peers; each rank reduces all n slots", nil},
	{"unit_tests/barrier_test.py", []int{1}, barrierTest, OK, "barrier over tbs 0 and 1; nothing else (no buffers)", nil},
	{"unit_tests/copy_test.py", []int{1}, copyTest, OK, "local copy input -> output", nil},
	{"unit_tests/copy_packet_test.py", []int{1}, copyPacketTest, OK, "cpkt of the input into scratch; the output is not written", nil},
	{"unit_tests/unpack_packet_test.py", []int{1}, unpackPacketTest, OK, "cpkt into scratch, upkt into the output", nil},
	{"unit_tests/flush/flush_test.py", []int{2}, flushTest, OK, "port-channel flush (no buffers)", nil},
	{"unit_tests/flush/flush_fuse_test.py", []int{3}, flushFuseTest, OK, "two flushes of two port channels fused into one (3 ranks, only rank 0 acts)", nil},
	{"unit_tests/get/get_test.py", []int{2}, getTest, OK, "relaxed handshake, get of the peer's in[1] into in[0], signal/wait", nil},
	{"unit_tests/get/get_fuse_test.py", []int{2}, getFuseTest, OK, "the same get twice (not fused: same destination; a nop orders them)", nil},
	{"unit_tests/put/put_test.py", []int{2}, putTest, OK, "relaxed handshake, put of in[0] into the peer's in[1], signal/wait", nil},
	{"unit_tests/put/put_fuse_test.py", []int{2}, putFuseTest, Race, "two puts on two channels fused; each rank reads its in[0] while the peer's put overwrites it, ordered only by a relaxed handshake", nil},
	{"unit_tests/put/put_with_signal_test.py", []int{2}, pwsTest, OK, "port signal/wait, pws into the peer's in[1], wait", nil},
	{"unit_tests/put/put_with_signal_fuse_test.py", []int{2}, pwsFuseTest, Unmatched, "two pws fused into one with two buffers: each rank signals 3 times, the peer waits twice (the next call would pair a wait with the stale signal)", nil},
	{"unit_tests/put/put_with_signal_and_flush_test.py", []int{2}, pwsfTest, OK, "port signal/wait, pwsf into the peer's in[1], wait", nil},
	{"unit_tests/put_packet_test.py", []int{2}, putPacketTest, OK, "ppkt of the input into the peer's scratch (nothing reads it)", nil},
	{"unit_tests/read_put_packet_test.py", []int{2}, readPutPacketTest, Deadlock, "rppkt polls packets in scratch[0] that no op ever writes", nil},
	{"unit_tests/read_reduce/read_reduce_test.py", []int{2}, readReduceTest, OK, "relaxed handshake, rre out[0] = in[0] + peer in[1], signal/wait", nil},
	{"unit_tests/read_reduce/read_reduce_fuse_test.py", []int{2}, readReduceFuseTest, OK, "two rre into out[0] (not fused: the second does not read the first's result); the last one wins", nil},
	{"unit_tests/read_reduce_send_test.py", []int{2}, readReduceSendTest, OK, "rre then put of the result into the peer's out[1], fused into rres", nil},
	{"unit_tests/reduce/reduce_test.py", []int{1}, reduceTest, OK, "local reduce of two input chunks", nil},
	{"unit_tests/reduce/reduce_fuse_test.py", []int{1}, reduceFuseTest, OK, "two reduces into out[0] (not fused); the last one wins", nil},
	{"unit_tests/reduce_send_test.py", []int{2}, reduceSendTest, OK, "reduce then put of the result into the peer's out[1], fused into res", nil},
	{"unit_tests/reduce_packet/reduce_packet_test.py", []int{1}, reducePacketTest, Deadlock, "repkt polls packets in scratch[1] nothing writes", nil},
	{"unit_tests/reduce_packet/reduce_packet_fuse_test.py", []int{1}, reducePacketFuseTest, Deadlock, "two repkt polling scratch nothing writes", nil},
	{"unit_tests/reduce_packet/reduce_packets_test.py", []int{1}, reducePacketsTest, Deadlock, "repkt polls packets in scratch[1] nothing writes", nil},
	{"unit_tests/reduce_packet/reduce_packets_fuse_test.py", []int{1}, reducePacketsFuseTest, Deadlock, "two repkt polling scratch nothing writes", nil},
	{"unit_tests/reduce_send_packet_test.py", []int{2}, reduceSendPacketTest, Deadlock, "respkt polls packets in scratch[1] nothing writes", nil},
	{"unit_tests/reduce_copy_packet_test.py", []int{1}, reduceCopyPacketTest, Deadlock, "recpkt polls packets in scratch[0] nothing writes", nil},
	{"unit_tests/reduce_copy_send_packet_test.py", []int{2}, reduceCopySendPacketTest, Deadlock, "recspkt polls packets in scratch[0] nothing writes", nil},
	{"unit_tests/semaphore.py", []int{2}, semaphoreTest, OK, "semaphore initial 1 acquired then released by one block", nil},
	{"unit_tests/signal_wait/signal_wait_test.py", []int{2}, signalWaitTest, OK, "signal/wait pairs between the two ranks (no buffers)", nil},
	{"unit_tests/signal_wait/signal_wait_fuse_test.py", []int{2}, signalWaitFuseTest, Deadlock, "signals on channels 0,1, waits on channels 2,3 that the peer never signals (channels pair by index)", nil},
	{"unit_tests/signal_wait/relaxed_signal_wait_test.py", []int{2}, relaxedSignalWaitTest, OK, "rlxsignal/rlxwait pairs (no buffers)", nil},
	{"unit_tests/signal_wait/relaxed_signal_wait_fuse_test.py", []int{2}, relaxedSignalWaitFuseTest, Deadlock, "as signal_wait_fuse, relaxed: waits on channels the peer never signals", nil},
	{"unit_tests/switch_broadcast_test.py", []int{3}, switchBroadcastTest, UndefinedRead, "rank 0 broadcasts a scratch chunk nothing wrote", nil},
	{"unit_tests/switch_reduce_test.py", []int{3}, switchReduceTest, OK, "glre of ranks 0 and 1's input into rank 0's scratch (3 ranks); no output written", nil},
	{"unit_tests/pipeline_test.py", []int{1}, pipelineTest, OK, "a copy in a pipeline loop", nil},
	{"unit_tests/tbg/tbg_copy_test.py", []int{1}, tbgCopyTest, OK, "copy split over a group of 4 blocks", nil},
	{"unit_tests/tbg/tbg_reduce_test.py", []int{1}, tbgReduceTest, OK, "reduce split over a group of 4 blocks", nil},
	{"unit_tests/tbg/tbg_reduce_fuse_test.py", []int{1}, tbgReduceFuseTest, Race, "two reduces of out[0] split 4 and 3 ways: block 1's part of the second overlaps block 0's part of the first, unordered across blocks", nil},
	{"unit_tests/tbg/tbg_reduce_send_test.py", []int{2}, tbgReduceSendTest, Race, "res split over 4 blocks, but only block 0 signals: blocks 1-3's puts are not ordered before the peer's kernel ends", nil},
	{"unit_tests/tbg/tbg_switch_test.py", []int{4}, tbgSwitchTest, UndefinedRead, "glre and gstore split over 4 blocks; the gstore reads scratch[1] nothing wrote", nil},
}

func newProgram(name string, coll plan.Collective, n int, proto plan.Protocol, mod func(*dsl.Config)) *dsl.Program {
	cfg := dsl.Config{Name: name, Collective: coll, Ranks: n, Protocol: proto}
	if mod != nil {
		mod(&cfg)
	}
	return dsl.NewProgram(cfg)
}

func peersOf(r, n int) []int {
	var out []int
	for q := range n {
		if q != r {
			out = append(out, q)
		}
	}
	return out
}

// mem returns ch[r][q], the memory channel on r towards q, for all pairs.
func mem(p *dsl.Program, n int) [][]*dsl.MemoryChannel {
	ch := make([][]*dsl.MemoryChannel, n)
	for r := range n {
		ch[r] = make([]*dsl.MemoryChannel, n)
		for _, q := range peersOf(r, n) {
			ch[r][q] = p.MemoryChannel(q, r)
		}
	}
	return ch
}

// handshake: rank r signals every peer and waits for every peer on tb.
func handshake(ch [][]*dsl.MemoryChannel, r, n, tb int, sig, wait dsl.SyncType) {
	for _, q := range peersOf(r, n) {
		ch[r][q].Signal(dsl.TB(tb), sig)
	}
	for _, q := range peersOf(r, n) {
		ch[r][q].Wait(dsl.TB(tb), wait)
	}
}

// ---- single node ----

func allgather(n int) (*plan.Plan, error) {
	p := newProgram("allgather", plan.AllGather, n, plan.Simple, func(c *dsl.Config) { c.InPlace = true })
	ch := mem(p, n)
	for r := range n {
		handshake(ch, r, n, 0, dsl.SyncNone, dsl.SyncAfter)
		out := p.Rank(r).Output()
		for _, q := range peersOf(r, n) {
			ch[r][q].Put(p.Rank(q).Output().Chunk(r, 1), out.Chunk(r, 1), dsl.TB(0))
		}
		handshake(ch, r, n, 0, dsl.SyncBefore, dsl.SyncNone)
	}
	return p.Lower()
}

func allgatherPkt(n int) (*plan.Plan, error) {
	p := newProgram("allgather_pkt", plan.AllGather, n, plan.LL, nil)
	ch := mem(p, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n)
	}
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		for _, q := range peersOf(r, n) {
			ch[r][q].PutPackets(scr[q].Chunk(r, 1), in.Chunk(0, 1), dsl.TB(0))
		}
		rk.Copy(out.Chunk(r, 1), in.Chunk(0, 1), dsl.TB(0))
		for _, q := range peersOf(r, n) {
			rk.UnpackPackets(out.Chunk(q, 1), scr[r].Chunk(q, 1), dsl.TB(0))
		}
	}
	return p.Lower()
}

// allgatherPktRppkt: every rank packs its input into its own scratch and
// forwards those packets to all peers with one rppkt.
func allgatherPktRppkt(n int) (*plan.Plan, error) {
	p := newProgram("allgather_pkt_rppkt", plan.AllGather, n, plan.LL, nil)
	ch := mem(p, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n)
	}
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		rk.CopyPackets(scr[r].Chunk(r, 1), in.Chunk(0, 1), dsl.TB(0))
		for _, q := range peersOf(r, n) {
			ch[r][q].ReadPutPackets(scr[q].Chunk(r, 1), scr[r].Chunk(r, 1), dsl.TB(0))
		}
		rk.Copy(out.Chunk(r, 1), in.Chunk(0, 1), dsl.TB(1))
		for _, q := range peersOf(r, n) {
			rk.UnpackPackets(out.Chunk(q, 1), scr[r].Chunk(q, 1), dsl.TB(1))
		}
	}
	return p.Lower()
}

func allgatherRing(n int) (*plan.Plan, error) {
	p := newProgram("allgather_ring", plan.AllGather, n, plan.Simple, func(c *dsl.Config) { c.InPlace = true })
	ch := mem(p, n)
	for r := range n {
		next, prev := (r+1)%n, (r+n-1)%n
		ch[r][prev].Signal(dsl.TB(0), dsl.SyncNone)
		ch[r][next].Wait(dsl.TB(0), dsl.SyncAfter)
		for s := range n - 1 {
			c := (r - s + n) % n // the chunk rank r forwards at step s
			ch[r][next].Put(p.Rank(next).Output().Chunk(c, 1), p.Rank(r).Output().Chunk(c, 1), dsl.TB(0))
			ch[r][next].Signal(dsl.TB(0), dsl.SyncBefore)
			ch[r][prev].Wait(dsl.TB(0), dsl.SyncAfter)
			if s < n-2 {
				ch[r][prev].Signal(dsl.TB(0), dsl.SyncNone) // the next slot may be written
				ch[r][next].Wait(dsl.TB(0), dsl.SyncNone)
			}
		}
	}
	return p.Lower()
}

func allgatherTBG(n int) (*plan.Plan, error) {
	p := newProgram("allgather_tbg", plan.AllGather, n, plan.Simple, func(c *dsl.Config) { c.InPlace = true })
	ch := mem(p, n)
	g := p.TBGroup(0, 1)
	for r := range n {
		handshake(ch, r, n, 0, dsl.SyncNone, dsl.SyncAfter)
		p.Rank(r).Barrier(0, 1)
		for _, q := range peersOf(r, n) {
			ch[r][q].Put(p.Rank(q).Output().Chunk(r, 1), p.Rank(r).Output().Chunk(r, 1), g)
		}
		p.Rank(r).Barrier(0, 1)
		handshake(ch, r, n, 0, dsl.SyncBefore, dsl.SyncNone)
	}
	return p.Lower()
}

func allgatherNVLS(n int) (*plan.Plan, error) {
	p := newProgram("allgather_nvls_zero_copy", plan.AllGather, n, plan.Simple, func(c *dsl.Config) { c.InPlace = true; c.ThreadsPerBlock = 256 })
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	sw := p.SwitchChannel(all, dsl.Output)
	ch := mem(p, n)
	for r := range n {
		for _, q := range peersOf(r, n) {
			ch[r][q].RelaxedSignal(dsl.TB(0), dsl.SyncNone)
		}
		for _, q := range peersOf(r, n) {
			ch[r][q].RelaxedWait(dsl.TB(0), dsl.SyncAfter)
		}
		sw.At(r).Broadcast(p.Rank(r).Output().Chunk(r, 1), r, 1, dsl.TB(0))
		for _, q := range peersOf(r, n) {
			ch[r][q].RelaxedSignal(dsl.TB(0), dsl.SyncBefore)
		}
		for _, q := range peersOf(r, n) {
			ch[r][q].RelaxedWait(dsl.TB(0), dsl.SyncNone)
		}
	}
	pl, err := p.Lower()
	if err != nil {
		return nil, err
	}
	BufferForm(pl)
	return pl, nil
}

// allgatherNVLSPkt: MSCCL++'s allgather_nvls_zero_copy_pkt.py (newest
// stored version, auto_sync=False, 256 threads, 1 KiB..1 MiB).
func allgatherNVLSPkt(n int) (*plan.Plan, error) {
	p := newProgram("allgather_nvls_zero_copy_pkt", plan.AllGather, n, plan.LL, func(c *dsl.Config) {
		c.InPlace, c.ThreadsPerBlock, c.DoubleScratch, c.NoAutoSync = true, 256, true, true
		c.MinMessageSize, c.MaxMessageSize = 1024, 1<<20
	})
	scr := make([]dsl.Buffer, n)
	all := make([]int, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n)
		all[r] = r
	}
	sw := p.SwitchChannel(all, dsl.Scratch)
	for r := range n {
		out := p.Rank(r).Output()
		p.Rank(r).CopyPackets(scr[r].Chunk(r, 1), out.Chunk(r, 1), dsl.TB(0))
		sw.At(r).BroadcastPackets(scr[r].Chunk(r, 1), r, 1, dsl.TB(0))
	}
	for r := range n {
		out := p.Rank(r).Output()
		for j := range n {
			p.Rank(r).UnpackPackets(out.Chunk(j, 1), scr[r].Chunk(j, 1), dsl.TB(j))
		}
	}
	pl, err := p.Lower()
	if err != nil {
		return nil, err
	}
	BufferForm(pl)
	return pl, nil
}

// allgatherNVLSBarrier: MSCCL++'s allgather_nvls_zero_copy_barrier.py
// (newest stored version: SwitchChannel.barrier(tb_list=[0]); defaults 8
// instances, 256 threads).
func allgatherNVLSBarrier(n int) (*plan.Plan, error) {
	p := newProgram("allgather_nvls_zero_copy_barrier", plan.AllGather, n, plan.Simple, func(c *dsl.Config) {
		c.InPlace, c.ThreadsPerBlock, c.Instances = true, 256, 8
	})
	all := make([]int, n)
	for r := range all {
		all[r] = r
	}
	sw := p.SwitchChannel(all, dsl.Output)
	for r := range n {
		sw.At(r).Barrier(0)
	}
	for r := range n {
		sw.At(r).Broadcast(p.Rank(r).Output().Chunk(r, 1), r, 1, dsl.TB(0))
	}
	for r := range n {
		sw.At(r).Barrier(0)
	}
	pl, err := p.Lower()
	if err != nil {
		return nil, err
	}
	BufferForm(pl)
	return pl, nil
}

func allreduceReadReduce(n int) (*plan.Plan, error) {
	p := newProgram("allreduce", plan.AllReduce, n, plan.Simple, nil)
	ch := mem(p, n)
	for r := range n {
		rk := p.Rank(r)
		handshake(ch, r, n, 0, dsl.SyncNone, dsl.SyncAfter)
		readReduce(p, ch, r, n)
		for _, q := range peersOf(r, n) {
			ch[r][q].Put(p.Rank(q).Output().Chunk(r, 1), rk.Output().Chunk(r, 1), dsl.TB(0))
		}
		handshake(ch, r, n, 0, dsl.SyncBefore, dsl.SyncNone)
	}
	return p.Lower()
}

// readReduce: out[r] = in[r] + every peer's in[r], one rre per peer that
// the DSL fuses into one rre reading all peers.
func readReduce(p *dsl.Program, ch [][]*dsl.MemoryChannel, r, n int) {
	rk := p.Rank(r)
	src := rk.Input().Chunk(r, 1)
	for _, q := range peersOf(r, n) {
		ch[r][q].Reduce(rk.Output().Chunk(r, 1), src, []dsl.Chunk{p.Rank(q).Input().Chunk(r, 1)}, dsl.Sum, dsl.TB(0))
		src = rk.Output().Chunk(r, 1)
	}
}

func allreducePkt(n int) (*plan.Plan, error) {
	p := newProgram("allreduce_pkt", plan.AllReduce, n, plan.LL, nil)
	ch := mem(p, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(2 * n) // [0,n): reduce-scatter slots, [n,2n): gather slots
	}
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		for _, q := range peersOf(r, n) {
			ch[r][q].PutPackets(scr[q].Chunk(r, 1), in.Chunk(q, 1), dsl.TB(0))
		}
		var pk []dsl.Chunk
		for _, q := range peersOf(r, n) {
			pk = append(pk, scr[r].Chunk(q, 1))
		}
		rk.ReducePackets(out.Chunk(r, 1), in.Chunk(r, 1), pk, dsl.Sum, dsl.TB(0))
		for _, q := range peersOf(r, n) {
			ch[r][q].PutPackets(scr[q].Chunk(n+r, 1), out.Chunk(r, 1), dsl.TB(0))
		}
		for _, q := range peersOf(r, n) {
			rk.UnpackPackets(out.Chunk(q, 1), scr[r].Chunk(n+q, 1), dsl.TB(0))
		}
	}
	return p.Lower()
}

func allreduceNVLS(n int) (*plan.Plan, error) {
	p := newProgram("allreduce_nvls_zero_copy", plan.AllReduce, n, plan.Simple, func(c *dsl.Config) { c.InPlace = true })
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	sw := p.SwitchChannel(all, dsl.Input)
	ch := mem(p, n)
	for r := range n {
		handshake(ch, r, n, 0, dsl.SyncNone, dsl.SyncAfter)
		scr := p.Rank(r).NewScratch(1)
		sw.At(r).Reduce(scr.Chunk(0, 1), r, 1, dsl.Sum, dsl.TB(0))
		sw.At(r).Broadcast(scr.Chunk(0, 1), r, 1, dsl.TB(0))
		handshake(ch, r, n, 0, dsl.SyncBefore, dsl.SyncNone)
	}
	return p.Lower()
}

func allreducePipeline(n int) (*plan.Plan, error) {
	p := newProgram("allreduce_pipeline", plan.AllReduce, n, plan.Simple, nil)
	ch := mem(p, n)
	for r := range n {
		rk := p.Rank(r)
		handshake(ch, r, n, 0, dsl.SyncNone, dsl.SyncAfter)
		p.Pipeline(1<<20, 1, func() {
			readReduce(p, ch, r, n)
			for _, q := range peersOf(r, n) {
				ch[r][q].Put(p.Rank(q).Output().Chunk(r, 1), rk.Output().Chunk(r, 1), dsl.TB(0))
			}
		})
		handshake(ch, r, n, 0, dsl.SyncBefore, dsl.SyncNone)
	}
	return p.Lower()
}

// ---- multi node (port channels) ----

func allgatherPort(n int) (*plan.Plan, error) {
	p := newProgram("allgather_multi_node", plan.AllGather, n, plan.Simple, func(c *dsl.Config) { c.InPlace = true })
	pc := make([][]*dsl.PortChannel, n)
	for r := range n {
		pc[r] = make([]*dsl.PortChannel, n)
		for _, q := range peersOf(r, n) {
			pc[r][q] = p.PortChannel(q, r)
		}
	}
	for r := range n {
		for _, q := range peersOf(r, n) {
			pc[r][q].Signal(dsl.TB(0), dsl.SyncNone)
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].Wait(dsl.TB(0), dsl.SyncAfter)
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].PutWithSignal(p.Rank(q).Output().Chunk(r, 1), p.Rank(r).Output().Chunk(r, 1), dsl.TB(0))
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].Wait(dsl.TB(0), dsl.SyncNone)
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].Flush(dsl.TB(0), dsl.SyncNone)
		}
	}
	return p.Lower()
}

func reduceScatterPort(n int) (*plan.Plan, error) {
	p := newProgram("reducescatter_multi_node", plan.ReduceScatter, n, plan.Simple, nil)
	pc := make([][]*dsl.PortChannel, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		pc[r] = make([]*dsl.PortChannel, n)
		for _, q := range peersOf(r, n) {
			pc[r][q] = p.PortChannel(q, r)
		}
		scr[r] = p.Rank(r).NewScratch(n)
	}
	for r := range n {
		rk := p.Rank(r)
		for _, q := range peersOf(r, n) {
			pc[r][q].Signal(dsl.TB(0), dsl.SyncNone)
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].Wait(dsl.TB(0), dsl.SyncAfter)
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].PutWithSignal(scr[q].Chunk(r, 1), rk.Input().Chunk(q, 1), dsl.TB(0))
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].Wait(dsl.TB(0), dsl.SyncAfter)
		}
		srcs := []dsl.Chunk{rk.Input().Chunk(r, 1)}
		for _, q := range peersOf(r, n) {
			srcs = append(srcs, scr[r].Chunk(q, 1))
		}
		rk.Reduce(rk.Output().Chunk(0, 1), srcs, dsl.Sum, dsl.TB(0))
		for _, q := range peersOf(r, n) {
			pc[r][q].Flush(dsl.TB(0), dsl.SyncNone)
		}
		// Nobody leaves (and reuses its scratch) before the peers read theirs.
		for _, q := range peersOf(r, n) {
			pc[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
		}
		for _, q := range peersOf(r, n) {
			pc[r][q].Wait(dsl.TB(0), dsl.SyncNone)
		}
	}
	return p.Lower()
}

// sendRecv: the ranks form two groups (MSCCL++'s split mask with group
// size n/2); every rank sends its input to the output of the rank at the
// same position in the other group, over port channels with
// put_with_signal, after a ready handshake.
func sendRecv(n int) (*plan.Plan, error) {
	group := n / 2
	if n < 2 || n%2 != 0 || group&(group-1) != 0 {
		return nil, fmt.Errorf("send_recv: %d ranks do not split into two groups of a power of two", n)
	}
	p := newProgram("send_recv", plan.SendRecv, n, plan.Simple, nil)
	ng := n / group
	next := func(r int) int { return ((r/group+1)%ng)*group + r%group }
	prev := func(r int) int { return ((r/group-1+ng)%ng)*group + r%group }
	nextCh := make([]*dsl.PortChannel, n)
	prevCh := make([]*dsl.PortChannel, n)
	for r := range n {
		if prev(r) == next(r) && r > prev(r) {
			prevCh[r] = p.PortChannel(prev(r), r)
			nextCh[r] = p.PortChannel(next(r), r)
		} else {
			nextCh[r] = p.PortChannel(next(r), r)
			prevCh[r] = p.PortChannel(prev(r), r)
		}
	}
	for r := range n {
		prevCh[r].Signal(dsl.TB(0), dsl.SyncNone)
		nextCh[r].Wait(dsl.TB(0), dsl.SyncAfter)
		nextCh[r].PutWithSignal(p.Rank(next(r)).Output().Chunk(0, 1), p.Rank(r).Input().Chunk(0, 1), dsl.TB(0))
		prevCh[r].Wait(dsl.TB(0), dsl.SyncNone)
	}
	return p.Lower()
}

// BufferForm rewrites every chunk-form gstore (and gstorepkt) of pl into
// the buffer form newer MSCCL++ writers emit: src_buff [the local chunk,
// with "rank"] and dst_buff [the switch range]. Nothing else changes.
func BufferForm(pl *plan.Plan) {
	for g := range pl.GPUs {
		for t := range pl.GPUs[g].ThreadBlocks {
			ops := pl.GPUs[g].ThreadBlocks[t].Ops
			for i := range ops {
				op := &ops[i]
				if (op.Name != plan.OpGroupStore && op.Name != plan.OpGroupStorePackets) || op.SrcChunk == nil || len(op.ChannelIDs) != 1 {
					continue
				}
				c := op.SrcChunk
				op.Src = []plan.BufRef{{Kind: plan.RefLocal, Type: c.Type, Index: c.Index, Size: c.Size, HasRank: true, Rank: c.Rank}}
				op.Dst = []plan.BufRef{plan.Switch(op.ChannelIDs[0], op.GroupOffset, op.GroupSize)}
				op.SrcChunk, op.GroupBuffer, op.GroupOffset, op.GroupSize = nil, plan.BufferNone, 0, 0
			}
		}
	}
}
