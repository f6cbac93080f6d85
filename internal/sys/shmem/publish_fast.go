//go:build amd64 && !race

package shmem

import "unsafe"

// Publish stores v at p with a plain store. amd64 makes stores visible
// in program order, so a reader that sees v sees what was written before
// it; what the plain store saves over an atomic one (XCHG) is the wait
// for the store buffer to drain, i.e. for the lines just written to come
// over from the cores polling them, on a path a peer waits for. The one
// guarantee lost is the store-load order a sleeper protocol needs
// (publish, then read the sleepers): callers restore it as their
// protocols say (ccl/cpu fenceRing; session and transport/shm poll a
// grace period and sleep briefly first). The pointer goes through uintptr
// so the store is kept (the word may be in memory shared with another
// process).
func Publish(p *uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(uintptr(unsafe.Pointer(p)))) = v
}
