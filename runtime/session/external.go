package session

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// Driver moves commands and replies for a session whose workers this
// package does not start itself: a multi-host session (cluster)
// relays them to node agents. Calls are serialized by the Session, except
// Stop (see driver).
type Driver interface {
	// Send delivers c to c.Worker, or to every worker for AllWorkers.
	Send(c *wire.Command) error
	// Recv returns worker w's next message.
	Recv(ctx context.Context, w int) (*wire.Reply, error)
	// Poll returns worker w's next message if one is ready, else nil.
	Poll(w int) (*wire.Reply, error)
	// Lost returns the error that failed the session, if any (it should
	// satisfy errors.Is(err, ErrWorkerLost)).
	Lost() error
	// Quiesce announces that workers are about to be told to exit.
	Quiesce()
	// Stop ends the workers after the Shutdown command (sent when the
	// session could): wait up to grace, then force; finally abort every
	// wait so that a call still blocked returns.
	Stop(grace time.Duration) error
	// Close frees the connections; no call is in flight.
	Close()
}

// CCLPreparer is implemented by Drivers whose workers need the
// controller's help before they can join a communicator (workers on
// several hosts must learn each other's addresses). InitCCL calls it
// first; it returns the backend the workers join and their id, or a nil
// id to let the backend make one (Backend.NewID on the controller).
type CCLPreparer interface {
	PrepareCCL(ctx context.Context, s *Session, backend string) (string, []byte, error)
}

type external struct{ d Driver }

func (e external) send(c *wire.Command) error { return e.d.Send(c) }
func (e external) recv(ctx context.Context, w int) (*wire.Reply, error) {
	return e.d.Recv(ctx, w)
}
func (e external) poll(w int) (*wire.Reply, error) { return e.d.Poll(w) }
func (e external) lost() error                     { return e.d.Lost() }

// cheapPoll: an external driver's Poll may do I/O, so collect waits for
// replies in worker order instead of scanning.
func (e external) cheapPoll() bool                { return false }
func (e external) quiesce()                       { e.d.Quiesce() }
func (e external) stop(grace time.Duration) error { return e.d.Stop(grace) }
func (e external) close()                         { e.d.Close() }

// TraceSource is implemented by Drivers whose workers' trace events
// reach the controller through the driver (cluster: each node
// agent collects its workers' events and sends them before it confirms
// Stop). When the session traces, it calls TraceEvents once, after Stop,
// and merges the result into the trace file.
type TraceSource interface {
	// TraceEvents returns the events collected (on the controller's
	// clock, with global worker ids, faults on the controller's faults
	// track) and entries for the trace file's otherData (how the hosts'
	// clocks were aligned, whose events are missing or were dropped).
	TraceEvents() ([]trace.Event, map[string]any)
}

// ExternalOptions configure NewExternalWith. Of Options, NumWorkers,
// NumGroups, ShutdownGrace (default 5 s), Trace, HangReport and
// HangOutput apply; WorkerDeadline does not (the driver has its own
// heartbeats).
type ExternalOptions struct {
	Options
	// StartTimeout bounds the first ping of every worker (default 30 s).
	StartTimeout time.Duration
}

// NewExternal makes a session of kind (e.g. "remote") over d, pings every
// worker (bounded by ctx and startTimeout, default 30 s) and returns it.
// On failure the session is shut down.
func NewExternal(ctx context.Context, kind string, n, groups int, d Driver, grace, startTimeout time.Duration) (*Session, error) {
	return NewExternalWith(ctx, kind, d, ExternalOptions{Options: Options{NumWorkers: n, NumGroups: groups, ShutdownGrace: grace}, StartTimeout: startTimeout})
}

// NewExternalWith is NewExternal with options; when the session traces
// and d is a TraceSource, its workers' events join the trace file. On
// failure the session is shut down (d closed).
func NewExternalWith(ctx context.Context, kind string, d Driver, o ExternalOptions) (*Session, error) {
	n := o.NumWorkers
	groups, err := validateCounts(n, o.NumGroups)
	if err != nil {
		return nil, err
	}
	grace := o.grace()
	obs, err := newObserver(Options{Trace: o.Trace, HangReport: o.HangReport, HangOutput: o.HangOutput, WorkerDeadline: -1}, n)
	if err != nil {
		d.Close()
		return nil, err
	}
	if src, ok := d.(TraceSource); ok && obs.path != "" {
		obs.source = src
	}
	s := newSession(kind, n, groups, external{d}, grace, obs)
	if err := s.pingAll(ctx, o.StartTimeout); err != nil {
		_ = s.Shutdown()
		return nil, fmt.Errorf("session: %s workers did not answer: %w", kind, err)
	}
	return s, nil
}

// cclPreparer returns the driver's CCLPreparer, if it has one.
func (s *Session) cclPreparer() CCLPreparer {
	if e, ok := s.drv.(external); ok {
		if p, ok := e.d.(CCLPreparer); ok {
			return p
		}
	}
	return nil
}

// workerProgram is the program a process session starts by default.
func workerProgram(prog string) (string, error) {
	if prog != "" {
		return prog, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("session: cannot find this program to start workers: %w", err)
	}
	return p, nil
}
