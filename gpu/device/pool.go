package device

import (
	"fmt"
	"math/bits"
	"sync"
)

// Stats describe a Pool.
type Stats struct {
	InUse     int64 // bytes handed out (rounded sizes)
	Cached    int64 // bytes kept for reuse
	Peak      int64 // highest InUse
	Allocs    int64 // Get calls
	Hits      int64 // Get calls served from the cache
	DeviceMem int64 // bytes allocated from the device, in use or cached
	// DevicePeak is the highest DeviceMem: the most device memory the
	// pool held at once (what a worker's peak GPU memory report uses;
	// Peak counts only what was handed out).
	DevicePeak int64
}

// Pool is a caching allocator over a Device: freed buffers are kept by
// size class (powers of two from 512 bytes) and reused, because device
// allocation and free synchronise the device. Release returns the cache.
type Pool struct {
	dev    Device
	mu     sync.Mutex
	free   map[int64][]*Buffer
	owned  map[*Buffer]bool
	st     Stats
	closed bool
}

// NewPool wraps dev.
func NewPool(dev Device) *Pool {
	return &Pool{dev: dev, free: map[int64][]*Buffer{}, owned: map[*Buffer]bool{}}
}

func sizeClass(n int64) int64 {
	if n <= 512 {
		return 512
	}
	return 1 << bits.Len64(uint64(n-1))
}

// Get returns a buffer of at least n bytes (Size reports the class size).
func (p *Pool) Get(n int64) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("device pool: negative size %d", n)
	}
	c := sizeClass(n)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.st.Allocs++
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.st.Hits++
		p.st.Cached -= c
		p.take(b, c)
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	b, err := p.dev.Alloc(c)
	if err != nil {
		// Out of memory: give the cache back and try once more.
		if p.Release() == nil {
			b, err = p.dev.Alloc(c)
		}
		if err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	p.st.DeviceMem += c
	p.st.DevicePeak = max(p.st.DevicePeak, p.st.DeviceMem)
	p.take(b, c)
	p.mu.Unlock()
	return b, nil
}

func (p *Pool) take(b *Buffer, c int64) {
	p.owned[b] = true
	p.st.InUse += c
	p.st.Peak = max(p.st.Peak, p.st.InUse)
}

// Put returns a buffer to the cache. Putting a buffer twice, or one the
// pool did not hand out, is an error.
func (p *Pool) Put(b *Buffer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if !p.owned[b] {
		return fmt.Errorf("device pool: Put of a buffer not handed out by this pool (or put twice)")
	}
	delete(p.owned, b)
	c := b.Size()
	p.st.InUse -= c
	p.st.Cached += c
	p.free[c] = append(p.free[c], b)
	return nil
}

// Release frees every cached buffer on the device.
func (p *Pool) Release() error {
	p.mu.Lock()
	free := p.free
	p.free = map[int64][]*Buffer{}
	p.st.Cached = 0
	p.mu.Unlock()
	var first error
	for c, l := range free {
		for _, b := range l {
			if err := p.dev.Free(b); err != nil && first == nil {
				first = err
			}
			p.mu.Lock()
			p.st.DeviceMem -= c
			p.mu.Unlock()
		}
	}
	return first
}

// Stats returns a snapshot.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

// Close frees every buffer, cached or handed out; later Puts are ignored
// (buffers returned by finalizers after the owner shut down) and Gets fail.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var all []*Buffer
	for _, l := range p.free {
		all = append(all, l...)
	}
	for b := range p.owned {
		all = append(all, b)
	}
	p.free, p.owned = map[int64][]*Buffer{}, map[*Buffer]bool{}
	p.st = Stats{Peak: p.st.Peak, Allocs: p.st.Allocs, Hits: p.st.Hits, DevicePeak: p.st.DevicePeak}
	p.mu.Unlock()
	var first error
	for _, b := range all {
		if err := p.dev.Free(b); err != nil && first == nil {
			first = err
		}
	}
	return first
}
