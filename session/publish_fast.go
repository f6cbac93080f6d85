//go:build linux && amd64 && !race

package session

import (
	"sync/atomic"
	"unsafe"
)

// publishSeq stores v in w with a plain store: amd64 makes stores
// visible in program order, so a consumer that sees v sees the entry
// written before it. What it saves over w.Store (XCHG) is the wait for
// the store buffer to drain, i.e. for the entry's lines to come over
// from the cores polling them, on the path a round waits for. The
// store-load order the sleeper protocol needs is then kept only up to
// the store buffer's drain: see parkFutex. The pointer goes through
// uintptr so the store is kept.
func publishSeq(w *atomic.Uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(uintptr(unsafe.Pointer(w)))) = v
}
