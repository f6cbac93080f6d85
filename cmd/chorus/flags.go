package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/chorus-rt/chorus/cmd/chorus/internal/bench"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Every command parses its flags through newFlags and parseFlags (or
// parseArgs): a bad flag is one line on stderr that names the command,
// the flag, the value and what is valid, with exit status 2; the usage is
// printed only for -h/--help, on stdout, with exit status 0.

// usageError is a bad command line: run prints it as one line and exits
// with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// flagError is where a FlagSet writes its own complaint; newFlags's
// Usage prints nothing when one was written (parseFlags reports it).
type flagError struct{ wrote *bool }

func (w flagError) Write(p []byte) (int, error) { *w.wrote = true; return len(p), nil }

func newFlags(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	failed := new(bool)
	quiet := flagError{failed}
	fs.SetOutput(quiet)
	fs.Usage = func() {
		if *failed {
			return // the flag package calls Usage after an error too
		}
		fmt.Fprintf(out, "Usage: %s\n\n", synopsis)
		fs.SetOutput(out)
		fs.PrintDefaults()
		fs.SetOutput(quiet)
	}
	addTraceFlag(fs)
	return fs
}

// parseFlags parses args, which hold flags only: a bad flag, or an
// argument that is not a flag, is a usageError of one line.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return flagErr(fs, err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("%s: unexpected arguments %q (chorus %s --help)", fs.Name(), fs.Args(), fs.Name())}
	}
	return nil
}

// parseArgs parses flags and positional arguments in any order and
// returns the positional ones.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagErr(fs, err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// flagErr turns the flag package's complaint into one line naming the
// command, the flag, the value and what the flag takes.
func flagErr(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	cmd := fs.Name()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return usageError{fmt.Sprintf("%s: unknown flag --%s (flags: %s; chorus %s --help)", cmd, name, flagNames(fs), cmd)}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return usageError{fmt.Sprintf("%s: --%s needs a value%s", cmd, name, valid(fs, name))}
	}
	var val, name string
	if n, _ := fmt.Sscanf(msg, "invalid value %q for flag -%s", &val, &name); n == 2 {
		name = strings.TrimSuffix(name, ":")
		_, why, _ := strings.Cut(msg, ": ")
		if why == "parse error" || why == "value out of range" {
			why = wantOf(fs.Lookup(name))
		}
		return usageError{fmt.Sprintf("%s: --%s %q: %s%s", cmd, name, val, why, valid(fs, name))}
	}
	if n, _ := fmt.Sscanf(msg, "invalid boolean value %q for -%s", &val, &name); n == 2 {
		name = strings.TrimSuffix(name, ":")
		return usageError{fmt.Sprintf("%s: --%s=%q: want true or false", cmd, name, val)}
	}
	return usageError{fmt.Sprintf("%s: %s (chorus %s --help)", cmd, msg, cmd)}
}

// wantOf says what kind of value a flag takes.
func wantOf(f *flag.Flag) string {
	if f == nil {
		return "bad value"
	}
	switch fmt.Sprintf("%T", f.Value) {
	case "*flag.intValue", "*flag.int64Value":
		return "want an integer"
	case "*flag.uintValue", "*flag.uint64Value":
		return "want an integer >= 0"
	case "*flag.float64Value":
		return "want a number"
	case "*flag.durationValue":
		return "want a duration such as 200us, 500ms or 2s"
	case "*flag.boolValue":
		return "want true or false"
	}
	return "bad value"
}

// valid is the flag's own description, as a reminder of what it takes.
func valid(fs *flag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil && f.Usage != "" {
		return " (" + f.Usage + ")"
	}
	return ""
}

// flagNames lists a FlagSet's flags, sorted.
func flagNames(fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// badFlag is a usage error for a flag value that parsed but is not
// allowed: the command, the flag, the value, and what is valid.
func badFlag(cmd, name string, value any, want string) error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return usageError{fmt.Sprintf("%s: --%s %s: %s", cmd, name, v, want)}
}

// numericDTypes are the element types a collective or plan sweep takes.
var numericDTypes = []tensor.DType{tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64, tensor.Uint8,
	tensor.Float16, tensor.BFloat16, tensor.Float32, tensor.Float64}

// parseNumericDType reads --NAME as a numeric element type.
func parseNumericDType(cmd, name, v string) (tensor.DType, error) {
	dt, err := tensor.ParseDType(v)
	if err != nil || dt == tensor.Bool {
		var names []string
		for _, d := range numericDTypes {
			names = append(names, d.String())
		}
		return tensor.Invalid, badFlag(cmd, name, v, "want one of "+strings.Join(names, ", "))
	}
	return dt, nil
}

// parseSizeFlag reads --NAME as a size in bytes.
func parseSizeFlag(cmd, name, v string) (int64, error) {
	b, err := bench.ParseSize(v)
	if err != nil {
		return 0, badFlag(cmd, name, v, bench.SizeSyntax)
	}
	return b, nil
}

// checkWorkers checks --workers for a session of kind (process or
// threaded) against what the session accepts.
func checkWorkers(cmd string, n int, kind string) error {
	limit := session.MaxThreadedWorkers
	if kind == "process" {
		limit = session.MaxProcessWorkers
	}
	if n < 1 || n > limit {
		return badFlag(cmd, "workers", n, fmt.Sprintf("want 1 to %d for a %s session", limit, kind))
	}
	return nil
}

// checkSession checks --session.
func checkSession(cmd, kind string) error {
	if kind != "process" && kind != "threaded" {
		return badFlag(cmd, "session", kind, "want process or threaded")
	}
	return nil
}

// checkTransport checks --transport.
func checkTransport(cmd, tr string) error {
	if tr != "shm" && tr != "stream" {
		return badFlag(cmd, "transport", tr, "want shm or stream")
	}
	return nil
}

// checkSweep checks the sizes of a sweep: --min <= --max, --step >= 2.
func checkSweep(cmd string, lo, hi, step int64) error {
	if hi < lo {
		return usageError{fmt.Sprintf("%s: --min %d is above --max %d: want --min <= --max", cmd, lo, hi)}
	}
	if step < 2 {
		return badFlag(cmd, "step", step, "want 2 or more (the size multiplier between rows)")
	}
	return nil
}

// parseDevices reads --devices: GPU ordinals, comma-separated ("": none).
func parseDevices(cmd, v string) ([]int, error) {
	if v == "" {
		return nil, nil
	}
	var ids []int
	for _, f := range strings.Split(v, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, badFlag(cmd, "devices", v, "want GPU ordinals like 0,1")
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// parseCounts reads --NAME as comma-separated counts >= 1.
func parseCounts(cmd, name, v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, badFlag(cmd, name, v, fmt.Sprintf("bad count %q: want comma-separated counts >= 1, like 1,2,4", strings.TrimSpace(f)))
		}
		out = append(out, n)
	}
	return out, nil
}

// parseInts reads comma-separated counts >= 1 (callers name the flag;
// parseCounts does that itself).
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad count %q: want comma-separated counts >= 1, like 1,2,4", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// memProbe tells the size checks how much memory there is (tests put a
// fake machine here).
var memProbe bench.MemProbe = bench.SystemMem{}

// checkMemory refuses a sweep whose largest size (--max) does not fit
// the memory there is, before any session starts.
func checkMemory(cmd, maxFlag string, c bench.MemCheck) error {
	if err := bench.CheckMemory(c, memProbe); err != nil {
		return badFlag(cmd, "max", maxFlag, err.Error())
	}
	return nil
}
