package worker

import (
	"context"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/tensor"
)

// What a worker records (docs/observability.md): every command (B at
// start, E at end, named after the function for CallPacked, with the
// failure it ended with) on "worker N / commands", and every collective
// called through the communicators Comm returns (B on arrival, E at the
// end: bytes, backend, op, communicator, its sequence number there) on
// "worker N / collectives". Both go to the flight recorder always, and
// to the timeline when the worker's Recorder keeps events.

// Recorder is the worker's event recorder (never nil for a worker made by
// New).
func (w *Worker) Recorder() *trace.Recorder { return w.rec }

// FlushTrace writes the events recorded since the last flush to the
// worker's trace output (process workers with tracing on); no-op
// otherwise.
func (w *Worker) FlushTrace() error {
	if w.traceOut == nil {
		return nil
	}
	return w.rec.Drain(func(evs []trace.Event) error { return trace.WritePart(w.traceOut, evs) })
}

// commandName is what a command's span is called: the function for
// CallPacked, else the action.
func (w *Worker) commandName(c *wire.Command) string {
	if c.Action == wire.ActCallPacked && c.Func > 0 && int(c.Func) < len(w.regs) {
		if f, ok := w.regs[c.Func].v.(funcValue); ok {
			return f.name
		}
	}
	return c.Action.String()
}

// traceCommand records the start of c, named name, and returns its
// Site and how many failures were pending, for stampCommandEnd.
func (w *Worker) traceCommand(c *wire.Command, name string) (*trace.Site, int) {
	s := w.cmdSites.Get(w.rec, w.cmdTrack, name, trace.CatCommand, trace.Args{Op: c.Action.String()})
	s.Mark(trace.Begin, 0, c.Seq, 0, "")
	return s, len(w.pending) + int(w.dropped)
}

// endPending is the end of the last command Handle ran, timed when it
// ended and recorded by FinishCommand after its reply went out.
type endPending struct {
	set  bool
	seq  uint64
	ts   int64
	site *trace.Site
	err  string
}

// stampCommandEnd times the end of c; FinishCommand records it.
func (w *Worker) stampCommandEnd(c *wire.Command, site *trace.Site, before int) {
	e := endPending{set: true, seq: c.Seq, ts: w.rec.Now(), site: site}
	if n := len(w.pending); n+int(w.dropped) > before && n > 0 {
		e.err = w.pending[n-1].Msg
	}
	w.cmdEnd = e
	if r := w.rec.Ring(); r != nil {
		r.MarkEnded(trace.ThreadCommands, e.ts, e.err != "")
	}
}

// FinishCommand records the end of the command Handle last ran (a no-op
// when it is recorded already). Recording costs a worker about as much
// as a no-op command's work on a many-core host (a slot write into the
// flight recorder and the event when tracing), so serving loops call it
// after sending the reply, not before.
func (w *Worker) FinishCommand() {
	p := &w.cmdEnd
	if !p.set {
		return
	}
	p.set = false
	p.site.Mark(trace.End, p.ts, p.seq, 0, p.err)
}

// BeginCollective records the start of a collective that does not go
// through a ccl.Comm (a plan, the custom all-reduce) on this worker's
// collectives track; End on the span records its end. name is the
// collective ("allreduce"), comm the sequence it is numbered in (one per
// communicator or plan: the numbers match across ranks), backend how it
// runs ("ipc/oneshot", "plan/allreduce_ring"). Recording allocates
// nothing.
func (w *Worker) BeginCollective(name, comm, backend string, bytes int64) registry.CollectiveSpan {
	w.spanSeq[comm]++
	site := w.colSites.Get(w.rec, w.colTrack, name, trace.CatCollective,
		trace.Args{Rank: int32(w.cfg.ID), Set: trace.HasRank, Comm: comm, Backend: backend})
	s := registry.CollectiveSpan{Site: site, Seq: w.spanSeq[comm], Bytes: bytes}
	site.Mark(trace.Begin, 0, s.Seq, bytes, "")
	return s
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// tracedComm records every collective of the communicator it wraps. The
// sequence numbers count the calls on this communicator, which every rank
// makes in the same order, so they match across ranks (and the cpu
// backend's own numbers in its TimeoutErrors).
type tracedComm struct {
	ccl.Comm
	rec     *trace.Recorder
	track   trace.Track
	rank    int32
	comm    string
	backend string
	seq     uint64
	bytes   int64           // of the collective in progress, repeated on its end
	cur     *trace.Site     // its site (so the flight recorder's state says what ended)
	sites   trace.SiteCache // the spans of this communicator's collectives
	w       *Worker
	onGPU   bool // a GPU backend: the device work is timed too
	gpuMark bool // gpuBegin's answer for the collective in progress
}

func newTracedComm(c ccl.Comm, w *Worker, comm, backend string) *tracedComm {
	if c == nil {
		return nil
	}
	return &tracedComm{Comm: c, rec: w.rec, track: w.colTrack, rank: int32(c.Rank()), comm: comm, backend: backend,
		w: w, onGPU: backend != "cpu" && backend != "cpu-hier"}
}

// Unwrap is the backend's communicator.
func (t *tracedComm) Unwrap() ccl.Comm { return t.Comm }

// PathFor forwards the cpu backend's path report (benchmarks print it).
func (t *tracedComm) PathFor(k ccl.Kind, n int) string {
	if p, ok := t.Comm.(interface{ PathFor(ccl.Kind, int) string }); ok {
		return p.PathFor(k, n)
	}
	return ""
}

func (t *tracedComm) begin(k ccl.Kind, bytes int64, op string, peer int) uint64 {
	t.seq++
	a := trace.Args{Rank: t.rank, Set: trace.HasRank, Comm: t.comm, Backend: t.backend, Op: op}
	if peer >= 0 {
		a.Peer, a.Set = int32(peer), a.Set|trace.HasPeer
	}
	t.bytes, t.cur = bytes, t.sites.Get(t.rec, t.track, k.String(), trace.CatCollective, a)
	t.cur.Mark(trace.Begin, 0, t.seq, bytes, "")
	if t.onGPU {
		t.gpuMark = t.w.gpuBegin()
	}
	return t.seq
}

func (t *tracedComm) end(k ccl.Kind, seq uint64, err error) error {
	if t.gpuMark {
		t.gpuMark = false
		t.w.gpuEnd(true, k.String()+" "+t.backend, t.bytes)
	}
	t.cur.Mark(trace.End, 0, seq, t.bytes, errText(err))
	return err
}

func nbytes(t *tensor.Tensor) int64 {
	if t == nil {
		return 0
	}
	return t.NumBytes()
}

func (t *tracedComm) AllReduce(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	s := t.begin(ccl.KindAllReduce, nbytes(send), op.String(), -1)
	return t.end(ccl.KindAllReduce, s, t.Comm.AllReduce(ctx, send, recv, op))
}

func (t *tracedComm) AllGather(ctx context.Context, send, recv *tensor.Tensor) error {
	s := t.begin(ccl.KindAllGather, nbytes(recv), "", -1)
	return t.end(ccl.KindAllGather, s, t.Comm.AllGather(ctx, send, recv))
}

func (t *tracedComm) ReduceScatter(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	s := t.begin(ccl.KindReduceScatter, nbytes(send), op.String(), -1)
	return t.end(ccl.KindReduceScatter, s, t.Comm.ReduceScatter(ctx, send, recv, op))
}

func (t *tracedComm) Broadcast(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	s := t.begin(ccl.KindBroadcast, nbytes(recv), "", root)
	return t.end(ccl.KindBroadcast, s, t.Comm.Broadcast(ctx, send, recv, root))
}

func (t *tracedComm) Scatter(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	s := t.begin(ccl.KindScatter, nbytes(recv), "", root)
	return t.end(ccl.KindScatter, s, t.Comm.Scatter(ctx, send, recv, root))
}

func (t *tracedComm) Gather(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	s := t.begin(ccl.KindGather, nbytes(send), "", root)
	return t.end(ccl.KindGather, s, t.Comm.Gather(ctx, send, recv, root))
}

func (t *tracedComm) Send(ctx context.Context, x *tensor.Tensor, peer int) error {
	s := t.begin(ccl.KindSend, nbytes(x), "", peer)
	return t.end(ccl.KindSend, s, t.Comm.Send(ctx, x, peer))
}

func (t *tracedComm) Recv(ctx context.Context, x *tensor.Tensor, peer int) error {
	s := t.begin(ccl.KindRecv, nbytes(x), "", peer)
	return t.end(ccl.KindRecv, s, t.Comm.Recv(ctx, x, peer))
}

func (t *tracedComm) Barrier(ctx context.Context) error {
	s := t.begin(ccl.KindBarrier, 0, "", -1)
	return t.end(ccl.KindBarrier, s, t.Comm.Barrier(ctx))
}
