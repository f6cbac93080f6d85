package ir

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error of this package wraps one of them, so
// callers can test with errors.Is.
var (
	// ErrSyntax: the text is not in the IR grammar.
	ErrSyntax = errors.New("syntax error")
	// ErrUndefined: a reference to a value that is never defined.
	ErrUndefined = errors.New("undefined value")
	// ErrUseBeforeDef: a reference to a value defined only later.
	ErrUseBeforeDef = errors.New("use before definition")
	// ErrRedefined: a value or function name defined twice.
	ErrRedefined = errors.New("redefined")
	// ErrUnknownOp: an op chorus does not know.
	ErrUnknownOp = errors.New("unknown op")
	// ErrArity: the wrong number of arguments.
	ErrArity = errors.New("wrong number of arguments")
	// ErrBadArg: an argument of the wrong kind or an out-of-range immediate.
	ErrBadArg = errors.New("bad argument")
	// ErrTypeMismatch: a declared type differs from the inferred one, or an
	// operand has the wrong type.
	ErrTypeMismatch = errors.New("type mismatch")
	// ErrShape: shapes that do not fit the op (matmul, add, reshape, ...).
	ErrShape = errors.New("bad shapes")
	// ErrDevice: operands of one op on disagreeing virtual devices.
	ErrDevice = errors.New("device mismatch")
)

// Error is a well-formedness error at one place of a module.
type Error struct {
	Func    string // function name ("" for module-level errors)
	Binding int    // index in Function.Bindings order, or -1
	Result  string // the binding's result, if any
	Op      Op
	Pos     Pos // position in the source text, if parsed
	Err     error
}

func (e *Error) Error() string {
	s := ""
	if e.Pos.IsValid() {
		s = e.Pos.String() + ": "
	}
	if e.Func != "" {
		s += "func @" + e.Func + ": "
	}
	if e.Binding >= 0 {
		if e.Result != "" {
			s += fmt.Sprintf("binding %d (%%%s = %s): ", e.Binding, e.Result, e.Op)
		} else {
			s += fmt.Sprintf("binding %d (%s): ", e.Binding, e.Op)
		}
	}
	return s + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ParseError is a syntax error with its position.
type ParseError struct {
	Pos Pos
	Msg string
}

func (e *ParseError) Error() string { return e.Pos.String() + ": " + e.Msg }

func (e *ParseError) Unwrap() error { return ErrSyntax }
