package plot

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Point is one size of a series: the median over the lines that gave it
// (a file with several rounds or runs of the same series).
type Point struct {
	Bytes  int64
	TimeUs float64
	BusBW  float64 // 0: unknown (no point in the bandwidth panel)
	N      int     // lines combined
}

// Series is one line of the plot.
type Series struct {
	Name   string
	Anchor bool
	Points []Point // by size
}

// key is what makes two records the same series.
type key struct {
	label, bench, backend, plan, algorithm, strategy, session, dtype string
	workers                                                          int
	graph, anchor                                                    bool
}

func keyOf(r Record) key {
	return key{r.Label, r.Bench, r.Backend, r.Plan, r.Algorithm, r.Strategy, r.Session, r.DType, r.Workers, r.Graph, r.Anchor}
}

// Group turns records into series, in the order each series first
// appears. Names hold the fields that tell the series apart (the backend,
// plan or algorithm first, then the session, workers, dtype or bench when
// they differ between series); Common lists the fields all series share,
// for the title.
func Group(recs []Record) (series []Series, shared string) {
	var keys []key
	by := map[key][]Record{}
	for _, r := range recs {
		k := keyOf(r)
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	// A field varies when series have two different values of it (a
	// series without the field, such as a labelled one, does not count);
	// it is common when every series has the same value.
	varies := func(get func(key) string) bool {
		seen := ""
		for _, k := range keys {
			if v := get(k); v != "" && seen != "" && v != seen {
				return true
			} else if v != "" {
				seen = v
			}
		}
		return false
	}
	common := func(get func(key) string) bool {
		for _, k := range keys {
			if get(k) == "" || get(k) != get(keys[0]) {
				return false
			}
		}
		return true
	}
	type field struct {
		name string
		get  func(key) string
	}
	fields := []field{
		{"bench", func(k key) string { return k.bench }},
		{"session", func(k key) string { return k.session }},
		{"workers", func(k key) string {
			if k.workers == 0 {
				return ""
			}
			return fmt.Sprintf("%d workers", k.workers)
		}},
		{"dtype", func(k key) string { return k.dtype }},
	}
	var commons []string
	for _, f := range fields {
		if len(keys) > 0 && common(f.get) {
			commons = append(commons, f.get(keys[0]))
		}
	}
	names := map[string]int{}
	for _, k := range keys {
		s := Series{Name: nameOf(k), Anchor: k.anchor}
		if k.label == "" {
			var extra []string
			for _, f := range fields {
				if varies(f.get) && f.get(k) != "" {
					extra = append(extra, f.get(k))
				}
			}
			if len(extra) > 0 {
				s.Name += " (" + strings.Join(extra, ", ") + ")"
			}
		}
		// Series that still share a name (an anchor file given twice,
		// say) are numbered rather than merged.
		if names[s.Name]++; names[s.Name] > 1 {
			s.Name += fmt.Sprintf(" #%d", names[s.Name])
		}
		s.Points = points(by[k])
		series = append(series, s)
	}
	return series, strings.Join(commons, ", ")
}

// nameOf is the main part of a series name.
func nameOf(k key) string {
	if k.label != "" {
		return k.label
	}
	var parts []string
	switch {
	case k.backend != "" && k.plan != "" && !strings.Contains(k.backend, k.plan):
		parts = append(parts, k.backend, "plan "+k.plan)
	case k.backend != "":
		parts = append(parts, k.backend)
	case k.plan != "":
		parts = append(parts, "plan "+k.plan)
	}
	if k.algorithm != "" {
		parts = append(parts, k.algorithm)
	}
	if k.strategy != "" && !strings.Contains(k.backend, k.strategy) {
		parts = append(parts, k.strategy)
	}
	if k.graph && !strings.Contains(k.backend, "graph") {
		parts = append(parts, "graph")
	}
	if len(parts) == 0 {
		if k.bench != "" {
			return k.bench
		}
		return "unnamed"
	}
	return strings.Join(parts, " ")
}

// points combines a series' records per size: medians of the time and the
// bus bandwidth.
func points(recs []Record) []Point {
	by := map[int64][]Record{}
	for _, r := range recs {
		by[r.Bytes] = append(by[r.Bytes], r)
	}
	var out []Point
	for b, rs := range by {
		ts := make([]float64, 0, len(rs))
		var bws []float64
		for _, r := range rs {
			ts = append(ts, r.TimeUs)
			if r.BusBW > 0 {
				bws = append(bws, r.BusBW)
			}
		}
		out = append(out, Point{Bytes: b, TimeUs: median(ts), BusBW: median(bws), N: len(rs)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes < out[j].Bytes })
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
