package session

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/runtime/trace"
)

func TestReadTail(t *testing.T) {
	const text = "aaaa\nbb\ncccccc\nd\n" // lines of 5, 3, 7 and 2 bytes
	cases := []struct {
		name    string
		text    string
		limit   int64
		want    string
		dropped int64
	}{
		{"no limit", text, 0, text, 0},
		{"limit above the size", text, 100, text, 0},
		{"limit equal to the size", text, int64(len(text)), text, 0},
		{"cut inside a line", text, 11, "cccccc\nd\n", 2},
		{"cut at a line's start", text, 9, "cccccc\nd\n", 2},
		{"cut at the second line's start", text, 12, "bb\ncccccc\nd\n", 1},
		{"only the last line", text, 2, "d\n", 3},
		{"one byte", text, 1, "", 4},
		{"last line unterminated", "aaaa\nbbbbbb", 4, "", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "part")
			if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, dropped, err := readTail(p, c.limit)
			if err != nil || string(got) != c.want || dropped != c.dropped {
				t.Fatalf("readTail(%d) = %q, %d dropped, %v; want %q, %d", c.limit, got, dropped, err, c.want, c.dropped)
			}
		})
	}
}

// TestMergePartsLimit: a part cut to its newest lines still gives
// balanced spans (a begin that was dropped is reopened, marked), and
// the dropped lines are counted; the files are removed.
func TestMergePartsLimit(t *testing.T) {
	dir := t.TempDir()
	tr := trace.Track{Process: trace.ProcWorker(3), Thread: trace.ThreadCommands}
	var evs []trace.Event
	ts := int64(1_000_000)
	for range 100 {
		evs = append(evs, trace.Event{Track: tr, Name: "outer", Cat: trace.CatCommand, Phase: trace.Begin, TS: ts})
		ts += 10
		evs = append(evs, trace.Event{Track: tr, Name: "outer", Cat: trace.CatCommand, Phase: trace.End, TS: ts})
		ts += 10
	}
	// A long span around the last events: its begin is among the oldest.
	long := append([]trace.Event{{Track: tr, Name: "long", Cat: trace.CatCommand, Phase: trace.Begin, TS: 1}}, evs...)
	long = append(long, trace.Event{Track: tr, Name: "long", Cat: trace.CatCommand, Phase: trace.End, TS: ts})
	var buf bytes.Buffer
	if err := trace.WritePart(&buf, long); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "w.worker-3.part")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	limit := int64(buf.Len() / 4)
	got, dropped, errs := mergeParts([]string{p}, nil, limit)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if dropped == 0 || int(dropped)+len(got) < len(long) || len(got) >= len(long) {
		t.Fatalf("%d events kept, %d dropped, of %d", len(got), dropped, len(long))
	}
	if got[0].Name != "long" || got[0].Phase != trace.Begin || got[0].Args.Set&trace.HasUnfinished == 0 {
		t.Fatalf("first event %+v, want the reopened long span", got[0])
	}
	var out bytes.Buffer
	if err := trace.Write(&out, got); err != nil {
		t.Fatal(err)
	}
	f, err := trace.Read(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("part file left behind: %v", err)
	}
	if !strings.Contains(out.String(), `"unfinished":true`) {
		t.Fatal("the reopened span is not marked")
	}
}
