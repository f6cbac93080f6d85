package plot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// syntheticTrace is a made-up step loop of 4 workers: the controller sends
// a call and an all-reduce per step, each worker runs the call (its GPU
// stream runs a kernel meanwhile) and then the all-reduce, which ends for
// every rank only when the slowest has arrived; worker 2 is slow in step 2.
func syntheticTrace() []Span {
	var spans []Span
	const us = int64(time.Microsecond)
	t := int64(0)
	for step := range 4 {
		spans = append(spans, Span{Track: "controller", Name: "send call app.step", Start: t, Dur: 4 * us})
		spans = append(spans, Span{Track: "controller", Name: "send allreduce", Start: t + 6*us, Dur: 3 * us})
		arrive := make([]int64, 4)
		for w := range 4 {
			d := int64(120+10*w) * us
			if step == 2 && w == 2 {
				d = 260 * us // the straggler
			}
			start := t + int64(10+2*w)*us
			spans = append(spans, Span{Track: "worker " + string(rune('0'+w)), Name: "call app.step", Start: start, Dur: d})
			spans = append(spans, Span{Track: "gpu " + string(rune('0'+w)) + " stream", Name: "kernel matmul", Start: start + 15*us, Dur: d - 30*us})
			arrive[w] = start + d
		}
		last := max(arrive[0], arrive[1], arrive[2], arrive[3])
		for w := range 4 {
			spans = append(spans, Span{Track: "worker " + string(rune('0'+w)), Name: "allreduce", Start: arrive[w], Dur: last + 40*us - arrive[w]})
		}
		t = last + 60*us
	}
	return spans
}

// The picture in docs/img (CHORUS_UPDATE_DOCS=1 rewrites it).
func TestTimelineDocsImage(t *testing.T) {
	var out bytes.Buffer
	if err := Timeline(&out, syntheticTrace(), TimelineOptions{Title: "synthetic spans: 4 steps of 4 workers (worker 2 straggles in step 3)"}); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, out.Bytes())
	for _, want := range []string{"controller", "worker 3", "gpu 0 stream", "allreduce", "kernel matmul"} {
		if !contains(texts, want) {
			t.Errorf("no %q", want)
		}
	}
	if os.Getenv("CHORUS_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "img", "timeline-synthetic.svg"), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
