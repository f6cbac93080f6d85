package node

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/chorus-rt/chorus/cluster/ctrl"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// agentTrace is an agent's part of a traced session: its own events
// (commands relayed, faults) on the track "agent N", kept in a ring of
// bounded size, and the share of the controller's byte limit that each
// of its workers and itself may send.
type agentTrace struct {
	proc    string
	share   int64 // bytes per worker part, and the agent's own share
	mu      sync.Mutex
	ring    []trace.Event
	next    int // where the next event goes once the ring is full
	dropped int64
	sent    bool
}

// bytesPerEvent estimates a part line, to turn the agent's share of
// bytes into a number of events.
const bytesPerEvent = 200

func newAgentTrace(node, workers int, limit int64) *agentTrace {
	share := limit / int64(workers+1)
	n := int(min(max(share/bytesPerEvent, 256), 1<<16))
	return &agentTrace{proc: fmt.Sprintf("agent %d", node), share: share, ring: make([]trace.Event, 0, n)}
}

func (t *agentTrace) now() int64 {
	if t == nil {
		return 0
	}
	return trace.Now()
}

func (t *agentTrace) record(e trace.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ring) < cap(t.ring) {
		t.ring = append(t.ring, e)
		return
	}
	t.ring[t.next] = e
	t.next = (t.next + 1) % len(t.ring)
	t.dropped++
}

// relayed records the command the agent handed to its workers, from
// its arrival (t0) to the end of the hand-over.
func (t *agentTrace) relayed(c *wire.Command, t0 int64) {
	if t == nil {
		return
	}
	now := trace.Now()
	t.record(trace.Event{Track: trace.Track{Process: t.proc, Thread: trace.ThreadCommands}, Name: "relay " + c.Action.String(),
		Cat: trace.CatCommand, Phase: trace.Complete, TS: t0, Dur: now - t0, Args: trace.Args{Op: c.Action.String(), Seq: c.Seq}})
}

// fault records an instant on the agent's faults track.
func (t *agentTrace) fault(name, msg string) {
	if t == nil {
		return
	}
	t.record(trace.Event{Track: trace.Track{Process: t.proc, Thread: trace.ThreadFaults}, Name: name,
		Cat: trace.CatFault, Phase: trace.Instant, TS: trace.Now(), Args: trace.Args{Error: msg}})
}

// take returns the agent's events, oldest first, and how many were
// dropped.
func (t *agentTrace) take() ([]trace.Event, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append(append([]trace.Event(nil), t.ring[t.next:]...), t.ring[:t.next]...)
	return out, t.dropped
}

// sendTrace sends the workers' events and the agent's as TTrace frames,
// then a TTraceEnd; once. Call it after the workers stopped.
func (ag *agent) sendTrace() {
	t := ag.tr
	if t == nil || t.sent {
		return
	}
	t.sent = true
	evs, dropped, err := ag.l.TraceEvents(t.share)
	own, ownDropped := t.take()
	evs = append(evs, own...)
	dropped += ownDropped
	fw := &frameWriter{c: ag.c}
	werr := trace.WritePart(fw, evs)
	if werr == nil {
		werr = fw.flush()
	}
	if werr != nil {
		ag.logf("could not send the trace events: %v", werr)
		return
	}
	end := ctrl.TraceEnd{Events: int64(len(evs)) - fw.skipped, Dropped: dropped + fw.skipped}
	if err != nil {
		end.Error = err.Error()
		if len(end.Error) > 4096 {
			end.Error = end.Error[:4096] + "..."
		}
	}
	if err := ag.c.WriteJSON(ctrl.TTraceEnd, end); err != nil {
		ag.logf("could not send the trace events: %v", err)
	}
}

// frameWriter cuts the part lines WritePart writes (whole lines per
// Write) into TTrace frames of at most ctrl.MaxTrace bytes; a line
// longer than that is skipped and counted.
type frameWriter struct {
	c       *ctrl.Conn
	buf     []byte
	skipped int64
}

func (f *frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line = p[:i+1]
		}
		p = p[len(line):]
		if len(line) > ctrl.MaxTrace {
			f.skipped++
			continue
		}
		if len(f.buf)+len(line) > ctrl.MaxTrace {
			if err := f.flush(); err != nil {
				return 0, err
			}
		}
		f.buf = append(f.buf, line...)
	}
	return n, nil
}

func (f *frameWriter) flush() error {
	if len(f.buf) == 0 {
		return nil
	}
	err := f.c.Write(ctrl.TTrace, f.buf)
	f.buf = f.buf[:0]
	return err
}
