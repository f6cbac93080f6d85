package passes_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
)

var update = flag.Bool("update", false, "rewrite the golden .out.ir files")

// TestGolden runs every testdata/NAME.in.ir through the pipeline named on
// its first line ("// pipeline: SPEC") and compares the IR printed after
// each pass with testdata/NAME.out.ir.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.in.ir")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range files {
		name := strings.TrimSuffix(filepath.Base(in), ".in.ir")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(src), "\n")
			spec, ok := strings.CutPrefix(first, "// pipeline: ")
			if !ok {
				t.Fatalf("%s: first line must be \"// pipeline: SPEC\"", in)
			}
			p, err := passes.ParsePipeline(name, spec)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ir.Parse(string(src))
			if err != nil {
				t.Fatal(err)
			}
			before := m.String()
			var trace bytes.Buffer
			if _, err := p.Run(m, passes.RunOptions{PrintAfterEach: &trace}); err != nil {
				t.Fatal(err)
			}
			if m.String() != before {
				t.Error("the pipeline modified its input")
			}
			got := trace.String()
			out := filepath.Join("testdata", name+".out.ir")
			if *update {
				if err := os.WriteFile(out, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s; got:\n%s", out, got)
			}
			// Every printed stage is itself valid IR that round-trips.
			for _, stage := range strings.Split(got, "// after pass ")[1:] {
				_, text, _ := strings.Cut(stage, "\n")
				sm, err := ir.Parse(text)
				if err != nil {
					t.Fatalf("stage does not parse: %v", err)
				}
				if err := ir.Verify(sm); err != nil {
					t.Fatalf("stage does not verify: %v", err)
				}
				if sm.String() != text {
					t.Errorf("stage does not round-trip")
				}
			}
		})
	}
}
