package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// A part is one process's events as JSON lines, with track names and ns
// timestamps inline: worker processes append their events to a part file
// as they go, and the controller merges the parts into one trace. A last
// line cut short (a worker killed while writing) is ignored.

// WritePart appends events to w as part lines.
func WritePart(w io.Writer, events []Event) error {
	var b []byte
	for i := range events {
		e := &events[i]
		b = append(b, `{"p":`...)
		b = appendString(b, e.Track.Process)
		b = append(b, `,"t":`...)
		b = appendString(b, e.Track.Thread)
		b = append(b, `,"name":`...)
		b = appendString(b, e.Name)
		b = append(b, `,"cat":`...)
		b = appendString(b, e.Cat)
		b = append(b, `,"ph":"`...)
		b = append(b, byte(e.Phase))
		b = append(b, `","ns":`...)
		b = strconv.AppendInt(b, e.TS, 10)
		if e.Dur != 0 {
			b = append(b, `,"dur_ns":`...)
			b = strconv.AppendInt(b, e.Dur, 10)
		}
		b = appendArgs(b, &e.Args)
		b = append(b, "}\n"...)
		if len(b) > 32<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(b)
	return err
}

type partLine struct {
	P    string   `json:"p"`
	T    string   `json:"t"`
	Name string   `json:"name"`
	Cat  string   `json:"cat"`
	Ph   string   `json:"ph"`
	NS   *int64   `json:"ns"`
	Dur  int64    `json:"dur_ns"`
	Args *rawArgs `json:"args"`
}

// ReadPart parses part lines.
func ReadPart(data []byte) ([]Event, error) {
	var out []Event
	for n := 1; len(data) > 0; n++ {
		line := data
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			// No newline: the writer was cut off mid-line.
			break
		}
		line, data = data[:i], data[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var p partLine
		if err := json.Unmarshal(line, &p); err != nil {
			return out, fmt.Errorf("%w: part line %d: %v", ErrFormat, n, err)
		}
		if len(p.Ph) != 1 || p.NS == nil {
			return out, fmt.Errorf("%w: part line %d: no phase or time", ErrFormat, n)
		}
		e := Event{Track: Track{Process: p.P, Thread: p.T}, Name: p.Name, Cat: p.Cat, Phase: Phase(p.Ph[0]), TS: *p.NS, Dur: p.Dur}
		if a := p.Args; a != nil {
			if a.Bytes != nil {
				e.Args.Bytes = *a.Bytes
			}
			if a.Seq != nil {
				e.Args.Seq = *a.Seq
			}
			if a.Rank != nil {
				e.Args.Rank, e.Args.Set = *a.Rank, e.Args.Set|HasRank
			}
			if a.Peer != nil {
				e.Args.Peer, e.Args.Set = *a.Peer, e.Args.Set|HasPeer
			}
			if a.Unfinished {
				e.Args.Set |= HasUnfinished
			}
			e.Args.Comm, e.Args.Backend, e.Args.Op, e.Args.Error = a.Comm, a.Backend, a.Op, a.Error
		}
		out = append(out, e)
	}
	return out, nil
}

// Close ends every span of events that was begun and not ended, at time
// at, with an E marked unfinished (a worker that died or hung mid-call),
// so that the merged trace stays balanced. It returns the added events.
func Close(events []Event, at int64) []Event {
	open := map[Track][]*Event{}
	var order []Track
	for i := range events {
		e := &events[i]
		switch e.Phase {
		case Begin:
			if _, ok := open[e.Track]; !ok {
				order = append(order, e.Track)
			}
			open[e.Track] = append(open[e.Track], e)
		case End:
			if st := open[e.Track]; len(st) > 0 {
				open[e.Track] = st[:len(st)-1]
			}
		}
	}
	var add []Event
	for _, t := range order {
		st := open[t]
		for i := len(st) - 1; i >= 0; i-- {
			b := st[i]
			add = append(add, Event{Track: t, Name: b.Name, Cat: b.Cat, Phase: End, TS: max(at, b.TS),
				Args: Args{Set: HasUnfinished, Error: "did not finish before the trace was written"}})
		}
	}
	return add
}

// Reopen returns B events for the E events of tail that close spans not
// begun in head or tail (a flight recorder keeps only the latest events:
// the start of a long call may have left it). Each B is placed at the
// time of tail's first event on its track and marked unfinished; put the
// result between head and tail, in the order returned.
func Reopen(head, tail []Event) []Event {
	open := map[Track]int{}
	for i := range head {
		switch head[i].Phase {
		case Begin:
			open[head[i].Track]++
		case End:
			if open[head[i].Track] > 0 {
				open[head[i].Track]--
			}
		}
	}
	first := map[Track]int64{}
	var unmatched []*Event
	for i := range tail {
		e := &tail[i]
		if _, ok := first[e.Track]; !ok {
			first[e.Track] = e.TS
		}
		switch e.Phase {
		case Begin:
			open[e.Track]++
		case End:
			if open[e.Track] > 0 {
				open[e.Track]--
			} else {
				unmatched = append(unmatched, e)
			}
		}
	}
	out := make([]Event, 0, len(unmatched))
	for i := len(unmatched) - 1; i >= 0; i-- { // outermost first
		e := unmatched[i]
		out = append(out, Event{Track: e.Track, Name: e.Name, Cat: e.Cat, Phase: Begin, TS: first[e.Track],
			Args: Args{Set: HasUnfinished, Error: "began before the flight recorder's window"}})
	}
	return out
}
