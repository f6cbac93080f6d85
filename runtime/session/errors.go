package session

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrWorkerLost: a worker process died or its connection broke. The
	// session is failed; only Shutdown remains useful.
	ErrWorkerLost = errors.New("worker lost")
	// ErrReleased: the DRef was already released.
	ErrReleased = errors.New("DRef already released")
	// ErrForeignRef: the DRef belongs to another session.
	ErrForeignRef = errors.New("DRef belongs to another session")
	// ErrShutdown: the session was shut down.
	ErrShutdown = errors.New("session is shut down")
	// ErrBadWorker: a worker id out of range.
	ErrBadWorker = errors.New("worker id out of range")
	// ErrLayout: a host tensor does not match the worker's tensor.
	ErrLayout = errors.New("tensor layout mismatch")

	// Re-exported so callers need only this package.
	ErrUnknownFunction = registry.ErrUnknownFunction
	ErrBadArgs         = registry.ErrBadArgs
	ErrFuncFailed      = wire.ErrFuncFailed
	ErrPanic           = wire.ErrPanic
	ErrDepFailed       = wire.ErrDepFailed
	ErrBadReg          = wire.ErrBadReg
)

// LostError says which worker was lost and how.
type LostError struct {
	Worker int
	PID    int
	Status string // exit status as the OS reported it, or the I/O error
}

func (e *LostError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("worker %d lost (pid %d): %s", e.Worker, e.PID, e.Status)
	}
	return fmt.Sprintf("worker %d lost: %s", e.Worker, e.Status)
}

func (e *LostError) Is(target error) bool { return target == ErrWorkerLost }

// Errors is a list of failures from one or more workers. Identical
// failures on several workers (same command, function and message) are
// printed once with the list of workers. errors.Is and errors.As see every
// element.
type Errors []error

func (e Errors) Error() string {
	type key struct {
		op   wire.Action
		fn   string
		msg  string
		code wire.Code
	}
	var order []key
	groups := map[key][]int32{}
	var b strings.Builder
	var other []string
	for _, err := range e {
		var we *wire.WorkerError
		if errors.As(err, &we) {
			k := key{we.Op, we.Func, we.Msg, we.Code}
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], we.Worker)
			continue
		}
		other = append(other, err.Error())
	}
	for i, k := range order {
		if i > 0 {
			b.WriteString("; ")
		}
		ws := groups[k]
		if len(ws) == 1 {
			fmt.Fprintf(&b, "worker %d: ", ws[0])
		} else {
			fmt.Fprintf(&b, "workers %s: ", workerList(ws))
		}
		b.WriteString(k.op.String())
		if k.fn != "" {
			fmt.Fprintf(&b, " %q", k.fn)
		}
		b.WriteString(": ")
		b.WriteString(k.msg)
	}
	for _, s := range other {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s)
	}
	return b.String()
}

func (e Errors) Unwrap() []error { return e }

// workerList prints ids compactly: 0-3,5.
func workerList(ws []int32) string {
	var parts []string
	for i := 0; i < len(ws); {
		j := i
		for j+1 < len(ws) && ws[j+1] == ws[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ws[i], ws[j]))
		} else {
			parts = append(parts, fmt.Sprint(ws[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// joinErrors returns nil for no errors, else an Errors with the first
// causes first (see causeRank).
func joinErrors(errs []error) error {
	var out Errors
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil
	}
	sort.SliceStable(out, func(i, j int) bool { return causeRank(out[i]) < causeRank(out[j]) })
	return out
}

// causeRank orders failures so that what the user reads first is what
// went wrong first: a lost worker or a collective timeout (naming the
// ranks that never arrived), then ordinary failures, then the ones that
// only follow from another (a communicator that an earlier failure
// broke, a result that depends on a failed call, an aborted peer).
func causeRank(err error) int {
	var we *wire.WorkerError
	switch {
	case errors.Is(err, ErrWorkerLost):
		return 0
	case errors.As(err, &we):
		switch we.Code {
		case wire.CodeCCLTimeout:
			return 0
		case wire.CodeCCLFailed, wire.CodeDepFailed:
			return 2
		}
	}
	return 1
}
