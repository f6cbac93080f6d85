//go:build !amd64 || race

package trace

import "sync/atomic"

// storeWord: see store_norace.go.
func storeWord(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// storeSeq: see store_norace.go.
func storeSeq(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
