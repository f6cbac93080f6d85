package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkSVG decodes the whole file with encoding/xml, wants an <svg> root,
// and returns the text of its <text> elements joined by newlines.
func checkSVG(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	root, depth, inText := "", 0, false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s does not decode: %v", path, err)
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
		t.Fatalf("%s: root %q, open elements at the end %d", path, root, depth)
	}
	return strings.Join(texts, "\n")
}

const glooLines = `{"bench":"allreduce","backend":"gloo","session":"process","workers":2,"dtype":"float32","bytes":1024,"time_us":2239.982,"algbw_gbs":0.0005,"busbw_gbs":0.0005,"wrong":0}
{"bench":"allreduce","backend":"gloo","session":"process","workers":2,"dtype":"float32","bytes":4096,"time_us":2031.577,"algbw_gbs":0.002,"busbw_gbs":0.002,"wrong":0}
`

func TestBenchPlot(t *testing.T) {
	dir := t.TempDir()
	anchor := filepath.Join(dir, "gloo.jsonl")
	if err := os.WriteFile(anchor, []byte(glooLines), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "out.svg")
	args := []string{"bench", "allreduce", "--session", "threaded", "--workers", "2", "--min", "1K", "--max", "4K", "--iters", "20", "--rounds", "1", "--membw", "-1", "--plot", svg, "--anchor", anchor}
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	if !strings.Contains(out, "size(B)") || !strings.Contains(errOut, "wrote "+svg+" (2 series)") {
		t.Errorf("stdout %q, stderr %q: want the table and a note of the plot", out, errOut)
	}
	// stderr is not a terminal here: no progress line.
	if strings.Contains(errOut, "\r") || strings.Contains(errOut, "left") {
		t.Errorf("progress written to a non-terminal stderr: %q", errOut)
	}
	texts := checkSVG(t, svg)
	for _, want := range []string{"chorus bench allreduce --session threaded", "cpu (threaded)", "gloo (process)", "bus bandwidth", "time per call", "1K"} {
		if !strings.Contains(texts, want) {
			t.Errorf("SVG lacks %q; texts:\n%s", want, texts)
		}
	}
	// Plans: chorus plan run draws its rows too.
	golden := filepath.Join("..", "..", "algo", "plan", "testdata", "allreduce_allpairs_2.json")
	psvg := filepath.Join(dir, "plan.svg")
	code, _, errOut = runCLI(t, "plan", "run", golden, "--workers", "2", "--session", "threaded", "--min", "4K", "--max", "16K", "--iters", "3", "--json", "--plot", psvg)
	if code != 0 {
		t.Fatalf("plan run --plot: code %d: %s", code, errOut)
	}
	if texts := checkSVG(t, psvg); !strings.Contains(texts, "plan ") || !strings.Contains(texts, "chorus plan run") {
		t.Errorf("plan SVG names no plan series or command:\n%s", texts)
	}
}

func TestPlotCommand(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs.jsonl")
	rows := `{"bench":"session","session":"threaded","transport":"inproc","workers":2,"procs":2,"p50_us":1,"p99_us":2}
{"bench":"allreduce","backend":"cpu","session":"process","workers":2,"dtype":"float32","bytes":1024,"time_us":20,"algbw_gbs":0.05,"busbw_gbs":0.05,"wrong":0}
{"bench":"allreduce","backend":"cpu","session":"process","workers":2,"dtype":"float32","bytes":65536,"time_us":40,"algbw_gbs":1.6,"busbw_gbs":1.6,"wrong":0}
`
	if err := os.WriteFile(runs, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	anchor := filepath.Join(dir, "gloo.jsonl")
	if err := os.WriteFile(anchor, []byte(glooLines), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(glooLines+"{\"bench\":\"allreduce\",\"bytes\":64}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Flags after the files work too; the default output is FILE.svg.
	code, _, errOut := runCLI(t, "plot", runs, "--anchor", anchor)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "skipped rows that have no size axis: session (1)") {
		t.Errorf("stderr %q: want a note of the skipped session row", errOut)
	}
	texts := checkSVG(t, filepath.Join(dir, "runs.svg"))
	for _, want := range []string{"chorus plot", "cpu", "gloo", "allreduce, process, 2 workers, float32"} {
		if !strings.Contains(texts, want) {
			t.Errorf("SVG lacks %q; texts:\n%s", want, texts)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plot"}, 2, "which files"},
		{[]string{"plot", "--help"}, 0, "Usage: chorus plot"},
		{[]string{"plot", runs, "--out", filepath.Join(dir, ".", "runs.jsonl.svg"), "--anchor", filepath.Join(dir, "runs.jsonl.svg")}, 2, "is one of the inputs"},
		{[]string{"plot", runs, "--out", filepath.Join(dir, "x.png")}, 2, "name it .svg"},
		{[]string{"plot", runs, "--out", filepath.Join(dir, "no", "x.svg")}, 2, "does not exist"},
		{[]string{"plot", bad, "--out", filepath.Join(dir, "b.svg")}, 1, bad + `:3: size row without "time_us"`},
		{[]string{"plot", filepath.Join(dir, "missing.jsonl")}, 1, "no such file"},
		{[]string{"bench", "allreduce", "--anchor", anchor}, 2, "--anchor needs --plot"},
		{[]string{"bench", "allreduce", "--plot", filepath.Join(dir, "x.svg"), "--anchor", bad}, 1, bad + ":3:"},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("chorus %v: code %d, output %q; want code %d and %q", c.args, code, out+errOut, c.code, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "b.svg")); !os.IsNotExist(err) {
		t.Errorf("a failed plot left a file: %v", err)
	}
}
