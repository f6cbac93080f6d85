package device

import (
	"fmt"
	"sync"
)

// Fake is a Device backed by host memory. Addresses are synthetic and
// never reused, so use-after-free is caught.
type Fake struct {
	mu       sync.Mutex
	ordinal  int
	capacity int64
	used     int64
	next     uint64
	mem      map[uint64][]byte
	closed   bool
}

// NewFake makes a fake device with capacity bytes of memory.
func NewFake(ordinal int, capacity int64) *Fake {
	return &Fake{ordinal: ordinal, capacity: capacity, next: 1 << 32, mem: map[uint64][]byte{}}
}

var _ Device = (*Fake)(nil)

func (f *Fake) Ordinal() int { return f.ordinal }

func (f *Fake) Alloc(n int64) (*Buffer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if n < 0 || n > f.capacity-f.used {
		return nil, fmt.Errorf("device %d: out of memory allocating %d bytes (%d of %d in use)", f.ordinal, n, f.used, f.capacity)
	}
	p := f.next
	f.next += uint64(n+255) &^ 255
	f.next += 256
	f.mem[p] = make([]byte, n)
	f.used += n
	return &Buffer{ptr: p, size: n, dev: f.ordinal}, nil
}

func (f *Fake) lookup(op string, b *Buffer, off, n int64) ([]byte, error) {
	if f.closed {
		return nil, ErrClosed
	}
	if err := checkRange(op, b, off, n, f.ordinal); err != nil {
		return nil, err
	}
	m, ok := f.mem[b.ptr]
	if !ok {
		return nil, fmt.Errorf("device %d: %s: buffer %#x was freed", f.ordinal, op, b.ptr)
	}
	return m[off : off+n], nil
}

func (f *Fake) Free(b *Buffer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.lookup("Free", b, 0, 0); err != nil {
		return err
	}
	delete(f.mem, b.ptr)
	f.used -= b.size
	return nil
}

func (f *Fake) CopyIn(b *Buffer, off int64, src []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.lookup("CopyIn", b, off, int64(len(src)))
	if err == nil {
		copy(m, src)
	}
	return err
}

func (f *Fake) CopyOut(dst []byte, b *Buffer, off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.lookup("CopyOut", b, off, int64(len(dst)))
	if err == nil {
		copy(dst, m)
	}
	return err
}

func (f *Fake) Copy(dst *Buffer, doff int64, src *Buffer, soff int64, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.lookup("Copy", dst, doff, n)
	if err != nil {
		return err
	}
	s, err := f.lookup("Copy", src, soff, n)
	if err != nil {
		return err
	}
	copy(d, s)
	return nil
}

func (f *Fake) Memset(b *Buffer, off int64, v byte, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.lookup("Memset", b, off, n)
	if err == nil {
		for i := range m {
			m[i] = v
		}
	}
	return err
}

func (f *Fake) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	return nil
}

func (f *Fake) MemInfo() (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity - f.used, f.capacity, nil
}

// Close frees everything; later calls fail with ErrClosed.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.mem = nil
	return nil
}
