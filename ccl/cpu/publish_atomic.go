//go:build linux && (!amd64 || race)

package cpu

import "sync/atomic"

// publish: see publish_fast.go. Elsewhere, and under the race detector
// (which would report the peers' concurrent atomic loads of a plain
// store), it is an atomic store.
func publish(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
