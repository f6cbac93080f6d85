package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/tensor"
)

// MaxRegisters bounds register ids, so a corrupt id cannot make a worker
// allocate a huge register file.
const MaxRegisters = 1 << 20

// Config describes one worker's place in its session.
type Config struct {
	ID         int
	NumWorkers int
	NumGroups  int // 0 means 1
	Device     tensor.Device
	// Registry is searched after the built-ins; nil means registry.Global.
	Registry *registry.Registry
	// OpenDevice binds a cuda:N Device; nil means the real GPU (OpenFake
	// gives a host-memory fake).
	OpenDevice DeviceOpener
	// Endpoint configures this process's data listener of cross-host
	// collectives (process workers of node agents; Options.Endpoint).
	Endpoint hier.EndpointOptions
	// IPCAutoTable replaces the custom all-reduce's strategy table
	// (Options.IPCAutoTable).
	IPCAutoTable string
	// SkipChecks drops the cross-rank argument checks of the custom
	// all-reduce and NCCL (test binaries only; Options.SkipChecks).
	SkipChecks bool
	// CPU are the options of the cpu backend's communicators (and of
	// cpu-hier's communicators within a host).
	CPU cpu.Options
	// Trace records the worker's events; nil means a recorder with a
	// flight recorder in ordinary memory and no timeline.
	Trace *trace.Recorder
	// TraceOut receives the events of a process worker whose Trace keeps
	// them (FlushTrace writes part lines; docs/observability.md).
	TraceOut io.Writer
}

// Validate checks the ids and group layout.
func (c Config) Validate() error {
	g := c.NumGroups
	if g == 0 {
		g = 1
	}
	switch {
	case c.NumWorkers < 1:
		return fmt.Errorf("worker: num_workers %d < 1", c.NumWorkers)
	case c.ID < 0 || c.ID >= c.NumWorkers:
		return fmt.Errorf("worker: id %d out of range [0, %d)", c.ID, c.NumWorkers)
	case g < 1 || c.NumWorkers%g != 0:
		return fmt.Errorf("worker: num_groups %d does not divide num_workers %d", g, c.NumWorkers)
	case c.Device != (tensor.Device{}) && !c.Device.Valid():
		return fmt.Errorf("worker: invalid device %v", c.Device)
	}
	return nil
}

// slot is one register. set distinguishes an empty register from one that
// holds nil (the result of a function that returns nothing).
type slot struct {
	set bool
	v   any
}

// funcValue is what GetGlobalFunc stores in a register.
type funcValue struct {
	name string
	fn   registry.Func
}

// failed is what a register holds when the call that should have filled it
// failed; a later call that reads it fails with CodeDepFailed.
type failed struct{ err *wire.WorkerError }

// Worker interprets commands for one worker. It is not safe for concurrent
// use: one goroutine owns it.
type Worker struct {
	cfg    Config
	groupN int
	regs   []slot
	out    wire.Reply // the reply Handle returns (reply)
	ctx    context.Context
	cancel context.CancelFunc

	dev  device.Device // the bound GPU, when Device is cuda:N
	pool *device.Pool

	commMu sync.Mutex   // guards comms against Abort
	comms  commSet      // set by chorus.init_ccl
	ipc    ipcState     // IPC memory and the custom all-reduce (after InitCCL)
	graphs atomic.Int64 // CUDA graphs captured here and not yet closed

	rec      *trace.Recorder
	traceOut io.Writer
	cmdTrack trace.Track
	cmdSites trace.SiteCache // the commands' spans
	cmdEnd   endPending      // the last command's end, until FinishCommand records it
	colTrack trace.Track
	colSites trace.SiteCache                     // BeginCollective's spans
	tcomms   struct{ global, group *tracedComm } // what Comm returns
	spanSeq  map[string]uint64                   // CollectiveSpan numbering, per sequence name
	gpu      *gpuTimer                           // device work timed for the trace

	pending  []*wire.WorkerError
	dropped  uint32
	notified bool // a Failure notice was sent since the last reply
}

// New makes a worker. Close it to cancel its context.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NumGroups == 0 {
		cfg.NumGroups = 1
	}
	if cfg.Device == (tensor.Device{}) {
		cfg.Device = tensor.CPUDevice
	}
	if cfg.Registry == nil {
		cfg.Registry = registry.Global
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{cfg: cfg, groupN: cfg.NumWorkers / cfg.NumGroups, regs: make([]slot, 16), ctx: ctx, cancel: cancel,
		rec: cfg.Trace, traceOut: cfg.TraceOut, spanSeq: map[string]uint64{}}
	if w.rec == nil {
		w.rec = trace.NewRecorder(trace.ProcWorker(cfg.ID), trace.NewHeapRing(trace.DefaultRingSlots, cfg.ID), false)
	}
	w.cmdTrack, w.colTrack = w.rec.Track(trace.ThreadCommands), w.rec.Track(trace.ThreadCollectives)
	if err := w.openDevice(cfg.OpenDevice); err != nil {
		cancel()
		return nil, err
	}
	return w, nil
}

// Close cancels the context functions see and closes communicators.
func (w *Worker) Close() {
	w.FinishCommand()
	w.cancel()
	w.closeCCL()
	w.regs = nil
	w.closeGPUTimer()
	w.closeDevice()
}

// Env implementation.

func (w *Worker) WorkerID() int            { return w.cfg.ID }
func (w *Worker) NumWorkers() int          { return w.cfg.NumWorkers }
func (w *Worker) NumGroups() int           { return w.cfg.NumGroups }
func (w *Worker) GroupSize() int           { return w.groupN }
func (w *Worker) GroupID() int             { return w.cfg.ID / w.groupN }
func (w *Worker) WorkerRank() int          { return w.cfg.ID % w.groupN }
func (w *Worker) Device() tensor.Device    { return w.cfg.Device }
func (w *Worker) Context() context.Context { return w.ctx }

// ErrNoDevice: a device the worker cannot allocate on (the sentinel of
// the registry's GPU capability).
var ErrNoDevice = registry.ErrNoDevice

// Alloc allocates host tensors; device memory needs a GPU backend, which
// this worker does not have, and that is an error rather than a silent
// host allocation.
func (w *Worker) Alloc(dt tensor.DType, shape tensor.Shape, dev tensor.Device, scope string) (*tensor.Tensor, error) {
	if scope == "" {
		scope = tensor.ScopeGlobal
	}
	if dev.Kind == tensor.CUDA {
		return w.allocDevice(dt, shape, dev, scope)
	}
	if dev.Kind != tensor.CPU {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, dev)
	}
	if scope != tensor.ScopeGlobal {
		return nil, fmt.Errorf("worker %d: no allocator for memory scope %q on %v", w.cfg.ID, scope, dev)
	}
	return tensor.NewScoped(dt, shape, scope)
}

var _ registry.Env = (*Worker)(nil)

// Handle executes one command. It returns the reply to send (nil when the
// command has none; valid until the next Handle), a Failure notice to send first (nil unless this is the
// first failure since the last reply), and stop=true for Shutdown. The
// caller calls FinishCommand after sending the reply: the command's end
// is timed before Handle returns but recorded then, off the reply's path
// (otherwise the next Handle records it).
func (w *Worker) Handle(c *wire.Command) (reply, notice *wire.Reply, stop bool) {
	w.FinishCommand()
	if c.Action == wire.ActShutdown {
		return nil, nil, true
	}
	// The name is taken before the command runs: a CallPacked may
	// overwrite the register that held its function.
	name := w.commandName(c)
	site, before := w.traceCommand(c, name)
	reply, notice, stop = w.handle(c)
	w.stampCommandEnd(c, site, before)
	if reply == nil && notice == nil {
		w.FinishCommand()
	}
	return reply, notice, stop
}

func (w *Worker) handle(c *wire.Command) (reply, notice *wire.Reply, stop bool) {
	switch c.Action {
	case wire.ActShutdown:
		return nil, nil, true
	case wire.ActKillReg:
		if err := w.checkReg(c.Reg); err != nil {
			w.fail(c, "", wire.CodeBadReg, err.Error())
		} else if int(c.Reg) < len(w.regs) {
			w.regs[c.Reg] = slot{}
		}
	case wire.ActGetGlobalFunc:
		w.getFunc(c)
		return w.reply(c, nil), nil, false
	case wire.ActCallPacked:
		w.call(c)
	case wire.ActSyncWorker, wire.ActPing:
		if w.dev != nil {
			// A sync covers the device: queued copies and kernels finish.
			err := w.dev.Sync()
			w.gpuResolve()
			if err != nil {
				w.fail(c, "", wire.CodeInternal, err.Error())
			} else if err := w.checkIPC(); err != nil {
				w.fail(c, "", codeOf(err), err.Error())
			}
		}
		return w.reply(c, nil), nil, false
	case wire.ActCopyToWorker0:
		w.copyTo(c)
	case wire.ActCopyFromWorker0, wire.ActDebugGet:
		v, ok := w.getValue(c)
		if !ok {
			v = nil
		}
		return w.reply(c, v), nil, false
	case wire.ActDebugSet:
		if len(c.Args) != 1 {
			w.fail(c, "", wire.CodeInternal, fmt.Sprintf("DebugSetRegister carries %d values, want 1", len(c.Args)))
		} else {
			w.set(c, c.Args[0])
		}
	default:
		w.fail(c, "", wire.CodeInternal, fmt.Sprintf("unknown action %v", c.Action))
	}
	if len(w.pending) > 0 && !w.notified {
		w.notified = true
		return nil, &wire.Reply{Action: wire.ActFailure, Seq: c.Seq, Worker: int32(w.cfg.ID), Errors: w.pending[:1:1]}, false
	}
	return nil, nil, false
}

// reply builds a Reply carrying every failure since the previous one, in
// the worker's one reply buffer (valid until the next Handle: every
// serving loop sends or copies it first; a Sync answered by every worker
// of a session allocated N replies per round).
func (w *Worker) reply(c *wire.Command, v any) *wire.Reply {
	r := &w.out
	*r = wire.Reply{Action: wire.ActReply, Seq: c.Seq, Worker: int32(w.cfg.ID), Value: v, Errors: w.pending, Dropped: w.dropped}
	w.pending, w.dropped, w.notified = nil, 0, false
	return r
}

func (w *Worker) fail(c *wire.Command, fn string, code wire.Code, msg string) *wire.WorkerError {
	e := &wire.WorkerError{Worker: int32(w.cfg.ID), Code: code, Op: c.Action, Func: fn, Reg: c.Reg, Msg: msg}
	if len(w.pending) < wire.MaxErrorsPerReply {
		w.pending = append(w.pending, e)
	} else {
		w.dropped++
	}
	return e
}

func (w *Worker) checkReg(r int64) error {
	if r < 0 || r >= MaxRegisters {
		return fmt.Errorf("register %d out of range [0, %d)", r, MaxRegisters)
	}
	return nil
}

// set stores v in register c.Reg (register 0 discards).
func (w *Worker) set(c *wire.Command, v any) {
	r := c.Reg
	if r == 0 {
		return
	}
	if err := w.checkReg(r); err != nil {
		w.fail(c, "", wire.CodeBadReg, err.Error())
		return
	}
	if int(r) >= len(w.regs) {
		n := max(2*len(w.regs), int(r)+1)
		w.regs = append(w.regs, make([]slot, n-len(w.regs))...)
	}
	w.regs[r] = slot{set: true, v: v}
}

// get reads register r; the error is a code and message.
func (w *Worker) get(r int64) (any, wire.Code, string) {
	if err := w.checkReg(r); err != nil {
		return nil, wire.CodeBadReg, err.Error()
	}
	if r == 0 || int(r) >= len(w.regs) || !w.regs[r].set {
		return nil, wire.CodeBadReg, fmt.Sprintf("register %d is empty", r)
	}
	v := w.regs[r].v
	if f, ok := v.(failed); ok {
		return nil, wire.CodeDepFailed, fmt.Sprintf("register %d holds the result of a failed call (%s)", r, f.err.Error())
	}
	return v, 0, ""
}

func (w *Worker) getFunc(c *wire.Command) {
	fn, err := lookup(w.cfg.Registry, c.Name)
	if err != nil {
		e := w.fail(c, c.Name, wire.CodeUnknown, err.Error())
		w.set(c, failed{e})
		return
	}
	w.set(c, funcValue{name: c.Name, fn: fn})
}

func (w *Worker) call(c *wire.Command) {
	fv, code, msg := w.get(c.Func)
	if msg != "" {
		e := w.fail(c, "", code, "function "+msg)
		w.set(c, failed{e})
		return
	}
	f, ok := fv.(funcValue)
	if !ok {
		e := w.fail(c, "", wire.CodeBadReg, fmt.Sprintf("register %d holds a %s, not a function", c.Func, value.Describe(fv)))
		w.set(c, failed{e})
		return
	}
	args := make([]any, len(c.Args))
	for i, a := range c.Args {
		ref, isRef := a.(value.Ref)
		if !isRef {
			args[i] = a
			continue
		}
		v, code, msg := w.get(int64(ref))
		if msg != "" {
			e := w.fail(c, f.name, code, fmt.Sprintf("argument %d: %s", i, msg))
			w.set(c, failed{e})
			return
		}
		args[i] = v
	}
	res, err := w.invoke(f, args)
	if err != nil {
		e := w.fail(c, f.name, codeOf(err), err.Error())
		w.set(c, failed{e})
		return
	}
	w.set(c, res)
}

type panicError struct {
	v     any
	stack string
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v\n%s", p.v, p.stack) }

// invoke calls f and turns a panic into an error carrying a trimmed stack.
func (w *Worker) invoke(f funcValue, args []any) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{v: r, stack: trimStack(string(debug.Stack()))}
		}
	}()
	return f.fn(w, args)
}

// trimStack keeps the frames below the panic, bounded in size.
func trimStack(s string) string {
	if i := strings.Index(s, "panic("); i >= 0 {
		if j := strings.Index(s[i:], "\n"); j >= 0 {
			s = s[i+j+1:]
		}
	}
	const limit = 2048
	if len(s) > limit {
		s = s[:limit] + "\n..."
	}
	return s
}

func (w *Worker) copyTo(c *wire.Command) {
	if len(c.Args) != 1 {
		w.fail(c, "", wire.CodeInternal, "CopyToWorker0 carries no tensor")
		return
	}
	src, ok := c.Args[0].(*tensor.Tensor)
	if !ok {
		w.fail(c, "", wire.CodeBadArgs, fmt.Sprintf("CopyToWorker0 source is a %s, not a tensor", value.Describe(c.Args[0])))
		return
	}
	v, code, msg := w.get(c.Reg)
	if msg != "" {
		w.fail(c, "", code, msg)
		return
	}
	dst, ok := v.(*tensor.Tensor)
	if !ok {
		w.fail(c, "", wire.CodeBadReg, fmt.Sprintf("register %d holds a %s, not a tensor", c.Reg, value.Describe(v)))
		return
	}
	var err error
	if dst.IsHost() {
		err = registry.CopyHost(dst, src)
	} else {
		err = w.fromHost(dst, src)
	}
	if err != nil {
		w.fail(c, "", wire.CodeBadArgs, err.Error())
	}
}

// getValue serves DebugGet and CopyFromWorker0: the value must be
// something the wire can carry.
func (w *Worker) getValue(c *wire.Command) (any, bool) {
	v, code, msg := w.get(c.Reg)
	if msg != "" {
		w.fail(c, "", code, msg)
		return nil, false
	}
	if c.Action == wire.ActCopyFromWorker0 {
		if _, ok := v.(*tensor.Tensor); !ok {
			w.fail(c, "", wire.CodeBadReg, fmt.Sprintf("register %d holds a %s, not a tensor", c.Reg, value.Describe(v)))
			return nil, false
		}
	}
	if _, ok := value.KindOf(v); !ok {
		w.fail(c, "", wire.CodeBadReg, fmt.Sprintf("register %d holds a %s, which cannot be sent to the controller", c.Reg, value.Describe(v)))
		return nil, false
	}
	if t, ok := v.(*tensor.Tensor); ok && !t.IsHost() {
		h, err := w.toHost(t)
		if err != nil {
			w.fail(c, "", wire.CodeInternal, fmt.Sprintf("register %d: %v", c.Reg, err))
			return nil, false
		}
		// The copy waited for the work queued before it; a custom
		// all-reduce of that work that gave up waiting for its peers
		// made the value wrong: report it here, not at the next sync.
		if err := w.checkIPC(); err != nil {
			w.fail(c, "", codeOf(err), fmt.Sprintf("register %d: %v", c.Reg, err))
			return nil, false
		}
		v = h
	}
	return v, true
}

// codeOf maps an error to its wire code, so the controller can test it
// with errors.Is.
func codeOf(err error) wire.Code {
	var pe *panicError
	switch {
	case errors.As(err, &pe):
		return wire.CodePanic
	case errors.Is(err, registry.ErrBadArgs):
		return wire.CodeBadArgs
	case errors.Is(err, ccl.ErrTimeout):
		return wire.CodeCCLTimeout
	case errors.Is(err, ccl.ErrFailed):
		return wire.CodeCCLFailed
	case errors.Is(err, ccl.ErrMismatch):
		return wire.CodeCCLMismatch
	case errors.Is(err, ccl.ErrBadArgs):
		return wire.CodeCCLBadArgs
	}
	return wire.CodeFailed
}
