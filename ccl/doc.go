// Package ccl is chorus's collective-communication layer: the Comm
// interface that every backend implements (allreduce, allgather,
// reduce-scatter, broadcast, scatter, gather, point-to-point send and
// receive, barrier), a registry of backends by name ("cpu" now; "nccl"
// and "ipc" later), and the argument checks and error types all backends
// share, so that every backend fails the same way on the same bad input.
//
// Semantics (shared with TVM's Disco, plus reduce-scatter):
//   - AllReduce: recv = op over ranks of send; recv may be send (in place).
//   - AllGather: recv = concatenation of every rank's send, in rank order.
//   - ReduceScatter: rank r's recv = slice r of op over ranks of send.
//   - Broadcast: every recv = root's send (non-roots may pass send nil).
//   - Scatter: root's send is split evenly; rank r receives slice r.
//   - Gather: root's recv = concatenation of every rank's send.
//   - Send/Recv: point to point; sending to oneself is an error.
//
// Every collective is called by all ranks of the communicator, in the same
// order. Arguments are checked locally (sizes, dtypes, aliasing) and then
// across ranks (same collective, dtype, count, op and root): a mismatch is
// reported on every rank, and no output is written. A collective that
// waits longer than the communicator's timeout fails with a TimeoutError
// naming the ranks that never arrived, and the communicator is then failed
// for good (every rank's later calls return ErrFailed).
//
// Backends read no environment: their settings are options (cpu.Options,
// hier.EndpointOptions, ipc.Options, nccl.Options) that the worker passes
// at Join; the measured choices are the code (docs/configuration.md).
package ccl
