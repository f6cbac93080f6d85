package mscclpptests

import (
	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
)

// The unit programs of MSCCL++'s DSL tests (tests/unit_tests): each shows
// one op (or one fusion) on one to four ranks with MSCCL++'s
// TestCollective(n, in, out). Many are marked by MSCCL++ as shape demos that
// "may not work correctly in the executor"; the verifier says why where
// they do not (a read of scratch nothing wrote, a wait nobody signals).
//
// MSCCL++'s signal and wait default to data_sync both (a nop on each
// side); the programs below spell that out.

func test(name string, n int, proto plan.Protocol, in, out int) *dsl.Program {
	return newProgram(name, "test", n, proto, func(c *dsl.Config) {
		c.InputChunks, c.OutputChunks = in, out
		c.NoBuffers = in == 0 && out == 0
	})
}

// eachPair calls f(r, q) for every ordered pair of distinct ranks, in
// MSCCL++'s loop order (src outer, dst inner).
func eachPair(n int, f func(r, q int)) {
	for r := range n {
		for _, q := range peersOf(r, n) {
			f(r, q)
		}
	}
}

func barrierTest(n int) (*plan.Plan, error) {
	p := test("barrier_test", n, plan.Simple, 0, 0)
	p.Rank(0).Barrier(0, 1)
	return p.Lower()
}

func signalWaitTest(n int) (*plan.Plan, error) {
	p := test("signal_wait_test", n, plan.Simple, 0, 0)
	ch := mem(p, n)
	eachPair(n, func(r, q int) {
		ch[r][q].Signal(dsl.TB(0), dsl.SyncBefore)
		ch[r][q].Wait(dsl.TB(0), dsl.SyncAfter)
	})
	return p.Lower()
}

func relaxedSignalWaitTest(n int) (*plan.Plan, error) {
	p := test("relaxed_signal_wait_test", n, plan.Simple, 0, 0)
	ch := mem(p, n)
	eachPair(n, func(r, q int) {
		ch[r][q].RelaxedSignal(dsl.TB(0), dsl.SyncBefore)
		ch[r][q].RelaxedWait(dsl.TB(0), dsl.SyncAfter)
	})
	return p.Lower()
}

// signalWaitFuseGen: every rank makes four channels to its peer, signals
// on the first two (fused into one signal) and waits on the last two
// (fused into one wait). The peer signals its first two channels, which
// pair with the first two here, so the waits on channels 2 and 3 wait for
// signals nobody sends: a deadlock (MSCCL++'s DSL does not check pairs:
// UncheckedPairs).
func signalWaitFuseGen(name string, relaxed bool) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := newProgram(name, "test", n, plan.Simple, func(c *dsl.Config) { c.NoBuffers, c.UncheckedPairs = true, true })
		eachPair(n, func(r, q int) {
			var cs [4]*dsl.MemoryChannel
			for i := range cs {
				cs[i] = p.MemoryChannel(q, r)
			}
			for i, c := range cs {
				switch {
				case i < 2 && relaxed:
					c.RelaxedSignal(dsl.TB(0), dsl.SyncBoth)
				case i < 2:
					c.Signal(dsl.TB(0), dsl.SyncBoth)
				case relaxed:
					c.RelaxedWait(dsl.TB(0), dsl.SyncBoth)
				default:
					c.Wait(dsl.TB(0), dsl.SyncBoth)
				}
			}
		})
		return p.Lower()
	}
}

var (
	signalWaitFuseTest        = signalWaitFuseGen("signal_wait_test", false)
	relaxedSignalWaitFuseTest = signalWaitFuseGen("relaxed_signal_wait_test", true)
)

func flushTest(n int) (*plan.Plan, error) {
	p := test("flush_test", n, plan.Simple, 0, 0)
	eachPair(n, func(r, q int) { p.PortChannel(q, r).Flush(dsl.TB(0), dsl.SyncBoth) })
	return p.Lower()
}

// flushFuseTest: two port channels from rank 0 to rank 1, flushed one after
// the other on one block (fused into one flush of both); ranks 1 and 2 do
// nothing.
func flushFuseTest(n int) (*plan.Plan, error) {
	p := test("flush_test", n, plan.Simple, 0, 0)
	p.PortChannel(1, 0).Flush(dsl.TB(0), dsl.SyncAfter)
	p.PortChannel(1, 0).Flush(dsl.TB(0), dsl.SyncBefore)
	return p.Lower()
}

func semaphoreTest(n int) (*plan.Plan, error) {
	p := test("semaphore_test", n, plan.Simple, 0, 0)
	s := p.Rank(0).Semaphore(1)
	s.Acquire(dsl.TB(0), dsl.SyncAfter)
	s.Release(dsl.TB(0), dsl.SyncBefore)
	return p.Lower()
}

func copyTest(n int) (*plan.Plan, error) {
	p := test("copy_test", n, plan.Simple, 1, 1)
	rk := p.Rank(0)
	rk.Copy(rk.Output().Chunk(0, 1), rk.Input().Chunk(0, 1), dsl.TB(0))
	return p.Lower()
}

// relaxedOpen and closeBoth are the handshakes around the data op of the
// two-rank unit programs: relaxed signal/wait before (the peer is ready),
// signal/wait after (the data arrived).
func relaxedOpen(c *dsl.MemoryChannel) {
	c.RelaxedSignal(dsl.TB(0), dsl.SyncBoth)
	c.RelaxedWait(dsl.TB(0), dsl.SyncAfter)
}

func closeBoth(c *dsl.MemoryChannel) {
	c.Signal(dsl.TB(0), dsl.SyncBefore)
	c.Wait(dsl.TB(0), dsl.SyncAfter)
}

// putTest: each rank puts its input chunk 0 into the peer's input chunk 1.
func putTest(n int) (*plan.Plan, error) {
	p := test("put_test", n, plan.Simple, 2, 0)
	eachPair(n, func(r, q int) {
		c := p.MemoryChannel(q, r)
		relaxedOpen(c)
		c.Put(p.Rank(q).Input().Chunk(1, 1), p.Rank(r).Input().Chunk(0, 1), dsl.TB(0))
		closeBoth(c)
	})
	return p.Lower()
}

// putFuseTest: two puts on two channels to the peer (fused into one put
// with two buffers), swapping input chunks 0 and 1 across the ranks. Each
// rank reads its own chunk 0 while the peer writes it, ordered only by the
// relaxed handshake: a race.
func putFuseTest(n int) (*plan.Plan, error) {
	p := test("put_test", n, plan.Simple, 2, 0)
	eachPair(n, func(r, q int) {
		c := p.MemoryChannel(q, r)
		relaxedOpen(c)
		c.Put(p.Rank(q).Input().Chunk(1, 1), p.Rank(r).Input().Chunk(0, 1), dsl.TB(0))
		c2 := p.MemoryChannel(q, r)
		c2.Put(p.Rank(q).Input().Chunk(0, 1), p.Rank(r).Input().Chunk(1, 1), dsl.TB(0))
		closeBoth(c2)
	})
	return p.Lower()
}

// getGen: each rank gets the peer's input chunk 1 into its own input chunk
// 0 (twice in the fuse program).
func getGen(name string, times int) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := test(name, n, plan.Simple, 2, 0)
		eachPair(n, func(r, q int) {
			c := p.MemoryChannel(q, r)
			relaxedOpen(c)
			for range times {
				c.Get(p.Rank(r).Input().Chunk(0, 1), p.Rank(q).Input().Chunk(1, 1), dsl.TB(0))
			}
			closeBoth(c)
		})
		return p.Lower()
	}
}

var (
	getTest     = getGen("get_test", 1)
	getFuseTest = getGen("get_test", 2)
)

// pwsGen: port channels: signal/wait, then put_with_signal(s) (or pwsf)
// from input chunk 2i into the peer's input chunk 2i+1, then a wait.
//
// With two puts (the fuse program) each rank signals three times and the
// peer waits twice: one signal is left over (Unmatched). MSCCL++'s DSL does
// not check pairs, so neither does this program (UncheckedPairs).
func pwsGen(name string, in int, flush bool) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := newProgram(name, "test", n, plan.Simple, func(c *dsl.Config) {
			c.InputChunks, c.UncheckedPairs = in, true
		})
		eachPair(n, func(r, q int) {
			c := p.PortChannel(q, r)
			c.Signal(dsl.TB(0), dsl.SyncBoth)
			c.Wait(dsl.TB(0), dsl.SyncAfter)
			for i := 0; i+1 < in; i += 2 {
				dst, src := p.Rank(q).Input().Chunk(i+1, 1), p.Rank(r).Input().Chunk(i, 1)
				if flush {
					c.PutWithSignalAndFlush(dst, src, dsl.TB(0))
				} else {
					c.PutWithSignal(dst, src, dsl.TB(0))
				}
			}
			c.Wait(dsl.TB(0), dsl.SyncAfter)
		})
		return p.Lower()
	}
}

var (
	pwsTest     = pwsGen("put_with_signal_test", 2, false)
	pwsFuseTest = pwsGen("put_with_signal_test", 4, false)
	pwsfTest    = pwsGen("put_with_signal_and_flush_test", 2, true)
)

// putPacketTest: each rank puts its input chunk as packets into the
// peer's scratch (nothing reads them).
func putPacketTest(n int) (*plan.Plan, error) {
	p := test("put_packets_test", n, plan.LL, 1, 0)
	eachPair(n, func(r, q int) {
		scr := p.Rank(q).NewScratch(1)
		p.MemoryChannel(q, r).PutPackets(scr.Chunk(0, 1), p.Rank(r).Input().Chunk(0, 1), dsl.TB(0))
	})
	return p.Lower()
}

// readPutPacketTest forwards packets from a scratch chunk nothing writes,
// as MSCCL++'s unit program does (it demonstrates the op's shape only).
func readPutPacketTest(n int) (*plan.Plan, error) {
	p := test("read_put_packets_test", n, plan.LL, 0, 0)
	scr := []dsl.Buffer{p.Rank(0).NewScratch(2), p.Rank(1).NewScratch(2)}
	eachPair(n, func(r, q int) {
		p.MemoryChannel(q, r).ReadPutPackets(scr[q].Chunk(1, 1), scr[r].Chunk(0, 1), dsl.TB(0))
	})
	return p.Lower()
}

// copyPacketTest: input chunk 0 packed into scratch (the output is left
// alone).
func copyPacketTest(n int) (*plan.Plan, error) {
	p := test("copy_packets_test", n, plan.LL, 1, 1)
	rk := p.Rank(0)
	rk.CopyPackets(rk.NewScratch(1).Chunk(0, 1), rk.Input().Chunk(0, 1), dsl.TB(0))
	return p.Lower()
}

// unpackPacketTest: pack the input into scratch, unpack it into the output.
func unpackPacketTest(n int) (*plan.Plan, error) {
	p := test("unpack_packets_test", n, plan.LL, 1, 1)
	rk := p.Rank(0)
	scr := rk.NewScratch(1)
	rk.CopyPackets(scr.Chunk(0, 1), rk.Input().Chunk(0, 1), dsl.TB(0))
	rk.UnpackPackets(rk.Output().Chunk(0, 1), scr.Chunk(0, 1), dsl.TB(0))
	return p.Lower()
}

// reduceGen: out[0] = in[0] + in[k] for k = 1..extra, one reduce each, on
// one block or on thread-block groups of the given sizes (one per reduce).
func reduceGen(name string, extra int, groups ...int) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := test(name, n, plan.Simple, extra+1, extra)
		rk := p.Rank(0)
		for k := 1; k <= extra; k++ {
			var tb dsl.Blocks = dsl.TB(0)
			if len(groups) > 0 {
				tbs := make([]int, groups[k-1])
				for i := range tbs {
					tbs[i] = i
				}
				tb = p.TBGroup(tbs...)
			}
			rk.Reduce(rk.Output().Chunk(0, 1), []dsl.Chunk{rk.Input().Chunk(0, 1), rk.Input().Chunk(k, 1)}, dsl.Sum, tb)
		}
		return p.Lower()
	}
}

var (
	reduceTest        = reduceGen("reduce_test", 1)
	reduceFuseTest    = reduceGen("reduce_test", 2)
	tbgReduceTest     = reduceGen("reduce_test", 1, 4)
	tbgReduceFuseTest = reduceGen("reduce_test", 2, 4, 3)
)

// readReduceGen: out[0] = in[0] + the peer's in[k] for each k of peerChunks
// (one rre each; with send, the result is also put into the peer's out[1]).
func readReduceGen(name string, peerChunks []int, send bool) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := test(name, n, plan.Simple, 2, 2)
		eachPair(n, func(r, q int) {
			c := p.MemoryChannel(q, r)
			rk := p.Rank(r)
			relaxedOpen(c)
			for _, k := range peerChunks {
				c.Reduce(rk.Output().Chunk(0, 1), rk.Input().Chunk(0, 1), []dsl.Chunk{p.Rank(q).Input().Chunk(k, 1)}, dsl.Sum, dsl.TB(0))
			}
			if send {
				c.Put(p.Rank(q).Output().Chunk(1, 1), rk.Output().Chunk(0, 1), dsl.TB(0))
			}
			closeBoth(c)
		})
		return p.Lower()
	}
}

var (
	readReduceTest     = readReduceGen("read_reduce_test", []int{1}, false)
	readReduceFuseTest = readReduceGen("read_reduce_test", []int{0, 1}, false)
	readReduceSendTest = readReduceGen("read_reduce_send_test", []int{1}, true)
)

// reduceSendGen: out[0] = in[0] + in[1], put into the peer's out[1] (res),
// on one block or on a group of four.
func reduceSendGen(tbg bool) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := test("reduce_send_test", n, plan.Simple, 2, 2)
		eachPair(n, func(r, q int) {
			c := p.MemoryChannel(q, r)
			rk := p.Rank(r)
			var tb dsl.Blocks = dsl.TB(0)
			if tbg {
				tb = p.TBGroup(0, 1, 2, 3)
			}
			relaxedOpen(c)
			rk.Reduce(rk.Output().Chunk(0, 1), []dsl.Chunk{rk.Input().Chunk(0, 1), rk.Input().Chunk(1, 1)}, dsl.Sum, tb)
			c.Put(p.Rank(q).Output().Chunk(1, 1), rk.Output().Chunk(0, 1), tb)
			closeBoth(c)
		})
		return p.Lower()
	}
}

var (
	reduceSendTest    = reduceSendGen(false)
	tbgReduceSendTest = reduceSendGen(true)
)

// reducePacketsGen: one rank, scratch only: s[last] = s[0] + packets of
// s[k] for k = 1..extra (one repkt each). Nothing writes the scratch.
func reducePacketsGen(name string, extra int) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := test(name, n, plan.LL, 0, 0)
		s := p.Rank(0).NewScratch(extra + 2)
		for k := 1; k <= extra; k++ {
			p.Rank(0).ReducePackets(s.Chunk(extra+1, 1), s.Chunk(0, 1), []dsl.Chunk{s.Chunk(k, 1)}, dsl.Sum, dsl.TB(0))
		}
		return p.Lower()
	}
}

var (
	reducePacketTest      = reducePacketsGen("reduce_packet_test", 1)
	reducePacketFuseTest  = reducePacketsGen("reduce_packet_test", 2)
	reducePacketsTest     = reducePacketsGen("reduce_packets_test", 1)
	reducePacketsFuseTest = reducePacketsGen("reduce_packets_test", 2)
)

// reduceSendPacketTest: each rank reduces scratch chunks 0 and 1 (packets)
// into scratch 2 and puts that as packets into the peer's scratch 3
// (respkt). Nothing writes scratch 0 or 1.
func reduceSendPacketTest(n int) (*plan.Plan, error) {
	p := test("reduce_send_packets_test", n, plan.LL, 0, 0)
	scr := []dsl.Buffer{p.Rank(0).NewScratch(4), p.Rank(1).NewScratch(4)}
	eachPair(n, func(r, q int) {
		c := p.MemoryChannel(q, r)
		p.Rank(r).ReducePackets(scr[r].Chunk(2, 1), scr[r].Chunk(0, 1), []dsl.Chunk{scr[r].Chunk(1, 1)}, dsl.Sum, dsl.TB(0))
		c.PutPackets(scr[q].Chunk(3, 1), scr[r].Chunk(2, 1), dsl.TB(0))
	})
	return p.Lower()
}

// reduceCopyPacketGen: rank 0 reduces packets of scratch 0 into input 0,
// packs input 0 into scratch 1 (recpkt) and, with send, also puts input 0
// as packets into rank 1's scratch (recspkt). Nothing writes scratch 0.
func reduceCopyPacketGen(name string, send bool) func(n int) (*plan.Plan, error) {
	return func(n int) (*plan.Plan, error) {
		p := test(name, n, plan.LL, 1, 0)
		rk := p.Rank(0)
		s0 := rk.NewScratch(2)
		var s1 dsl.Buffer
		if send {
			s1 = p.Rank(1).NewScratch(1)
		}
		in := rk.Input().Chunk(0, 1)
		rk.ReducePackets(in, in, []dsl.Chunk{s0.Chunk(0, 1)}, dsl.Sum, dsl.TB(0))
		rk.CopyPackets(s0.Chunk(1, 1), in, dsl.TB(0))
		if send {
			p.MemoryChannel(1, 0).PutPackets(s1.Chunk(0, 1), in, dsl.TB(0))
		}
		return p.Lower()
	}
}

var (
	reduceCopyPacketTest     = reduceCopyPacketGen("reduce_copy_packets_test", false)
	reduceCopySendPacketTest = reduceCopyPacketGen("reduce_copy_send_packets_test", true)
)

// switchBroadcastTest: rank 0 stores a scratch chunk it never wrote into
// the input of ranks 0 and 1 over the switch (MSCCL++'s shape demo).
func switchBroadcastTest(n int) (*plan.Plan, error) {
	p := test("group_store_test", n, plan.Simple, 1, 1)
	scr := p.Rank(0).NewScratch(1)
	sw := p.SwitchChannel([]int{0, 1}, dsl.Input)
	sw.At(0).Broadcast(scr.Chunk(0, 1), 0, 1, dsl.TB(0))
	pl, err := p.Lower()
	if err != nil {
		return nil, err
	}
	BufferForm(pl)
	return pl, nil
}

// switchReduceTest: rank 0 load-reduces input chunk 0 of ranks 0 and 1
// into its scratch (rank 2 does nothing).
func switchReduceTest(n int) (*plan.Plan, error) {
	p := test("switch_reduce_test", n, plan.Simple, 1, 1)
	scr := p.Rank(0).NewScratch(1)
	sw := p.SwitchChannel([]int{0, 1}, dsl.Input)
	sw.At(0).Reduce(scr.Chunk(0, 1), 0, 1, dsl.Sum, dsl.TB(0))
	return p.Lower()
}

// tbgSwitchTest: on four ranks, rank 0 load-reduces input chunk 0 of all
// into scratch 0 and stores scratch 1 (never written) into everyone's
// input chunk 0, both by a group of four blocks.
func tbgSwitchTest(n int) (*plan.Plan, error) {
	p := test("tbg_switch_test", n, plan.Simple, 1, 1)
	dst, src := p.Rank(0).NewScratch(1), p.Rank(0).NewScratch(1)
	sw := p.SwitchChannel([]int{0, 1, 2, 3}, dsl.Input)
	g := p.TBGroup(0, 1, 2, 3)
	sw.At(0).Reduce(dst.Chunk(0, 1), 0, 1, dsl.Sum, g)
	sw.At(0).Broadcast(src.Chunk(0, 1), 0, 1, g)
	return p.Lower()
}

func pipelineTest(n int) (*plan.Plan, error) {
	p := test("barrier_test", n, plan.Simple, 1, 1)
	rk := p.Rank(0)
	p.Pipeline(1<<20, 1, func() {
		rk.Copy(rk.Output().Chunk(0, 1), rk.Input().Chunk(0, 1), dsl.TB(0))
	})
	return p.Lower()
}

func tbgCopyTest(n int) (*plan.Plan, error) {
	p := test("copy_test", n, plan.Simple, 1, 1)
	rk := p.Rank(0)
	rk.Copy(rk.Output().Chunk(0, 1), rk.Input().Chunk(0, 1), p.TBGroup(0, 1, 2, 3))
	return p.Lower()
}
