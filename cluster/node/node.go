package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/cluster/ctrl"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// Options configure an agent.
type Options struct {
	// Connect is the controller's host:port.
	Connect string
	// NodeRank is this host's rank, or -1 to take the next free one.
	NodeRank int
	// Workers is the number of worker processes on this host.
	Workers int
	// Program is the worker executable (default: this program); Args and
	// Env are added as for a process session.
	Program string
	Args    []string
	Env     []string
	// Files are the credentials; workers get them too (in their spec)
	// for their data links.
	Files link.Files
	// Plaintext: the workers' data links between hosts carry plain TCP
	// after authentication (hier.EndpointOptions.Plaintext; trusted
	// networks only, every agent alike; chorus node reads
	// CHORUS_HIER_PLAINTEXT).
	Plaintext bool
	// ConnectTimeout bounds finding the controller (it may start later)
	// and waiting for the assignment (default 120 s).
	ConnectTimeout time.Duration
	// Stderr receives the workers' output; default os.Stderr.
	Stderr io.Writer
	// Log receives the agent's messages; nil: the standard logger.
	Log func(msg string)
}

// ErrControllerGone: the controller closed the connection or went silent.
var ErrControllerGone = errors.New("controller gone")

// Run serves one session and returns when it ends: nil after a clean
// Shutdown, an error otherwise.
func Run(ctx context.Context, o Options) error {
	if o.Workers < 1 {
		return fmt.Errorf("node: --workers %d < 1", o.Workers)
	}
	if o.NodeRank < -1 {
		return fmt.Errorf("node: node rank %d", o.NodeRank)
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 120 * time.Second
	}
	logf := func(format string, args ...any) {
		msg := fmt.Sprintf("chorus node: "+format, args...)
		if o.Log != nil {
			o.Log(msg)
		} else {
			log.Print(msg)
		}
	}
	sec, err := o.Files.Load()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	sec.Log = func(s string) { logf("%s", s) }
	cctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	tc, err := dial(cctx, sec, o.Connect)
	if err != nil {
		return err
	}
	c := ctrl.NewConn(tc, o.ConnectTimeout)
	defer c.Close()
	hn, _ := os.Hostname()
	if err := c.WriteJSON(ctrl.THello, ctrl.Hello{Version: ctrl.Version, NodeRank: o.NodeRank, Workers: o.Workers, Hostname: hn, PID: os.Getpid()}); err != nil {
		return fmt.Errorf("node: hello: %w", err)
	}
	stopRead := context.AfterFunc(cctx, func() { c.Close() })
	typ, p, err := c.Read()
	stopRead()
	if err != nil {
		return fmt.Errorf("node: waiting for the assignment: %w", err)
	}
	if typ == ctrl.TRefuse {
		var rf ctrl.Refuse
		_ = ctrl.Decode(typ, p, &rf)
		return fmt.Errorf("node: the controller refused us: %s", rf.Reason)
	}
	var a ctrl.Assign
	if typ != ctrl.TAssign {
		return fmt.Errorf("node: got %s, want an assignment", typ)
	}
	if err := ctrl.Decode(typ, p, &a); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if a.HeartbeatMs <= 0 || a.DeadlineMs <= a.HeartbeatMs || a.Base < 0 || a.Base+o.Workers > a.Total {
		return fmt.Errorf("node: bad assignment %+v", a)
	}
	var cpuOpts cpu.Options
	if len(a.Worker.CPU) > 0 {
		if err := json.Unmarshal(a.Worker.CPU, &cpuOpts); err != nil {
			return fmt.Errorf("node: the assignment's cpu options: %w", err)
		}
	}
	hb, deadline := time.Duration(a.HeartbeatMs)*time.Millisecond, time.Duration(a.DeadlineMs)*time.Millisecond
	grace := time.Duration(a.GraceMs) * time.Millisecond
	c.SetIdle(deadline)
	popts := session.ProcessOptions{
		Options: session.Options{NumWorkers: o.Workers, NumGroups: a.Groups, DeviceIDs: a.DeviceIDs, ShutdownGrace: grace,
			Worker: worker.Options{FakeGPU: a.Worker.FakeGPU, CPUProfile: a.Worker.CPUProfile, IPCAutoTable: a.Worker.IPCAutoTable,
				SkipChecks: a.Worker.SkipChecks, NoSharedTensors: a.Worker.NoSharedTensors,
				CPU: cpuOpts, Endpoint: hier.EndpointOptions{Addr: a.Addr, Files: o.Files, Plaintext: o.Plaintext}}},
		Transport: a.Transport, Program: o.Program, Args: o.Args, Env: o.Env, Stderr: o.Stderr,
	}
	var tr *agentTrace
	if a.Trace {
		// The workers write their events to part files here; the agent
		// sends them to the controller at the end.
		dir, err := os.MkdirTemp("", "chorus-node-trace-")
		if err != nil {
			_ = c.WriteJSON(ctrl.TRefuse, ctrl.Refuse{Reason: fmt.Sprintf("node %d: trace directory: %v", a.NodeRank, err)})
			return fmt.Errorf("node: trace directory: %w", err)
		}
		defer os.RemoveAll(dir)
		popts.Trace = filepath.Join(dir, "worker")
		tr = newAgentTrace(a.NodeRank, o.Workers, a.TraceBytes)
	}
	l, err := session.StartLocal(popts, a.Base, a.Total)
	if err != nil {
		_ = c.WriteJSON(ctrl.TRefuse, ctrl.Refuse{Reason: err.Error()})
		return fmt.Errorf("node: %w", err)
	}
	if err := c.WriteJSON(ctrl.TReady, ctrl.Ready{PIDs: l.PIDs()}); err != nil {
		l.Quiesce()
		_ = l.Stop(0)
		l.Close()
		return fmt.Errorf("node: ready: %w", err)
	}
	logf("node %d: workers %d-%d started (pids %v)", a.NodeRank, a.Base, a.Base+o.Workers-1, l.PIDs())
	ag := &agent{c: c, l: l, logf: logf, grace: grace, quit: make(chan struct{}), tr: tr}
	return ag.serve(ctx, hb, deadline)
}

// dial finds the controller, retrying until ctx ends; an authentication
// failure is final.
func dial(ctx context.Context, sec *link.Config, addr string) (net.Conn, error) {
	for {
		tc, err := sec.Dial(ctx, addr, "control")
		if err == nil {
			return tc, nil
		}
		if errors.Is(err, link.ErrAuth) || errors.Is(err, link.ErrNoCredentials) {
			return nil, fmt.Errorf("node: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node: no controller at %s: %w", addr, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type agent struct {
	c        *ctrl.Conn
	l        *session.Local
	logf     func(string, ...any)
	grace    time.Duration
	stopped  bool
	mu       sync.Mutex
	quit     chan struct{}
	reported sync.Once
	wg       sync.WaitGroup
	tr       *agentTrace // nil when the session does not trace
	silent   bool        // the controller went silent (no trace is sent then)
	pongs    chan []byte // answers to clock pings, for pong (when tracing)
}

func (ag *agent) isStopping() bool {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	return ag.stopped
}

func (ag *agent) setStopping() {
	ag.mu.Lock()
	ag.stopped = true
	ag.mu.Unlock()
	ag.l.Quiesce()
}

func (ag *agent) serve(ctx context.Context, hb, deadline time.Duration) error {
	defer ag.l.Close()
	stopCtx := context.AfterFunc(ctx, func() { ag.c.Close() })
	defer stopCtx()
	for i := range ag.l.Count {
		ag.wg.Add(1)
		go ag.pump(i)
	}
	ag.wg.Add(1)
	go ag.beat(hb)
	if ag.tr != nil {
		ag.pongs = make(chan []byte, 16)
		ag.wg.Add(1)
		go ag.pong()
	}
	err := ag.relay()
	// However we got here, no worker outlives the agent's session.
	if !ag.isStopping() {
		ag.setStopping()
		_ = ag.l.Stop(500 * time.Millisecond)
		// A controller that closed the connection (a session that
		// failed elsewhere) still reads: send it our events. One that
		// went silent would not take them.
		if err != nil && !ag.silent {
			ag.sendTrace()
		}
	}
	close(ag.quit)
	ag.wg.Wait()
	if err == nil {
		// Done was our last frame: half-close and wait for the
		// controller to close, so it is not lost to a reset.
		_ = ag.c.CloseWrite(time.Second)
		ag.c.Drain(2 * time.Second)
	}
	ag.c.Close()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("node: %w", ctx.Err())
	}
	return err
}

// relay reads the controller's frames until Shutdown or the end.
func (ag *agent) relay() error {
	for {
		typ, p, err := ag.c.Read()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				ag.silent = true
				err = fmt.Errorf("%w: nothing received within the deadline", ErrControllerGone)
			} else {
				err = fmt.Errorf("%w: %v", ErrControllerGone, err)
			}
			ag.logf("%v; stopping the workers", err)
			ag.tr.fault("controller gone", err.Error())
			return err
		}
		switch typ {
		case ctrl.THeartbeat:
		case ctrl.TPing:
			pong, err := ctrl.PongPayload(p, trace.Now())
			if err != nil {
				return fmt.Errorf("node: controller sent a bad ping: %w", err)
			}
			// Another goroutine answers, so a large reply being written
			// never holds up the relay; when it falls behind, the ping
			// is not answered (the controller keeps the other samples).
			select {
			case ag.pongs <- pong:
			default:
			}
		case ctrl.TAbort:
			var ab ctrl.Abort
			_ = ctrl.Decode(typ, p, &ab)
			ag.logf("the session lost a peer (%s); aborting collectives", ab.Reason)
			ag.tr.fault("abort", ab.Reason)
			ag.l.AbortCollectives()
		case ctrl.TWire:
			t0 := ag.tr.now()
			cmd, err := wire.DecodeCommand(p)
			if err != nil {
				return fmt.Errorf("node: controller sent a bad command: %w", err)
			}
			if cmd.Action == wire.ActShutdown {
				ag.setStopping()
			}
			if err := ag.l.Send(cmd); err != nil {
				ag.report(err)
			}
			ag.tr.relayed(cmd, t0)
			if cmd.Action == wire.ActShutdown {
				serr := ag.l.Stop(ag.grace)
				msg := ""
				if serr != nil {
					msg = serr.Error()
				}
				ag.sendTrace()
				_ = ag.c.WriteJSON(ctrl.TDone, ctrl.Done{Error: msg})
				return nil
			}
		default:
			return fmt.Errorf("node: unexpected %s frame from the controller", typ)
		}
	}
}

// report tells the controller, once, that a local worker was lost.
func (ag *agent) report(err error) {
	if ag.isStopping() {
		return
	}
	ag.reported.Do(func() {
		lost := ag.l.Lost()
		if lost == nil {
			lost = err
		}
		ag.logf("%v", lost)
		ag.tr.fault("worker lost", lost.Error())
		m := ctrl.Lost{Worker: -1, Status: lost.Error()}
		var le *session.LostError
		if errors.As(lost, &le) {
			m = ctrl.Lost{Worker: le.Worker, PID: le.PID, Status: le.Status}
		}
		_ = ag.c.WriteJSON(ctrl.TLost, m)
	})
}

// pump forwards local worker i's messages to the controller.
func (ag *agent) pump(i int) {
	defer ag.wg.Done()
	var out []byte
	for {
		r, err := ag.l.Recv(context.Background(), i)
		if err != nil {
			ag.report(err)
			return
		}
		out, err = wire.AppendReply(out[:0], r)
		if err == nil {
			err = ag.c.Write(ctrl.TWire, out)
		}
		if err != nil {
			return
		}
	}
}

// pong writes the answers to the controller's clock pings.
func (ag *agent) pong() {
	defer ag.wg.Done()
	for {
		select {
		case <-ag.quit:
			return
		case p := <-ag.pongs:
			if ag.c.Write(ctrl.TPong, p) != nil {
				return
			}
		}
	}
}

func (ag *agent) beat(every time.Duration) {
	defer ag.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ag.quit:
			return
		case <-t.C:
			if ag.c.Write(ctrl.THeartbeat, nil) != nil {
				return
			}
		}
	}
}
