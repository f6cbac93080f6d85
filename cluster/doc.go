// Package cluster is the controller side of a multi-host session: it
// listens on an address (loopback unless told otherwise), waits for one
// node agent per host (cluster/node) to connect and authenticate
// (net/link), gives each its node rank and global worker ids
// (host-major: node 0's workers first), and returns an ordinary
// *session.Session whose driver relays commands over one connection per
// host. Every command, built-in and collective of a process session works
// across hosts; InitCCL("cpu") becomes the hierarchical cross-host
// backend (ccl/hier) once the session spans several hosts.
//
// Faults: both ends send heartbeats (Options.Heartbeat, default 1 s) and
// give up on a connection that carried nothing for Options.Deadline
// (default 3 s). A host that died, stalled or was cut off fails the
// session with a HostLostError (errors.Is ErrHostLost and
// session.ErrWorkerLost) naming the node and its workers; the surviving
// agents are told to abort their workers' collectives. Agents stop their
// workers when the controller is gone, and workers exit when their agent
// is gone (the process session's lifeline). See docs/multi-host.md.
//
// Tracing (Options.Trace, CHORUS_TRACE): the agents send their workers'
// events and their own at the end, bounded by Options.TraceLimit; the
// controller aligns each host's clock with the best ping round trip and
// merges them into the session's trace, naming hosts whose events are
// missing (docs/observability.md, "Multi-host traces").
package cluster
