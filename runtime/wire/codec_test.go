package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/tensor"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden frames in testdata/golden")

// ---- helpers ----

// randTensor returns a host tensor of the given layout filled with
// deterministic pseudo-random bytes.
func randTensor(tb testing.TB, dt tensor.DType, shape tensor.Shape, scope string, seed uint64) *tensor.Tensor {
	tb.Helper()
	t, err := tensor.NewScoped(dt, shape, scope)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 42))
	b := t.Bytes()
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if dt == tensor.Bool {
		for i := range b {
			b[i] &= 1
		}
	}
	return t
}

func equalValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case tensor.Shape:
		y, ok := b.(tensor.Shape)
		return ok && x.Equal(y)
	case *tensor.Tensor:
		y, ok := b.(*tensor.Tensor)
		return ok && x.DType() == y.DType() && x.Shape().Equal(y.Shape()) &&
			x.Device() == y.Device() && x.Scope() == y.Scope() && bytes.Equal(x.Bytes(), y.Bytes())
	}
	return a == b // the remaining kinds are comparable
}

func equalCommand(a, b *Command) bool {
	if a.Action != b.Action || a.Seq != b.Seq || a.Worker != b.Worker || a.Reg != b.Reg ||
		a.Func != b.Func || a.Name != b.Name || len(a.Args) != len(b.Args) {
		return false
	}
	for i := range a.Args {
		if !equalValue(a.Args[i], b.Args[i]) {
			return false
		}
	}
	return true
}

func equalReply(a, b *Reply) bool {
	if a.Action != b.Action || a.Seq != b.Seq || a.Worker != b.Worker || a.Dropped != b.Dropped ||
		!equalValue(a.Value, b.Value) || len(a.Errors) != len(b.Errors) {
		return false
	}
	for i := range a.Errors {
		if *a.Errors[i] != *b.Errors[i] {
			return false
		}
	}
	return true
}

func mustCommand(tb testing.TB, c *Command) []byte {
	tb.Helper()
	b, err := AppendCommand(nil, c)
	if err != nil {
		tb.Fatalf("AppendCommand(%v): %v", c.Action, err)
	}
	return b
}

func mustReply(tb testing.TB, r *Reply) []byte {
	tb.Helper()
	b, err := AppendReply(nil, r)
	if err != nil {
		tb.Fatalf("AppendReply: %v", err)
	}
	return b
}

type namedValue struct {
	name string
	v    any
}

// valueCases covers every value kind and the tensor edge cases.
func valueCases(tb testing.TB) []namedValue {
	tb.Helper()
	cs := []namedValue{
		{"nil", nil},
		{"int0", int64(0)},
		{"int", int64(-123456789)},
		{"intmax", int64(math.MaxInt64)},
		{"intmin", int64(math.MinInt64)},
		{"float", 3.25},
		{"negzero", math.Copysign(0, -1)},
		{"nan", math.NaN()},
		{"inf", math.Inf(-1)},
		{"true", true},
		{"false", false},
		{"string", "héllo\x00world"},
		{"emptystring", ""},
		{"bytes", []byte{0, 1, 2, 255}},
		{"emptybytes", []byte{}},
		{"dtype", tensor.BFloat16},
		{"cpu", tensor.CPUDevice},
		{"cuda", tensor.CUDADevice(7)},
		{"cudamax", tensor.CUDADevice(math.MaxInt32)},
		{"shape", tensor.Shape{2, 3, 4}},
		{"shapeneg", tensor.Shape{-1, 8}},
		{"shapeempty", tensor.Shape{}},
		{"ref", value.Ref(17)},
		{"ref0", value.Ref(0)},
	}
	for i, dt := range tensor.DTypes {
		cs = append(cs, namedValue{"tensor_" + dt.String(), randTensor(tb, dt, tensor.Shape{2, 3}, "", uint64(i))})
	}
	cs = append(cs,
		namedValue{"tensor_scalar", randTensor(tb, tensor.Float32, nil, "", 100)},
		namedValue{"tensor_empty", randTensor(tb, tensor.Int64, tensor.Shape{0}, "", 101)},
		namedValue{"tensor_empty2d", randTensor(tb, tensor.Float16, tensor.Shape{4, 0, 1 << 40}, "", 102)},
		namedValue{"tensor_scope", randTensor(tb, tensor.Uint8, tensor.Shape{5}, "ipc_memory", 103)},
		namedValue{"tensor_maxdims", randTensor(tb, tensor.Int8, make(tensor.Shape, tensor.MaxDims), "", 104)},
	)
	base := randTensor(tb, tensor.Float32, tensor.Shape{4, 4}, "shared", 105)
	view, err := base.View(16, tensor.Float32, tensor.Shape{2, 3})
	if err != nil {
		tb.Fatal(err)
	}
	cs = append(cs, namedValue{"tensor_view", view})
	return cs
}

type namedCommand struct {
	name string
	c    *Command
}

func commandCases(tb testing.TB) []namedCommand {
	tb.Helper()
	cs := []namedCommand{
		{"shutdown", &Command{Action: ActShutdown, Seq: 1, Worker: AllWorkers}},
		{"shutdown_zero", &Command{Action: ActShutdown}},
		{"killreg", &Command{Action: ActKillReg, Seq: 2, Worker: AllWorkers, Reg: 42}},
		{"getglobalfunc", &Command{Action: ActGetGlobalFunc, Seq: 3, Worker: AllWorkers, Reg: 5, Name: "ccl.allreduce"}},
		{"getglobalfunc_empty", &Command{Action: ActGetGlobalFunc, Seq: 3, Reg: -5}},
		{"callpacked_noargs", &Command{Action: ActCallPacked, Seq: 4, Reg: 9, Func: 5}},
		{"callpacked_scalars", &Command{Action: ActCallPacked, Seq: math.MaxUint64, Worker: AllWorkers, Reg: 10, Func: 5,
			Args: []any{value.Ref(9), int64(3), 1.5, true, "sum", nil}}},
		{"syncworker", &Command{Action: ActSyncWorker, Seq: 6, Worker: 3}},
		{"syncworker_all", &Command{Action: ActSyncWorker, Seq: 6, Worker: AllWorkers}},
		{"copytoworker0", &Command{Action: ActCopyToWorker0, Seq: 7, Reg: 11,
			Args: []any{randTensor(tb, tensor.Float32, tensor.Shape{3, 2}, "", 1)}}},
		{"copyfromworker0", &Command{Action: ActCopyFromWorker0, Seq: 8, Reg: 11}},
		{"debugget", &Command{Action: ActDebugGet, Seq: 9, Worker: 2, Reg: 12}},
		{"debugset", &Command{Action: ActDebugSet, Seq: 10, Worker: 1, Reg: 13, Args: []any{"v"}}},
		{"debugset_nil", &Command{Action: ActDebugSet, Seq: 10, Worker: 1, Reg: 13, Args: []any{nil}}},
		{"ping", &Command{Action: ActPing, Seq: 11, Worker: AllWorkers}},
	}
	var all []any
	for _, v := range valueCases(tb) {
		all = append(all, v.v)
	}
	cs = append(cs, namedCommand{"callpacked_allkinds", &Command{Action: ActCallPacked, Seq: 12, Reg: 1, Func: 2, Args: all}})
	return cs
}

func commandByName(tb testing.TB, name string) *Command {
	for _, tc := range commandCases(tb) {
		if tc.name == name {
			return tc.c
		}
	}
	tb.Fatalf("no command case %q", name)
	return nil
}

type namedReply struct {
	name string
	r    *Reply
}

func replyCases(tb testing.TB) []namedReply {
	tb.Helper()
	var errs []*WorkerError
	for c := CodeFailed; c <= CodeInternal; c++ {
		errs = append(errs, &WorkerError{Worker: int32(c), Code: c, Op: ActCallPacked, Func: "f" + fmt.Sprint(c), Reg: int64(c) * 10, Msg: "boom " + fmt.Sprint(c)})
	}
	full := make([]*WorkerError, MaxErrorsPerReply)
	for i := range full {
		full[i] = &WorkerError{Worker: 1, Code: CodeDepFailed, Op: ActKillReg, Reg: int64(i)}
	}
	return []namedReply{
		{"empty", &Reply{Action: ActReply, Seq: 1}},
		{"value", &Reply{Action: ActReply, Seq: 2, Worker: 3, Value: int64(99)}},
		{"tensor", &Reply{Action: ActReply, Seq: 3, Value: randTensor(tb, tensor.BFloat16, tensor.Shape{2, 2}, "", 9)}},
		{"errors", &Reply{Action: ActReply, Seq: 4, Worker: 1, Errors: errs, Dropped: 3}},
		{"full", &Reply{Action: ActReply, Seq: 5, Errors: full, Dropped: math.MaxUint32}},
		{"failure", &Reply{Action: ActFailure, Seq: 6, Worker: 2, Errors: errs[:1]}},
		{"emptyerr", &Reply{Action: ActFailure, Seq: 7, Errors: []*WorkerError{{Op: Action(200)}}}},
	}
}

// ---- round trips ----

func TestCommandRoundTrip(t *testing.T) {
	for _, tc := range commandCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			frame := mustCommand(t, tc.c)
			if a, err := PeekAction(frame); err != nil || a != tc.c.Action {
				t.Fatalf("PeekAction = %v, %v; want %v", a, err, tc.c.Action)
			}
			got, err := DecodeCommand(frame)
			if err != nil {
				t.Fatalf("DecodeCommand: %v", err)
			}
			if !equalCommand(tc.c, got) {
				t.Fatalf("round trip changed the command:\n got %+v\nwant %+v", got, tc.c)
			}
			if again := mustCommand(t, got); !bytes.Equal(again, frame) {
				t.Fatalf("re-encoding differs")
			}
		})
	}
}

func TestValueRoundTrip(t *testing.T) {
	for _, tc := range valueCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			// As a CallPacked argument, a DebugSet argument and a reply value.
			c1 := &Command{Action: ActCallPacked, Reg: 1, Func: 2, Args: []any{int64(1), tc.v, value.Ref(3)}}
			c2 := &Command{Action: ActDebugSet, Reg: 1, Worker: 0, Args: []any{tc.v}}
			for _, c := range []*Command{c1, c2} {
				got, err := DecodeCommand(mustCommand(t, c))
				if err != nil {
					t.Fatal(err)
				}
				if !equalCommand(c, got) {
					t.Fatalf("%v: got %#v, want %#v", c.Action, got.Args, c.Args)
				}
			}
			r := &Reply{Action: ActReply, Seq: 5, Value: tc.v}
			got, err := DecodeReply(mustReply(t, r))
			if err != nil {
				t.Fatal(err)
			}
			if !equalReply(r, got) {
				t.Fatalf("reply: got %#v, want %#v", got.Value, r.Value)
			}
			if tt, ok := got.Value.(*tensor.Tensor); ok {
				if tt.Offset() != 0 || !tt.IsHost() || tt.Storage().Size() != tt.NumBytes() {
					t.Fatalf("decoded tensor not in fresh compact storage: offset %d, storage %d, view %d", tt.Offset(), tt.Storage().Size(), tt.NumBytes())
				}
			}
		})
	}
}

func TestAppendValueSize(t *testing.T) {
	base := randTensor(t, tensor.Float32, tensor.Shape{64}, "", 1)
	view, _ := base.View(32, tensor.Float32, tensor.Shape{2, 2})
	b, err := AppendValue([]byte("prefix"), view)
	if err != nil {
		t.Fatal(err)
	}
	// Only the view's 16 bytes are sent.
	if want := len("prefix") + tensorHead + len(tensor.ScopeGlobal) + 2*8 + 16; len(b) != want {
		t.Fatalf("encoded view is %d bytes, want %d", len(b), want)
	}
	if !bytes.Equal(b[len(b)-16:], view.Bytes()) {
		t.Fatal("encoded view bytes differ")
	}
	// An empty scope (possible only by editing Storage.Scope) travels as "global".
	tt := randTensor(t, tensor.Int32, tensor.Shape{2}, "", 2)
	tt.Storage().Scope = ""
	got, err := DecodeReply(mustReply(t, &Reply{Action: ActReply, Value: tt}))
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Value.(*tensor.Tensor).Scope(); s != tensor.ScopeGlobal {
		t.Fatalf("scope %q", s)
	}
}

func TestReplyRoundTrip(t *testing.T) {
	for _, tc := range replyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			frame := mustReply(t, tc.r)
			if a, err := PeekAction(frame); err != nil || a != tc.r.Action {
				t.Fatalf("PeekAction = %v, %v", a, err)
			}
			got, err := DecodeReply(frame)
			if err != nil {
				t.Fatal(err)
			}
			if !equalReply(tc.r, got) {
				t.Fatalf("got %+v, want %+v", got, tc.r)
			}
		})
	}
}

// Sentinels of a layer above wire, registered with MatchCode as
// runtime/worker registers the registry's and the collectives'.
var (
	errTestUnknown = errors.New("test: unknown function")
	errTestBadArgs = errors.New("test: bad arguments")
)

func init() {
	MatchCode(CodeUnknown, errTestUnknown)
	MatchCode(CodeBadArgs, errTestBadArgs, errTestBadArgs) // twice: once is kept
}

func TestReplyErrorsIs(t *testing.T) {
	sentinels := map[Code]error{
		CodeFailed: ErrFuncFailed, CodePanic: ErrPanic, CodeUnknown: errTestUnknown,
		CodeBadArgs: errTestBadArgs, CodeBadReg: ErrBadReg, CodeDepFailed: ErrDepFailed, CodeInternal: ErrInternal,
	}
	r := replyCases(t)[3].r
	got, err := DecodeReply(mustReply(t, r))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Errors) != len(sentinels) {
		t.Fatalf("%d errors", len(got.Errors))
	}
	for _, e := range got.Errors {
		var err error = fmt.Errorf("wrapped: %w", e)
		if !errors.Is(err, sentinels[e.Code]) {
			t.Errorf("code %d: errors.Is(%v) false", e.Code, err)
		}
		for c, s := range sentinels {
			if c != e.Code && errors.Is(err, s) {
				t.Errorf("code %d also matches the sentinel of code %d", e.Code, c)
			}
		}
	}
}

// Decoded values must not alias the frame, which the transport reuses.
func TestDecodeDoesNotAlias(t *testing.T) {
	tt := randTensor(t, tensor.Float64, tensor.Shape{3}, "", 3)
	c := &Command{Action: ActCallPacked, Reg: 1, Func: 2, Args: []any{[]byte("abc"), "str", tt}}
	frame := mustCommand(t, c)
	got, err := DecodeCommand(frame)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Reply{Action: ActReply, Value: []byte("xyz"), Errors: []*WorkerError{{Func: "fn", Msg: "msg"}}}
	rframe := mustReply(t, rep)
	rgot, err := DecodeReply(rframe)
	if err != nil {
		t.Fatal(err)
	}
	for i := range frame {
		frame[i] = 0xAA
	}
	for i := range rframe {
		rframe[i] = 0xAA
	}
	if !equalCommand(c, got) {
		t.Fatal("decoded command changed when the frame was overwritten")
	}
	if !equalReply(rep, rgot) {
		t.Fatal("decoded reply changed when the frame was overwritten")
	}
}

func TestAppendKeepsPrefix(t *testing.T) {
	c := commandByName(t, "callpacked_scalars")
	plain := mustCommand(t, c)
	prefix := []byte("some earlier frame")
	b, err := AppendCommand(append([]byte(nil), prefix...), c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:len(prefix)], prefix) || !bytes.Equal(b[len(prefix):], plain) {
		t.Fatal("AppendCommand did not append")
	}
}

func TestAppendCommandNoAlloc(t *testing.T) {
	c := &Command{Action: ActCallPacked, Seq: 1, Reg: 10, Func: 3, Args: []any{value.Ref(4), value.Ref(5), int64(1 << 20), 0.5, true}}
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = AppendCommand(buf[:0], c); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendCommand allocates %.1f times per call", allocs)
	}
}

// ---- encoding errors ----

type fakeBuf struct{ n int64 }

func (f fakeBuf) Ptr() uintptr { return 0x1000 }
func (f fakeBuf) Size() int64  { return f.n }

func TestEncodeErrors(t *testing.T) {
	dev, err := tensor.View(tensor.NewDeviceStorage(tensor.CUDADevice(0), "", fakeBuf{64}), 0, tensor.Float32, tensor.Shape{4})
	if err != nil {
		t.Fatal(err)
	}
	longScope := randTensor(t, tensor.Float32, tensor.Shape{1}, strings.Repeat("s", MaxScopeLen+1), 1)
	call := func(args ...any) *Command { return &Command{Action: ActCallPacked, Reg: 1, Func: 2, Args: args} }
	cmds := []struct {
		name string
		c    *Command
		want string
	}{
		{"nil", nil, "nil command"},
		{"replyaction", &Command{Action: ActReply}, "not a command"},
		{"action0", &Command{Action: 0}, "not a command"},
		{"int", call(int64(1), 2), "argument 1: int is not a wire value"},
		{"int32", call(int32(1)), "argument 0: int32"},
		{"float32", call(1.0, float32(1)), "argument 1: float32"},
		{"intslice", call([]int{1}), "argument 0: []int"},
		{"device tensor", call(nil, nil, dev), "argument 2: tensor: storage is not in host memory"},
		{"nil tensor", call((*tensor.Tensor)(nil)), "argument 0: nil *tensor.Tensor"},
		{"bad dtype", call(tensor.DType(0)), "argument 0: invalid dtype"},
		{"bad dtype2", call(tensor.DType(11)), "argument 0: invalid dtype"},
		{"zero device", call(1.0, tensor.Device{}), "argument 1: invalid device"},
		{"cpu1", call(tensor.Device{Kind: tensor.CPU, ID: 1}), "invalid device"},
		{"cuda-1", call(tensor.CUDADevice(-1)), "invalid device"},
		{"cuda big", call(tensor.CUDADevice(math.MaxInt32 + 1)), "invalid device"},
		{"long scope", call(longScope), "argument 0: tensor scope name"},
		{"too many args", call(make([]any, MaxArgs+1)...), "at most 65536"},
		{"killreg func", &Command{Action: ActKillReg, Reg: 1, Func: 2}, "field Func"},
		{"syncworker reg", &Command{Action: ActSyncWorker, Worker: AllWorkers, Reg: 3}, "field Reg"},
		{"shutdown reg", &Command{Action: ActShutdown, Reg: 1}, "field Reg"},
		{"getglobal func", &Command{Action: ActGetGlobalFunc, Func: 1}, "field Func"},
		{"sync name", &Command{Action: ActSyncWorker, Name: "x"}, "field Name"},
		{"ping args", &Command{Action: ActPing, Args: []any{nil}}, "field Args"},
		{"debugset noarg", &Command{Action: ActDebugSet}, "exactly one argument"},
		{"copyto 2args", &Command{Action: ActCopyToWorker0, Args: []any{nil, nil}}, "exactly one argument"},
		{"debugset int", &Command{Action: ActDebugSet, Args: []any{7}}, "argument 0: int"},
	}
	for _, tc := range cmds {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := AppendCommand(dst, tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed on error: %q", out)
			}
		})
	}
	if _, err := AppendCommand(nil, call(dev)); !errors.Is(err, tensor.ErrNotHost) {
		t.Errorf("device tensor error %v does not wrap tensor.ErrNotHost", err)
	}

	many := make([]*WorkerError, MaxErrorsPerReply+1)
	for i := range many {
		many[i] = &WorkerError{}
	}
	reps := []struct {
		name string
		r    *Reply
		want string
	}{
		{"nil", nil, "nil reply"},
		{"action", &Reply{Action: ActPing}, "not a reply"},
		{"value", &Reply{Action: ActReply, Value: 3}, "value: int"},
		{"too many", &Reply{Action: ActReply, Errors: many}, "at most 16"},
		{"nil error", &Reply{Action: ActReply, Errors: []*WorkerError{nil}}, "error 0 is nil"},
		{"bad code", &Reply{Action: ActFailure, Errors: []*WorkerError{{}, {Code: 11}}}, "error 1 has unknown code 11"},
	}
	for _, tc := range reps {
		t.Run("reply_"+tc.name, func(t *testing.T) {
			out, err := AppendReply([]byte("keep"), tc.r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed on error: %q", out)
			}
		})
	}
	if _, err := AppendValue(nil, uint8(1)); err == nil {
		t.Error("AppendValue(uint8) succeeded")
	}
}

// ---- rejection of malformed frames ----

// fb builds payloads by hand.
type fb []byte

func (b fb) u8(v ...uint8) fb { return append(b, v...) }
func (b fb) u32(v uint32) fb  { return le.AppendUint32(b, v) }
func (b fb) u64(v uint64) fb  { return le.AppendUint64(b, v) }
func (b fb) i64(v int64) fb   { return b.u64(uint64(v)) }
func (b fb) str(s string) fb  { return append(b.u32(uint32(len(s))), s...) }
func (b fb) raw(p []byte) fb  { return append(b, p...) }
func (b fb) cpuDev() fb       { return b.u8(uint8(tensor.CPU)).u32(0) }
func frame(a Action, payload fb) []byte {
	return append(appendHeader(nil, a, len(payload), 77), payload...)
}

// call builds a CallPacked frame around the given encoded args.
func callFrame(nargs uint32, args fb) []byte {
	return frame(ActCallPacked, fb{}.u32(math.MaxUint32).i64(1).i64(2).u32(nargs).raw(args))
}

func tensorVal(dt tensor.DType, scope string, dims []int64, nbytes uint64, data []byte) fb {
	b := fb{}.u8(uint8(value.KindTensor), uint8(dt)).cpuDev().u8(uint8(len(scope))).raw([]byte(scope)).u8(uint8(len(dims)))
	for _, d := range dims {
		b = b.i64(d)
	}
	return b.u64(nbytes).raw(data)
}

func TestRejectMalformed(t *testing.T) {
	valid := mustCommand(t, commandByName(t, "callpacked_scalars"))
	patch := func(f []byte, off int, v ...byte) []byte {
		g := append([]byte(nil), f...)
		copy(g[off:], v)
		return g
	}
	withLen := func(f []byte, n uint64) []byte {
		g := append([]byte(nil), f...)
		le.PutUint64(g[offLength:], n)
		return g
	}
	kT := uint8(value.KindTensor)
	cases := []struct {
		name    string
		frame   []byte
		reply   bool // decode with DecodeReply
		version bool // want ErrVersion rather than ErrMalformed
		want    string
	}{
		{"empty", nil, false, false, "header"},
		{"magic only", []byte("CHR"), false, false, "header"},
		{"bad magic", patch(valid, 0, 'X'), false, false, "magic"},
		{"bad version", patch(valid, offVersion, 2), false, true, "version 2"},
		{"bad version short", []byte("CHR\x09"), false, true, "version 9"},
		{"version 0", patch(valid, offVersion, 0), false, true, "version 0"},
		{"action 0", patch(valid, offAction, 0), false, false, "unknown action 0"},
		{"action 11", patch(valid, offAction, 11), false, false, "unknown action 11"},
		{"action 34", patch(valid, offAction, 34), false, false, "unknown action 34"},
		{"action 255", patch(valid, offAction, 255), false, false, "unknown action 255"},
		{"flags", patch(valid, offFlags, 1), false, false, "flags"},
		{"reserved", patch(valid, offReserved+1, 1), false, false, "reserved"},
		{"length big", withLen(valid, uint64(len(valid))), false, false, "payload length"},
		{"length huge", withLen(valid, math.MaxUint64), false, false, "payload length"},
		{"trailing after length", append(append([]byte(nil), valid...), 0), false, false, "payload length"},
		{"trailing in payload", frame(ActKillReg, fb{}.u32(0).i64(1).u8(0)), false, false, "1 trailing bytes"},
		{"reply as command", mustReply(t, &Reply{Action: ActReply}), false, false, "not a command"},
		{"command as reply", valid, true, false, "not a reply"},
		{"unknown kind", callFrame(1, fb{}.u8(11)), false, false, "args[0].kind at offset 48: unknown value kind 11"},
		{"kind 255", callFrame(2, fb{}.u8(0, 255)), false, false, "args[1].kind"},
		{"bool 2", callFrame(1, fb{}.u8(uint8(value.KindBool), 2)), false, false, "bool"},
		{"dtype 0", callFrame(1, fb{}.u8(uint8(value.KindDType), 0)), false, false, "unknown dtype 0"},
		{"dtype 11", callFrame(1, fb{}.u8(uint8(value.KindDType), 11)), false, false, "unknown dtype 11"},
		{"device kind 0", callFrame(1, fb{}.u8(uint8(value.KindDevice), 0).u32(0)), false, false, "unknown device"},
		{"device kind 3", callFrame(1, fb{}.u8(uint8(value.KindDevice), 3).u32(0)), false, false, "unknown device"},
		{"cpu id 1", callFrame(1, fb{}.u8(uint8(value.KindDevice), 1).u32(1)), false, false, "unknown device"},
		{"cuda id -1", callFrame(1, fb{}.u8(uint8(value.KindDevice), 2).u32(math.MaxUint32)), false, false, "unknown device"},
		{"string huge", callFrame(1, fb{}.u8(uint8(value.KindString)).u32(math.MaxUint32).raw([]byte("abc"))), false, false, "string length"},
		{"bytes huge", callFrame(1, fb{}.u8(uint8(value.KindBytes)).u32(1<<31)), false, false, "bytes length"},
		{"name huge", frame(ActGetGlobalFunc, fb{}.u32(0).i64(1).u32(100).raw([]byte("f"))), false, false, "name length"},
		{"shape huge", callFrame(1, fb{}.u8(uint8(value.KindShape)).u32(1<<30).i64(1)), false, false, "shape length"},
		{"args over limit", callFrame(MaxArgs+1, make(fb, MaxArgs+1)), false, false, "exceeds the limit of 65536"},
		{"args over bytes", callFrame(1000, fb{}.u8(0, 0, 0)), false, false, "cannot fit"},
		{"args short", callFrame(3, fb{}.u8(0, 0, 1)), false, false, "args[2].int at offset 51: needs 8 bytes, 0 left"},
		{"tensor ndim 17", callFrame(1, tensorVal(tensor.Int8, "global", make([]int64, 17), 0, nil)), false, false, "17 dims"},
		{"tensor negative dim", callFrame(1, tensorVal(tensor.Int8, "global", []int64{2, -1}, 0, nil)), false, false, "negative"},
		{"tensor overflow", callFrame(1, tensorVal(tensor.Int8, "global", []int64{1 << 32, 1 << 32}, 0, nil)), false, false, "overflows"},
		{"tensor size overflow", callFrame(1, tensorVal(tensor.Float64, "global", []int64{1 << 61}, 0, nil)), false, false, "tensor byte length"},
		{"tensor 2^40 claimed", callFrame(1, tensorVal(tensor.Float32, "global", []int64{1 << 40}, 4<<40, []byte{1, 2})), false, false, "claimed"},
		{"tensor bytes mismatch", callFrame(1, tensorVal(tensor.Float32, "global", []int64{2}, 7, make([]byte, 7))), false, false, "7 bytes for 2 elements"},
		{"tensor bytes mismatch2", callFrame(1, tensorVal(tensor.Float32, "global", []int64{2}, 8, make([]byte, 9))), false, false, "trailing"},
		{"tensor data short", callFrame(1, tensorVal(tensor.Float32, "global", []int64{2}, 8, make([]byte, 7))), false, false, "claimed"},
		{"tensor empty scope", callFrame(1, tensorVal(tensor.Float32, "", nil, 4, make([]byte, 4))), false, false, "scope name is empty"},
		{"tensor scope short", callFrame(1, fb{}.u8(kT, uint8(tensor.Int8)).cpuDev().u8(50).raw([]byte("ab"))), false, false, "scope length"},
		{"tensor bad dtype", callFrame(1, fb{}.u8(kT, 12).cpuDev()), false, false, "tensor dtype"},
		{"tensor cuda", callFrame(1, fb{}.u8(kT, uint8(tensor.Int8), uint8(tensor.CUDA)).u32(0).u8(1, 'g', 0).u64(1).u8(0)), false, false, "only host tensors"},
		{"tensor dims short", callFrame(1, fb{}.u8(kT, uint8(tensor.Int8)).cpuDev().u8(1, 'g', 3).i64(1)), false, false, "tensor dims"},
		{"debugset trailing arg", frame(ActDebugSet, fb{}.u32(0).i64(1).u8(0, 0)), false, false, "trailing"},
		{"reply errors over limit", frame(ActReply, fb{}.u32(0).u8(0).u32(0).u32(17)), true, false, "exceeds the limit of 16"},
		{"reply errors over bytes", frame(ActReply, fb{}.u32(0).u8(0).u32(0).u32(2).raw(make([]byte, minErrorSize))), true, false, "cannot fit"},
		{"reply bad code", frame(ActReply, fb{}.u32(0).u8(0).u32(0).u32(1).u32(0).u8(11, 4).i64(0).str("").str("")), true, false, "errors[0].code"},
		{"reply msg huge", frame(ActReply, fb{}.u32(0).u8(0).u32(0).u32(1).u32(0).u8(0, 4).i64(0).str("").u32(99)), true, false, "errors[0].msg length"},
		{"reply value kind", frame(ActReply, fb{}.u32(0).u8(99)), true, false, "value.kind"},
		{"reply trailing", frame(ActFailure, fb{}.u32(0).u8(0).u32(0).u32(0).u8(1)), true, false, "trailing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.reply {
				_, err = DecodeReply(tc.frame)
			} else {
				_, err = DecodeCommand(tc.frame)
			}
			want := ErrMalformed
			if tc.version {
				want = ErrVersion
			}
			if !errors.Is(err, want) {
				t.Fatalf("err = %v, want %v", err, want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// A frame claiming a huge tensor must fail before allocating it.
func TestRejectHugeClaimWithoutAllocating(t *testing.T) {
	frames := [][]byte{
		callFrame(1, tensorVal(tensor.Float32, "global", []int64{1 << 40}, 4<<40, nil)),
		callFrame(1, tensorVal(tensor.Float64, "global", []int64{1 << 20, 1 << 20}, 8<<40, make([]byte, 3))),
		callFrame(1, fb{}.u8(uint8(value.KindBytes)).u32(math.MaxUint32)),
		callFrame(1, fb{}.u8(uint8(value.KindShape)).u32(math.MaxUint32)),
		callFrame(MaxArgs, fb{}),
	}
	for i, f := range frames {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			if _, err := DecodeCommand(f); !errors.Is(err, ErrMalformed) {
				t.Fatalf("frame %d: err = %v", i, err)
			}
		}
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
			t.Errorf("frame %d: decoding 10 times allocated %d bytes", i, d)
		}
	}
}

// validFrames returns every frame of the round-trip tables.
func validFrames(tb testing.TB) (cmds, reps [][]byte) {
	for _, tc := range commandCases(tb) {
		cmds = append(cmds, mustCommand(tb, tc.c))
	}
	for _, tc := range replyCases(tb) {
		reps = append(reps, mustReply(tb, tc.r))
	}
	return cmds, reps
}

// Every strict prefix of a valid frame is rejected, both as is (the header
// length no longer matches) and with the header length patched to match
// (the payload reader must notice).
func TestRejectTruncated(t *testing.T) {
	cmds, reps := validFrames(t)
	check := func(t *testing.T, f []byte, decode func([]byte) error) {
		for n := range len(f) {
			p := append([]byte(nil), f[:n]...)
			if err := decode(p); !errors.Is(err, ErrMalformed) {
				t.Fatalf("prefix %d of %d: err = %v", n, len(f), err)
			}
			if n >= HeaderSize {
				le.PutUint64(p[offLength:], uint64(n-HeaderSize))
				if err := decode(p); !errors.Is(err, ErrMalformed) {
					t.Fatalf("prefix %d of %d with patched length: err = %v", n, len(f), err)
				}
			}
		}
	}
	dc := func(b []byte) error { _, err := DecodeCommand(b); return err }
	dr := func(b []byte) error { _, err := DecodeReply(b); return err }
	for i, f := range cmds {
		if len(f) > 4096 {
			continue // keep the quadratic loop cheap
		}
		t.Run(fmt.Sprint("command", i), func(t *testing.T) { check(t, f, dc) })
	}
	for i, f := range reps {
		t.Run(fmt.Sprint("reply", i), func(t *testing.T) { check(t, f, dr) })
	}
}

func TestPeekAction(t *testing.T) {
	f := mustReply(t, &Reply{Action: ActFailure})
	if a, err := PeekAction(f); err != nil || a != ActFailure {
		t.Fatalf("PeekAction = %v, %v", a, err)
	}
	// The header alone is checked: a bad payload still peeks.
	if a, err := PeekAction(frame(ActCallPacked, fb{}.u8(1, 2, 3))); err != nil || a != ActCallPacked {
		t.Fatalf("PeekAction = %v, %v", a, err)
	}
	for _, bad := range [][]byte{nil, []byte("CHR\x01"), frame(Action(99), nil), append(frame(ActPing, nil), 0)} {
		if _, err := PeekAction(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("PeekAction(%x) = %v", bad, err)
		}
	}
	if _, err := PeekAction([]byte("CHR\x02rest of a future frame")); !errors.Is(err, ErrVersion) {
		t.Errorf("future version: %v", err)
	}
}

// ---- golden frames ----

func goldenFrames(tb testing.TB) map[string][]byte {
	tt, err := tensor.NewScoped(tensor.Float32, tensor.Shape{2, 2}, "ipc_memory")
	if err != nil {
		tb.Fatal(err)
	}
	d, _ := tensor.Data[float32](tt)
	copy(d, []float32{1, 2, 3, -0.5})
	return map[string][]byte{
		"callpacked": mustCommand(tb, &Command{Action: ActCallPacked, Seq: 0x0102030405060708, Worker: AllWorkers, Reg: 12, Func: 3, Args: []any{
			nil, int64(-2), 0.25, true, "hi", []byte{0xde, 0xad}, tensor.Float16, tensor.CUDADevice(1),
			tensor.Shape{3, -1}, tt, value.Ref(7),
		}}),
		"getglobalfunc": mustCommand(tb, &Command{Action: ActGetGlobalFunc, Seq: 1, Reg: 4, Name: "ccl.allreduce"}),
		"debugget":      mustCommand(tb, &Command{Action: ActDebugGet, Seq: 2, Worker: 1, Reg: 4}),
		"syncworker":    mustCommand(tb, &Command{Action: ActSyncWorker, Seq: 3, Worker: AllWorkers}),
		"reply": mustReply(tb, &Reply{Action: ActReply, Seq: 9, Worker: 2, Value: int64(5), Dropped: 1, Errors: []*WorkerError{
			{Worker: 2, Code: CodePanic, Op: ActCallPacked, Func: "f", Reg: 8, Msg: "oops"},
		}}),
	}
}

func TestGolden(t *testing.T) {
	for name, f := range goldenFrames(t) {
		path := filepath.Join("testdata", "golden", name+".hex")
		var lines []string
		h := hex.EncodeToString(f)
		for len(h) > 64 {
			lines = append(lines, h[:64])
			h = h[64:]
		}
		text := strings.Join(append(lines, h), "\n") + "\n"
		if *rewrite {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestGolden -rewrite to create it)", err)
		}
		wantBytes, err := hex.DecodeString(strings.Join(strings.Fields(string(want)), ""))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !bytes.Equal(f, wantBytes) {
			t.Errorf("%s: the encoding changed (if on purpose, bump wire.Version, update docs/protocol.md and rerun with -rewrite)\n got %x\nwant %x", name, f, wantBytes)
		}
		// The golden bytes also decode to what was encoded.
		if name == "reply" {
			if _, err := DecodeReply(wantBytes); err != nil {
				t.Error(err)
			}
		} else if _, err := DecodeCommand(wantBytes); err != nil {
			t.Error(err)
		}
	}
}
