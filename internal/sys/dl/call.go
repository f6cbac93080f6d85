package dl

import "github.com/ebitengine/purego"

// Caller calls the functions of a library whose result is an int32
// status with zero for success (CUresult, nvrtcResult, ncclResult_t,
// cublasStatus_t), and turns any other status into the library's own
// error. Every GPU binding calls through one, so the call, the check and
// the rules below are written once.
//
// Pointers: Call and Check are go:uintptrescapes, so a pointer converted
// to uintptr in the call expression itself (d.Call("f",
// uintptr(unsafe.Pointer(&x)))) is moved to the heap and kept alive until
// the call returns, and the library never writes to a stack that moved.
// A pointer converted earlier needs heap memory and runtime.KeepAlive.
type Caller struct {
	syms map[string]uintptr
	fail func(fn string, status int32) error
}

// NewCaller calls l's resolved symbols; fail describes a non-zero status
// of the function named fn (it may call the library's error-string
// function through Str).
func NewCaller(l *Lib, fail func(fn string, status int32) error) Caller {
	return Caller{syms: l.syms, fail: fail}
}

// Sym is the address of a symbol resolved by Open (0 for one not asked
// for), for the hot paths that cache it and call Check.
func (c Caller) Sym(name string) uintptr { return c.syms[name] }

// Call calls the symbol name with args and returns nil or the library's
// error for its status.
//
//go:uintptrescapes
func (c Caller) Call(name string, args ...uintptr) error {
	return c.Check(name, c.syms[name], args...)
}

// Check is Call for a function address already looked up (fn), named
// name in errors.
//
//go:uintptrescapes
func (c Caller) Check(name string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if int32(r) == 0 {
		return nil
	}
	return c.fail(name, int32(r))
}

// Str calls a function that returns a C string owned by the library
// (an error name or message) and copies it; def when the function is
// missing or returns NULL.
func (c Caller) Str(def, name string, args ...uintptr) string {
	fn := c.syms[name]
	if fn == 0 {
		return def
	}
	p, _, _ := purego.SyscallN(fn, args...)
	if p == 0 {
		return def
	}
	return CString(p)
}

// Raw calls name and returns its status unchecked, for the functions a
// fail function calls to describe a status (they must not fail in turn).
//
//go:uintptrescapes
func (c Caller) Raw(name string, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(c.syms[name], args...)
	return int32(r)
}
