package trace

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/chorus-rt/chorus/internal/config"
)

// Phase is an event's Trace Event Format phase.
type Phase byte

const (
	Begin    Phase = 'B' // a span starts on its track
	End      Phase = 'E' // the innermost open span of its track ends
	Complete Phase = 'X' // a span with its duration (Dur)
	Instant  Phase = 'i' // a point in time (faults, hang reports)
)

// Categories chorus records.
const (
	CatCommand    = "command"    // controller sends and waits; worker command execution
	CatCollective = "collective" // one rank's part in a collective
	CatGPU        = "gpu"        // device work timed with CUDA events
	CatFault      = "fault"      // worker errors, lost workers, timeouts
	CatHang       = "hang"       // hang reports
	CatActivity   = "activity"   // long work inside a command (a kernel compile)
)

// Thread names of chorus's tracks.
const (
	ThreadCommands    = "commands"
	ThreadCollectives = "collectives"
	ThreadFaults      = "faults"
	ThreadActivity    = "activity"
)

// StreamThread is the thread name of GPU stream i.
func StreamThread(i int) string { return "stream " + strconv.Itoa(i) }

// Process names.
const ProcController = "controller"

// ProcWorker is worker id's process name.
func ProcWorker(id int) string { return "worker " + strconv.Itoa(id) }

// ProcWorkerGPU is the process name of worker id's GPU.
func ProcWorkerGPU(id int) string { return "worker " + strconv.Itoa(id) + " gpu" }

// WorkerOf parses a process name made by ProcWorker or ProcWorkerGPU (an
// optional "session N: " prefix is allowed); ok is false for others.
func WorkerOf(proc string) (id int, gpu, ok bool) {
	if _, rest, found := strings.Cut(proc, ": "); found && strings.HasPrefix(proc, "session ") {
		proc = rest
	}
	s, found := strings.CutPrefix(proc, "worker ")
	if !found {
		return 0, false, false
	}
	s, gpu = strings.CutSuffix(s, " gpu")
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false, false
	}
	return n, gpu, true
}

// Track is where an event is drawn: a process ("controller", "worker 3",
// "worker 3 gpu") and a thread in it ("commands", "collectives",
// "faults", "stream 0"). Perfetto shows one row per thread.
type Track struct {
	Process string
	Thread  string
}

func (t Track) String() string { return t.Process + " / " + t.Thread }

// Bits of Args.Set.
const (
	HasRank       uint8 = 1 << iota // Args.Rank is meaningful
	HasPeer                         // Args.Peer is meaningful
	HasUnfinished                   // a span closed by the merger, not by its owner
)

// Args are the typed arguments an event may carry; zero fields are not
// written. Strings should be long-lived (function names, constants): an
// event stores the string header, it copies nothing.
type Args struct {
	Bytes   int64  // payload size
	Seq     uint64 // collective: its number on its communicator (from 1); command: the controller's sequence number
	Rank    int32  // collective: this rank (Set&HasRank)
	Peer    int32  // send/recv: the other rank (Set&HasPeer)
	Set     uint8
	Comm    string // communicator: "global", "group 1", a plan's name
	Backend string // backend and algorithm or strategy: "cpu", "nccl", "ipc/oneshot", "plan/allreduce_ring"
	Op      string // reduction: "sum"; command: the action ("CallPacked")
	Error   string // the failure the span ended with, or the fault
}

// Event is one record. It is a fixed-size value: recording one copies it
// into a chunk, and allocates nothing.
type Event struct {
	Track Track
	Name  string
	Cat   string
	Phase Phase
	TS    int64 // ns since the Unix epoch (wall clock; see Now)
	Dur   int64 // ns, for Complete
	Args  Args
}

var (
	anchorWall = time.Now().UnixNano() + skew()
	anchorMono = time.Now()
)

// EnvSkew (a Go duration, e.g. "5s" or "-2s") shifts this process's
// trace clock: a test runs the processes of one simulated host with it
// to play a host whose clock differs from the controller's
// (docs/observability.md, clock alignment). Unset: 0; a value that is
// not a duration is ignored with a warning on stderr.
const EnvSkew = "CHORUS_TRACE_SKEW"

func skew() int64 {
	v := config.Process().Get(config.TraceSkew)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chorus: %s=%q is not a duration; ignored\n", EnvSkew, v)
		return 0
	}
	return int64(d)
}

// Now is the trace clock: wall-clock ns since the Unix epoch, advancing
// with the monotonic clock from this process's start, so it never goes
// back within a process and agrees with other processes of the host up to
// their clocks' offset at start.
func Now() int64 { return anchorWall + int64(time.Since(anchorMono)) }

// FormatBytes prints a size as 4 MiB, 512 B, ...
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func cutPrefix(s, p string) (string, bool)     { return strings.CutPrefix(s, p) }
func cut(s, sep string) (string, string, bool) { return strings.Cut(s, sep) }
