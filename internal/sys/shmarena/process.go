package shmarena

import "sync/atomic"

var process atomic.Pointer[Arena]

// SetProcess makes a the arena this process's host tensors come from
// (nil: none), for the collectives to find; it returns the previous one.
// The worker process installs it together with tensor.SetHostAllocator.
func SetProcess(a *Arena) *Arena { return process.Swap(a) }

// Process returns the arena set by SetProcess, or nil.
func Process() *Arena { return process.Load() }
