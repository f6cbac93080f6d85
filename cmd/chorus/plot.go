package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chorus-rt/chorus/cmd/chorus/internal/plot"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/progress"
)

// fileList is a repeatable flag.
type fileList []string

func (f *fileList) String() string { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error {
	if v == "" {
		return errors.New("empty file name")
	}
	*f = append(*f, v)
	return nil
}

// plotFlags are --plot FILE.svg and --anchor FILE.jsonl of the benches
// that print size rows: the rows of the run are kept (as the JSON lines
// --json prints) and drawn with the anchors' rows when the run ends.
type plotFlags struct {
	out     string
	anchors fileList
	title   string
	rows    bytes.Buffer
	anchor  []plot.Record
}

func addPlotFlags(fs *flag.FlagSet) *plotFlags {
	p := &plotFlags{}
	fs.StringVar(&p.out, "plot", "", "also draw the rows as an SVG here: bus bandwidth and time against size, log axes (docs/observability.md)")
	fs.Var(&p.anchors, "anchor", "with --plot: JSON lines of other runs or tools (bench/anchors, torch scripts) to draw with them, dashed (repeatable)")
	return p
}

// prepare checks the flags before the bench runs, so that a bad anchor
// file or a missing folder fails at once, not after a long sweep; title is
// the command line.
func (p *plotFlags) prepare(title string, errOut io.Writer) error {
	if p.out == "" {
		if len(p.anchors) > 0 {
			return usageError{"--anchor needs --plot FILE.svg"}
		}
		return nil
	}
	if err := checkOutDir(p.out); err != nil {
		return err
	}
	recs, err := readJSONLines(p.anchors, true, errOut)
	if err != nil {
		return err
	}
	p.anchor, p.title = recs, title
	return nil
}

func checkOutDir(out string) error {
	dir := filepath.Dir(out)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageError{fmt.Sprintf("--plot %s: folder %s does not exist", out, dir)}
	}
	return nil
}

// add keeps one row (any of the bench row types) for the plot.
func (p *plotFlags) add(row any) {
	if p == nil || p.out == "" {
		return
	}
	b, err := json.Marshal(row)
	if err == nil {
		p.rows.Write(append(b, '\n'))
	}
}

// write draws the run's rows and the anchors to the --plot file.
func (p *plotFlags) write(errOut io.Writer) error {
	if p == nil || p.out == "" {
		return nil
	}
	in, err := plot.Read(&p.rows, "rows of this run", false)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return writePlot(p.out, append(in.Records, p.anchor...), p.title, errOut)
}

// readJSONLines reads files of JSON lines; notes about rows without sizes
// go to errOut.
func readJSONLines(files []string, anchor bool, errOut io.Writer) ([]plot.Record, error) {
	var recs []plot.Record
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		in, err := plot.Read(f, name, anchor)
		f.Close()
		if err != nil {
			return nil, err
		}
		if note := plot.SkippedNote(in.Skipped); note != "" {
			fmt.Fprintf(errOut, "chorus: %s: %s\n", name, note)
		}
		if len(in.Records) == 0 {
			return nil, fmt.Errorf("%s: %w: no size rows (bench, bytes, time_us)", name, plot.ErrNoData)
		}
		recs = append(recs, in.Records...)
	}
	return recs, nil
}

// writePlot draws recs to out (through a file in the same folder renamed
// over it, so that a failed drawing never leaves half an SVG).
func writePlot(out string, recs []plot.Record, title string, errOut io.Writer) error {
	var buf bytes.Buffer
	if err := plot.Bench(&buf, recs, plot.BenchOptions{Title: title, Date: time.Now()}); err != nil {
		return fmt.Errorf("--plot %s: %w", out, err)
	}
	if err := writeFileAtomic(out, buf.Bytes()); err != nil {
		return fmt.Errorf("--plot %s: %w", out, err)
	}
	series, _ := plot.Group(recs)
	fmt.Fprintf(errOut, "chorus: wrote %s (%d series)\n", out, len(series))
	return nil
}

// commandLine is the title of a plot: the command as typed.
func commandLine(args ...string) string {
	return "chorus " + strings.Join(args, " ")
}

// newProgress is the progress line of long runs: on stderr when it is a
// terminal (CHORUS_PROGRESS=0 turns it off), nothing otherwise.
func newProgress(errOut io.Writer) *progress.Reporter {
	return progress.New(errOut, progress.Options{})
}

const plotUsage = "chorus plot [--out FILE.svg] [--anchor FILE.jsonl]... [--title TEXT] FILE.jsonl..."

// cmdPlot draws saved JSON lines (chorus bench --json, the anchor scripts,
// bench/results/*.jsonl).
func cmdPlot(args []string, out, errOut io.Writer) error {
	fs := newFlags("plot", plotUsage, out)
	output := fs.String("out", "", "SVG file to write (default: the first FILE with .svg instead of its extension)")
	title := fs.String("title", "", "first line of the title (default: the command)")
	var anchors fileList
	fs.Var(&anchors, "anchor", "JSON lines drawn dashed, as anchors (repeatable)")
	if err := fs.Parse(interleaved(fs, args)); err != nil {
		return flagErr(fs, err)
	}
	files := fs.Args()
	if len(files) == 0 && len(anchors) == 0 {
		return usageError{"plot: which files? (" + plotUsage + ")"}
	}
	if *output == "" {
		first := append(append([]string{}, files...), anchors...)[0]
		*output = strings.TrimSuffix(first, filepath.Ext(first)) + ".svg"
	}
	if filepath.Ext(*output) != ".svg" {
		return usageError{fmt.Sprintf("plot: --out %s: the picture is an SVG; name it .svg", *output)}
	}
	if err := checkOutDir(*output); err != nil {
		return err
	}
	for _, f := range append(append([]string{}, files...), anchors...) {
		if sameFile(f, *output) {
			return usageError{fmt.Sprintf("plot: --out %s is one of the inputs", *output)}
		}
	}
	recs, err := readJSONLines(files, false, errOut)
	if err != nil {
		return err
	}
	anc, err := readJSONLines(anchors, true, errOut)
	if err != nil {
		return err
	}
	t := *title
	if t == "" {
		t = commandLine(append([]string{"plot"}, args...)...)
	}
	return writePlot(*output, append(recs, anc...), t, errOut)
}

// sameFile reports whether a and b name one file (b need not exist).
func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 == nil && err2 == nil {
		return os.SameFile(sa, sb)
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// interleaved moves flags before the positional arguments (the flag
// package stops at the first positional one), so that
// `chorus plot a.jsonl --out x.svg` works.
func interleaved(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") {
			if f := fs.Lookup(name); f != nil {
				if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
					if i+1 < len(args) {
						i++
						flags = append(flags, args[i])
					}
				}
			}
		}
	}
	return append(append(flags, "--"), pos...)
}

// writeFileAtomic writes data to path through a file in the same folder
// renamed over it, so that a failure never leaves half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".chorus-*"+filepath.Ext(path))
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
