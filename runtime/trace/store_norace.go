//go:build amd64 && !race

package trace

import "unsafe"

// storeWord writes a slot's data word. The words between the two atomic
// stores of the slot's sequence need no atomic store of their own: the
// sequence stores order them (Go keeps plain stores on their side of an
// atomic operation, and the reader checks the sequence after copying).
// That holds on amd64, whose stores become visible in program order;
// elsewhere, and under the race detector, they are atomic (store_race.go):
// a weaker memory model could publish them before the odd sequence, and
// the race detector would report the reader's concurrent copy.
func storeWord(p *uint64, v uint64) { *p = v }

// storeSeq writes a slot's sequence word. A plain store is enough on
// amd64: stores become visible in program order, and the compiler keeps
// stores in program order (each takes and yields the memory state). An
// atomic store (XCHG) would drain the store buffer twice per slot, four
// times per event: about half of a worker's cost per recorded event, on
// every command, tracing on or off. The pointer goes through uintptr so
// the store is kept (the word may be in a mapping shared with the
// controller).
func storeSeq(p *uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(uintptr(unsafe.Pointer(p)))) = v
}
