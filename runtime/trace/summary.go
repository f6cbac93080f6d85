package trace

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Span is one interval of a trace: a B/E pair or an X event (Dur > 0 or
// 0), or an instant (Instant set, Dur 0). Start is wall-clock ns.
type Span struct {
	Track   Track
	Name    string
	Cat     string
	Start   int64
	Dur     int64
	Instant bool
	Args    Args // the B's (or X's) arguments; an E's error is added
}

// Spans pairs every track's B and E events (innermost first) and returns
// them with the X and instant events, ordered by start. A B that never
// ends runs to the last event of the file.
func Spans(f *File) []Span {
	var out []Span
	open := map[Track][]int{}
	end := int64(0)
	for i := range f.Events {
		end = max(end, f.Events[i].TS)
	}
	for i := range f.Events {
		e := &f.Events[i]
		switch e.Phase {
		case Begin:
			open[e.Track] = append(open[e.Track], len(out))
			out = append(out, Span{Track: e.Track, Name: e.Name, Cat: e.Cat, Start: e.TS, Dur: -1, Args: e.Args})
		case End:
			st := open[e.Track]
			if len(st) == 0 {
				continue
			}
			s := &out[st[len(st)-1]]
			open[e.Track] = st[:len(st)-1]
			s.Dur = e.TS - s.Start
			if e.Args.Error != "" {
				s.Args.Error = e.Args.Error
			}
			if e.Args.Set&HasUnfinished != 0 {
				s.Args.Set |= HasUnfinished
			}
		case Complete:
			out = append(out, Span{Track: e.Track, Name: e.Name, Cat: e.Cat, Start: e.TS, Dur: e.Dur, Args: e.Args})
		case Instant, 'I':
			out = append(out, Span{Track: e.Track, Name: e.Name, Cat: e.Cat, Start: e.TS, Instant: true, Args: e.Args})
		}
	}
	for i := range out {
		if out[i].Dur < 0 {
			out[i].Dur = end - out[i].Start
			out[i].Args.Set |= HasUnfinished
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// OpStat totals the spans of one name on one side (the controller or the
// workers).
type OpStat struct {
	Side  string // "controller", "workers", "gpu"
	Cat   string
	Name  string
	Count int
	Total time.Duration
	Max   time.Duration
}

// Mean is Total / Count.
func (o OpStat) Mean() time.Duration {
	if o.Count == 0 {
		return 0
	}
	return o.Total / time.Duration(o.Count)
}

// Straggler is one collective matched across ranks by communicator and
// sequence number: the rank that arrived last, and how much later than
// the first.
type Straggler struct {
	Name    string
	Comm    string
	Seq     uint64
	Backend string
	Bytes   int64
	Ranks   int
	Slowest int           // worker id of the last arrival
	Late    time.Duration // its arrival minus the first arrival
	Took    time.Duration // first arrival to last end
}

// RankLate counts how often a worker arrived last and by how much.
type RankLate struct {
	Worker int
	Last   int
	Late   time.Duration
}

// Summary is what `chorus trace summary` prints.
type Summary struct {
	Span        time.Duration
	Ops         []OpStat    // by total time, largest first
	Collectives []Straggler // every matched collective, latest arrival gap first
	Ranks       []RankLate  // by worker
	Faults      []Span      // instants of category fault or hang
}

// Summarize computes the summary of f.
func Summarize(f *File) Summary {
	var s Summary
	spans := Spans(f)
	if len(spans) > 0 {
		lo, hi := spans[0].Start, spans[0].Start
		for _, sp := range spans {
			hi = max(hi, sp.Start+sp.Dur)
		}
		s.Span = time.Duration(hi - lo)
	}
	type okey struct{ side, cat, name string }
	ops := map[okey]*OpStat{}
	type ckey struct {
		name, comm string
		seq        uint64
	}
	type arrival struct {
		worker     int
		start, end int64
		args       *Args
	}
	colls := map[ckey][]arrival{}
	var corder []ckey
	for i := range spans {
		sp := &spans[i]
		if sp.Instant {
			if sp.Cat == CatFault || sp.Cat == CatHang {
				s.Faults = append(s.Faults, *sp)
			}
			continue
		}
		side := "workers"
		w, gpu, isWorker := WorkerOf(sp.Track.Process)
		switch {
		case gpu:
			side = "gpu"
		case !isWorker:
			side = sp.Track.Process
			if _, rest, ok := cutSession(side); ok {
				side = rest
			}
		}
		k := okey{side, sp.Cat, sp.Name}
		o := ops[k]
		if o == nil {
			o = &OpStat{Side: side, Cat: sp.Cat, Name: sp.Name}
			ops[k] = o
		}
		o.Count++
		o.Total += time.Duration(sp.Dur)
		o.Max = max(o.Max, time.Duration(sp.Dur))
		if sp.Cat == CatCollective && isWorker && !gpu && sp.Args.Seq != 0 {
			ck := ckey{sp.Name, sp.Args.Comm, sp.Args.Seq}
			if _, ok := colls[ck]; !ok {
				corder = append(corder, ck)
			}
			colls[ck] = append(colls[ck], arrival{w, sp.Start, sp.Start + sp.Dur, &sp.Args})
		}
	}
	for _, o := range ops {
		s.Ops = append(s.Ops, *o)
	}
	sort.Slice(s.Ops, func(i, j int) bool {
		a, b := s.Ops[i], s.Ops[j]
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Side+a.Name < b.Side+b.Name
	})
	ranks := map[int]*RankLate{}
	for _, ck := range corder {
		as := colls[ck]
		if len(as) < 2 {
			continue
		}
		first, last, slow, endAll := as[0].start, as[0].start, as[0].worker, as[0].end
		for _, a := range as[1:] {
			first = min(first, a.start)
			endAll = max(endAll, a.end)
			if a.start > last {
				last, slow = a.start, a.worker
			}
		}
		st := Straggler{Name: ck.name, Comm: ck.comm, Seq: ck.seq, Ranks: len(as), Slowest: slow,
			Late: time.Duration(last - first), Took: time.Duration(endAll - first),
			Backend: as[0].args.Backend, Bytes: as[0].args.Bytes}
		s.Collectives = append(s.Collectives, st)
		r := ranks[slow]
		if r == nil {
			r = &RankLate{Worker: slow}
			ranks[slow] = r
		}
		r.Last++
		r.Late += st.Late
	}
	sort.SliceStable(s.Collectives, func(i, j int) bool { return s.Collectives[i].Late > s.Collectives[j].Late })
	for _, r := range ranks {
		s.Ranks = append(s.Ranks, *r)
	}
	sort.Slice(s.Ranks, func(i, j int) bool { return s.Ranks[i].Worker < s.Ranks[j].Worker })
	return s
}

// Print writes the summary as tables; top bounds the stragglers listed.
func (s Summary) Print(w io.Writer, top int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "trace spans %v\n\n", s.Span.Round(time.Microsecond))
	fmt.Fprintln(tw, "side\tcategory\tname\tcount\ttotal\tmean\tmax\t")
	for _, o := range s.Ops {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%v\t%v\t\n", o.Side, o.Cat, o.Name, o.Count, roundDur(o.Total), roundDur(o.Mean()), roundDur(o.Max))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Collectives) > 0 {
		fmt.Fprintf(w, "\n%d collectives matched across ranks; slowest arrivals:\n", len(s.Collectives))
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "collective\tcomm\tseq\tbackend\tbytes\tranks\tlast rank\tlate by\ttook\t")
		for i, c := range s.Collectives {
			if i >= top {
				break
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\tworker %d\t%v\t%v\t\n", c.Name, c.Comm, c.Seq, c.Backend, FormatBytes(c.Bytes), c.Ranks, c.Slowest, roundDur(c.Late), roundDur(c.Took))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nlast to arrive, per worker:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "worker\ttimes last\ttotal late\t")
		for _, r := range s.Ranks {
			fmt.Fprintf(tw, "%d\t%d\t%v\t\n", r.Worker, r.Last, roundDur(r.Late))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(s.Faults) > 0 {
		fmt.Fprintf(w, "\n%d faults and hang reports:\n", len(s.Faults))
		for _, f := range s.Faults {
			msg := f.Args.Error
			if i := strings.IndexByte(msg, '\n'); i >= 0 {
				msg = msg[:i] + " ..."
			}
			fmt.Fprintf(w, "  %s %s: %s %s\n", time.Unix(0, f.Start).Format("15:04:05.000000"), f.Track.Process, f.Name, msg)
		}
	}
	return nil
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}
