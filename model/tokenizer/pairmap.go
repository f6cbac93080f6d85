package tokenizer

// pairMap is an open-addressing hash table from a pair of token ids to the
// merge they make; faster than a Go map on the hot path of merging.
type pairMap struct {
	keys  []uint64 // pairKey, or emptyKey
	vals  []mergeVal
	shift uint
	n     int
}

const emptyKey = ^uint64(0) // ids are below 1<<31, so no pair has this key

func newPairMap(capacity int) *pairMap {
	size, shift := 8, uint(61)
	for size < 2*capacity {
		size <<= 1
		shift--
	}
	m := &pairMap{keys: make([]uint64, size), vals: make([]mergeVal, size), shift: shift}
	for i := range m.keys {
		m.keys[i] = emptyKey
	}
	return m
}

func (m *pairMap) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> m.shift }

func (m *pairMap) get(k uint64) (mergeVal, bool) {
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case k:
			return m.vals[i], true
		case emptyKey:
			return mergeVal{}, false
		}
	}
}

// set inserts or replaces k.
func (m *pairMap) set(k uint64, v mergeVal) {
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case k:
			m.vals[i] = v
			return
		case emptyKey:
			m.keys[i], m.vals[i] = k, v
			m.n++
			return
		}
	}
}

func (m *pairMap) grow() {
	old := *m
	*m = *newPairMap(len(old.keys))
	for i, k := range old.keys {
		if k != emptyKey {
			m.set(k, old.vals[i])
		}
	}
}
