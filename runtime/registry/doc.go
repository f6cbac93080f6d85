// Package registry maps function names to Go functions that workers can
// call. A controller asks every worker to look a name up (GetGlobalFunc) and
// then calls the result with packed arguments (CallPacked).
//
// Functions are registered at init time, so a worker process started from
// the same binary sees the same names. Two forms exist: Func, which receives
// the raw argument list, and a typed form (RegisterTyped) whose parameter
// types are checked with reflection before the call, so a wrong argument
// count or type becomes a clear error instead of a panic.
package registry
