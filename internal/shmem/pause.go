package shmem

import _ "unsafe" // go:linkname

// Pause spins the CPU for about cycles short delays (PAUSE on amd64, YIELD
// on arm64) without giving up the thread: the polite way to busy-poll a
// word another core is about to write, which also leaves a hyper-thread
// sibling its share of the core.
func Pause(cycles uint32) { procyield(cycles) }

// procyield is the runtime's own spin-wait primitive (sync.Mutex spins
// with it); it is kept reachable by go:linkname on purpose (see the
// comment on it in runtime/stubs.go).
//
//go:linkname procyield runtime.procyield
func procyield(cycles uint32)
