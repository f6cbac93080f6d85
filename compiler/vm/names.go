package vm

import "github.com/chorus-rt/chorus/compiler/vm/interp"

// Sentinel errors that callers test with errors.Is: the interpreter's,
// which the controller's checks use too.
var (
	// ErrLoad: the module text does not parse or verify, names a
	// function no worker has registered, or names a plan that cannot
	// serve.
	ErrLoad = interp.ErrLoad
	// ErrUnsupported: the module needs something a worker cannot do (a
	// GPU op on a CPU worker, ipc_memory or custom_allreduce on the host,
	// a dtype a kernel lacks).
	ErrUnsupported = interp.ErrUnsupported
	// ErrShape: operands whose dtype or shape do not fit the op.
	ErrShape = interp.ErrShape
	// ErrArgs: a call with the wrong function name, argument count or
	// argument types (wraps registry.ErrBadArgs, so the session reports
	// it as bad arguments).
	ErrArgs = interp.ErrArgs
)

// Names of the worker functions the interpreter registers in
// registry.Global (package compiler/vm/interp documents their
// arguments); linking this package links them, so every worker of a
// binary that uses the VM offers them.
const (
	LoadFunc     = interp.LoadFunc
	RunFunc      = interp.RunFunc
	ResultFunc   = interp.ResultFunc
	CaptureFunc  = interp.CaptureFunc
	ReplayFunc   = interp.ReplayFunc
	RunStatsFunc = interp.RunStatsFunc
)
