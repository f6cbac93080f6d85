package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// svgTexts decodes a whole SVG with encoding/xml, checks that the root is
// <svg>, and returns the character data of every <text> element.
func svgTexts(t *testing.T, b []byte) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	depth, inText := 0, false
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not decode: %v\n%s", err, b)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = x.Name.Local
			}
			depth++
			inText = x.Name.Local == "text"
		case xml.EndElement:
			depth--
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(x))
			}
		}
	}
	if root != "svg" || depth != 0 {
		t.Fatalf("root element %q, depth at end %d: want a closed <svg>", root, depth)
	}
	return texts
}

func contains(texts []string, s string) bool {
	for _, x := range texts {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func TestBenchSVG(t *testing.T) {
	in := strings.Join([]string{
		chorusRow,
		strings.Replace(chorusRow, `"bytes":1024`, `"bytes":67108864`, 1),
		strings.Replace(chorusRow, `"backend":"cpu"`, `"backend":"<b&c> \"q\""`, 1),
	}, "\n")
	a, err := Read(strings.NewReader(in), "chorus.jsonl", false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Read(strings.NewReader(glooRow+"\n"+mpiRow), "anchors.jsonl", true)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	date := time.Date(2026, 11, 25, 10, 30, 0, 0, time.UTC)
	if err := Bench(&out, append(a.Records, b.Records...), BenchOptions{Title: "chorus bench allreduce --workers 2", Date: date}); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, out.Bytes())
	for _, want := range []string{"chorus bench allreduce --workers 2", "2026-11-25 10:30 UTC", "bus bandwidth", "time per call", "message size (bytes)",
		"cpu (2 workers)", "<b&c> \"q\" (2 workers)", "gloo (8 workers)", "openmpi (2 workers)", "1K", "64M", "10 us"} {
		if !contains(texts, want) {
			t.Errorf("SVG has no text %q; texts: %q", want, texts)
		}
	}
}

// One size, one series, a bench without a bus-bandwidth factor: still a
// picture (the bandwidth panel says why it is empty).
func TestBenchSVGEdges(t *testing.T) {
	in, err := Read(strings.NewReader(`{"bench":"mystery","backend":"x","bytes":3000,"time_us":0.25}`), "x", false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Bench(&out, in.Records, BenchOptions{}); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, out.Bytes())
	if !contains(texts, "no bus bandwidth") || !contains(texts, "x") {
		t.Errorf("texts %q", texts)
	}
	if err := Bench(&out, nil, BenchOptions{}); !errors.Is(err, ErrNoData) {
		t.Errorf("no records: %v, want ErrNoData", err)
	}
}

func TestTimelineSVG(t *testing.T) {
	spans := []Span{
		{Track: "worker 0", Name: "call app.step", Start: 1_000_000, Dur: 300_000},
		{Track: "worker 0", Name: "allreduce", Start: 1_400_000, Dur: 200_000},
		{Track: "worker 1", Name: "call app.step", Start: 1_000_000, Dur: 500_000},
		{Track: "worker 1", Name: "allreduce", Start: 1_550_000, Dur: 50_000},
		{Track: "gpu 1 <stream>", Name: "kernel", Start: 1_100_000, Dur: 0},
	}
	var out bytes.Buffer
	if err := Timeline(&out, spans, TimelineOptions{Title: "trace.json", Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, out.Bytes())
	for _, want := range []string{"worker 0", "worker 1", "gpu 1 <stream>", "call app.step", "allreduce", "kernel", "time (us)", "trace.json; 2026-01-02 03:04 UTC"} {
		if !contains(texts, want) {
			t.Errorf("SVG has no text %q; texts: %q", want, texts)
		}
	}
	// Tracks given first, in that order, before the others.
	out.Reset()
	if err := Timeline(&out, spans, TimelineOptions{Tracks: []string{"worker 1", "idle worker"}}); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, x := range svgTexts(t, out.Bytes()) {
		if strings.HasPrefix(x, "worker") || strings.HasPrefix(x, "idle") || strings.HasPrefix(x, "gpu") {
			rows = append(rows, x)
		}
	}
	// Tick labels are drawn bottom-up: the last row first.
	if got := strings.Join(rows, "|"); got != "gpu 1 <stream>|worker 0|idle worker|worker 1" {
		t.Errorf("row labels bottom-up %q", got)
	}
	// A 3 s range is labelled in seconds.
	out.Reset()
	if err := Timeline(&out, []Span{{Track: "a", Name: "x", Start: 0, Dur: 3e9}}, TimelineOptions{}); err != nil {
		t.Fatal(err)
	}
	if !contains(svgTexts(t, out.Bytes()), "time (s)") {
		t.Error("3 s range not in seconds")
	}
	for _, bad := range [][]Span{nil, {{Track: "a", Name: "x", Start: 5, Dur: -1}}, {{Track: "a", Name: "x", Start: 1<<63 - 10, Dur: 100}}} {
		if err := Timeline(&out, bad, TimelineOptions{}); err == nil {
			t.Errorf("spans %v accepted", bad)
		}
	}
}
