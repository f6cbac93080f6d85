package trace

import "unsafe"

// A Site is what the events of one kind of span share: track, name,
// category and the fixed arguments (rank, peer, communicator, backend,
// op). A writer makes it once (SiteCache keeps the few a loop uses) and
// records each event with Mark, which with the flight recorder alone
// (no trace file) is a timestamp and a few stores: no Event is built,
// and the slot's metadata and packed strings were computed when the
// Site was made.
type Site struct {
	rec   *Recorder
	ev    Event // the template: Track, Name, Cat, Args without Bytes, Seq, Error
	ring  bool  // its events go to the flight recorder
	state int   // the ring's state slot
	meta  uint64
	key   textKey
	text  [slotWords - 6]uint64 // name, then backend and op, as slot words 6..15
}

// NewSite makes the Site of events on track with name, category cat and
// the fixed arguments a (Bytes, Seq and Error are Mark's). A nil
// recorder gives a nil Site, whose Mark records nothing.
func (r *Recorder) NewSite(track Track, name, cat string, a Args) *Site {
	if r == nil {
		return nil
	}
	a.Bytes, a.Seq, a.Error = 0, 0, ""
	s := &Site{rec: r, ev: Event{Track: track, Name: name, Cat: cat, Args: a}}
	s.ring = r.ring != nil && ringCat(cat) && track.Process == r.proc
	if s.ring {
		s.state = stateIndex(track.Thread)
		s.meta = slotMeta(&s.ev, 0)
		s.key = keyOf(&s.ev)
		putText(s.text[:6], name, "")
		putText(s.text[6:], a.Backend, a.Op)
	}
	return s
}

// Mark records an event of s: phase ph at ts (0: now, in the recorder's
// clock: Recorder.Now), with the span's number seq, its bytes and the
// failure it ended with (err, "" for none). Like Record, it goes to the
// flight recorder (command and collective events of the recorder's own
// process) and, when the recorder keeps events, to the timeline; only
// the ring's writer may call it for ring events.
func (s *Site) Mark(ph Phase, ts int64, seq uint64, bytes int64, err string) {
	if s == nil {
		return
	}
	r := s.rec
	if r.keep || !s.ring {
		e := s.ev
		e.Phase, e.TS, e.Args.Seq, e.Args.Bytes, e.Args.Error = ph, ts, seq, bytes, err
		r.Record(&e)
		return
	}
	if ts == 0 {
		ts = r.ring.Now()
	}
	r.ring.putSite(s, ph, ts, seq, bytes, err != "")
}

// Is reports whether s is the Site of those arguments: the same strings
// (by identity: the constants and long-lived names spans are made of)
// and numbers.
func (s *Site) Is(track Track, name, cat string, a Args) bool {
	e := &s.ev
	return same(e.Track.Process, track.Process) && same(e.Track.Thread, track.Thread) && same(e.Name, name) &&
		same(e.Cat, cat) && same(e.Args.Comm, a.Comm) && same(e.Args.Backend, a.Backend) && same(e.Args.Op, a.Op) &&
		e.Args.Rank == a.Rank && e.Args.Peer == a.Peer && e.Args.Set == a.Set
}

func same(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// SiteCache holds the last few Sites a writer made, so that the spans of
// a loop are found again without allocating. The zero value is ready.
type SiteCache struct {
	spans [8]*Site
	next  int
}

// Get returns the Site of those arguments on r, made if it is not cached
// (replacing the oldest).
func (c *SiteCache) Get(r *Recorder, track Track, name, cat string, a Args) *Site {
	if r == nil {
		return nil
	}
	for _, s := range c.spans {
		if s != nil && s.rec == r && s.Is(track, name, cat, a) {
			return s
		}
	}
	s := r.NewSite(track, name, cat, a)
	c.spans[c.next] = s
	c.next = (c.next + 1) % len(c.spans)
	return s
}
