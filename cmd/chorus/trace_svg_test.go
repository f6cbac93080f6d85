package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chorus trace svg draws a real trace of a traced command; a window
// without spans and a bad window are errors.
func TestTraceSVG(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "run.json")
	var out, errOut bytes.Buffer
	if code := run([]string{"bench", "session", "--sessions", "threaded", "--workers", "2", "--iters", "50", "--warmup", "5", "--trace", tr}, &out, &errOut); code != 0 {
		t.Fatalf("bench session: exit %d: %s", code, errOut.String())
	}
	svg := filepath.Join(dir, "run.svg")
	out.Reset()
	if code := run([]string{"trace", "svg", tr, "--out", svg}, &out, &errOut); code != 0 {
		t.Fatalf("trace svg: exit %d: %s", code, errOut.String())
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	var root string
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG does not parse: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	for _, want := range []string{"controller", "worker 0", "worker 1", "chorus.noop"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("picture lacks %q", want)
		}
	}
	for _, args := range [][]string{
		{"trace", "svg", tr, "--out", svg, "--from", "1e12", "--to", "2e12"},
		{"trace", "svg", tr, "--out", svg, "--from", "5", "--to", "2"},
		{"trace", "svg", tr, "--out", tr},
	} {
		if code := run(args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
	}
}
