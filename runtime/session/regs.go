package session

// regAlloc hands out register ids. Id 0 is reserved ("discard the
// result"); freed ids are reused most-recently-freed first, which keeps the
// workers' register files small and hot. gen[id] changes on every free, so
// a stale DRef is detected even after its id was handed out again.
type regAlloc struct {
	next int64   // next never-used id
	free []int64 // stack of freed ids
	gen  []uint64
	live []bool
}

func newRegAlloc() *regAlloc {
	return &regAlloc{next: 1, gen: []uint64{0}, live: []bool{true}}
}

// alloc returns a fresh id and its generation.
func (a *regAlloc) alloc() (int64, uint64) {
	var id int64
	if n := len(a.free); n > 0 {
		id = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		id = a.next
		a.next++
		a.gen = append(a.gen, 0)
		a.live = append(a.live, false)
	}
	a.live[id] = true
	return id, a.gen[id]
}

// valid reports whether (id, gen) names a live register.
func (a *regAlloc) valid(id int64, gen uint64) bool {
	return id > 0 && id < int64(len(a.live)) && a.live[id] && a.gen[id] == gen
}

// release frees id; it reports false if (id, gen) was not live.
func (a *regAlloc) release(id int64, gen uint64) bool {
	if !a.valid(id, gen) {
		return false
	}
	a.live[id] = false
	a.gen[id]++
	a.free = append(a.free, id)
	return true
}

// inUse counts live registers (excluding the reserved 0).
func (a *regAlloc) inUse() int { return int(a.next-1) - len(a.free) }
