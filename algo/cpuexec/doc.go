// Package cpuexec runs an MSCCL++ execution plan (package algo/plan) on CPU
// memory across the ranks of a communicator: goroutines of one process
// (threaded sessions) or separate processes (process sessions) on one
// host. It is the executor that makes a plan testable without a GPU, and
// it is what algo/run uses to make a plan a collective of a session.
//
// # Use
//
//	x, err := cpuexec.Join(ctx, ccl.Config{ID: id, Rank: r, Size: n}, p)
//	err = x.Run(ctx, in, out, reduce.Sum) // every rank, same sizes
//	x.Close()
//
// Every rank joins with the same id and the same plan (rank 0 creates a
// segment in /dev/shm named after a hash of the id, the others open it;
// a rank that loaded a different plan fails Join with ccl.ErrMismatch, and
// ranks missing after the timeout are named in a *WaitError).
//
// # Memory
//
// Every rank's input, output and scratch buffers live in one shared data
// segment, mapped by every rank, so a put is a copy into the peer's
// region and a get a copy out of it. Run copies the caller's input into
// the rank's input region before the call and the output region back
// afterwards; when the plan does not write every output chunk, the
// caller's output is copied in too, so unwritten bytes keep the caller's
// values (a poisoned output stays poisoned). The data segment grows, by a
// collective step all ranks take in the same call, when a call needs more
// room; in-place plans alias input and output as the collective says.
//
// # Semantics (docs/plans.md has the full list)
//
//   - A thread block is a coroutine that runs its ops in order on one of
//     the rank's workers (Run's goroutine, and goroutines owned by the
//     executor when the machine has cores to spare); it yields when it has
//     to wait. Cores a rank has beyond its workers take pieces of its
//     large plain copies and reduces (spare_linux.go); the op waits for
//     them, so a block's ops still run in order. nop is therefore empty, and flush too (a put has completed
//     when it returns).
//   - Memory and port channels: signal adds one to a counter in the
//     shared control segment that the peer's paired channel waits on (the
//     k-th channel from r to p pairs with the k-th channel from p to r);
//     wait waits until the counter reaches the number of waits so far. The
//     counters are 64-bit atomics (sequentially consistent), so a signal
//     releases the data written before it. Relaxed variants behave the
//     same.
//   - Switch channels (NVLink multicast) are emulated: glre reads the range
//     of every group rank and reduces in the group's rank order, gstore
//     writes a local chunk to every group rank, gstorepkt forwards local
//     packets to every group rank (waiting for their flags like rppkt),
//     glres pairs its source and destination references. Signal and wait
//     on a switch channel are its barrier: a signal counts on one counter
//     per group rank (pair counters, as on memory channels), the k-th wait
//     waits until every group rank signalled k times.
//   - LL packets: 4 data bytes and a 32-bit flag (the call's sequence
//     number) per 8-byte word, written and read with one atomic access;
//     readers wait per word. Scratch chunk c of an LL plan occupies
//     [2cC, 2(c+1)C). The buffers' regions follow the call's sizes, so a
//     scratch may lie where another call staged its input or output, and
//     an int32 element equal to the flag there would pass for a packet:
//     before each call a rank zeroes the bytes of its scratch that
//     earlier inputs and outputs left, all of its scratch at every flag
//     cycle (2^32-1 calls), and at every change of sizes of a plan that
//     keeps plain data in a scratch.
//   - reduce_op is honoured (sum, min, max) for every dtype ccl/reduce
//     supports, reducing all sources of an op in one ccl/reduce call in
//     source order; ops without reduce_op use Run's op, and an explicit
//     reduce_op that differs from Run's op is an error (WithReduceOp
//     rewrites a plan for another op).
//   - Every call compares every rank's sizes, dtype and op (a mismatch
//     fails every rank, nothing is written): in the plan's prologue (its
//     opening signals and waits, when they reach every peer and the plan
//     is self-synced) or else at a start barrier. A call ends with a
//     barrier unless the plan's own signals and waits order every remote
//     access of a rank's buffers before the owner's last op. Both are
//     decided at Join.
//   - Buffers no peer touches are the caller's tensors (no copy); when all
//     ranks share the process, peers use each other's tensors directly.
//   - Every wait spins briefly, then sleeps on a futex of its rank; one that
//     does not complete within the timeout fails with a *WaitError naming
//     rank, thread block, op and the peers awaited, and marks the executor
//     failed on every rank: later calls fail fast with ccl.ErrFailed.
package cpuexec
