package verify

import (
	"errors"
	"fmt"
	"strings"
)

// Kind classifies why a plan was rejected.
type Kind uint8

const (
	// Invalid: the plan fails (*plan.Plan).Validate; Error.Err holds the
	// validation errors.
	Invalid Kind = iota + 1
	// Unsupported: the plan uses a construct the verifier cannot decide
	// (named in the message); it is not a verdict on the plan.
	Unsupported
	// Deadlock: under every schedule some op blocks forever (a wait no
	// signal satisfies, a cycle of waits, an incomplete barrier, a
	// semaphore never released, packets never written).
	Deadlock
	// Race: two accesses to the same bytes, at least one a write, not
	// ordered by happens-before (or an output write not ordered before the
	// owning rank's kernel ends).
	Race
	// UndefinedRead: an op reads data no op has written (uninitialised
	// scratch, an output chunk not yet produced).
	UndefinedRead
	// WrongResult: the plan terminates without races but an output chunk
	// does not hold the collective's result (missing or double-counted
	// contribution, wrong chunk, packet data read as plain data, ...).
	WrongResult
	// Unmatched: signals no wait consumes, or semaphores left with a value
	// other than their initial one: the counters would be off for the next
	// call of the plan.
	Unmatched
)

var kindNames = [...]string{"", "invalid plan", "unsupported", "deadlock", "race", "undefined read", "wrong result", "unmatched synchronization"}

func (k Kind) String() string {
	if int(k) > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Sentinel errors: errors.Is(err, ErrRace) holds for an *Error of kind Race,
// and so on.
var (
	ErrInvalid       = errors.New("verify: invalid plan")
	ErrUnsupported   = errors.New("verify: unsupported construct")
	ErrDeadlock      = errors.New("verify: deadlock")
	ErrRace          = errors.New("verify: race")
	ErrUndefinedRead = errors.New("verify: undefined read")
	ErrWrongResult   = errors.New("verify: wrong result")
	ErrUnmatched     = errors.New("verify: unmatched synchronization")
)

var sentinels = map[Kind]error{
	Invalid: ErrInvalid, Unsupported: ErrUnsupported, Deadlock: ErrDeadlock, Race: ErrRace,
	UndefinedRead: ErrUndefinedRead, WrongResult: ErrWrongResult, Unmatched: ErrUnmatched,
}

// Location names one op: op Op of thread block TB on rank Rank; Body is the
// index inside a pipeline op's body (-1 outside pipelines) and Iter the
// pipeline iteration the verifier was simulating (-1 outside pipelines).
type Location struct {
	Rank, TB, Op int
	Body, Iter   int
}

func (l Location) String() string {
	if l.Rank < 0 {
		return "(no op)"
	}
	if l.TB < 0 {
		return fmt.Sprintf("rank %d", l.Rank)
	}
	s := fmt.Sprintf("rank %d tb %d op %d", l.Rank, l.TB, l.Op)
	if l.Body >= 0 {
		s += fmt.Sprintf(" body op %d (iteration %d)", l.Body, l.Iter)
	}
	return s
}

// Error is what Verify returns when a plan is rejected. Rank, TB and Op
// locate the op the finding is about (-1 where there is none, e.g. an output
// chunk nobody writes has only a Rank); Msg says what happened and names the
// chunks and buffers involved.
type Error struct {
	Kind         Kind
	Rank, TB, Op int
	Msg          string
	// Body and Iter locate an op inside a pipeline body (-1 otherwise).
	Body, Iter int
	// OpName is the kind of the op at Rank/TB/Op (empty when there is none).
	OpName string
	// Other is the second op of a race, or the op a blocked op waits on.
	Other *Location
	// Err is the underlying cause: Validate's errors for Invalid.
	Err error
}

// Loc returns the error's location.
func (e *Error) Loc() Location {
	return Location{Rank: e.Rank, TB: e.TB, Op: e.Op, Body: e.Body, Iter: e.Iter}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("verify: ")
	b.WriteString(e.Kind.String())
	if e.Rank >= 0 {
		b.WriteString(" at ")
		b.WriteString(e.Loc().String())
		if e.OpName != "" {
			b.WriteString(" (" + e.OpName + ")")
		}
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil && e.Kind == Invalid {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is reports whether target is the sentinel of e's kind.
func (e *Error) Is(target error) bool { return target != nil && sentinels[e.Kind] == target }

// Unwrap returns the underlying cause (Validate's errors for Invalid).
func (e *Error) Unwrap() error { return e.Err }

func newErr(k Kind, at *step, format string, args ...any) *Error {
	e := &Error{Kind: k, Rank: -1, TB: -1, Op: -1, Body: -1, Iter: -1, Msg: fmt.Sprintf(format, args...)}
	if at != nil {
		e.Rank, e.TB, e.Op, e.Body, e.Iter = at.loc.Rank, at.loc.TB, at.loc.Op, at.loc.Body, at.loc.Iter
		e.OpName = at.op.Name.String()
	}
	return e
}
