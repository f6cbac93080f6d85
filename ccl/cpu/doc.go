// Package cpu is the "cpu" collective backend: ranks on one host (goroutines
// of one process, or processes) exchange data through a shared memory
// segment synchronised with atomics and futexes.
//
// Rendezvous: rank 0 creates the segment as a file in /dev/shm named after
// a hash of the communicator id, the others open it, and rank 0 removes the
// name as soon as every rank has mapped it, so nothing is left behind even
// if a process dies later. The same code serves threaded and process
// sessions, and plain Go programs that start their ranks themselves (agree
// on an id, call Backend.Join).
//
// Algorithms (per chunk of at most Options.SlotBytes per rank, so any size
// streams through fixed memory; every rank has two slots used alternately,
// so a rank may refill one while others still read the other):
//   - allreduce, 1-2 ranks or small messages: one-shot: every rank copies
//     its chunk into its slot, one barrier, every rank reduces all slots
//     into its output;
//   - allreduce, larger: reduce-scatter then all-gather through the slots:
//     rank r reduces part r of every slot into its own slot, a barrier,
//     every rank copies all parts out (less memory traffic per rank when
//     there are more than two ranks);
//   - allreduce above OneShotMax without staging: ranks of one process read
//     each other's buffers directly; ranks in different processes read
//     buffers that lie in the peer's shared tensor arena (internal/sys/shmarena,
//     installed by worker processes; mapped read-write at Join) through that
//     mapping with plain loads ("shm"), and other buffers with
//     process_vm_readv (single copy; probed at Join, all ranks or none),
//     peer by peer; Comm.Path and PathFor say which and why not; when
//     every rank's output is reachable (direct, or every output in its
//     arena) each rank pushes its reduced part into every peer's output
//     (push.go: memory traffic at the bound, two barriers), else every
//     rank pulls the others' parts (three barriers); each rank
//     splits its work over its share of the host's cores (threadsFor);
//     AllReduceSplit runs this path with a caller's step on each rank's
//     reduced part between the two halves (ccl/hier's rings between
//     hosts), and AllReducePiped in groups, the caller's step on one
//     group (on a goroutine of the call) while the rank reduces the
//     next and pushes the previous;
//   - reduce-scatter: each rank stages the n blocks, one barrier, rank r
//     reduces block r of every slot into its output;
//   - allgather, broadcast, scatter, gather: stage, barrier, copy out;
//   - send/recv: a mailbox per ordered pair of ranks with a rendezvous (the
//     receiver posts its size, the sender checks it), then chunks.
//
// Every reduction calls ccl/reduce once per element range with all ranks'
// inputs in rank order, so results are identical whatever the algorithm
// and bitwise reproducible (float16/bfloat16 accumulate in float32 and are
// rounded once).
package cpu
