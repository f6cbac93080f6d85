package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// Environment variables that configure every session (options win;
// internal/config decodes them).
const (
	// EnvTrace=FILE writes a trace of the session to FILE at Shutdown.
	EnvTrace = "CHORUS_TRACE"
	// EnvHangReport is the hang report threshold (a Go duration; 0
	// disables reports).
	EnvHangReport = "CHORUS_HANG_REPORT"
	// EnvWorkerDeadline is the WorkerDeadline (a Go duration; 0: none).
	EnvWorkerDeadline = "CHORUS_WORKER_DEADLINE"
)

// DefaultHangReport is how long a blocking call waits before the first
// hang report.
const DefaultHangReport = 10 * time.Second

// observer is a session's tracing and hang watch (docs/observability.md).
type observer struct {
	path     string          // trace file; "" when not tracing
	rec      *trace.Recorder // the controller's events (kept only when tracing)
	n        int
	hang     time.Duration // first report after this wait; 0: none
	deadline time.Duration // unresponsive workers are lost after this; 0: never
	out      io.Writer

	// Filled by the driver.
	rings      []*trace.Ring     // each worker's flight recorder (nil: none)
	pids       []int             // worker process ids (process sessions)
	workerRecs []*trace.Recorder // threaded workers' recorders
	parts      []string          // process workers' trace part files
	source     TraceSource       // a driver that collects its workers' events (multi-host)
	kill       func(w int, why string)

	// The wait in progress (collect, fetch), for the watchdog.
	waitSince atomic.Int64 // trace.Now() at its start; 0 when none
	waitSeq   atomic.Uint64
	waitOp    atomic.Pointer[string]
	waitOne   atomic.Int32 // the worker awaited, or wire.AllWorkers
	answered  []atomic.Uint64

	stop chan struct{}
	done chan struct{}
}

// envDuration decodes a duration variable of the controller's
// environment (0 turns it off; negative is refused).
func envDuration(v *config.Var) (time.Duration, bool, error) {
	d, set, err := config.Process().Duration(v)
	if err == nil && d < 0 {
		err = fmt.Errorf("%s=%v: negative", v.Name, d)
	}
	if err != nil {
		return 0, false, fmt.Errorf("session: %w (0 turns it off)", err)
	}
	return d, set, nil
}

// ResolveTrace is the trace file a session with Options.Trace == path
// writes: path, or else CHORUS_TRACE ("" for none). A driver that must
// tell its workers to record before the session exists (cluster)
// asks here.
func ResolveTrace(path string) string {
	if path != "" {
		return path
	}
	return config.Process().Get(config.Trace)
}

// newObserver resolves the options against the environment.
func newObserver(o Options, n int) (*observer, error) {
	ob := &observer{n: n, path: ResolveTrace(o.Trace), out: o.HangOutput, answered: make([]atomic.Uint64, n),
		rings: make([]*trace.Ring, n), pids: make([]int, n)}
	if ob.path != "" {
		abs, err := filepath.Abs(ob.path)
		if err != nil {
			return nil, fmt.Errorf("session: trace file %q: %w", ob.path, err)
		}
		ob.path = abs
		// Fail now, not at Shutdown, if the file cannot be written.
		f, err := os.OpenFile(abs, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("session: trace file: %w", err)
		}
		f.Close()
	}
	ob.rec = trace.NewRecorder(trace.ProcController, nil, ob.path != "")
	switch {
	case o.HangReport < 0:
	case o.HangReport > 0:
		ob.hang = o.HangReport
	default:
		d, set, err := envDuration(config.HangReport)
		if err != nil {
			return nil, err
		}
		ob.hang = DefaultHangReport
		if set {
			ob.hang = d
		}
	}
	switch {
	case o.WorkerDeadline < 0:
	case o.WorkerDeadline > 0:
		ob.deadline = o.WorkerDeadline
	default:
		d, _, err := envDuration(config.WorkerDeadline)
		if err != nil {
			return nil, err
		}
		ob.deadline = d
	}
	if ob.out == nil {
		ob.out = os.Stderr
	}
	return ob, nil
}

// start runs the watchdog when there is something to watch for. The
// session's Shutdown stops it.
func (ob *observer) start() {
	if ob.hang == 0 && ob.deadline == 0 {
		return
	}
	ob.stop, ob.done = make(chan struct{}), make(chan struct{})
	go ob.watch()
}

func (ob *observer) close() {
	if ob.stop != nil {
		close(ob.stop)
		<-ob.done
		ob.stop = nil
	}
}

// beginWait announces that the controller waits for replies to c from
// worker one (or every worker).
func (ob *observer) beginWait(c *wire.Command, one int32, op *string) {
	ob.waitSeq.Store(c.Seq)
	ob.waitOne.Store(one)
	ob.waitOp.Store(op)
	ob.waitSince.Store(trace.Now())
}

func (ob *observer) endWait() { ob.waitSince.Store(0) }

// answer notes that worker w replied to the command of sequence seq.
func (ob *observer) answer(w int, seq uint64) {
	if w >= 0 && w < len(ob.answered) {
		ob.answered[w].Store(seq)
	}
}

// pending lists the workers that have not answered the current wait.
func (ob *observer) pending() []int {
	seq := ob.waitSeq.Load()
	one := ob.waitOne.Load()
	var out []int
	for w := range ob.n {
		if one != wire.AllWorkers && int(one) != w {
			continue
		}
		if ob.answered[w].Load() >= seq {
			continue
		}
		// The controller reads replies in order and may still be
		// blocked on another worker's; the flight recorder knows that
		// this one has finished the awaited command.
		if r := ob.rings[w]; r != nil {
			if c := r.Snapshot().Command; c.Phase == trace.End && c.Args.Seq >= seq {
				continue
			}
		}
		out = append(out, w)
	}
	return out
}

// watch reports waits longer than the threshold, at growing intervals
// (threshold, 2x, 4x, ...), and declares workers lost after the deadline.
func (ob *observer) watch() {
	defer close(ob.done)
	limit := ob.hang
	if limit == 0 || ob.deadline > 0 && ob.deadline < limit {
		limit = ob.deadline
	}
	tick := min(max(limit/4, 5*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	var since int64
	var next time.Duration
	var killed bool
	// Progress: a worker whose flight recorder moves (commands and
	// collectives start and end) is working, however long the call.
	written := make([]uint64, ob.n)
	moved := make([]int64, ob.n)
	for {
		select {
		case <-ob.stop:
			return
		case <-t.C:
		}
		s := ob.waitSince.Load()
		if s == 0 {
			continue
		}
		now := trace.Now()
		if s != since {
			since, next, killed = s, ob.hang, false
		}
		for w, r := range ob.rings {
			if r == nil {
				continue
			}
			if n := r.Written(); n != written[w] {
				written[w], moved[w] = n, now
			}
		}
		waited := time.Duration(now - s)
		if ob.hang > 0 && waited >= next {
			ob.report(waited, next*2)
			next *= 2
		}
		if ob.deadline > 0 && !killed && ob.kill != nil {
			// The deadline runs from the later of the wait's start and
			// the last progress of any awaited worker.
			pend := ob.pending()
			last := s
			for _, w := range pend {
				last = max(last, moved[w])
			}
			if stalled := time.Duration(now - last); len(pend) > 0 && stalled >= ob.deadline {
				killed = true
				ob.expire(pend, stalled, now)
			}
		}
	}
}

// expire declares lost the workers that hold the awaited ones (pend) up:
// those that have not reached the collective the awaited ones wait in,
// and those whose process is not running; if there are none, the awaited
// workers themselves.
func (ob *observer) expire(pend []int, stalled time.Duration, now int64) {
	in, behind := ob.behind(pend)
	for _, w := range behind {
		ob.kill(w, fmt.Sprintf("did not reach %s for %v (WorkerDeadline %v); %s", describeCollective(in), round(stalled), ob.deadline, ob.doing(w, now)))
	}
	halted := ob.halted(pend, behind)
	for _, w := range halted {
		ob.kill(w, fmt.Sprintf("not running (%s) while others made no progress for %v (WorkerDeadline %v); %s", procState(ob.pids[w]), round(stalled), ob.deadline, ob.doing(w, now)))
	}
	if len(behind)+len(halted) == 0 {
		for _, w := range pend {
			ob.kill(w, fmt.Sprintf("no answer and no progress for %v (WorkerDeadline %v); %s", round(stalled), ob.deadline, ob.doing(w, now)))
		}
	}
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// maxBehind bounds the workers a report lists as not having reached a
// collective.
const maxBehind = 16

// behind finds the collective the awaited workers wait inside (the one
// with the highest sequence number) and the other workers that have not
// reached it: a worker waiting in a collective waits for its peers, which
// may have answered the controller long ago.
func (ob *observer) behind(pend []int) (in trace.Event, out []int) {
	waiting := map[int]bool{}
	for _, w := range pend {
		waiting[w] = true
		if r := ob.rings[w]; r != nil {
			if c := r.Snapshot().Collective; c.Phase == trace.Begin && c.Args.Seq > in.Args.Seq {
				in = c
			}
		}
	}
	if in.Phase != trace.Begin {
		return in, nil
	}
	for w := range ob.n {
		r := ob.rings[w]
		if waiting[w] || r == nil {
			continue
		}
		c := r.Snapshot().Collective
		if c.Phase != 0 && (c.Args.Backend != in.Args.Backend || c.Args.Seq >= in.Args.Seq) {
			continue // there already (or in another communicator)
		}
		out = append(out, w)
	}
	return in, out
}

// halted lists the workers, other than the awaited ones and skip, whose
// process is not running (stopped, a zombie, gone): a peer frozen inside
// a collective holds the others up although it has reached it.
func (ob *observer) halted(pend, skip []int) []int {
	not := map[int]bool{}
	for _, w := range append(append([]int(nil), pend...), skip...) {
		not[w] = true
	}
	var out []int
	for w := range ob.n {
		if not[w] || ob.pids[w] == 0 {
			continue
		}
		if st := procState(ob.pids[w]); strings.HasPrefix(st, "stopped") || strings.HasPrefix(st, "exited") || st == "no such process" {
			out = append(out, w)
		}
	}
	return out
}

// report writes a hang report and records it in the trace.
func (ob *observer) report(waited, next time.Duration) {
	pend := ob.pending()
	if len(pend) == 0 {
		return
	}
	op := "a call"
	if p := ob.waitOp.Load(); p != nil {
		op = *p
	}
	now := trace.Now()
	var b strings.Builder
	ws := make([]int32, len(pend))
	for i, w := range pend {
		ws[i] = int32(w)
	}
	fmt.Fprintf(&b, "chorus: hang report: %s has waited %v for worker", op, round(waited))
	if len(pend) > 1 {
		b.WriteString("s")
	}
	fmt.Fprintf(&b, " %s (of %d)\n", workerList(ws), ob.n)
	in, behind := ob.behind(pend)
	for _, w := range pend {
		fmt.Fprintf(&b, "  worker %d%s: %s\n", w, ob.procInfo(w), ob.doing(w, now))
	}
	for i, w := range behind {
		if i == maxBehind {
			fmt.Fprintf(&b, "  ... and %d more\n", len(behind)-i)
			break
		}
		fmt.Fprintf(&b, "  worker %d%s has not reached %s: %s\n", w, ob.procInfo(w), describeCollective(in), ob.doing(w, now))
	}
	for _, w := range ob.halted(pend, behind) {
		fmt.Fprintf(&b, "  worker %d%s is not running: %s\n", w, ob.procInfo(w), ob.doing(w, now))
	}
	if ob.deadline > 0 {
		fmt.Fprintf(&b, "  unresponsive workers count as lost after %v (WorkerDeadline)", ob.deadline)
	} else {
		fmt.Fprintf(&b, "  no WorkerDeadline set (%s): waiting on", EnvWorkerDeadline)
	}
	fmt.Fprintf(&b, "; next report after %v\n", round(next))
	msg := b.String()
	_, _ = io.WriteString(ob.out, msg)
	ob.rec.Record(&trace.Event{Track: ob.rec.Track(trace.ThreadFaults), Name: "hang report", Cat: trace.CatHang, Phase: trace.Instant, TS: now, Args: trace.Args{Error: msg}})
}

// procInfo is " (pid N, stopped)" for process workers.
func (ob *observer) procInfo(w int) string {
	pid := ob.pids[w]
	if pid == 0 {
		if r := ob.rings[w]; r != nil {
			pid = r.PID()
		}
	}
	if pid == 0 {
		return ""
	}
	if st := procState(pid); st != "" {
		return fmt.Sprintf(" (pid %d, %s)", pid, st)
	}
	return fmt.Sprintf(" (pid %d)", pid)
}

// doing says what worker w's flight recorder shows it doing.
func (ob *observer) doing(w int, now int64) string {
	r := ob.rings[w]
	if r == nil {
		return "no flight recorder"
	}
	s := r.Snapshot()
	var parts []string
	switch c := s.Command; c.Phase {
	case 0:
		parts = append(parts, "no command started yet")
	case trace.Begin:
		parts = append(parts, fmt.Sprintf("in %s for %v", describeCommand(c), round(time.Duration(now-c.TS))))
	default:
		parts = append(parts, fmt.Sprintf("idle for %v after %s", round(time.Duration(now-c.TS)), describeCommand(c)))
	}
	if a := s.Activity; a.Phase == trace.Begin && s.Command.Phase == trace.Begin && a.TS >= s.Command.TS {
		parts = append(parts, fmt.Sprintf("%s for %v", a.Name, round(time.Duration(now-a.TS))))
	}
	switch c := s.Collective; c.Phase {
	case 0:
	case trace.Begin:
		parts = append(parts, fmt.Sprintf("in %s for %v", describeCollective(c), round(time.Duration(now-c.TS))))
	default:
		parts = append(parts, fmt.Sprintf("last collective %s ended %v ago", describeCollective(c), round(time.Duration(now-c.TS))))
	}
	return strings.Join(parts, "; ")
}

func describeCommand(e trace.Event) string {
	if e.Args.Op != "" && e.Args.Op != e.Name {
		return e.Args.Op + " " + e.Name
	}
	return e.Name
}

func describeCollective(e trace.Event) string {
	s := fmt.Sprintf("%s #%d", e.Name, e.Args.Seq)
	var d []string
	if e.Args.Backend != "" {
		d = append(d, e.Args.Backend)
	}
	if e.Args.Bytes > 0 {
		d = append(d, trace.FormatBytes(e.Args.Bytes))
	}
	if len(d) > 0 {
		s += " (" + strings.Join(d, ", ") + ")"
	}
	return s
}

// fault records an instant on the controller's faults track.
func (ob *observer) fault(name, msg string) {
	if !ob.rec.Timeline() {
		return
	}
	ob.rec.Record(&trace.Event{Track: ob.rec.Track(trace.ThreadFaults), Name: name, Cat: trace.CatFault, Phase: trace.Instant, Args: trace.Args{Error: msg}})
}

// Traces of several sessions of one process to one file accumulate: the
// file holds them all, later sessions' processes named "session N: ...".
var traceFiles struct {
	sync.Mutex
	m map[string]*traceFile
}

type traceFile struct {
	sessions int
	events   []trace.Event
	meta     map[string]any
}

// writeTrace merges the controller's and the workers' events and writes
// the trace file. Workers have stopped.
func (ob *observer) writeTrace() error {
	if ob.path == "" {
		return nil
	}
	evs := ob.rec.Events()
	for _, r := range ob.workerRecs {
		evs = append(evs, r.Events()...)
	}
	part, _, errs := mergeParts(ob.parts, ob.rings, 0)
	evs = append(evs, part...)
	var meta map[string]any
	if ob.source != nil {
		more, m := ob.source.TraceEvents()
		evs = append(evs, more...)
		meta = m
	}
	end := int64(0)
	for i := range evs {
		end = max(end, evs[i].TS)
	}
	evs = append(evs, trace.Close(evs, end)...)

	traceFiles.Lock()
	defer traceFiles.Unlock()
	if traceFiles.m == nil {
		traceFiles.m = map[string]*traceFile{}
	}
	tf := traceFiles.m[ob.path]
	if tf == nil {
		tf = &traceFile{}
		traceFiles.m[ob.path] = tf
	}
	tf.sessions++
	prefix := ""
	if tf.sessions > 1 {
		prefix = fmt.Sprintf("session %d: ", tf.sessions)
		for i := range evs {
			evs[i].Track.Process = prefix + evs[i].Track.Process
		}
	}
	tf.events = append(tf.events, evs...)
	for k, v := range meta {
		if tf.meta == nil {
			tf.meta = map[string]any{}
		}
		tf.meta[prefix+k] = v
	}
	tmp := ob.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	err = trace.WriteFile(f, &trace.File{Origin: trace.Earliest(tf.events), Events: tf.events, Meta: tf.meta})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, ob.path)
	}
	return errors.Join(append(errs, err)...)
}
