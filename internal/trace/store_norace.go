//go:build amd64 && !race

package trace

// storeWord writes a slot's data word. The words between the two atomic
// stores of the slot's sequence need no atomic store of their own: the
// sequence stores order them (Go keeps plain stores on their side of an
// atomic operation, and the reader checks the sequence after copying).
// That holds on amd64, whose stores become visible in program order;
// elsewhere, and under the race detector, they are atomic (store_race.go):
// a weaker memory model could publish them before the odd sequence, and
// the race detector would report the reader's concurrent copy.
func storeWord(p *uint64, v uint64) { *p = v }
