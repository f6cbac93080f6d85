package plot

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// Lines as each writer prints them (trimmed to the fields that matter).
const (
	chorusRow   = `{"bench":"allreduce","backend":"cpu","session":"process","workers":2,"dtype":"float32","bytes":1024,"time_us":10.5,"p50_us":10,"p99_us":20,"max_us":30,"algbw_gbs":0.0975,"busbw_gbs":0.0975,"wrong":0,"rounds":3,"samples":5000,"membw_gbs":12.5,"mem_bound_frac":0.01,"path":"direct"}`
	planRow     = `{"bench":"allreduce","plan":"ring","session":"process","workers":4,"dtype":"float32","bytes":4096,"time_us":40,"algbw_gbs":0.1,"busbw_gbs":0.15,"wrong":0,"cpu_time_us":20,"ratio":2}`
	gpuPlanRow  = `{"bench":"allreduce","backend":"chorus-plan-ring-graph","plan":"ring","session":"process-cuda-graph","workers":2,"dtype":"bfloat16","bytes":1048576,"time_us":12,"algbw_gbs":87,"busbw_gbs":87,"wrong":0}`
	torchRow    = `{"bench": "allreduce", "backend": "torch-nccl-graph", "session": "process", "workers": 2, "dtype": "bfloat16", "bytes": 1024, "time_us": 11.2, "p50_us": 11.0, "p99_us": 13.5, "max_us": 20.1, "algbw_gbs": 0.09, "busbw_gbs": 0.09, "wrong": 0}`
	glooRow     = `{"bench":"allreduce","backend":"gloo","session":"process","workers":8,"dtype":"float32","bytes":1024,"time_us":26382.643,"algbw_gbs":0.0,"busbw_gbs":0.0001,"wrong":0}`
	mpiRow      = `{"bench":"allreduce","backend":"openmpi","session":"process","workers":2,"dtype":"float32","bytes":4096,"time_us":8362.295,"algbw_gbs":0.0005,"busbw_gbs":0.0005,"wrong":0}`
	sessionRow  = `{"bench":"session","session":"remote-2nodes","transport":"tls","workers":2,"p50_us":208.629,"p99_us":394.355}`
	membwRow    = `{"bench":"membw","threads":2,"array_bytes":67108864,"copy_gbs":10,"triad_gbs":11}`
	planopsRow  = `{"bench":"planops","plan":"copy8","ops":8,"tbs":1,"dtype":"float32","bytes":1024,"iters":10,"copy_us":3,"plan_us":5,"per_op_us":0.25,"wrong":0}`
	unknownBand = `{"bench":"alltoallv","backend":"x","bytes":2048,"time_us":4,"busbw_gbs":0.7}`
)

func TestReadGood(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		recs    int
		skipped map[string]int
		check   func(t *testing.T, rs []Record)
	}{
		{name: "chorus collective row", in: chorusRow, recs: 1, check: func(t *testing.T, rs []Record) {
			r := rs[0]
			if r.Bench != "allreduce" || r.Backend != "cpu" || r.Workers != 2 || r.Bytes != 1024 || r.TimeUs != 10.5 || r.P50Us != 10 || r.P99Us != 20 || r.Source != "f.jsonl:1" {
				t.Errorf("record %+v", r)
			}
			// busbw recomputed: 1024 B / 10.5 us * 2(n-1)/n.
			if want := 1024 / 10.5 / 1e3; math.Abs(r.BusBW-want) > 1e-12 {
				t.Errorf("busbw %v, want %v", r.BusBW, want)
			}
		}},
		{name: "plan rows", in: planRow + "\n" + gpuPlanRow, recs: 2, check: func(t *testing.T, rs []Record) {
			if rs[0].Plan != "ring" || rs[0].Backend != "" || rs[1].Backend != "chorus-plan-ring-graph" || rs[1].Source != "f.jsonl:2" {
				t.Errorf("records %+v", rs)
			}
		}},
		{name: "anchors: torch, gloo (rounded busbw), openmpi", in: torchRow + "\n" + glooRow + "\n" + mpiRow, recs: 3, check: func(t *testing.T, rs []Record) {
			if rs[1].BusBW <= 0 || math.Abs(rs[1].BusBW-1024/26382.643/1e3*2*7/8) > 1e-15 {
				t.Errorf("gloo busbw %v: want it recomputed from bytes and time", rs[1].BusBW)
			}
			for _, r := range rs {
				if !r.Anchor {
					t.Errorf("%s: not marked as anchor", r.Source)
				}
			}
		}},
		{name: "unknown bench keeps the line's busbw", in: unknownBand, recs: 1, check: func(t *testing.T, rs []Record) {
			if rs[0].BusBW != 0.7 {
				t.Errorf("busbw %v", rs[0].BusBW)
			}
		}},
		{name: "blank lines, comments, rows without sizes", in: "\n# chorus bench allreduce: ...\n" + sessionRow + "\n  \n" + membwRow + "\n" + planopsRow + "\n" + chorusRow + "\n", recs: 1,
			skipped: map[string]int{"session": 1, "membw": 1, "planops": 1}},
		{name: "CRLF and no final newline", in: chorusRow + "\r\n" + chorusRow, recs: 2},
		{name: "labels are made drawable", in: `{"bench":"allreduce","backend":"a\u0001b\u007f","bytes":8,"time_us":1}`, recs: 1, check: func(t *testing.T, rs []Record) {
			if rs[0].Backend != "a?b?" {
				t.Errorf("backend %q", rs[0].Backend)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, err := Read(strings.NewReader(c.in), "f.jsonl", strings.HasPrefix(c.name, "anchors"))
			if err != nil {
				t.Fatal(err)
			}
			if len(in.Records) != c.recs {
				t.Fatalf("%d records, want %d", len(in.Records), c.recs)
			}
			for k, v := range c.skipped {
				if in.Skipped[k] != v {
					t.Errorf("skipped %v, want %v", in.Skipped, c.skipped)
				}
			}
			if len(in.Skipped) != len(c.skipped) {
				t.Errorf("skipped %v, want %v", in.Skipped, c.skipped)
			}
			if c.check != nil {
				c.check(t, in.Records)
			}
		})
	}
}

func TestReadBad(t *testing.T) {
	cases := []struct {
		name, in string
		line     int
		want     string
	}{
		{"table row", chorusRow + "\n        1024          256   float32      10.50", 2, "not a JSON object"},
		{"truncated", `{"bench":"allreduce","bytes":10`, 1, "not a benchmark row"},
		{"array", `[1,2,3]`, 1, "not a JSON object"},
		{"null", `null`, 1, "not a JSON object"},
		{"two objects", chorusRow + chorusRow, 1, "text after the JSON object"},
		{"no bytes, no bench", `{"time_us":3}`, 1, `no "bytes"`},
		{"bytes as a string", `{"bench":"allreduce","bytes":"1K","time_us":3}`, 1, "not a benchmark row"},
		{"fractional bytes", `{"bench":"allreduce","bytes":1.5,"time_us":3}`, 1, "positive whole number"},
		{"zero bytes", `{"bench":"allreduce","bytes":0,"time_us":3}`, 1, "positive whole number"},
		{"no time", "\n\n" + `{"bench":"allreduce","bytes":8}`, 3, `without "time_us"`},
		{"zero time", `{"bench":"allreduce","bytes":8,"time_us":0}`, 1, "positive time"},
		{"negative time", `{"bench":"allreduce","bytes":8,"time_us":-1}`, 1, "positive time"},
		{"negative busbw", `{"bench":"x","bytes":8,"time_us":1,"busbw_gbs":-2}`, 1, "busbw_gbs"},
		{"bad workers", `{"bench":"allreduce","bytes":8,"time_us":1,"workers":0}`, 1, "workers"},
		{"long line", `{"bench":"` + strings.Repeat("x", MaxLine) + `"}`, 1, "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.in), "runs/x.jsonl", false)
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrBadLine) {
				t.Fatalf("error %v: want a *LineError wrapping ErrBadLine", err)
			}
			if le.File != "runs/x.jsonl" || le.Line != c.line || !strings.HasPrefix(err.Error(), le.File+":") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q (line %d): want runs/x.jsonl:%d and %q", err, le.Line, c.line, c.want)
			}
		})
	}
}

func TestGroupNames(t *testing.T) {
	read := func(s string, anchor bool) []Record {
		in, err := Read(strings.NewReader(s), "f", anchor)
		if err != nil {
			t.Fatal(err)
		}
		return in.Records
	}
	row := func(backend, session string, workers, bytes int, time float64) string {
		return fmt.Sprintf(`{"bench":"allreduce","backend":%q,"session":%q,"workers":%d,"dtype":"float32","bytes":%d,"time_us":%g}`, backend, session, workers, bytes, time)
	}
	var recs []Record
	// Three rounds of cpu at two sizes, one anchor, one other session.
	recs = append(recs, read(row("cpu", "process", 2, 1024, 10)+"\n"+row("cpu", "process", 2, 1024, 30)+"\n"+row("cpu", "process", 2, 1024, 20)+"\n"+row("cpu", "process", 2, 4096, 40), false)...)
	recs = append(recs, read(row("gloo", "process", 2, 1024, 100), true)...)
	recs = append(recs, read(row("cpu", "threaded", 2, 1024, 5), false)...)
	recs = append(recs, read(`{"label":"my run","bench":"allreduce","bytes":1024,"time_us":7}`, false)...)
	series, common := Group(recs)
	var names []string
	for _, s := range series {
		names = append(names, s.Name)
	}
	want := []string{"cpu (process)", "gloo (process)", "cpu (threaded)", "my run"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("names %q, want %q", names, want)
	}
	if common != "allreduce" {
		t.Errorf("common %q, want allreduce (the others vary or are missing)", common)
	}
	if p := series[0].Points; len(p) != 2 || p[0].Bytes != 1024 || p[0].TimeUs != 20 || p[0].N != 3 || p[1].Bytes != 4096 {
		t.Errorf("cpu points %+v: want the median of 3 rounds at 1K, then 4K", p)
	}
	if !series[1].Anchor || series[0].Anchor {
		t.Errorf("anchor flags wrong: %+v", series)
	}
	// Rows of the same series from two files are one series; two series
	// that end up with one name (labels) are numbered, not merged.
	two, _ := Group(append(read(row("gloo", "process", 2, 1024, 100), true), read(row("gloo", "process", 2, 1024, 100), true)...))
	if len(two) != 1 || two[0].Points[0].N != 2 {
		t.Errorf("identical rows: %+v, want 1 series of 2 lines", two)
	}
	lab, _ := Group(read(`{"label":"x","bench":"allreduce","bytes":8,"time_us":1}`+"\n"+`{"label":"x","bench":"allgather","bytes":8,"time_us":1}`, false))
	if len(lab) != 2 || lab[0].Name != "x" || lab[1].Name != "x #2" {
		t.Errorf("same label, different benches: %+v", lab)
	}
}
