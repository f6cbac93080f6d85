package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/chorus-rt/chorus/cmd/chorus/internal/plot"
	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/trace"
)

// sessionCommands are the commands that make sessions: they take
// --trace FILE. (The others would ignore it, which is worse than
// refusing it.)
var sessionCommands = map[string]bool{
	"demo": true, "model": true, "bench session": true, "bench allreduce": true, "bench allgather": true,
	"bench reducescatter": true, "bench broadcast": true, "bench peercopy": true, "bench mlp": true,
	"bench planops": true, "plan run": true, "cluster check": true,
	"cluster bench allreduce": true, "cluster bench session": true,
}

// addTraceFlag gives a session-making command --trace FILE: every
// session the command makes writes its trace there (several sessions
// accumulate in one file). It works through session.EnvTrace, which run
// restores when the command ends.
func addTraceFlag(fs *flag.FlagSet) {
	if !sessionCommands[fs.Name()] {
		return
	}
	fs.Func("trace", "write a trace of the run to `FILE` (Trace Event Format: open it in ui.perfetto.dev; chorus trace summary FILE)", func(v string) error {
		if v == "" {
			return fmt.Errorf("--trace needs a file name")
		}
		return os.Setenv(session.EnvTrace, v)
	})
}

// restoreEnv puts an environment variable back as it was.
func restoreEnv(name string) func() {
	old, had := os.LookupEnv(name)
	return func() {
		if had {
			os.Setenv(name, old)
		} else {
			os.Unsetenv(name)
		}
	}
}

const traceUsage = `Usage:
  chorus trace summary FILE [--top N]   per-op counts and times, stragglers of each collective, faults
  chorus trace check FILE               validate a trace (parses, begin/end balanced, monotonic per track,
                                        one track per worker)
  chorus trace svg FILE [--out F.svg] [--from US] [--to US]
                                        a timeline picture: one row per track, a bar per span
`

func cmdTrace(args []string, out io.Writer) error {
	if len(args) == 0 {
		return usageError{"trace: which? summary, check or svg (chorus trace --help)"}
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(out, traceUsage)
		return flag.ErrHelp
	case "summary", "check", "svg":
	default:
		return usageError{fmt.Sprintf("trace: unknown subcommand %q: want summary, check or svg (chorus trace --help)", args[0])}
	}
	fs := newFlags("trace "+args[0], "chorus trace "+args[0]+" FILE", out)
	top := fs.Int("top", 10, "collectives to list, slowest arrival first")
	outSVG := fs.String("out", "", "svg: the picture's file (default FILE with .svg)")
	from := fs.Float64("from", 0, "svg: start of the window, microseconds after the trace's first event")
	to := fs.Float64("to", 0, "svg: end of the window, microseconds after the first event (0: the end)")
	// The file may come before or after the flags.
	files, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return usageError{fmt.Sprintf("trace %s: want one trace file, got %d %q", args[0], len(files), files)}
	}
	file := files[0]
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	f, err := trace.Read(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	verr := trace.Validate(f)
	if args[0] == "svg" {
		return traceSVG(f, file, *outSVG, *from, *to, out)
	}
	if args[0] == "check" {
		if verr != nil {
			return fmt.Errorf("%s: %w", file, verr)
		}
		procs := map[string]bool{}
		for _, e := range f.Events {
			procs[e.Track.Process] = true
		}
		fmt.Fprintf(out, "%s: valid, %d events, %d processes\n", file, len(f.Events), len(procs))
		return nil
	}
	if verr != nil {
		fmt.Fprintf(out, "warning: %v\n\n", verr)
	}
	return trace.Summarize(f).Print(out, *top)
}

// traceSVG draws the spans of f between from and to (microseconds after
// its first event) as a timeline picture.
func traceSVG(f *trace.File, file, out string, from, to float64, stdout io.Writer) error {
	if out == "" {
		out = strings.TrimSuffix(file, filepath.Ext(file)) + ".svg"
	}
	if out == file {
		return usageError{"trace svg: --out is the trace file itself"}
	}
	spans := trace.Spans(f)
	if len(spans) == 0 {
		return fmt.Errorf("trace svg: %s has no spans", file)
	}
	t0 := spans[0].Start
	for _, sp := range spans {
		t0 = min(t0, sp.Start)
	}
	lo := t0 + int64(from*1e3)
	hi := int64(math.MaxInt64)
	if to > 0 {
		if to <= from {
			return usageError{"trace svg: --to must be after --from"}
		}
		hi = t0 + int64(to*1e3)
	}
	var ps []plot.Span
	var tracks []string
	seen := map[string]bool{}
	for _, sp := range spans {
		if sp.Start+sp.Dur < lo || sp.Start > hi {
			continue
		}
		tr := sp.Track.String()
		if !seen[tr] {
			seen[tr] = true
			tracks = append(tracks, tr)
		}
		ps = append(ps, plot.Span{Track: tr, Name: sp.Name, Start: sp.Start - t0, Dur: sp.Dur})
	}
	if len(ps) == 0 {
		return fmt.Errorf("trace svg: no span of %s between %v and %v us", file, from, to)
	}
	// Controller first, then workers in order, each worker's GPU
	// streams after it: the order of the names sorts that way.
	sort.SliceStable(tracks, func(i, j int) bool { return trackKey(tracks[i]) < trackKey(tracks[j]) })
	var buf bytes.Buffer
	if err := plot.Timeline(&buf, ps, plot.TimelineOptions{Title: "chorus trace " + filepath.Base(file), Date: time.Now(), Tracks: tracks}); err != nil {
		return err
	}
	if err := writeFileAtomic(out, buf.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d spans on %d tracks\n", out, len(ps), len(tracks))
	return nil
}

// trackKey orders track names: the controller first, then workers by
// number.
func trackKey(t string) string {
	if strings.HasPrefix(t, "controller") {
		return "0" + t
	}
	var n int
	if _, err := fmt.Sscanf(t, "worker %d", &n); err == nil {
		return fmt.Sprintf("1%06d%s", n, t)
	}
	return "2" + t
}

// traceEventBytes is what one call's event takes in a trace file:
// tracing the default bench allreduce sweep (2 worker processes, 1K to
// 64M, 3 rounds) wrote 867,000 events in 147 MB, and the run took 17 s
// instead of 6 s untraced (2-core machine).
const traceEventBytes = 170

// announceTrace says on errOut, before a benchmark runs with a trace
// (--trace or CHORUS_TRACE), how large the trace will be at least: a
// benchmark makes many calls and every call of every worker is an event.
// The function it returns reports the trace file's size when the
// benchmark is done.
func announceTrace(errOut io.Writer, cmd string, minEvents int64) func() {
	path := config.Process().Get(config.Trace)
	if path == "" {
		return func() {}
	}
	fmt.Fprintf(errOut, "chorus: %s: tracing to %s: every call of every worker is an event (about %d bytes): the timed calls alone make %d events, %.0f MB; warm-up adds more, and the run is slower (the default bench allreduce: 867,000 events, 147 MB, 17 s instead of 6 s); --min/--max, --iters and --rounds 1 make a smaller trace\n",
		cmd, path, traceEventBytes, minEvents, float64(minEvents*traceEventBytes)/1e6)
	return func() {
		if st, err := os.Stat(path); err == nil {
			fmt.Fprintf(errOut, "chorus: %s: trace %s: %.1f MB\n", cmd, path, float64(st.Size())/1e6)
		}
	}
}
