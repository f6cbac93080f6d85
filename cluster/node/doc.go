// Package node is the node agent of a multi-host session (`chorus node
// --connect HOST:PORT`): it connects to the controller (cluster),
// authenticates (net/link), receives its node rank and global worker
// ids, starts this host's worker processes with the process-session
// machinery (session.StartLocal: shared-memory rings, lifeline), and
// relays commands and replies over its one connection.
//
// It stops its workers and exits when the controller says Shutdown, when
// the controller's connection ends or stays silent past the deadline, or
// when its context ends (SIGINT/SIGTERM in the CLI); its workers exit by
// themselves if the agent dies (their lifeline pipe closes). A worker that
// dies is reported to the controller, which fails the session.
//
// When the session traces, its workers record their events, the agent
// records the commands it relays, answers the controller's clock pings,
// and sends every event over the control connection once its workers
// stopped (docs/observability.md, "Multi-host traces").
package node
