package tokenizer

// symbol is one token of a word being merged; symbols form a linked list
// inside a slice, and a merged-away symbol has size 0.
type symbol struct {
	id         int32
	prev, next int32
	size       int32
}

// mergeItem is a candidate merge of the symbol at pos with the next one.
type mergeItem struct {
	rank, pos, newID int32
}

// word holds the scratch space of one merge.
type word struct {
	syms []symbol
	heap []mergeItem
}

func (w *word) reset() {
	w.syms = w.syms[:0]
	w.heap = w.heap[:0]
}

func (w *word) add(id int32, size int) {
	n := int32(len(w.syms))
	prev := int32(-1)
	if n > 0 {
		w.syms[n-1].next = n
		prev = n - 1
	}
	w.syms = append(w.syms, symbol{id: id, prev: prev, next: -1, size: int32(size)})
}

func itemLess(a, b mergeItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// The heap is 4-ary, like the QuaternaryHeap of tokenizers (the order of
// equal items does not matter: a rank and position name one merge).
func (w *word) push(it mergeItem) {
	h := append(w.heap, it)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !itemLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	w.heap = h
}

func (w *word) pop() mergeItem {
	h := w.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l := 4*i + 1
		if l >= len(h) {
			break
		}
		m := l
		for r := l + 1; r < l+4 && r < len(h); r++ {
			if itemLess(h[r], h[m]) {
				m = r
			}
		}
		if !itemLess(h[m], h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	w.heap = h
	return top
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// mergeAll applies the merges, lowest rank first (ties: leftmost first),
// exactly as Word::merge_all of tokenizers does without dropout.
func (w *word) mergeAll(merges *pairMap) {
	syms := w.syms
	if len(syms) < 2 {
		return
	}
	for i := 0; i+1 < len(syms); i++ {
		if mv, ok := merges.get(pairKey(syms[i].id, syms[i+1].id)); ok {
			w.push(mergeItem{mv.rank, int32(i), mv.id})
		}
	}
	for len(w.heap) > 0 {
		top := w.pop()
		cur := &syms[top.pos]
		if cur.size == 0 || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		if mv, ok := merges.get(pairKey(cur.id, right.id)); !ok || mv.id != top.newID {
			continue
		}
		cur.id = top.newID
		cur.size += right.size
		cur.next = right.next
		syms[nextPos].size = 0
		if right.next > -1 && int(right.next) < len(syms) {
			syms[right.next].prev = top.pos
		}
		c := *cur
		if c.prev >= 0 {
			if mv, ok := merges.get(pairKey(syms[c.prev].id, c.id)); ok {
				w.push(mergeItem{mv.rank, c.prev, mv.id})
			}
		}
		if c.next >= 0 && int(c.next) < len(syms) {
			if mv, ok := merges.get(pairKey(c.id, syms[c.next].id)); ok {
				w.push(mergeItem{mv.rank, top.pos, mv.id})
			}
		}
	}
}

// appendIDs appends the ids of the symbols left after merging.
func (w *word) appendIDs(dst []int32) []int32 {
	for _, s := range w.syms {
		if s.size != 0 {
			dst = append(dst, s.id)
		}
	}
	return dst
}
