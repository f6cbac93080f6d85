package shm

import "unsafe"

// storeRelease publishes v at p with release ordering. On amd64 every
// plain store is a release store (TSO), and a plain MOV does not wait for
// the store buffer to drain, as the XCHG of atomic.StoreUint64 does: a
// controller publishing to N rings then has N cache-line transfers in
// flight at once instead of one after another. The pointer goes through
// uintptr so that the compiler keeps the store (the word is in a shared
// mapping the Go memory model does not know about).
func storeRelease(p *uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(uintptr(unsafe.Pointer(p)))) = v
}
