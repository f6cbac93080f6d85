package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/cluster/ctrl"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// ErrHostLost: a host of the session died, stalled or was cut off.
var ErrHostLost = errors.New("host lost")

// HostLostError names the lost host and its workers.
type HostLostError struct {
	Node        int
	Addr        string
	Hostname    string
	First, Last int // its workers' global ids
	Reason      string
}

func (e *HostLostError) Error() string {
	return fmt.Sprintf("node %d (%s, %s) lost with workers %d-%d: %s", e.Node, e.Addr, e.Hostname, e.First, e.Last, e.Reason)
}

func (e *HostLostError) Is(target error) bool {
	return target == ErrHostLost || target == session.ErrWorkerLost
}

// Options configure a multi-host session.
type Options struct {
	// Listen is host:port to bind; default 127.0.0.1:0 (loopback: give
	// an address other hosts can reach, deliberately).
	Listen string
	// Nodes is the number of node agents to wait for.
	Nodes int
	// WorkersPerNode, when set, is required of every agent; otherwise
	// each agent says how many workers it runs.
	WorkersPerNode int
	// NumGroups divides the workers into contiguous groups (0: 1). With
	// equal workers per node and NumGroups == Nodes, group g is node g.
	NumGroups int
	// DeviceIDs binds local worker i of every node to
	// cuda:DeviceIDs[i % len(DeviceIDs)].
	DeviceIDs []int
	// Transport is the agents' local transport, "shm" (default) or
	// "stream".
	Transport string
	// Security holds the credentials agents must prove (required).
	Security *link.Config
	// Heartbeat is how often each side sends a heartbeat (default 1 s);
	// Deadline is how long a silent connection is trusted (default 3 s).
	Heartbeat, Deadline time.Duration
	// ShutdownGrace bounds how long Shutdown waits for workers before
	// forcing them (default 5 s).
	ShutdownGrace time.Duration
	// StartTimeout bounds waiting for agents and their workers (default
	// 60 s).
	StartTimeout time.Duration
	// Log receives refusals and faults; nil: the standard logger.
	Log func(msg string)

	// Worker are every worker's settings (session.Options.Worker; the
	// agents set the data endpoint), sent to the agents in their
	// assignment. Fields left zero come from the controller's environment
	// (CHORUS_FAKE_GPU, CHORUS_CPUPROFILE, CHORUS_IPC_AUTO_TABLE), then
	// from each agent's.
	Worker worker.Options

	// Trace writes a trace of the session, with every host's workers'
	// events, to this file at Shutdown; "" means CHORUS_TRACE, or none
	// (docs/observability.md).
	Trace string
	// TraceLimit bounds the trace events each host sends, in bytes of
	// part lines (default DefaultTraceLimit): each of its workers, and
	// the agent, keep their newest limit/(workers+1) bytes; the older
	// are dropped and counted in the trace.
	TraceLimit int64
}

func (o *Options) defaults() error {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Nodes < 1 {
		return fmt.Errorf("cluster: Nodes %d < 1", o.Nodes)
	}
	if o.Security == nil {
		return fmt.Errorf("cluster: %w", link.ErrNoCredentials)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.Deadline <= 0 {
		o.Deadline = 3 * time.Second
	}
	if o.Deadline <= o.Heartbeat {
		return fmt.Errorf("cluster: Deadline %v must exceed Heartbeat %v", o.Deadline, o.Heartbeat)
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	w, err := session.ResolveWorker(o.Worker)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	o.Worker = w
	if o.Transport == "" {
		o.Transport = "shm"
	}
	if o.Log == nil {
		o.Log = func(s string) { log.Print(s) }
	}
	if o.TraceLimit < 0 {
		return fmt.Errorf("cluster: TraceLimit %d < 0", o.TraceLimit)
	}
	if o.TraceLimit == 0 {
		o.TraceLimit = DefaultTraceLimit
	}
	if p := session.ResolveTrace(o.Trace); p != "" {
		// Fail before any agent is waited for, not at Shutdown.
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("cluster: trace file: %w", err)
		}
		f.Close()
	}
	return nil
}

// Listener waits for the agents of one session.
type Listener struct {
	opts Options
	ln   *link.Listener
}

// Listen binds the controller's address.
func Listen(opts Options) (*Listener, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if opts.Security.Log == nil {
		opts.Security.Log = opts.Log
	}
	ln, err := link.Listen(opts.Listen, opts.Security, "control")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &Listener{opts: opts, ln: ln}, nil
}

// Addr is the bound address (host:port) agents connect to.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// Start listens, waits for the agents and returns the session.
func Start(ctx context.Context, opts Options) (*session.Session, error) {
	l, err := Listen(opts)
	if err != nil {
		return nil, err
	}
	return l.Accept(ctx)
}

type pending struct {
	conn  *ctrl.Conn
	hello ctrl.Hello
}

// Accept waits for Options.Nodes agents, starts their workers and returns
// the session; the listener is closed.
func (l *Listener) Accept(ctx context.Context) (*session.Session, error) {
	defer l.Close()
	o := l.opts
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	byRank := make([]*pending, o.Nodes)
	var any []*pending
	refuse := func(c *ctrl.Conn, why string) {
		o.Log(fmt.Sprintf("chorus: refused node agent %s: %s", c.RemoteAddr(), why))
		_ = c.WriteJSON(ctrl.TRefuse, ctrl.Refuse{Reason: why})
		c.Close()
	}
	closeAll := func() {
		for _, p := range append(byRank, any...) {
			if p != nil {
				p.conn.Close()
			}
		}
	}
	for got := 0; got < o.Nodes; {
		tc, err := l.ln.Accept(ctx)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("cluster: waiting for %d node agents (have %d): %w", o.Nodes, got, err)
		}
		c := ctrl.NewConn(tc, 10*time.Second)
		typ, p, err := c.Read()
		if err != nil || typ != ctrl.THello {
			refuse(c, fmt.Sprintf("no hello (%v, %v)", typ, err))
			continue
		}
		var h ctrl.Hello
		if err := ctrl.Decode(typ, p, &h); err != nil {
			refuse(c, err.Error())
			continue
		}
		switch {
		case h.Version != ctrl.Version:
			refuse(c, fmt.Sprintf("protocol version %d, want %d", h.Version, ctrl.Version))
			continue
		case h.Workers < 1 || h.Workers > 4096:
			refuse(c, fmt.Sprintf("%d workers", h.Workers))
			continue
		case o.WorkersPerNode > 0 && h.Workers != o.WorkersPerNode:
			refuse(c, fmt.Sprintf("%d workers, the session wants %d per node", h.Workers, o.WorkersPerNode))
			continue
		case h.NodeRank < -1 || h.NodeRank >= o.Nodes:
			refuse(c, fmt.Sprintf("node rank %d outside [0, %d)", h.NodeRank, o.Nodes))
			continue
		case h.NodeRank >= 0 && byRank[h.NodeRank] != nil:
			refuse(c, fmt.Sprintf("node rank %d taken by %s", h.NodeRank, byRank[h.NodeRank].conn.RemoteAddr()))
			continue
		}
		pd := &pending{conn: c, hello: h}
		if h.NodeRank >= 0 {
			byRank[h.NodeRank] = pd
		} else {
			any = append(any, pd)
		}
		got++
	}
	// Agents without a rank fill the free ranks in arrival order.
	for r := range byRank {
		if byRank[r] == nil {
			byRank[r], any = any[0], any[1:]
		}
	}
	d := &driver{opts: o, lostCh: make(chan struct{}), quit: make(chan struct{}),
		tracing: session.ResolveTrace(o.Trace) != "", traceLimit: o.TraceLimit}
	total := 0
	for r, p := range byRank {
		host, _, _ := net.SplitHostPort(p.conn.RemoteAddr().String())
		d.hosts = append(d.hosts, &host_{node: r, base: total, count: p.hello.Workers, conn: p.conn,
			addr: p.conn.RemoteAddr().String(), ip: host, hostname: p.hello.Hostname, done: make(chan struct{}), tr: &hostTrace{}})
		total += p.hello.Workers
	}
	groups := max(1, o.NumGroups)
	if total%groups != 0 {
		closeAll()
		return nil, fmt.Errorf("cluster: num_groups %d does not divide the %d workers", groups, total)
	}
	for _, h := range d.hosts {
		a := ctrl.Assign{NodeRank: h.node, Nodes: o.Nodes, Base: h.base, Total: total, Groups: groups,
			DeviceIDs: o.DeviceIDs, Transport: o.Transport, HeartbeatMs: o.Heartbeat.Milliseconds(),
			DeadlineMs: o.Deadline.Milliseconds(), GraceMs: o.ShutdownGrace.Milliseconds(), Addr: h.ip}
		if d.tracing {
			a.Trace, a.TraceBytes = true, o.TraceLimit
		}
		w := o.Worker
		a.Worker = ctrl.WorkerSettings{FakeGPU: w.FakeGPU, CPUProfile: w.CPUProfile, IPCAutoTable: w.IPCAutoTable,
			SkipChecks: w.SkipChecks, NoSharedTensors: w.NoSharedTensors}
		if w.CPU != (cpu.Options{}) {
			a.Worker.CPU, _ = json.Marshal(w.CPU) // plain numbers and booleans: cannot fail
		}
		if err := h.conn.WriteJSON(ctrl.TAssign, a); err != nil {
			closeAll()
			return nil, fmt.Errorf("cluster: node %d (%s): %w", h.node, h.addr, err)
		}
	}
	for _, h := range d.hosts {
		h.conn.SetIdle(o.StartTimeout)
		typ, p, err := h.conn.Read()
		if err == nil && typ == ctrl.TRefuse {
			var rf ctrl.Refuse
			_ = ctrl.Decode(typ, p, &rf)
			err = errors.New(rf.Reason)
		} else if err == nil && typ != ctrl.TReady {
			err = fmt.Errorf("sent %s, want ready", typ)
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("cluster: node %d (%s) could not start its workers: %w", h.node, h.addr, err)
		}
		h.conn.SetIdle(o.Deadline)
	}
	d.owner = make([]int, total)
	d.qs = make([]*rqueue, total)
	for hi, h := range d.hosts {
		for w := h.base; w < h.base+h.count; w++ {
			d.owner[w] = hi
		}
	}
	for w := range d.qs {
		d.qs[w] = &rqueue{sig: make(chan struct{}, 1)}
	}
	for _, h := range d.hosts {
		d.wg.Add(2)
		go d.read(h)
		go d.beat(h)
	}
	s, err := session.NewExternalWith(ctx, "remote", d, session.ExternalOptions{StartTimeout: o.StartTimeout,
		Options: session.Options{NumWorkers: total, NumGroups: groups, ShutdownGrace: o.ShutdownGrace,
			Trace: o.Trace}})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return s, nil
}

type host_ struct {
	node, base, count int
	conn              *ctrl.Conn
	addr, ip          string
	hostname          string
	done              chan struct{} // closed when Done arrived or the link ended
	doneOnce          sync.Once
	doneErr           string
	tr                *hostTrace // its trace events and clock (when tracing)
}

func (h *host_) finish(msg string) {
	h.doneOnce.Do(func() {
		h.doneErr = msg
		close(h.done)
	})
}

// rqueue holds one worker's messages in arrival order.
type rqueue struct {
	mu  sync.Mutex
	q   []*wire.Reply
	sig chan struct{}
}

func (q *rqueue) put(r *wire.Reply) {
	q.mu.Lock()
	q.q = append(q.q, r)
	q.mu.Unlock()
	select {
	case q.sig <- struct{}{}:
	default:
	}
}

func (q *rqueue) pop() *wire.Reply {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) == 0 {
		return nil
	}
	r := q.q[0]
	q.q[0] = nil
	q.q = q.q[1:]
	return r
}

// driver relays a session's commands to the node agents.
type driver struct {
	opts      Options
	hosts     []*host_
	owner     []int // worker -> index in hosts
	qs        []*rqueue
	lostErr   atomic.Pointer[error]
	failMu    sync.Mutex // makes fail's abort set-up happen before the loss is visible
	lostCh    chan struct{}
	stopping  atomic.Bool
	frame     []byte
	wg        sync.WaitGroup
	aborts    sync.WaitGroup // Abort messages in flight
	abortMu   sync.Mutex     // orders aborts.Add before Close's Wait
	closing   bool
	quit      chan struct{}
	quitOnce  sync.Once
	closeOnce sync.Once

	tracing    bool
	traceLimit int64
	faultMu    sync.Mutex
	faults     []trace.Event // host and worker losses, when tracing
}

var _ session.Driver = (*driver)(nil)

func (d *driver) hostLost(h *host_, reason string) error {
	return d.fail(&HostLostError{Node: h.node, Addr: h.addr, Hostname: h.hostname, First: h.base, Last: h.base + h.count - 1, Reason: reason})
}

// fail records the session's first loss, wakes every waiter and tells the
// other agents to abort their workers' collectives.
func (d *driver) fail(err error) error {
	d.failMu.Lock()
	defer d.failMu.Unlock()
	if p := d.lostErr.Load(); p != nil {
		return *p
	}
	d.opts.Log(fmt.Sprintf("chorus: session failed: %v", err))
	var he *HostLostError
	lostNode := -1
	if errors.As(err, &he) {
		lostNode = he.Node
		d.noteFault("host lost", err.Error())
	} else {
		d.noteFault("worker lost", err.Error())
	}
	for _, h := range d.hosts {
		if h.node == lostNode {
			h.conn.Close()
			continue
		}
		d.abortMu.Lock()
		if d.closing {
			d.abortMu.Unlock()
			continue
		}
		d.aborts.Add(1)
		d.abortMu.Unlock()
		go func() {
			defer d.aborts.Done()
			_ = h.conn.WriteJSON(ctrl.TAbort, ctrl.Abort{Reason: err.Error()})
		}()
	}
	// The loss becomes visible only once the aborts are under way, so a
	// Shutdown that follows at once still delivers them.
	d.lostErr.Store(&err)
	close(d.lostCh)
	return err
}

func (d *driver) Lost() error {
	if p := d.lostErr.Load(); p != nil {
		return *p
	}
	return nil
}

// read owns host h's incoming frames.
func (d *driver) read(h *host_) {
	defer d.wg.Done()
	for {
		typ, p, err := h.conn.Read()
		if err != nil {
			if d.stopping.Load() {
				h.finish("")
				return
			}
			reason := err.Error()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				reason = fmt.Sprintf("nothing received for %v (dead, stalled or cut off)", d.opts.Deadline)
			}
			d.hostLost(h, reason)
			h.finish(reason)
			return
		}
		switch typ {
		case ctrl.THeartbeat:
		case ctrl.TWire:
			r, err := wire.DecodeReply(p)
			if err == nil && (int(r.Worker) < h.base || int(r.Worker) >= h.base+h.count) {
				err = fmt.Errorf("reply for worker %d, not one of its own", r.Worker)
			}
			if err != nil {
				d.hostLost(h, fmt.Sprintf("protocol error: %v", err))
				h.conn.Close()
				continue
			}
			d.qs[r.Worker].put(r)
		case ctrl.TLost:
			var l ctrl.Lost
			if err := ctrl.Decode(typ, p, &l); err != nil {
				d.hostLost(h, err.Error())
				continue
			}
			if d.stopping.Load() {
				continue
			}
			d.fail(&session.LostError{Worker: l.Worker, PID: l.PID, Status: fmt.Sprintf("%s (on node %d, %s)", l.Status, h.node, h.addr)})
		case ctrl.TDone:
			var dn ctrl.Done
			_ = ctrl.Decode(typ, p, &dn)
			h.finish(dn.Error)
		case ctrl.TPong:
			if err := h.tr.pong(p, trace.Now()); err != nil {
				d.hostLost(h, fmt.Sprintf("protocol error: %v", err))
			}
		case ctrl.TTrace:
			h.tr.take(p, d.traceBound())
		case ctrl.TTraceEnd:
			var te ctrl.TraceEnd
			if err := ctrl.Decode(typ, p, &te); err != nil {
				d.hostLost(h, err.Error())
				continue
			}
			h.tr.ended(te)
		default:
			d.hostLost(h, fmt.Sprintf("unexpected %s frame", typ))
		}
	}
}

// beat sends h a heartbeat every Options.Heartbeat; when tracing, a
// ping instead (a burst first), which the agent answers with its clock.
func (d *driver) beat(h *host_) {
	defer d.wg.Done()
	if d.tracing && !d.pingBurst(h, 2*time.Millisecond) {
		return
	}
	t := time.NewTicker(d.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-d.quit:
			return
		case <-h.done:
			return
		case <-t.C:
			if d.tracing {
				if !d.ping(h) {
					return
				}
				continue
			}
			if err := h.conn.Write(ctrl.THeartbeat, nil); err != nil {
				if !d.stopping.Load() {
					d.hostLost(h, fmt.Sprintf("heartbeat not taken: %v", err))
				}
				return
			}
		}
	}
}

func (d *driver) Send(c *wire.Command) error {
	if err := d.Lost(); err != nil {
		return err
	}
	var err error
	d.frame, err = wire.AppendCommand(d.frame[:0], c)
	if err != nil {
		return err
	}
	for _, h := range d.hosts {
		if c.Worker != wire.AllWorkers && d.hosts[d.owner[c.Worker]] != h {
			continue
		}
		if err := h.conn.Write(ctrl.TWire, d.frame); err != nil {
			if lost := d.Lost(); lost != nil {
				return lost
			}
			return d.hostLost(h, fmt.Sprintf("send: %v", err))
		}
	}
	return nil
}

func (d *driver) Recv(ctx context.Context, w int) (*wire.Reply, error) {
	q := d.qs[w]
	for {
		if r := q.pop(); r != nil {
			return r, nil
		}
		if err := d.Lost(); err != nil {
			return nil, err
		}
		select {
		case <-q.sig:
		case <-d.lostCh:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (d *driver) Poll(w int) (*wire.Reply, error) { return d.qs[w].pop(), nil }

// Quiesce: Shutdown begins. When tracing, every live host gets a burst
// of pings first (answered before the Shutdown command that follows), a
// clock sample from the session's end.
func (d *driver) Quiesce() {
	if d.tracing && !d.stopping.Load() && d.Lost() == nil {
		var wg sync.WaitGroup
		for _, h := range d.hosts {
			wg.Add(1)
			h.tr.endClock()
			go func() {
				defer wg.Done()
				d.pingBurst(h, time.Millisecond)
			}()
		}
		wg.Wait()
	}
	d.stopping.Store(true)
}

// Stop waits for every agent to confirm that its workers stopped (they
// get grace, then are forced), then closes the connections.
func (d *driver) Stop(grace time.Duration) error {
	d.stopping.Store(true)
	var errs []error
	if d.Lost() == nil {
		timer := time.NewTimer(2*grace + d.opts.Deadline)
		defer timer.Stop()
	wait:
		for _, h := range d.hosts {
			select {
			case <-h.done:
				if h.doneErr != "" {
					errs = append(errs, fmt.Errorf("node %d (%s): %s", h.node, h.addr, h.doneErr))
				}
			case <-timer.C:
				errs = append(errs, fmt.Errorf("node %d (%s) did not confirm that its workers stopped", h.node, h.addr))
				break wait
			}
		}
	}
	d.Close()
	if len(errs) > 0 {
		return fmt.Errorf("session: Shutdown: %w", errors.Join(errs...))
	}
	return nil
}

func (d *driver) Close() {
	d.closeOnce.Do(func() {
		d.stopping.Store(true)
		d.quitOnce.Do(func() { close(d.quit) })
		// Survivors hear why before their connection closes (each write
		// is bounded by the deadline).
		d.abortMu.Lock()
		d.closing = true
		d.abortMu.Unlock()
		d.aborts.Wait()
		// Half-close first and let each agent close its side (their
		// readers drain what is in flight), so the last frames we sent
		// (Abort) are not lost to a reset; a silent agent gets a bound.
		for _, h := range d.hosts {
			_ = h.conn.CloseWrite(time.Second)
		}
		// When tracing, survivors of a failed session send their events
		// after they stopped their workers.
		wait := time.NewTimer(time.Second)
		if d.tracing {
			wait.Reset(traceWait)
		}
		defer wait.Stop()
		for _, h := range d.hosts {
			select {
			case <-h.done:
			case <-wait.C:
			}
		}
		for _, h := range d.hosts {
			h.conn.Close()
		}
		d.wg.Wait()
	})
}
