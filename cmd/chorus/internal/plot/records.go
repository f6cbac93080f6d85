package plot

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// ErrBadLine is what every error about a line of input wraps
// (errors.Is); the error itself is a *LineError naming file and line.
var ErrBadLine = errors.New("bad benchmark line")

// ErrNoData: nothing to plot (no size rows, no spans).
var ErrNoData = errors.New("nothing to plot")

// LineError is a line that could not be read.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string   { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() []error { return []error{ErrBadLine, e.Err} }

// Record is one size row of a sweep, as chorus bench (collectives, plans)
// and the anchor scripts write it: the fields that name the series, the
// size, and the times.
type Record struct {
	Source string // "file:line"
	Anchor bool   // read from an anchor file (drawn dashed)

	// Fields naming the series. Label, when a line has one, is the
	// series' name as is.
	Label     string
	Bench     string // allreduce, allgather, ...
	Backend   string // cpu, nccl, ipc-oneshot, gloo, openmpi, torch-nccl, chorus-plan-NAME ...
	Plan      string // plan rows of chorus plan run / bench --plan
	Algorithm string
	Strategy  string
	Session   string
	Workers   int
	DType     string
	Graph     bool

	Bytes  int64
	TimeUs float64 // mean time per call
	P50Us  float64 // 0 when the line has none
	P99Us  float64
	// BusBW in GB/s (1e9 B/s): recomputed from Bytes and TimeUs with
	// nccl-tests' factor when Bench and Workers are known (the anchor
	// scripts round theirs to 4 decimals), else the line's busbw_gbs,
	// else 0 (no point in the bandwidth panel).
	BusBW float64
}

// line is the JSON shape read; unknown fields are ignored (anchors carry
// their own extras), wrong types are errors.
type line struct {
	Label     string   `json:"label"`
	Bench     string   `json:"bench"`
	Backend   string   `json:"backend"`
	Plan      string   `json:"plan"`
	Algorithm string   `json:"algorithm"`
	Strategy  string   `json:"strategy"`
	Session   string   `json:"session"`
	Workers   *float64 `json:"workers"`
	DType     string   `json:"dtype"`
	Graph     bool     `json:"graph"`
	Bytes     *float64 `json:"bytes"`
	TimeUs    *float64 `json:"time_us"`
	P50Us     *float64 `json:"p50_us"`
	P99Us     *float64 `json:"p99_us"`
	BusBW     *float64 `json:"busbw_gbs"`
	AlgBW     *float64 `json:"algbw_gbs"`
}

// Input is what Read returns for one file.
type Input struct {
	Records []Record
	// Skipped counts lines that are valid rows of other benchmarks
	// without a size axis (chorus bench session, membw, hostpoll,
	// planops), by bench name: they are not errors, but callers say so.
	Skipped map[string]int
}

// MaxLine bounds one line (bytes).
const MaxLine = 1 << 20

// busFactor is nccl-tests' bus-bandwidth factor; ok is false for a bench
// it does not know.
func busFactor(bench string, n int) (float64, bool) {
	if n < 1 {
		return 0, false
	}
	switch strings.ReplaceAll(bench, "_", "") {
	case "allreduce":
		return 2 * float64(n-1) / float64(n), true
	case "allgather", "reducescatter":
		return float64(n-1) / float64(n), true
	case "broadcast", "peercopy":
		return 1, true
	}
	return 0, false
}

// Read reads JSON lines from r; name is the file name errors carry.
// Blank lines and lines starting with '#' (a table's header, a comment)
// are skipped. A line must be a JSON object; one with a "bytes" field is
// a size row and needs a positive "time_us"; one without "bytes" but with
// a "bench" name is a row of a benchmark without sizes and is counted in
// Skipped; anything else is a *LineError.
func Read(r io.Reader, name string, anchor bool) (Input, error) {
	in := Input{Skipped: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	n := 0
	for sc.Scan() {
		n++
		rec, skip, err := parseLine(sc.Bytes())
		if err != nil {
			return in, &LineError{File: name, Line: n, Err: err}
		}
		switch {
		case skip != "":
			in.Skipped[skip]++
		case rec != nil:
			rec.Source = fmt.Sprintf("%s:%d", name, n)
			rec.Anchor = anchor
			in.Records = append(in.Records, *rec)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		return in, &LineError{File: name, Line: n + 1, Err: err}
	}
	return in, nil
}

// parseLine returns a record, or the bench name of a row to skip, or
// neither for a blank or comment line.
func parseLine(b []byte) (*Record, string, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] == '#' {
		return nil, "", nil
	}
	if b[0] != '{' {
		return nil, "", fmt.Errorf("not a JSON object: %q", clip(b))
	}
	var l line
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&l); err != nil {
		return nil, "", fmt.Errorf("not a benchmark row: %v", err)
	}
	if dec.InputOffset() != int64(len(b)) {
		return nil, "", fmt.Errorf("text after the JSON object: %q", clip(b[dec.InputOffset():]))
	}
	if l.Bytes == nil {
		if l.Bench != "" && l.TimeUs == nil {
			return nil, l.Bench, nil
		}
		if l.Bench == "planops" {
			return nil, l.Bench, nil
		}
		return nil, "", errors.New(`no "bytes" field (a size row has bench, bytes and time_us)`)
	}
	if l.Bench == "planops" || l.Bench == "hostpoll" {
		// Sized rows of other shapes (per-op costs, load latencies).
		return nil, l.Bench, nil
	}
	rec := &Record{Label: clean(l.Label), Bench: clean(l.Bench), Backend: clean(l.Backend), Plan: clean(l.Plan), Algorithm: clean(l.Algorithm),
		Strategy: clean(l.Strategy), Session: clean(l.Session), DType: clean(l.DType), Graph: l.Graph}
	if v := *l.Bytes; !(v >= 1 && v <= 1<<62 && v == math.Trunc(v)) {
		return nil, "", fmt.Errorf(`"bytes" is %v: want a positive whole number`, v)
	}
	rec.Bytes = int64(*l.Bytes)
	if l.Workers != nil {
		if v := *l.Workers; !(v >= 1 && v <= 1<<24 && v == math.Trunc(v)) {
			return nil, "", fmt.Errorf(`"workers" is %v: want a positive whole number`, v)
		}
		rec.Workers = int(*l.Workers)
	}
	if l.TimeUs == nil {
		return nil, "", errors.New(`size row without "time_us"`)
	}
	if v := *l.TimeUs; !(v > 0 && !math.IsInf(v, 0)) {
		return nil, "", fmt.Errorf(`"time_us" is %v: want a positive time`, v)
	}
	rec.TimeUs = *l.TimeUs
	for _, p := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"p50_us", l.P50Us, &rec.P50Us}, {"p99_us", l.P99Us, &rec.P99Us}, {"busbw_gbs", l.BusBW, &rec.BusBW}} {
		if p.v == nil {
			continue
		}
		if v := *p.v; v < 0 || math.IsInf(v, 0) {
			return nil, "", fmt.Errorf("%q is %v: want a finite value >= 0", p.name, v)
		}
		*p.dst = *p.v
	}
	if f, ok := busFactor(rec.Bench, rec.Workers); ok {
		rec.BusBW = float64(rec.Bytes) / rec.TimeUs / 1e3 * f
	}
	// Bounds that keep every axis finite (log10 of the decades).
	if rec.TimeUs < 1e-200 || rec.TimeUs > 1e200 || rec.BusBW > 1e200 || (rec.BusBW > 0 && rec.BusBW < 1e-200) {
		return nil, "", fmt.Errorf(`"time_us" %v and bus bandwidth %v GB/s: out of range`, rec.TimeUs, rec.BusBW)
	}
	return rec, "", nil
}

// clean makes a label safe to draw: valid UTF-8, no control characters
// (XML 1.0 does not allow them in an SVG), at most 80 characters.
func clean(s string) string { return cleanN(s, 80) }

func cleanN(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0xfffe || r == 0xffff {
			return '?'
		}
		return r
	}, s)
	if r := []rune(s); len(r) > n {
		s = string(r[:n-3]) + "..."
	}
	return s
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// SkippedNote describes the Skipped counts in one line ("" when none):
// "skipped rows without a size: membw (1), session (3)".
func SkippedNote(skipped map[string]int) string {
	if len(skipped) == 0 {
		return ""
	}
	var names []string
	for k := range skipped {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s (%d)", k, skipped[k])
	}
	return "skipped rows that have no size axis: " + strings.Join(parts, ", ")
}
