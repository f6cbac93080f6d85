// Package shm is the shared-memory transport: the default transport.Conn
// between a controller and a worker process on the same Linux host.
//
// Its purpose is latency. Each connection is one memfd segment, mapped
// MAP_SHARED by both processes, holding two single-producer/single-consumer
// byte rings (controller->worker and worker->controller). Sending a frame is
// a copy into the ring; Flush publishes it with one atomic store. A waiting
// reader first polls the shared index for a short, bounded and adaptive time
// (letting other goroutines run between polls), then sleeps in a
// cross-process futex; a publisher only makes the wake-up system call when
// the reader announced that it sleeps. A small-frame round trip between two
// awake processes therefore costs well under a microsecond, against several
// microseconds for a pipe.
//
// The controller calls Create and hands the returned memfd to the worker
// (for example through exec.Cmd.ExtraFiles); the worker calls Open on it.
// Frames may be of any size up to transport.MaxFrame, also larger than a
// ring: they are streamed through in pieces.
//
// A Log (CreateLog, OpenLog) is a second kind of segment: one producer
// appends entries that every consumer reads, each addressed to one
// consumer or to all; a process session sends every command through it,
// so that a broadcast is one write instead of one per worker. Frames too
// large for an entry are redirects to the consumer's own Conn (LogConn
// joins the two on the worker's side).
//
// The segment holds no process-death detection: when a worker dies, the
// session learns it from the process and calls Abort. A Close, by contrast,
// is visible to a live peer, whose Recv returns transport.ErrPeerGone once
// it has drained the ring.
//
// On systems other than Linux the package builds, but Create and Open return
// ErrUnsupported.
package shm
