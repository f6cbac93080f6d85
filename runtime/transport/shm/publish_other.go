//go:build !amd64

package shm

import "sync/atomic"

// storeRelease publishes v at p with (at least) release ordering.
func storeRelease(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
