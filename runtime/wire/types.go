package wire

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Version is the frame format version written into every header. A decoder
// rejects any other version.
const Version = 1

// Action is the kind of a message. Numbers are part of the wire format.
type Action uint8

const (
	// Controller -> worker.
	ActShutdown        Action = 1  // all workers leave their loop
	ActKillReg         Action = 2  // clear register Reg
	ActGetGlobalFunc   Action = 3  // look up Name, store in Reg; every worker replies
	ActCallPacked      Action = 4  // Reg = call(register Func, Args...)
	ActSyncWorker      Action = 5  // Worker replies once all before it ran; Worker<0: every worker replies
	ActCopyToWorker0   Action = 6  // worker 0: copy tensor Args[0] into the tensor in Reg
	ActCopyFromWorker0 Action = 7  // worker 0 replies with a copy of the tensor in Reg
	ActDebugGet        Action = 8  // Worker replies with the value of Reg
	ActDebugSet        Action = 9  // Worker stores Args[0] in Reg
	ActPing            Action = 10 // every worker replies (liveness, start-up handshake)

	// Worker -> controller.
	ActReply   Action = 32 // answer to a command with the same Seq
	ActFailure Action = 33 // unsolicited notice: a command failed on this worker
)

// actionNames is an array, not a map: String runs on every command a
// worker records (its flight recorder), and a map lookup was a tenth of
// that cost.
var actionNames = [...]string{
	ActShutdown: "Shutdown", ActKillReg: "KillReg", ActGetGlobalFunc: "GetGlobalFunc",
	ActCallPacked: "CallPacked", ActSyncWorker: "SyncWorker", ActCopyToWorker0: "CopyToWorker0",
	ActCopyFromWorker0: "CopyFromWorker0", ActDebugGet: "DebugGetFromRemote",
	ActDebugSet: "DebugSetRegister", ActPing: "Ping", ActReply: "Reply", ActFailure: "Failure",
}

func (a Action) String() string {
	if int(a) < len(actionNames) && actionNames[a] != "" {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// AllWorkers as Command.Worker addresses every worker.
const AllWorkers = -1

// Command is a controller -> worker message. Which fields are meaningful
// depends on Action (see docs/protocol.md); the rest are zero.
//
// Field order: what every command is read for (Action, Worker, Seq, Reg,
// Func, the length of Args) lies in the first 56 bytes, so that a
// threaded session's log entry holds it in the cache line its sequence
// number is in (runtime/session/queue.go); Name (GetGlobalFunc only) comes last.
type Command struct {
	Action Action
	Worker int32  // target worker of targeted actions, or AllWorkers
	Seq    uint64 // assigned by the controller; replies echo it
	Reg    int64  // register written, read or cleared
	Func   int64  // register holding the function (CallPacked)
	Args   []any  // normalized values (package value)
	Name   string // function name (GetGlobalFunc)
}

// Reply is a worker -> controller message.
type Reply struct {
	Action Action // ActReply or ActFailure
	Seq    uint64
	Worker int32
	Value  any            // the requested value (DebugGet, CopyFromWorker0)
	Errors []*WorkerError // failures since the worker's previous reply
	// Dropped counts failures not listed because the list was full.
	Dropped uint32
}

// Plain reports whether r is a reply that carries nothing but its
// sequence number (no value, no failures): the answer to nearly every
// Sync, which sessions may deliver as an acknowledgement instead of a
// message.
func (r *Reply) Plain() bool {
	return r.Action == ActReply && r.Seq != 0 && r.Value == nil && len(r.Errors) == 0 && r.Dropped == 0
}

// Code classifies a worker failure so callers can test it with errors.Is
// even when it crossed a process boundary.
type Code uint8

const (
	CodeFailed    Code = 0 // the function returned an error
	CodePanic     Code = 1 // the function panicked
	CodeUnknown   Code = 2 // unknown function
	CodeBadArgs   Code = 3 // wrong argument count or type
	CodeBadReg    Code = 4 // register empty, wrong kind, or out of range
	CodeDepFailed Code = 5 // an argument holds the result of a failed call
	CodeInternal  Code = 6 // the worker could not carry out the command
	// Collective failures (package ccl), so that errors.Is with the ccl
	// sentinels works on the controller (runtime/worker registers them
	// with MatchCode, as it does the registry's for CodeUnknown and
	// CodeBadArgs).
	CodeCCLBadArgs  Code = 7  // ccl.ErrBadArgs: this rank's collective arguments
	CodeCCLMismatch Code = 8  // ccl.ErrMismatch: ranks disagree
	CodeCCLTimeout  Code = 9  // ccl.ErrTimeout: some ranks never arrived (also ccl.ErrFailed)
	CodeCCLFailed   Code = 10 // ccl.ErrFailed: the communicator failed earlier

	maxCode = CodeCCLFailed
)

// Sentinels matched by WorkerError.Is.
var (
	ErrFuncFailed = errors.New("function failed")
	ErrPanic      = errors.New("function panicked")
	ErrBadReg     = errors.New("bad register")
	ErrDepFailed  = errors.New("depends on a failed call")
	ErrInternal   = errors.New("worker internal error")
)

// WorkerError is a failure on one worker, as reported to the controller.
type WorkerError struct {
	Worker int32
	Code   Code
	Op     Action // the command that failed
	Func   string // function name, when a function was involved
	Reg    int64  // the register the command targeted
	Msg    string
}

func (e *WorkerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "worker %d: %s", e.Worker, e.Op)
	if e.Func != "" {
		fmt.Fprintf(&b, " %q", e.Func)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Is lets errors.Is match the sentinel of the error's code: wire's own
// (ErrFuncFailed, ErrPanic, ...) and those registered with MatchCode.
func (e *WorkerError) Is(target error) bool {
	if own, ok := ownSentinels[e.Code]; ok && target == own {
		return true
	}
	codeMu.RLock()
	defer codeMu.RUnlock()
	for _, s := range matches[e.Code] {
		if target == s {
			return true
		}
	}
	return false
}

// ownSentinels are the sentinels of the codes that wire defines errors for.
var ownSentinels = map[Code]error{
	CodeFailed:    ErrFuncFailed,
	CodePanic:     ErrPanic,
	CodeBadReg:    ErrBadReg,
	CodeDepFailed: ErrDepFailed,
	CodeInternal:  ErrInternal,
}

var (
	codeMu  sync.RWMutex
	matches = map[Code][]error{}
)

// MatchCode makes errors.Is(e, target) true, for every target, for each
// WorkerError e of code c. The sentinels of the layers above wire (an
// unknown function, bad arguments, a collective's mismatch, timeout or
// failure) are registered by the layer that maps errors to codes
// (runtime/worker), so wire itself depends on neither the registry nor
// the collectives. Registering a target twice has no further effect.
func MatchCode(c Code, targets ...error) {
	codeMu.Lock()
	defer codeMu.Unlock()
	for _, t := range targets {
		dup := false
		for _, s := range matches[c] {
			dup = dup || s == t
		}
		if !dup {
			matches[c] = append(matches[c], t)
		}
	}
}

// MaxErrorsPerReply bounds Reply.Errors; more are counted in Dropped.
const MaxErrorsPerReply = 16
