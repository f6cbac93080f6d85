package shmarena

import (
	"errors"
	"fmt"
	"sort"
)

// ErrExhausted: the arena has no room for a block of the size asked (its
// capacity, or the memory the kernel would back it with).
var ErrExhausted = errors.New("shmarena: exhausted")

// span is a range [off, off+size) of the arena.
type span struct{ off, size int64 }

// allocator hands out ranges of [base, capacity): first fit over a free
// list sorted by offset whose neighbours are always coalesced, then a bump
// pointer (top). Freed ranges that end at top give their room back to it.
// It does no I/O and holds no locks; Arena wraps it.
type allocator struct {
	capacity int64
	top      int64           // [top, capacity) is untouched
	free     []span          // sorted by off, never adjacent, all below top
	used     map[int64]int64 // off -> size of live blocks
	inUse    int64
}

func newAllocator(base, capacity int64) *allocator {
	return &allocator{capacity: capacity, top: base, used: map[int64]int64{}}
}

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }

// alloc returns the offset of a free range of size bytes aligned to align
// (a power of two; size a multiple of it).
func (a *allocator) alloc(size, align int64) (int64, error) {
	if size <= 0 || align <= 0 || align&(align-1) != 0 || size%align != 0 {
		return 0, fmt.Errorf("shmarena: bad block size %d or alignment %d", size, align)
	}
	for i, s := range a.free {
		start := alignUp(s.off, align)
		end := s.off + s.size
		if start+size > end {
			continue
		}
		var repl []span
		if start > s.off {
			repl = append(repl, span{s.off, start - s.off})
		}
		if start+size < end {
			repl = append(repl, span{start + size, end - start - size})
		}
		a.free = append(a.free[:i], append(repl, a.free[i+1:]...)...)
		a.take(start, size)
		return start, nil
	}
	start := alignUp(a.top, align)
	if start > a.capacity || size > a.capacity-start {
		return 0, fmt.Errorf("%w: %d bytes wanted, %d of %d in use, %d never used", ErrExhausted, size, a.inUse, a.capacity, a.capacity-a.top)
	}
	if start > a.top {
		a.release(span{a.top, start - a.top})
	}
	a.top = start + size
	a.take(start, size)
	return start, nil
}

func (a *allocator) take(off, size int64) {
	a.used[off] = size
	a.inUse += size
}

// freeBlock returns the block at off to the free list and its size.
func (a *allocator) freeBlock(off int64) (int64, error) {
	size, ok := a.used[off]
	if !ok {
		return 0, fmt.Errorf("shmarena: free of %d, which is not a live block", off)
	}
	delete(a.used, off)
	a.inUse -= size
	a.release(span{off, size})
	return size, nil
}

// release inserts s into the free list, merging it with its neighbours,
// and gives a last free range that ends at top back to top.
func (a *allocator) release(s span) {
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > s.off })
	if i > 0 && a.free[i-1].off+a.free[i-1].size == s.off {
		i--
		s = span{a.free[i].off, a.free[i].size + s.size}
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	if i < len(a.free) && s.off+s.size == a.free[i].off {
		s.size += a.free[i].size
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	if s.off+s.size == a.top {
		a.top = s.off
		return
	}
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = s
}
