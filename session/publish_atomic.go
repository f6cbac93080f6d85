//go:build !linux || !amd64 || race

package session

import "sync/atomic"

// publishSeq: see publish_fast.go. Elsewhere (and for the race
// detector) an atomic store.
func publishSeq(w *atomic.Uint64, v uint64) { w.Store(v) }
