package safetensors

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinel errors that callers test with errors.Is.
var (
	// ErrCorrupt: the file breaks the format (bad header length, bad
	// JSON, duplicate names, offsets that overlap, leave gaps or do not
	// match the shape). A truncated file is ErrCorrupt too.
	ErrCorrupt = errors.New("corrupt safetensors file")
	// ErrTruncated: the file ends before the header or the data it
	// announces.
	ErrTruncated = errors.New("truncated safetensors file")
	// ErrNotFound: no tensor (or no file) of that name.
	ErrNotFound = errors.New("not found")
	// ErrDType: a dtype chorus has no tensor type for, an unknown dtype
	// name, or a dtype other than the one asked for.
	ErrDType = errors.New("unsupported or unexpected dtype")
	// ErrShape: a shape that does not fit (the size of its bytes, or the
	// shape a caller expects).
	ErrShape = errors.New("shape mismatch")
)

// Error is what this package returns: where (file, tensor, field) and
// what. Unwrap gives the sentinels it matches.
type Error struct {
	File   string // path of the file (or index) at fault
	Tensor string // tensor name, if one is at fault
	Field  string // header field ("dtype", "shape", "data_offsets", "header length", ...)
	Msg    string
	Kinds  []error // sentinels
	Err    error   // an underlying cause (an I/O error), if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		b.WriteString("tensor ")
		b.WriteString(strconv.Quote(e.Tensor))
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if len(e.Kinds) > 0 {
		b.WriteString(" (")
		b.WriteString(e.Kinds[0].Error())
		b.WriteString(")")
	}
	return b.String()
}

func (e *Error) Unwrap() []error {
	out := append([]error(nil), e.Kinds...)
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

func corrupt(file, tensor, field, msg string) *Error {
	return &Error{File: file, Tensor: tensor, Field: field, Msg: msg, Kinds: []error{ErrCorrupt}}
}

func truncated(file, tensor, field, msg string) *Error {
	return &Error{File: file, Tensor: tensor, Field: field, Msg: msg, Kinds: []error{ErrTruncated, ErrCorrupt}}
}
