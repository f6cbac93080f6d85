// Package dsl is a Go language for collective-communication algorithms in
// the style of MSCCL++'s Python DSL: a program says, per rank and thread
// block, which chunks move through which channels and how they are
// reduced; Lower turns it into an execution plan (package algo/plan) that
// MSCCL++'s executor and chorus's executors and verifier read.
//
//	p := dsl.NewProgram(dsl.Config{Name: "ag", Collective: plan.AllGather, Ranks: 2})
//	for r := range 2 {
//		ch := p.MemoryChannel(1-r, r)           // lives on r, reaches 1-r
//		rk := p.Rank(r)
//		rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(0, 1), dsl.TB(0))
//		ch.Put(p.Rank(1-r).Output().Chunk(r, 1), rk.Input().Chunk(0, 1), dsl.TB(0))
//		ch.Signal(dsl.TB(0), dsl.SyncBefore)   // the put is complete
//		ch.Wait(dsl.TB(0), dsl.SyncAfter)      // the peer's put is complete
//	}
//	pl, err := p.Lower()
//
// The pieces: Program (configuration, ranks, channels, thread-block
// groups, pipelines), Rank (buffers, scratch allocation, local copy and
// reduce, packet pack/unpack, barriers, semaphores), Buffer and Chunk
// (chunk ranges of a rank's buffer), MemoryChannel, PortChannel and
// SwitchChannel with every channel operation of MSCCL++ (signal/wait with
// data sync and relaxed forms, put, get, packet puts, remote reduce,
// flush, put-with-signal(-and-flush), multimem reduce and broadcast).
//
// Errors: every call checks its arguments (ranks in range, chunk ranks
// matching the channel's ends, equal chunk sizes, chunks inside their
// buffers, scratch for packets, the LL protocol for packet ops, single
// thread blocks where a group is not allowed, ...). A bad call records an
// *Error naming the rank, thread block and operation, adds nothing, and the
// program goes on; Err returns the errors so far and Lower returns them.
// Nothing in the package panics on bad input.
//
// Lowering (see Lower) pairs signals with waits, fuses neighbouring ops as
// MSCCL++ does, expands data sync into nop ops, inserts the nops that
// intra-block hazards need (auto-sync), and replicates instances. The
// result always passes plan.Validate. docs/dsl.md is the guide.
//
// The package depends on the standard library and algo/plan only.
package dsl
