package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/chorus-rt/chorus/runtime/trace"

	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// Local is a set of worker processes on this host that belong to a larger
// session: a node agent (cluster/node) starts them with the process-session
// machinery (shared-memory rings, lifeline, watchers) and relays their
// commands and replies. Worker ids are global: Base, Base+1, ...
type Local struct {
	p      *process
	Base   int
	Count  int
	prefix string // of the workers' trace part files; "" when not tracing
}

// StartLocal starts opts.NumWorkers worker processes with global ids base,
// base+1, ... of a session of total workers in opts.NumGroups groups. It
// does not ping them; the controller does. opts.Trace, when set, is not a
// trace file but the prefix of the workers' part files (the agent's
// temporary directory): the workers record their events there, and
// TraceEvents collects them after Stop.
func StartLocal(opts ProcessOptions, base, total int) (*Local, error) {
	if err := refuseInsideWorker(); err != nil {
		return nil, err
	}
	n := opts.NumWorkers
	groups, err := validateCounts(total, opts.NumGroups)
	if err != nil {
		return nil, err
	}
	if err := checkMax("process", n); err != nil {
		return nil, err
	}
	if n < 1 || base < 0 || base+n > total {
		return nil, fmt.Errorf("session: local workers [%d, %d) outside [0, %d)", base, base+n, total)
	}
	if err := opts.checkDevices(); err != nil {
		return nil, err
	}
	if opts.Transport == "" {
		opts.Transport = "shm"
	}
	if opts.Transport != "shm" && opts.Transport != "stream" {
		return nil, fmt.Errorf("session: unknown transport %q (want shm or stream)", opts.Transport)
	}
	prog, err := workerProgram(opts.Program)
	if err != nil {
		return nil, err
	}
	stderr := opts.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	p, err := startProcesses(opts, prog, stderr, base, n, total, groups, opts.Trace)
	if err != nil {
		return nil, err
	}
	return &Local{p: p, Base: base, Count: n, prefix: opts.Trace}, nil
}

// Send delivers c to global worker c.Worker (one of ours) or to all of
// ours. One goroutine sends.
func (l *Local) Send(c *wire.Command) error {
	if c.Worker != wire.AllWorkers && (int(c.Worker) < l.Base || int(c.Worker) >= l.Base+l.Count) {
		return fmt.Errorf("session: worker %d is not on this host (have %d-%d)", c.Worker, l.Base, l.Base+l.Count-1)
	}
	return l.p.send(c)
}

// Recv returns the next message of local worker i (global id Base+i).
// One goroutine per worker may receive.
func (l *Local) Recv(ctx context.Context, i int) (*wire.Reply, error) { return l.p.recv(ctx, i) }

// Lost returns the LostError of the first worker that died, if any.
func (l *Local) Lost() error { return l.p.lost() }

// Quiesce announces a coming Shutdown: exits are no longer failures.
func (l *Local) Quiesce() { l.p.quiesce() }

// AbortCollectives asks every live worker to abort its communicators
// (worker.SignalAbort): a peer elsewhere was lost.
func (l *Local) AbortCollectives() {
	for _, w := range l.p.ws {
		select {
		case <-w.exited:
		default:
			_ = w.cmd.Process.Signal(worker.SignalAbort)
		}
	}
}

// Stop waits up to grace for the workers to exit (after a Shutdown
// command), then closes their lifeline, then kills them.
func (l *Local) Stop(grace time.Duration) error { return l.p.stop(grace) }

// TraceEvents returns the events the workers recorded (global ids) when
// they were started with a trace prefix, and removes their part files;
// call it after Stop and before Close. At most limit bytes (0: no limit)
// of each worker's part file are read, its newest events: dropped counts
// the older ones left out. A worker that died adds what its flight
// recorder still holds (marked unfinished).
func (l *Local) TraceEvents(limit int64) (evs []trace.Event, dropped int64, err error) {
	if l.prefix == "" {
		return nil, 0, nil
	}
	parts := make([]string, len(l.p.ws))
	rings := make([]*trace.Ring, len(l.p.ws))
	for i, w := range l.p.ws {
		parts[i], rings[i] = partPath(l.prefix, w.id), w.ring
	}
	evs, dropped, errs := mergeParts(parts, rings, limit)
	return evs, dropped, errors.Join(errs...)
}

// Close frees the connections.
func (l *Local) Close() { l.p.close() }

// PIDs are the worker process ids, local order.
func (l *Local) PIDs() []int {
	out := make([]int, len(l.p.ws))
	for i, w := range l.p.ws {
		out[i] = w.cmd.Process.Pid
	}
	return out
}
