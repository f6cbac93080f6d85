package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Frame layout constants (docs/protocol.md).
const (
	// Magic opens every frame.
	Magic = "CHR"
	// HeaderSize is the size of the fixed frame header.
	HeaderSize = 24

	// MaxArgs bounds the argument count of a CallPacked command.
	MaxArgs = 1 << 16
	// MaxScopeLen bounds the length of a tensor's memory scope name.
	MaxScopeLen = 255
	// maxPayload bounds the payload an encoder will write; it only guards
	// against int overflow when many large tensors are summed.
	maxPayload = 1 << 62
)

// Header field offsets.
const (
	offVersion  = 3
	offAction   = 4
	offFlags    = 5
	offReserved = 6
	offLength   = 8
	offSeq      = 16
)

var (
	// ErrMalformed is wrapped by every decoding error caused by a frame
	// that does not follow the format: truncation, bad magic, unknown
	// action, kind, dtype or device, inconsistent lengths, trailing bytes,
	// exceeded limits. The message names the field and its byte offset.
	ErrMalformed = errors.New("wire: malformed frame")
	// ErrVersion is wrapped when a frame carries a format version other
	// than Version.
	ErrVersion = errors.New("wire: unsupported frame version")
)

var le = binary.LittleEndian

// Field sets of command payloads. Every command starts with Worker (int32),
// the addressee; the other fields follow in this bit order.
const (
	fReg     uint8 = 1 << iota // int64
	fFunc                      // int64
	fName                      // string
	fArgs                      // uint32 count, then that many values
	fArg                       // exactly one value (Args[0])
	fCommand uint8 = 0x80      // marks a valid command action
)

var commandFields = [...]uint8{
	ActShutdown:        fCommand,
	ActKillReg:         fCommand | fReg,
	ActGetGlobalFunc:   fCommand | fReg | fName,
	ActCallPacked:      fCommand | fReg | fFunc | fArgs,
	ActSyncWorker:      fCommand,
	ActCopyToWorker0:   fCommand | fReg | fArg,
	ActCopyFromWorker0: fCommand | fReg,
	ActDebugGet:        fCommand | fReg,
	ActDebugSet:        fCommand | fReg | fArg,
	ActPing:            fCommand,
}

// commandLayout returns the field set of a command action.
func commandLayout(a Action) (uint8, bool) {
	if int(a) < len(commandFields) {
		f := commandFields[a]
		return f, f&fCommand != 0
	}
	return 0, false
}

func isReplyAction(a Action) bool { return a == ActReply || a == ActFailure }

// minErrorSize is the encoded size of a WorkerError with empty strings.
const minErrorSize = 4 + 1 + 1 + 8 + 4 + 4

func appendHeader(dst []byte, a Action, payload int, seq uint64) []byte {
	dst = append(dst, Magic[0], Magic[1], Magic[2], Version, byte(a), 0, 0, 0)
	dst = le.AppendUint64(dst, uint64(payload))
	return le.AppendUint64(dst, seq)
}

// AppendCommand appends the frame encoding c to dst and returns the
// extended buffer. Fields that c.Action does not carry must be zero, and
// Args must hold normalized values (package value); otherwise it returns
// an error (naming the argument index where one is at fault) and dst
// unchanged. It does not allocate beyond growing dst.
func AppendCommand(dst []byte, c *Command) ([]byte, error) {
	if c == nil {
		return dst, errors.New("wire: encode: nil command")
	}
	f, ok := commandLayout(c.Action)
	if !ok {
		return dst, fmt.Errorf("wire: encode: %v is not a command action", c.Action)
	}
	n, err := commandPayloadSize(c, f)
	if err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, HeaderSize+n)
	dst = appendHeader(dst, c.Action, n, c.Seq)
	dst = le.AppendUint32(dst, uint32(c.Worker))
	if f&fReg != 0 {
		dst = le.AppendUint64(dst, uint64(c.Reg))
	}
	if f&fFunc != 0 {
		dst = le.AppendUint64(dst, uint64(c.Func))
	}
	if f&fName != 0 {
		dst = appendString(dst, c.Name)
	}
	if f&fArgs != 0 {
		dst = le.AppendUint32(dst, uint32(len(c.Args)))
	}
	for _, a := range c.Args {
		dst = appendValue(dst, a)
	}
	return dst, nil
}

// commandPayloadSize validates c against its action's field set and
// returns the exact payload size.
func commandPayloadSize(c *Command, f uint8) (int, error) {
	unused := func(field string, v any) error {
		return fmt.Errorf("wire: encode %v: field %s (%v) is not carried by this action and must be zero", c.Action, field, v)
	}
	n := 4 // Worker
	if f&fReg != 0 {
		n += 8
	} else if c.Reg != 0 {
		return 0, unused("Reg", c.Reg)
	}
	if f&fFunc != 0 {
		n += 8
	} else if c.Func != 0 {
		return 0, unused("Func", c.Func)
	}
	if f&fName != 0 {
		if uint64(len(c.Name)) > math.MaxUint32 {
			return 0, fmt.Errorf("wire: encode %v: name of %d bytes is too long", c.Action, len(c.Name))
		}
		n += 4 + len(c.Name)
	} else if c.Name != "" {
		return 0, unused("Name", c.Name)
	}
	switch {
	case f&fArgs != 0:
		if len(c.Args) > MaxArgs {
			return 0, fmt.Errorf("wire: encode %v: %d arguments, at most %d allowed", c.Action, len(c.Args), MaxArgs)
		}
		n += 4
	case f&fArg != 0:
		if len(c.Args) != 1 {
			return 0, fmt.Errorf("wire: encode %v: needs exactly one argument, got %d", c.Action, len(c.Args))
		}
	default:
		if len(c.Args) != 0 {
			return 0, unused("Args", fmt.Sprintf("%d values", len(c.Args)))
		}
	}
	for i, a := range c.Args {
		m, err := valueSize(a)
		if err != nil {
			return 0, fmt.Errorf("wire: encode %v: argument %d: %w", c.Action, i, err)
		}
		n += m
		if n > maxPayload {
			return 0, fmt.Errorf("wire: encode %v: payload too large", c.Action)
		}
	}
	return n, nil
}

// AppendReply appends the frame encoding r to dst and returns the extended
// buffer. r.Action must be ActReply or ActFailure, r.Errors may hold at most
// MaxErrorsPerReply non-nil errors with known codes, and r.Value must be a
// normalized value. On error dst is returned unchanged.
func AppendReply(dst []byte, r *Reply) ([]byte, error) {
	if r == nil {
		return dst, errors.New("wire: encode: nil reply")
	}
	if !isReplyAction(r.Action) {
		return dst, fmt.Errorf("wire: encode: %v is not a reply action", r.Action)
	}
	n, err := valueSize(r.Value)
	if err != nil {
		return dst, fmt.Errorf("wire: encode %v: value: %w", r.Action, err)
	}
	if len(r.Errors) > MaxErrorsPerReply {
		return dst, fmt.Errorf("wire: encode %v: %d errors, at most %d allowed (count the rest in Dropped)", r.Action, len(r.Errors), MaxErrorsPerReply)
	}
	n += 4 + 4 + 4 // worker, dropped, error count
	for i, e := range r.Errors {
		if e == nil {
			return dst, fmt.Errorf("wire: encode %v: error %d is nil", r.Action, i)
		}
		if e.Code > maxCode {
			return dst, fmt.Errorf("wire: encode %v: error %d has unknown code %d", r.Action, i, e.Code)
		}
		if uint64(len(e.Func)) > math.MaxUint32 || uint64(len(e.Msg)) > math.MaxUint32 {
			return dst, fmt.Errorf("wire: encode %v: error %d: string too long", r.Action, i)
		}
		n += minErrorSize + len(e.Func) + len(e.Msg)
	}
	if n > maxPayload {
		return dst, fmt.Errorf("wire: encode %v: payload too large", r.Action)
	}
	dst = slices.Grow(dst, HeaderSize+n)
	dst = appendHeader(dst, r.Action, n, r.Seq)
	dst = le.AppendUint32(dst, uint32(r.Worker))
	dst = appendValue(dst, r.Value)
	dst = le.AppendUint32(dst, r.Dropped)
	dst = le.AppendUint32(dst, uint32(len(r.Errors)))
	for _, e := range r.Errors {
		dst = le.AppendUint32(dst, uint32(e.Worker))
		dst = append(dst, byte(e.Code), byte(e.Op))
		dst = le.AppendUint64(dst, uint64(e.Reg))
		dst = appendString(dst, e.Func)
		dst = appendString(dst, e.Msg)
	}
	return dst, nil
}

// parseHeader validates the fixed header: magic, version, a known action,
// zero flags and reserved bytes, and a payload length equal to the bytes
// that follow the header.
func parseHeader(frame []byte) (Action, uint64, error) {
	if len(frame) >= offVersion+1 && string(frame[:len(Magic)]) == Magic && frame[offVersion] != Version {
		return 0, 0, fmt.Errorf("%w: frame has version %d, this reader speaks %d", ErrVersion, frame[offVersion], Version)
	}
	if len(frame) < HeaderSize {
		return 0, 0, malformed(0, "header", "frame is %d bytes, shorter than the %d-byte header", len(frame), HeaderSize)
	}
	if string(frame[:len(Magic)]) != Magic {
		return 0, 0, malformed(0, "magic", "got %q, want %q", frame[:len(Magic)], Magic)
	}
	a := Action(frame[offAction])
	if _, ok := commandLayout(a); !ok && !isReplyAction(a) {
		return 0, 0, malformed(offAction, "action", "unknown action %d", uint8(a))
	}
	if frame[offFlags] != 0 {
		return 0, 0, malformed(offFlags, "flags", "unknown flags %#02x", frame[offFlags])
	}
	if frame[offReserved] != 0 || frame[offReserved+1] != 0 {
		return 0, 0, malformed(offReserved, "reserved", "must be zero")
	}
	if n := le.Uint64(frame[offLength:]); n != uint64(len(frame)-HeaderSize) {
		return 0, 0, malformed(offLength, "payload length", "header says %d bytes, frame carries %d", n, len(frame)-HeaderSize)
	}
	return a, le.Uint64(frame[offSeq:]), nil
}

// PeekAction validates a frame's header (not its payload) and returns its
// action, so a receiver can choose between DecodeCommand and DecodeReply.
func PeekAction(frame []byte) (Action, error) {
	a, _, err := parseHeader(frame)
	return a, err
}

// DecodeCommand decodes a command frame. The frame is untrusted: any
// deviation from the format gives an error wrapping ErrMalformed (or
// ErrVersion), never a panic. The result shares no memory with frame.
func DecodeCommand(frame []byte) (*Command, error) {
	a, seq, err := parseHeader(frame)
	if err != nil {
		return nil, err
	}
	f, ok := commandLayout(a)
	if !ok {
		return nil, malformed(offAction, "action", "%v is not a command", a)
	}
	r := reader{b: frame, off: HeaderSize, arg: -1}
	var c *Command
	var small []any
	if f&(fArgs|fArg) != 0 {
		// One allocation for the command and a short argument list.
		s := new(commandWithArgs)
		c, small = &s.c, s.args[:]
	} else {
		c = new(Command)
	}
	c.Action, c.Seq = a, seq
	w, err := r.u32("worker")
	if err != nil {
		return nil, err
	}
	c.Worker = int32(w)
	if f&fReg != 0 {
		v, err := r.u64("reg")
		if err != nil {
			return nil, err
		}
		c.Reg = int64(v)
	}
	if f&fFunc != 0 {
		v, err := r.u64("func")
		if err != nil {
			return nil, err
		}
		c.Func = int64(v)
	}
	if f&fName != 0 {
		if c.Name, err = r.str("name"); err != nil {
			return nil, err
		}
	}
	if f&fArgs != 0 {
		at := r.off
		n, err := r.u32("args count")
		if err != nil {
			return nil, err
		}
		if n > MaxArgs {
			return nil, malformed(at, "args count", "%d exceeds the limit of %d", n, MaxArgs)
		}
		if int(n) > r.remaining() { // every value takes at least one byte
			return nil, malformed(at, "args count", "%d arguments cannot fit in the %d bytes left", n, r.remaining())
		}
		if n > 0 {
			if int(n) <= len(small) {
				c.Args = small[:n:n]
			} else {
				c.Args = make([]any, n)
			}
			for i := range c.Args {
				r.arg = i
				if c.Args[i], err = r.value(); err != nil {
					return nil, err
				}
			}
		}
	}
	if f&fArg != 0 {
		r.arg = 0
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		small[0] = v
		c.Args = small[:1:1]
	}
	r.arg = -1
	if err := r.end(); err != nil {
		return nil, err
	}
	return c, nil
}

// commandWithArgs backs a decoded command with up to six arguments.
type commandWithArgs struct {
	c    Command
	args [6]any
}

// DecodeReply decodes a Reply or Failure frame, with the same guarantees as
// DecodeCommand.
func DecodeReply(frame []byte) (*Reply, error) {
	a, seq, err := parseHeader(frame)
	if err != nil {
		return nil, err
	}
	if !isReplyAction(a) {
		return nil, malformed(offAction, "action", "%v is not a reply", a)
	}
	r := reader{b: frame, off: HeaderSize, arg: -1}
	rep := &Reply{Action: a, Seq: seq}
	w, err := r.u32("worker")
	if err != nil {
		return nil, err
	}
	rep.Worker = int32(w)
	r.where = "value"
	if rep.Value, err = r.value(); err != nil {
		return nil, err
	}
	r.where = ""
	if rep.Dropped, err = r.u32("dropped"); err != nil {
		return nil, err
	}
	at := r.off
	n, err := r.u32("error count")
	if err != nil {
		return nil, err
	}
	if n > MaxErrorsPerReply {
		return nil, malformed(at, "error count", "%d exceeds the limit of %d", n, MaxErrorsPerReply)
	}
	if int(n)*minErrorSize > r.remaining() {
		return nil, malformed(at, "error count", "%d errors cannot fit in the %d bytes left", n, r.remaining())
	}
	if n > 0 {
		store := make([]WorkerError, n)
		rep.Errors = make([]*WorkerError, n)
		for i := range store {
			e := &store[i]
			r.where = "errors"
			r.arg = i
			v, err := r.u32("worker")
			if err != nil {
				return nil, err
			}
			e.Worker = int32(v)
			at := r.off
			code, err := r.u8("code")
			if err != nil {
				return nil, err
			}
			if Code(code) > maxCode {
				return nil, r.fail(at, "code", "unknown code %d", code)
			}
			e.Code = Code(code)
			op, err := r.u8("op")
			if err != nil {
				return nil, err
			}
			e.Op = Action(op)
			reg, err := r.u64("reg")
			if err != nil {
				return nil, err
			}
			e.Reg = int64(reg)
			if e.Func, err = r.str("func"); err != nil {
				return nil, err
			}
			if e.Msg, err = r.str("msg"); err != nil {
				return nil, err
			}
			rep.Errors[i] = e
		}
	}
	r.where, r.arg = "", -1
	if err := r.end(); err != nil {
		return nil, err
	}
	return rep, nil
}

func malformed(off int, field, format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d: %s", ErrMalformed, field, off, fmt.Sprintf(format, args...))
}

// reader walks a frame's payload. off is absolute within the frame so
// error messages point at the offending byte; where and arg name the
// enclosing list element ("args[3]", "value", "errors[1]") in messages.
type reader struct {
	b     []byte
	off   int
	where string
	arg   int
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) fail(off int, field, format string, args ...any) error {
	where := r.where
	if where == "" && r.arg >= 0 {
		where = "args"
	}
	switch {
	case r.arg >= 0:
		field = fmt.Sprintf("%s[%d].%s", where, r.arg, field)
	case where != "":
		field = where + "." + field
	}
	return malformed(off, field, format, args...)
}

func (r *reader) short(field string, need int) error {
	return r.fail(r.off, field, "needs %d bytes, %d left", need, r.remaining())
}

func (r *reader) end() error {
	if r.off != len(r.b) {
		return r.fail(r.off, "payload", "%d trailing bytes", len(r.b)-r.off)
	}
	return nil
}

func (r *reader) u8(field string) (uint8, error) {
	if r.off >= len(r.b) {
		return 0, r.short(field, 1)
	}
	v := r.b[r.off]
	r.off++
	return v, nil
}

func (r *reader) u32(field string) (uint32, error) {
	if r.remaining() < 4 {
		return 0, r.short(field, 4)
	}
	v := le.Uint32(r.b[r.off:])
	r.off += 4
	return v, nil
}

func (r *reader) u64(field string) (uint64, error) {
	if r.remaining() < 8 {
		return 0, r.short(field, 8)
	}
	v := le.Uint64(r.b[r.off:])
	r.off += 8
	return v, nil
}

// lenPrefixed reads a uint32 length and returns that many bytes, aliasing
// the frame (callers copy).
func (r *reader) lenPrefixed(field string) ([]byte, error) {
	at := r.off
	n, err := r.u32(field + " length")
	if err != nil {
		return nil, err
	}
	if uint64(n) > uint64(r.remaining()) {
		return nil, r.fail(at, field+" length", "%d bytes claimed, %d left", n, r.remaining())
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

func (r *reader) str(field string) (string, error) {
	b, err := r.lenPrefixed(field)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
