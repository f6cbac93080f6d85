package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/chorus-rt/chorus/internal/trace"
	"github.com/chorus-rt/chorus/session"
)

// sessionCommands are the commands that make sessions: they take
// --trace FILE. (The others would ignore it, which is worse than
// refusing it.)
var sessionCommands = map[string]bool{
	"demo": true, "bench session": true, "bench allreduce": true, "bench allgather": true,
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
`

func cmdTrace(args []string, out io.Writer) error {
	if len(args) == 0 {
		return usageError{"trace: which? summary or check\n" + traceUsage}
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(out, traceUsage)
		return flag.ErrHelp
	case "summary", "check":
	default:
		return usageError{fmt.Sprintf("trace: unknown subcommand %q\n%s", args[0], traceUsage)}
	}
	fs := newFlags("trace "+args[0], "chorus trace "+args[0]+" FILE", out)
	top := fs.Int("top", 10, "collectives to list, slowest arrival first")
	// The file may come before or after the flags.
	rest := args[1:]
	var file string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		file, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err.Error()}
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("trace %s: unexpected arguments %q", args[0], fs.Args())}
	}
	if file == "" {
		return usageError{"trace " + args[0] + ": which file?"}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	f, err := trace.Read(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	verr := trace.Validate(f)
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
