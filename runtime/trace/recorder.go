package trace

import "sync"

// chunkEvents is the number of events per chunk: chunks are never moved
// or copied when the recorder grows (a growing slice would copy every
// event recorded so far).
const chunkEvents = 1024

// Recorder collects one process's events (a worker's, the controller's).
// Record is safe for concurrent use. A nil *Recorder records nothing, so
// call sites need no other test; Timeline says whether events are kept
// for a trace file, and a Ring, when set, receives the command and
// collective events of the recorder's own process whether or not they
// are kept (the flight recorder).
type Recorder struct {
	proc  string
	ring  *Ring
	keep  bool
	mu    sync.Mutex
	chunk [][]Event
	taken int // events already handed out by Drain
	total int
}

// NewRecorder makes a recorder for process proc (ProcWorker(i),
// ProcController). ring may be nil; keep says whether events are kept
// for a trace file.
func NewRecorder(proc string, ring *Ring, keep bool) *Recorder {
	return &Recorder{proc: proc, ring: ring, keep: keep}
}

// Process is the recorder's process name.
func (r *Recorder) Process() string { return r.proc }

// Ring is the recorder's flight recorder (nil if none).
func (r *Recorder) Ring() *Ring {
	if r == nil {
		return nil
	}
	return r.ring
}

// Timeline reports whether events are kept for a trace file.
func (r *Recorder) Timeline() bool { return r != nil && r.keep }

// Record stores e (TS 0 means now) in the flight ring, for command,
// collective and activity events of the recorder's process, and keeps
// it when the timeline is on.
func (r *Recorder) Record(e *Event) {
	if r == nil {
		return
	}
	toRing := r.ring != nil && ringCat(e.Cat) && e.Track.Process == r.proc
	if !toRing && !r.keep {
		return // the controller's recorder with tracing off: not even the clock
	}
	if e.TS == 0 {
		e.TS = r.now(toRing)
	}
	if toRing {
		r.ring.Put(e)
	}
	if !r.keep {
		return
	}
	r.mu.Lock()
	n := len(r.chunk)
	if n == 0 || len(r.chunk[n-1]) == chunkEvents {
		r.chunk = append(r.chunk, make([]Event, 0, chunkEvents))
		n++
	}
	r.chunk[n-1] = append(r.chunk[n-1], *e)
	r.total++
	r.mu.Unlock()
}

// Now is the time for an event of the recorder's own command or
// collective tracks (the flight recorder's clock when not tracing, else
// Now). Only the ring's writer may call it.
func (r *Recorder) Now() int64 {
	if r == nil {
		return Now()
	}
	return r.now(r.ring != nil)
}

// now: the ring's clock for an event that goes only to the ring; Now for
// one kept in the timeline, whose events must all share one clock.
func (r *Recorder) now(toRing bool) int64 {
	if toRing && !r.keep {
		return r.ring.Now()
	}
	return Now()
}

// Track returns the track of thread in the recorder's process.
func (r *Recorder) Track(thread string) Track { return Track{Process: r.proc, Thread: thread} }

// Events returns a copy of the events kept and not yet drained, in
// record order.
func (r *Recorder) Events() []Event {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Event, 0, r.total)
	r.each(func(evs []Event) error { out = append(out, evs...); return nil })
	return out
}

// each calls fn on the undrained events. Caller holds mu.
func (r *Recorder) each(fn func([]Event) error) error {
	for i, c := range r.chunk {
		if i == 0 {
			c = c[r.taken:]
		}
		if len(c) == 0 {
			continue
		}
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// Drain calls fn with the events kept since the previous Drain, in record
// order, and then forgets them (a worker process streams its events to a
// file this way). fn must not keep the slices. When fn fails, nothing is
// forgotten.
func (r *Recorder) Drain(fn func([]Event) error) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.each(fn); err != nil {
		return err
	}
	r.total = 0
	if n := len(r.chunk); n > 0 && len(r.chunk[n-1]) < chunkEvents {
		// Keep the partly filled chunk for the events to come.
		last := r.chunk[n-1]
		r.chunk = append(r.chunk[:0], last)
		r.taken = len(last)
		return nil
	}
	r.chunk = r.chunk[:0]
	r.taken = 0
	return nil
}
