//go:build !amd64 || race

package shmem

import "sync/atomic"

// Publish: see publish_fast.go. Elsewhere, and under the race detector
// (which would report the readers' concurrent atomic loads of a plain
// store), it is an atomic store.
func Publish(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
