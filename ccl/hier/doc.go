// Package hier is the "cpu-hier" collective backend: the "cpu" backend
// across hosts. Ranks on one host work through shared memory (a ccl/cpu
// communicator per host); between hosts, data moves over TCP links
// authenticated by net/link (TLS 1.3, cluster certificates or a
// token), between every rank and its counterparts on the other hosts
// (multi-ring) or between one leader per host. After that authentication
// a link leaves crypto/tls's 16 KiB records for sealed records of up to
// 256 KiB keyed by the TLS session (seal.go, net/seal: 0.008% of the
// wire instead of 0.13%, fewer copies). With EndpointOptions.Plaintext on
// every host the links turn
// plain TCP instead, after a challenge-response keyed by the TLS session
// (plain.go; for trusted networks only). Multi-host sessions (cluster) turn
// InitCCL("cpu") into this backend; nothing else needs to change.
//
// Rendezvous: every worker process listens on its host's address
// (Endpoint, started by the built-in chorus.hier.endpoint) and the
// controller collects the addresses into the communicator id (MakeID).
// At Join, every rank connects to every rank of the other hosts (the
// higher rank dials), and each connection names its communicator and
// ranks (and the leader ring's stripe, below) in a fixed-size hello
// after authentication.
//
// Every collective first agrees on the arguments across all ranks, as the
// cpu backend does: the 72-byte descriptors of a host's ranks (with the
// settings every rank must share: path, gathered maximum, multi-ring
// minimum and groups, stripes and stripe minimum, RHD maximum, ring
// chunks and inline rings) are gathered
// through shared memory, the leaders exchange their hosts' descriptors
// (each sends its host's to every other leader at once; from 8 hosts in
// ceil(log2 k) Bruck rounds of one message each, bruck.go), and every
// rank gets the full table, so a mismatch or bad arguments on any rank
// fail every rank with ccl.ErrMismatch / ccl.ErrBadArgs before any
// output is written. Then:
//
//   - allreduce, up to smallMax bytes (16 KiB; from 8 hosts only up to
//     agreeInlineMax, gatherMax): the ranks' inputs are gathered to
//     every rank (host, then leaders, then host) and reduced in rank order
//     with one ccl/reduce call: bit for bit the single-host result. Up to
//     agreeInlineMax they ride in the agreement round; with one rank per host
//     up to carryMaxBytes too (carry.go; below 8 hosts), so such an allreduce
//     is one round between hosts, not two;
//   - allreduce from multiRingMin (1 MiB) up, when every host holds the
//     same number L > 1 of ranks: multi-ring (as NCCL's channels). Local rank j owns part j
//     of the message (cpu.Part: ceil(count/L) elements each; the same on
//     every host). The host's direct or single-copy allreduce runs in two
//     halves (cpu.Comm.AllReduceSplit): in the first, local rank j
//     reduces part j of every local rank's input; between them, local
//     rank j allreduces part j with local rank j of every other host (L
//     rings at once, each on its own links, so every rank's core and
//     connection works, not one leader doing all the crypto and copies);
//     in the second half every local rank copies every part. Above two
//     quarters of pipeBytes (4 MiB) the message runs in groups of at most
//     pipeBytes, the first and the last a quarter of it
//     (cpu.Comm.AllReducePiped, cpu.PipeCuts): the rings of one group
//     overlap the host's reduction of the next and its copies of the
//     previous, and the short edges keep the links' idle time at the
//     start and the end of a call short. Hosts whose
//     ranks cannot read each other (staged ccl/cpu path) run a staged
//     allreduce, the rings on the parts, then a broadcast of each part
//     from its owner;
//   - allreduce, larger, otherwise (below multiRingMin, one rank per
//     host, or hosts with unequal rank counts): the leader path: a shared-memory allreduce
//     inside each host, an allreduce between one leader per host (its
//     lowest rank), and a broadcast inside each host;
//   - between hosts, both paths use recursive halving and doubling when
//     there are 4, 8, ... hosts and the ring's message (the share, or the
//     whole message) is at most rhdMax (128 KiB: fewer steps), else a
//     pipelined ring: reduce-scatter and allgather as one stream of
//     chunks (chunkBytes, at least 4 per segment down to ringMinChunk,
//     32 KiB), chunk c of step t
//     forwarded as soon as chunk c of step t-1 has arrived and been
//     reduced, so every link carries data in both directions all the
//     time and reductions overlap the transfers. A ring whose segments
//     are at most ringInlineMax (32 KiB) runs on one goroutine: it
//     writes a step's segment and then reads the next, with no hand-off
//     to a sending goroutine (a wake-up per step, more than a small
//     segment's transfer). RHD reduces what it receives in reducePieceBytes
//     pieces as they arrive. On encrypted links (sealed or TLS records)
//     a message is flushed (one record) every flushBytes (the link
//     buffer by default) and a ring chunk as soon as it is written. Reads may poll the socket before they park
//     (poll.go, tests only; off: no gain measured). With one rank per host
//     the leader reads its contribution straight from the send buffer.
//     Received reduce-scatter chunks are read and reduced reducePieceBytes
//     bytes at a time (in cache); plaintext links write and read straight
//     between the socket and the tensors (a header leaves with its
//     message's first bytes in one writev), encrypted links through
//     their record layer's buffers (sealed) or the link buffer (TLS).
//     Striped leader rings (stripe.go; as NCCL's several sockets per
//     peer): one TLS connection per direction is one core encrypting and
//     one decrypting, so from stripeMinBytes (256 KiB;
//     on more than 4 hosts where each segment is at least stripeMinBytes/4 too)
//     up the leader ring splits the message into S stripes (cpu.Part:
//     the same split on every leader) and runs S rings at once, each on
//     its own links to the next and previous leader with its own
//     goroutines and scratch. S (1 to MaxStripes) is DefaultStripes (8) on the leader path and
//     DefaultMultiStripes (2) on the multi-ring path, where every local
//     rank's ring runs on links to its counterparts, striped only for
//     messages from 256 x stripeMinBytes (64 MiB; below, the rings already
//     keep every local rank's core and link busy); leader rings below
//     32 x stripeMinBytes (8 MiB) run
//     on at most 4 of the links (ringStripes: eight bbr flows kept a 10
//     Gbit/s uplink busier than four from 16 MiB, and cost more than
//     they gave below); a constant, not the host's core count, since
//     every rank must stripe alike: the agreement round fails a
//     collective whose ranks differ in S or the minimum with
//     ccl.ErrMismatch naming the variable. The extra links exist only
//     between leaders (multi-ring path: counterparts) of
//     neighbouring hosts in the ring and are made at Join: the dialer's
//     hello names the stripe and its count (refused if the stripe is not
//     below the count or the count is not 1 to MaxStripes; decoded only
//     after authentication), the acceptor keeps the stripes below its
//     own count. RHD uses stripe 0 only.
//     Where each link's share of a segment is ringMinChunks chunks of
//     ringMinChunk or more, the S links carry one balanced ring instead
//     (balancedRing): its chunks, numbered, go out on whichever link is
//     free, and every stripe link keeps at most notSentLowat bytes
//     unsent (TCP_NOTSENT_LOWAT, notSentLowat), so a slow flow
//     takes fewer chunks and the ring ends when the link is through, not
//     its slowest flow; it reduces in the unstriped ring's order.
//     Comm.PathFor says "leader ring, S stripes";
//     Comm.Path says which path a communicator takes and why,
//     Comm.PathFor which algorithm a size gets; the path is part of every
//     agreement (ranks that differ fail a collective with
//     ccl.ErrMismatch).
//     Every element is reduced along exactly one ring (or RHD exchange,
//     or stripe's ring) and then copied, so every rank gets the same
//     bits. Rounding of
//     float16/bfloat16 (which accumulate in float32): the host's sum of
//     its ranks is rounded once (one ccl/reduce call over the host's
//     ranks in rank order), then once per hop between hosts (each ring
//     step or RHD step adds one partial sum and rounds); avg sums and
//     divides once at the end (ccl/reduce's Divide rules). The two paths
//     split the message into ring segments differently, and so do
//     different stripe counts, so float results may differ between them
//     in the last bits (integers are exact);
//   - allgather, broadcast: the same three levels, leaders exchanging
//     whole host blocks; reduce-scatter, scatter and gather reuse
//     allreduce, broadcast and allgather through a temporary buffer (they
//     move more data than they need to: correctness first);
//   - send/recv inside a host use shared memory; across hosts the direct
//     link, with a size and dtype check answered before the data moves.
//
// Faults: every wait is bounded by the communicator's timeout and ends
// with a ccl.TimeoutError naming the ranks; any failure (on any stripe)
// closes the links (every stripe's) and fails the shared-memory
// communicator, so every rank's collective
// ends promptly with an error and later calls fail with ccl.ErrFailed.
// Abort (from any goroutine) does the same.
package hier
