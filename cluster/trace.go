package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/cluster/ctrl"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
)

// Tracing a multi-host session (docs/observability.md): every agent's
// workers record their events as a process session's do; the agent
// sends them, and its own, before it confirms that its workers stopped
// (or when its controller went away), as TTrace frames and a TTraceEnd.
// The controller pings every agent (a burst at the start, one instead of
// each heartbeat, a burst at Shutdown) to estimate each host's clock
// offset, shifts that host's events onto its own clock, and merges them
// into the session's trace file (session.TraceSource).

// DefaultTraceLimit bounds the trace events one host sends.
const DefaultTraceLimit = 128 << 20

// clockBurst is the number of pings sent back to back (a few ms apart)
// when the session starts and when it shuts down: a short session gets
// samples too, and a long one a late sample.
const clockBurst = 8

// traceWait bounds how long Stop waits, when tracing, for the agents of
// a session that failed to send their events (they stop their workers
// first).
const traceWait = 5 * time.Second

// hostTrace is what the controller gathers from one host.
type hostTrace struct {
	mu      sync.Mutex
	pings   []int64 // clocks of the pings not answered yet (at most maxPings)
	clock   clockEst
	events  []trace.Event
	bytes   int64 // of TTrace payload kept
	refused int64 // TTrace bytes beyond the controller's bound, not kept
	end     *ctrl.TraceEnd
	errs    []string
}

const maxPings = 64

// sentPing remembers the clock of a ping sent.
func (t *hostTrace) sentPing(at int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pings) == maxPings {
		t.pings = t.pings[1:]
	}
	t.pings = append(t.pings, at)
}

// pong takes a pong that arrived at recv. One that echoes no ping in
// memory (more than maxPings unanswered) is not a sample.
func (t *hostTrace) pong(p []byte, recv int64) error {
	sent, remote, err := ctrl.ParsePong(p)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range t.pings {
		if s == sent {
			t.pings = append(t.pings[:i], t.pings[i+1:]...)
			t.clock.add(clockSample{sent: sent, remote: remote, recv: recv})
			break
		}
	}
	return nil
}

// take keeps a TTrace frame's events while the host stays within bound.
func (t *hostTrace) take(p []byte, bound int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bytes+int64(len(p)) > bound {
		t.refused += int64(len(p))
		return
	}
	t.bytes += int64(len(p))
	evs, err := trace.ReadPart(p)
	if err != nil {
		t.errs = append(t.errs, err.Error())
	}
	t.events = append(t.events, evs...)
}

func (t *hostTrace) ended(e ctrl.TraceEnd) {
	t.mu.Lock()
	t.end = &e
	t.mu.Unlock()
}

// bound is how much TTrace payload the controller keeps of one host: the
// agent cuts its workers' parts to the limit; flight-recorder tails of
// workers that died and the spans reopened after a cut come on top.
func (d *driver) traceBound() int64 { return d.traceLimit + d.traceLimit/4 + 1<<20 }

// endClock: the samples from now on describe the session's end.
func (t *hostTrace) endClock() {
	t.mu.Lock()
	t.clock.markEnd()
	t.mu.Unlock()
}

// ping sends h a ping (false when the connection failed).
func (d *driver) ping(h *host_) bool {
	now := trace.Now()
	h.tr.sentPing(now)
	if err := h.conn.Write(ctrl.TPing, ctrl.PingPayload(now)); err != nil {
		if !d.stopping.Load() {
			d.hostLost(h, fmt.Sprintf("heartbeat not taken: %v", err))
		}
		return false
	}
	return true
}

// pingBurst sends clockBurst pings, gap apart (false when the
// connection failed or the session ends).
func (d *driver) pingBurst(h *host_, gap time.Duration) bool {
	for i := range clockBurst {
		if !d.ping(h) {
			return false
		}
		if i == clockBurst-1 {
			break
		}
		t := time.NewTimer(gap)
		select {
		case <-d.quit:
			t.Stop()
			return false
		case <-h.done:
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return true
}

// noteFault records a fault instant on the controller's faults track.
func (d *driver) noteFault(name, msg string) {
	if !d.tracing {
		return
	}
	d.faultMu.Lock()
	d.faults = append(d.faults, trace.Event{Track: trace.Track{Process: trace.ProcController, Thread: trace.ThreadFaults},
		Name: name, Cat: trace.CatFault, Phase: trace.Instant, TS: trace.Now(), Args: trace.Args{Error: msg}})
	d.faultMu.Unlock()
}

var _ session.TraceSource = (*driver)(nil)

// ProcAgent is the process name of node agent n's events.
func ProcAgent(node int) string { return fmt.Sprintf("agent %d", node) }

// TraceEvents returns every host's events on the controller's clock and
// says, in the metadata and as faults, how each host's clock was
// aligned, which hosts' events are missing and how many were dropped.
func (d *driver) TraceEvents() ([]trace.Event, map[string]any) {
	if !d.tracing {
		return nil, nil
	}
	d.faultMu.Lock()
	evs := append([]trace.Event(nil), d.faults...)
	d.faultMu.Unlock()
	now := trace.Now()
	fault := func(name, msg string) {
		evs = append(evs, trace.Event{Track: trace.Track{Process: trace.ProcController, Thread: trace.ThreadFaults},
			Name: name, Cat: trace.CatFault, Phase: trace.Instant, TS: now, Args: trace.Args{Error: msg}})
	}
	var hosts, missing []map[string]any
	for _, h := range d.hosts {
		t := h.tr
		t.mu.Lock()
		who := fmt.Sprintf("node %d (%s, %s), workers %d-%d", h.node, h.addr, h.hostname, h.base, h.base+h.count-1)
		m := map[string]any{"node": h.node, "addr": h.addr, "hostname": h.hostname,
			"workers": fmt.Sprintf("%d-%d", h.base, h.base+h.count-1), "clock_samples": t.clock.n}
		off, unc, ok := t.clock.estimate()
		if ok {
			m["clock_offset_ns"], m["clock_uncertainty_ns"] = off, unc
			if dr, du, over, ok := t.clock.drift(); ok {
				m["clock_drift_ns"], m["clock_drift_uncertainty_ns"], m["clock_drift_over_ns"] = dr, du, over
			}
		} else if len(t.events) > 0 {
			m["clock"] = "not aligned: no ping was answered"
		}
		agent := ProcAgent(h.node)
		kept, rejected := 0, 0
		for _, e := range t.events {
			if w, _, isW := trace.WorkerOf(e.Track.Process); !(isW && w >= h.base && w < h.base+h.count) && e.Track.Process != agent {
				rejected++ // another host's track: not this agent's to send
				continue
			}
			e.TS -= off
			evs = append(evs, e)
			kept++
		}
		m["events"] = kept
		if rejected > 0 {
			m["rejected_events"] = rejected
		}
		if t.refused > 0 {
			m["refused_bytes"] = t.refused
			fault("trace events refused", fmt.Sprintf("%s: %d bytes of events beyond the controller's bound (%d bytes) were not kept", who, t.refused, d.traceBound()))
		}
		if len(t.errs) > 0 {
			m["errors"] = t.errs
		}
		switch e := t.end; {
		case e == nil:
			reason := h.doneErr
			if reason == "" {
				reason = "the connection ended before they were sent"
			}
			state := "missing"
			if len(t.events) > 0 {
				state = "incomplete"
			}
			m["events_"+state] = reason
			missing = append(missing, map[string]any{"node": h.node, "addr": h.addr, "hostname": h.hostname,
				"workers": m["workers"], "state": state, "reason": reason})
			fault("trace events "+state, fmt.Sprintf("%s: its trace events are %s: %s", who, state, reason))
		default:
			if e.Dropped > 0 {
				m["dropped_events"] = e.Dropped
				fault("trace events dropped", fmt.Sprintf("%s: the %d oldest events were dropped to stay within %d bytes (cluster.Options.TraceLimit)", who, e.Dropped, d.traceLimit))
			}
			if e.Error != "" {
				m["agent_error"] = e.Error
			}
		}
		t.mu.Unlock()
		hosts = append(hosts, m)
	}
	meta := map[string]any{"hosts": hosts, "trace_limit_bytes_per_host": d.traceLimit}
	if len(missing) > 0 {
		meta["hosts_missing"] = missing
	}
	return evs, meta
}
