//go:build linux && amd64 && !race

package cpu

import "unsafe"

// publish stores an arrival counter with a plain store. amd64 makes
// stores visible in program order, so a peer that sees the counter sees
// the slot and descriptor written before it; what the plain store saves
// over an atomic one (XCHG) is the wait for the store buffer to drain
// (the slot's lines, each to be taken from the peer that read them last):
// the rank goes on to poll its peers meanwhile. The one guarantee lost is
// the store-load order the sleeper protocol needs (see ring), so after a
// publish a rank calls fenceRing before it can sleep and when its wait
// ends. The pointer goes through uintptr so the store is kept (the word is
// in shared memory).
func publish(p *uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(uintptr(unsafe.Pointer(p)))) = v
}
