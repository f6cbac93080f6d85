package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// ErrFormat: the data is not a trace this package can read.
var ErrFormat = errors.New("trace: not a Trace Event Format file")

// ErrInvalid: a trace that breaks an invariant (see Validate).
var ErrInvalid = errors.New("trace: invalid")

// maxMicros bounds timestamps (about 285 years in microseconds): beyond,
// nanoseconds no longer fit an int64.
const maxMicros = 9e15

type rawEvent struct {
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	Ph   string          `json:"ph"`
	TS   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	PID  *int64          `json:"pid"`
	TID  *int64          `json:"tid"`
	Args json.RawMessage `json:"args"`
}

type rawArgs struct {
	Name       *string `json:"name"` // metadata
	Bytes      *int64  `json:"bytes"`
	Seq        *uint64 `json:"seq"`
	Rank       *int32  `json:"rank"`
	Peer       *int32  `json:"peer"`
	Comm       string  `json:"comm"`
	Backend    string  `json:"backend"`
	Op         string  `json:"op"`
	Error      string  `json:"error"`
	Unfinished bool    `json:"unfinished"`
}

// Read parses a trace: a JSON object with "traceEvents" (and optionally
// "otherData".origin_unix_ns), or a bare JSON array of events. Metadata
// events name the tracks; the other events keep the file's order. Things
// Validate objects to but that do not stop reading (an unnamed process, a
// name used by two processes) are remembered for Validate.
func Read(data []byte) (*File, error) {
	var raws []rawEvent
	var origin int64
	var meta map[string]any
	data = bytes.TrimSpace(data)
	switch {
	case len(data) > 0 && data[0] == '[':
		if err := json.Unmarshal(data, &raws); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
	default:
		var top struct {
			TraceEvents *[]rawEvent                `json:"traceEvents"`
			OtherData   map[string]json.RawMessage `json:"otherData"`
		}
		if err := json.Unmarshal(data, &top); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		if top.TraceEvents == nil {
			return nil, fmt.Errorf("%w: no traceEvents", ErrFormat)
		}
		raws = *top.TraceEvents
		for k, v := range top.OtherData {
			switch k {
			case metaOrigin:
				if err := json.Unmarshal(v, &origin); err != nil {
					return nil, fmt.Errorf("%w: otherData.%s: %v", ErrFormat, k, err)
				}
			case metaClock:
			default:
				d := json.NewDecoder(bytes.NewReader(v))
				d.UseNumber()
				var x any
				if err := d.Decode(&x); err != nil {
					return nil, fmt.Errorf("%w: otherData.%s: %v", ErrFormat, k, err)
				}
				if meta == nil {
					meta = map[string]any{}
				}
				meta[k] = x
			}
		}
	}
	f := &File{Origin: origin, Meta: meta}
	type tkey struct{ pid, tid int64 }
	procs := map[int64]string{}
	threads := map[tkey]string{}
	var evs []rawEvent
	var args []rawArgs
	for i, r := range raws {
		if len(r.Ph) != 1 {
			return nil, fmt.Errorf("%w: event %d: phase %q", ErrFormat, i, r.Ph)
		}
		if r.PID == nil {
			return nil, fmt.Errorf("%w: event %d (%q): no pid", ErrFormat, i, r.Name)
		}
		var a rawArgs
		if len(r.Args) > 0 && string(r.Args) != "null" {
			if err := json.Unmarshal(r.Args, &a); err != nil {
				return nil, fmt.Errorf("%w: event %d (%q): args: %v", ErrFormat, i, r.Name, err)
			}
		}
		tid := int64(0)
		if r.TID != nil {
			tid = *r.TID
		}
		if r.Ph == "M" {
			if a.Name == nil {
				continue
			}
			switch r.Name {
			case "process_name":
				if old, ok := procs[*r.PID]; ok && old != *a.Name {
					f.problems = append(f.problems, fmt.Sprintf("pid %d named %q and %q", *r.PID, old, *a.Name))
				}
				procs[*r.PID] = *a.Name
			case "thread_name":
				threads[tkey{*r.PID, tid}] = *a.Name
			}
			continue
		}
		if r.TS == nil || math.IsNaN(*r.TS) || math.Abs(*r.TS) > maxMicros {
			return nil, fmt.Errorf("%w: event %d (%q): missing or unusable ts", ErrFormat, i, r.Name)
		}
		if r.Dur != nil && (math.IsNaN(*r.Dur) || math.Abs(*r.Dur) > maxMicros) {
			return nil, fmt.Errorf("%w: event %d (%q): unusable dur", ErrFormat, i, r.Name)
		}
		r.TID = &tid
		evs = append(evs, r)
		args = append(args, a)
	}
	// One process per name: two pids called "worker 3" would merge here.
	byName := map[string]int64{}
	pids := make([]int64, 0, len(procs))
	for p := range procs {
		pids = append(pids, p)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, p := range pids {
		if o, ok := byName[procs[p]]; ok {
			f.problems = append(f.problems, fmt.Sprintf("process name %q used by pids %d and %d", procs[p], o, p))
		}
		byName[procs[p]] = p
	}
	unnamed := map[string]bool{}
	f.Events = make([]Event, len(evs))
	for i, r := range evs {
		proc, ok := procs[*r.PID]
		if !ok {
			proc = fmt.Sprintf("pid %d", *r.PID)
			if !unnamed[proc] {
				unnamed[proc] = true
				f.problems = append(f.problems, fmt.Sprintf("pid %d has no process_name", *r.PID))
			}
		}
		th, ok := threads[tkey{*r.PID, *r.TID}]
		if !ok {
			th = fmt.Sprintf("tid %d", *r.TID)
			if k := proc + "/" + th; !unnamed[k] {
				unnamed[k] = true
				f.problems = append(f.problems, fmt.Sprintf("%s tid %d has no thread_name", proc, *r.TID))
			}
		}
		e := Event{Track: Track{Process: proc, Thread: th}, Name: r.Name, Cat: r.Cat, Phase: Phase(r.Ph[0]),
			TS: origin + int64(math.Round(*r.TS*1000))}
		if e.Phase == Complete && r.Dur != nil {
			e.Dur = int64(math.Round(*r.Dur * 1000))
		}
		a := args[i]
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
		f.Events[i] = e
	}
	return f, nil
}

// Validate checks the invariants of a chorus trace: every process and
// thread is named, and each process name (so each worker) belongs to one
// process; phases are B, E, X or i; timestamps are not before the origin
// and never go back on a track (in file order); durations are not
// negative; on every track each E closes the innermost open B (of the
// same name, when the E has one), and nothing is left open.
func Validate(f *File) error {
	var errs []string
	errs = append(errs, f.problems...)
	type state struct {
		last int64
		seen bool
		open []string
	}
	tracks := map[Track]*state{}
	var order []Track
	for i := range f.Events {
		e := &f.Events[i]
		st := tracks[e.Track]
		if st == nil {
			st = &state{}
			tracks[e.Track] = st
			order = append(order, e.Track)
		}
		if e.TS < f.Origin {
			errs = append(errs, fmt.Sprintf("%v: event %d (%q) before the origin", e.Track, i, e.Name))
		}
		if st.seen && e.TS < st.last {
			errs = append(errs, fmt.Sprintf("%v: event %d (%q) at %d ns goes back from %d ns", e.Track, i, e.Name, e.TS-f.Origin, st.last-f.Origin))
		}
		st.last, st.seen = e.TS, true
		switch e.Phase {
		case Begin:
			st.open = append(st.open, e.Name)
		case End:
			if len(st.open) == 0 {
				errs = append(errs, fmt.Sprintf("%v: event %d: E (%q) with nothing open", e.Track, i, e.Name))
				continue
			}
			top := st.open[len(st.open)-1]
			if e.Name != "" && e.Name != top {
				errs = append(errs, fmt.Sprintf("%v: event %d: E %q closes B %q", e.Track, i, e.Name, top))
			}
			st.open = st.open[:len(st.open)-1]
		case Complete:
			if e.Dur < 0 {
				errs = append(errs, fmt.Sprintf("%v: event %d (%q): negative dur", e.Track, i, e.Name))
			}
		case Instant, 'I':
		default:
			errs = append(errs, fmt.Sprintf("%v: event %d (%q): phase %q not used by chorus", e.Track, i, e.Name, string(e.Phase)))
		}
	}
	for _, t := range order {
		if st := tracks[t]; len(st.open) > 0 {
			errs = append(errs, fmt.Sprintf("%v: %d spans never end (%s)", t, len(st.open), strings.Join(st.open, ", ")))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	if len(errs) > 20 {
		errs = append(errs[:20], fmt.Sprintf("... %d more", len(errs)-20))
	}
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
}
