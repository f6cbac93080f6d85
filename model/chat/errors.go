package chat

import (
	"errors"
	"fmt"
)

// ErrUnsupported is matched (errors.Is) by every error that refuses a
// template construct outside the supported Jinja subset.
var ErrUnsupported = errors.New("unsupported template construct")

// ErrLimit is matched by errors raised when a render exceeds the
// evaluator's safety limits (output size, steps, nesting).
var ErrLimit = errors.New("template resource limit exceeded")

// SyntaxError reports a template that is not valid Jinja.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d: syntax error: %s", e.Line, e.Msg)
}

// UnsupportedError reports a construct outside the supported subset: a
// tag, filter, test, function or method. Line is 0 when unknown.
type UnsupportedError struct {
	Line      int
	Construct string
}

func (e *UnsupportedError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: unsupported %s", e.Line, e.Construct)
	}
	return "unsupported " + e.Construct
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

func unsupportedf(format string, args ...any) error {
	return &UnsupportedError{Construct: fmt.Sprintf(format, args...)}
}

// RaiseError is raised by the template itself, through
// raise_exception(message). Message is the template's text, as
// transformers' TemplateError carries it.
type RaiseError struct {
	Line    int
	Message string
}

func (e *RaiseError) Error() string {
	return fmt.Sprintf("line %d: raise_exception: %s", e.Line, e.Message)
}

// RenderError is a runtime error other than raise_exception: what Jinja
// reports as UndefinedError, TypeError, ValueError and the like.
type RenderError struct {
	Line int
	Err  error
}

func (e *RenderError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *RenderError) Unwrap() error { return e.Err }

type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

func (e *limitError) Is(target error) bool { return target == ErrLimit }

func errLimit(msg string) error { return &limitError{msg: msg} }

// atLine attaches a line number to an evaluation error that has none.
func atLine(err error, line int) error {
	switch e := err.(type) {
	case nil:
		return nil
	case *UnsupportedError:
		if e.Line == 0 {
			c := *e
			c.Line = line
			return &c
		}
		return e
	case *RaiseError:
		if e.Line == 0 {
			c := *e
			c.Line = line
			return &c
		}
		return e
	case *RenderError, *SyntaxError, *ctrlFlow:
		return err
	}
	return &RenderError{Line: line, Err: err}
}
