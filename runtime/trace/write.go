package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// File is a trace: events with their tracks, and the wall-clock origin
// that the file's timestamps count from.
type File struct {
	problems []string // found by Read, reported by Validate

	// Origin is the wall-clock time (ns since the Unix epoch) of ts 0.
	Origin int64
	Events []Event
	// Meta goes to "otherData" next to the origin (values as JSON, keys
	// sorted): how a multi-host trace was aligned, whose events are
	// missing or were dropped. Read returns numbers as json.Number.
	Meta map[string]any
}

// Reserved keys of "otherData".
const (
	metaClock  = "clock"
	metaOrigin = "origin_unix_ns"
)

// Earliest is the smallest timestamp of events (0 for none): the origin
// Write uses.
func Earliest(events []Event) int64 {
	origin := int64(math.MaxInt64)
	for i := range events {
		origin = min(origin, events[i].TS)
	}
	if len(events) == 0 {
		origin = 0
	}
	return origin
}

// Write writes events in the Trace Event Format (a JSON object with
// "traceEvents"): metadata events name every process and thread, so
// Perfetto shows "controller", "worker 3", "worker 3 gpu"; timestamps are
// microseconds (with ns precision) since the earliest event, which goes
// to "otherData" as origin_unix_ns. Events are ordered by time (stably,
// so a track's events stay in the order they were recorded when their
// times are equal).
func Write(w io.Writer, events []Event) error {
	return WriteFile(w, &File{Origin: Earliest(events), Events: events})
}

// WriteFile writes f as Write does, with f's origin (events before it get
// negative times, which Validate rejects).
func WriteFile(w io.Writer, f *File) error {
	evs := make([]Event, len(f.Events))
	copy(evs, f.Events)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].TS < evs[j].TS })
	pids, tids := numberTracks(evs)
	bw := bufio.NewWriterSize(w, 64<<10)
	var b []byte
	b = append(b, `{"displayTimeUnit":"ns","otherData":{"clock":"wall-clock ns since the Unix epoch","origin_unix_ns":`...)
	b = strconv.AppendInt(b, f.Origin, 10)
	keys := make([]string, 0, len(f.Meta))
	for k := range f.Meta {
		if k != metaClock && k != metaOrigin {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := json.Marshal(f.Meta[k])
		if err != nil {
			return fmt.Errorf("trace: otherData %q: %w", k, err)
		}
		b = append(b, ',')
		b = appendString(b, k)
		b = append(b, ':')
		b = append(b, v...)
	}
	b = append(b, `},"traceEvents":[`...)
	first := true
	sep := func() {
		if !first {
			b = append(b, ",\n"...)
		} else {
			b = append(b, '\n')
		}
		first = false
	}
	for _, p := range pids.order {
		pid := pids.id[p]
		sep()
		b = append(b, `{"name":"process_name","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(pid), 10)
		b = append(b, `,"tid":0,"args":{"name":`...)
		b = appendString(b, p)
		b = append(b, `}},`...)
		b = append(b, "\n"...)
		b = append(b, `{"name":"process_sort_index","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(pid), 10)
		b = append(b, `,"tid":0,"args":{"sort_index":`...)
		b = strconv.AppendInt(b, int64(pid), 10)
		b = append(b, `}}`...)
	}
	for _, t := range tids.order {
		tid := tids.id[t]
		sep()
		b = append(b, `{"name":"thread_name","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(pids.id[t.Process]), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, `,"args":{"name":`...)
		b = appendString(b, t.Thread)
		b = append(b, `}},`...)
		b = append(b, "\n"...)
		b = append(b, `{"name":"thread_sort_index","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(pids.id[t.Process]), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, `,"args":{"sort_index":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, `}}`...)
	}
	for i := range evs {
		e := &evs[i]
		sep()
		b = appendEvent(b, e, f.Origin, pids.id[e.Track.Process], tids.id[e.Track])
		if len(b) > 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, "\n]}\n"...)
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.Flush()
}

func appendEvent(b []byte, e *Event, origin int64, pid, tid int) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, e.Name)
	if e.Cat != "" {
		b = append(b, `,"cat":`...)
		b = appendString(b, e.Cat)
	}
	b = append(b, `,"ph":"`...)
	b = append(b, byte(e.Phase))
	b = append(b, `","ts":`...)
	b = appendMicros(b, e.TS-origin)
	if e.Phase == Complete {
		b = append(b, `,"dur":`...)
		b = appendMicros(b, e.Dur)
	}
	if e.Phase == Instant {
		b = append(b, `,"s":"t"`...)
	}
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(tid), 10)
	b = appendArgs(b, &e.Args)
	return append(b, '}')
}

func appendArgs(b []byte, a *Args) []byte {
	start := len(b)
	b = append(b, `,"args":{`...)
	open := len(b)
	field := func(k string) {
		if len(b) > open {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":`...)
	}
	if a.Bytes != 0 {
		field("bytes")
		b = strconv.AppendInt(b, a.Bytes, 10)
	}
	if a.Seq != 0 {
		field("seq")
		b = strconv.AppendUint(b, a.Seq, 10)
	}
	if a.Set&HasRank != 0 {
		field("rank")
		b = strconv.AppendInt(b, int64(a.Rank), 10)
	}
	if a.Set&HasPeer != 0 {
		field("peer")
		b = strconv.AppendInt(b, int64(a.Peer), 10)
	}
	for _, kv := range [...]struct{ k, v string }{{"comm", a.Comm}, {"backend", a.Backend}, {"op", a.Op}, {"error", a.Error}} {
		if kv.v != "" {
			field(kv.k)
			b = appendString(b, kv.v)
		}
	}
	if a.Set&HasUnfinished != 0 {
		field("unfinished")
		b = append(b, "true"...)
	}
	if len(b) == open {
		return b[:start]
	}
	return append(b, '}')
}

// appendMicros writes ns as microseconds with three decimals, exactly.
func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	if frac == 0 {
		return b
	}
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b
}

// appendString writes s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

type numbering[K comparable] struct {
	order []K
	id    map[K]int
}

// numberTracks gives processes and threads small stable numbers:
// controller first, then workers by id (each followed by its GPU), then
// other processes by name; threads commands, collectives, faults, then
// streams and others by name.
func numberTracks(evs []Event) (numbering[string], numbering[Track]) {
	pids := numbering[string]{id: map[string]int{}}
	tids := numbering[Track]{id: map[Track]int{}}
	for i := range evs {
		t := evs[i].Track
		if _, ok := pids.id[t.Process]; !ok {
			pids.id[t.Process] = 0
			pids.order = append(pids.order, t.Process)
		}
		if _, ok := tids.id[t]; !ok {
			tids.id[t] = 0
			tids.order = append(tids.order, t)
		}
	}
	sort.SliceStable(pids.order, func(i, j int) bool { return procLess(pids.order[i], pids.order[j]) })
	for i, p := range pids.order {
		pids.id[p] = i + 1
	}
	sort.SliceStable(tids.order, func(i, j int) bool {
		a, b := tids.order[i], tids.order[j]
		if a.Process != b.Process {
			return pids.id[a.Process] < pids.id[b.Process]
		}
		return threadLess(a.Thread, b.Thread)
	})
	for i, t := range tids.order {
		tids.id[t] = i + 1
	}
	return pids, tids
}

func procKey(p string) (session, group, id int, gpu int) {
	if s, rest, ok := cutSession(p); ok {
		session, p = s, rest
	}
	if p == ProcController {
		return session, 0, 0, 0
	}
	if w, g, ok := WorkerOf(p); ok {
		if g {
			gpu = 1
		}
		return session, 1, w, gpu
	}
	return session, 2, 0, 0
}

// cutSession splits "session N: rest".
func cutSession(p string) (int, string, bool) {
	s, ok := cutPrefix(p, "session ")
	if !ok {
		return 0, p, false
	}
	num, rest, ok := cut(s, ": ")
	if !ok {
		return 0, p, false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, p, false
	}
	return n, rest, true
}

func procLess(a, b string) bool {
	sa, ga, ia, xa := procKey(a)
	sb, gb, ib, xb := procKey(b)
	switch {
	case sa != sb:
		return sa < sb
	case ga != gb:
		return ga < gb
	case ia != ib:
		return ia < ib
	case xa != xb:
		return xa < xb
	}
	return a < b
}

func threadRank(t string) int {
	switch t {
	case ThreadCommands:
		return 0
	case ThreadCollectives:
		return 1
	case ThreadFaults:
		return 2
	}
	return 3
}

func threadLess(a, b string) bool {
	ra, rb := threadRank(a), threadRank(b)
	if ra != rb {
		return ra < rb
	}
	if len(a) != len(b) { // "stream 2" before "stream 10"
		return len(a) < len(b)
	}
	return a < b
}
