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
	// rec holds the Copy and Memset calls recorded since BeginCapture
	// (nil: not capturing).
	rec []func() error
	// pending holds the CopyInAsync copies not yet done: they run at the
	// next call that orders after them (Sync, copies, Memset, Free...),
	// reading the pinned buffer then, so a caller that writes a pinned
	// buffer before Sync sees its data corrupted, as on a GPU.
	pending []func() error
	pinned  map[*PinnedBuffer]bool
}

// NewFake makes a fake device with capacity bytes of memory.
func NewFake(ordinal int, capacity int64) *Fake {
	return &Fake{ordinal: ordinal, capacity: capacity, next: 1 << 32, mem: map[uint64][]byte{}, pinned: map[*PinnedBuffer]bool{}}
}

var (
	_ Capturer = (*Fake)(nil)
	_ Stager   = (*Fake)(nil)
)

// flush runs the queued asynchronous copies (the stream reaching them).
func (f *Fake) flush() error {
	var first error
	for _, op := range f.pending {
		if err := op(); err != nil && first == nil {
			first = err
		}
	}
	f.pending = nil
	return first
}

// AllocPinned returns n bytes of (ordinary) host memory posing as pinned.
func (f *Fake) AllocPinned(n int64) (*PinnedBuffer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if n < 0 {
		return nil, fmt.Errorf("device %d: AllocPinned: negative size %d", f.ordinal, n)
	}
	p := &PinnedBuffer{b: make([]byte, n), dev: f.ordinal}
	f.pinned[p] = true
	return p, nil
}

func (f *Fake) FreePinned(p *PinnedBuffer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := checkPinned("FreePinned", p, 0, 0, f.ordinal); err != nil {
		return err
	}
	err := f.flush()
	p.freed = true
	delete(f.pinned, p)
	return err
}

// PinnedInUse counts pinned buffers not freed (tests check for leaks).
func (f *Fake) PinnedInUse() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pinned)
}

func (f *Fake) CopyInAsync(dst *Buffer, doff int64, src *PinnedBuffer, soff, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rec != nil {
		return fmt.Errorf("CopyInAsync: %w", ErrCapturing)
	}
	if err := checkPinned("CopyInAsync", src, soff, n, f.ordinal); err != nil {
		return err
	}
	if _, err := f.lookup("CopyInAsync", dst, doff, n); err != nil {
		return err
	}
	f.pending = append(f.pending, func() error {
		if src.freed {
			return fmt.Errorf("device %d: CopyInAsync: %w before the copy ran", f.ordinal, ErrPinnedFreed)
		}
		m, err := f.lookup("CopyInAsync", dst, doff, n)
		if err == nil {
			copy(m, src.b[soff:soff+n])
		}
		return err
	})
	return nil
}

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
	if err := f.flush(); err != nil {
		return err
	}
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
	if f.rec != nil {
		return fmt.Errorf("CopyIn: %w", ErrCapturing)
	}
	if err := f.flush(); err != nil {
		return err
	}
	m, err := f.lookup("CopyIn", b, off, int64(len(src)))
	if err == nil {
		copy(m, src)
	}
	return err
}

func (f *Fake) CopyOut(dst []byte, b *Buffer, off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rec != nil {
		return fmt.Errorf("CopyOut: %w", ErrCapturing)
	}
	if err := f.flush(); err != nil {
		return err
	}
	m, err := f.lookup("CopyOut", b, off, int64(len(dst)))
	if err == nil {
		copy(dst, m)
	}
	return err
}

func (f *Fake) Copy(dst *Buffer, doff int64, src *Buffer, soff int64, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record(func() error { return f.copy(dst, doff, src, soff, n) })
}

// record runs op now, or appends it to the capture (after checking it
// would run now, so a bad call fails at capture time as on CUDA).
func (f *Fake) record(op func() error) error {
	if err := f.flush(); err != nil {
		return err
	}
	if f.rec == nil {
		return op()
	}
	if err := f.dryRun(op); err != nil {
		return err
	}
	f.rec = append(f.rec, op)
	return nil
}

// dryRun checks op's ranges without touching memory: every buffer is
// swapped for a scratch copy while op runs.
func (f *Fake) dryRun(op func() error) error {
	saved := f.mem
	f.mem = make(map[uint64][]byte, len(saved))
	for k, v := range saved {
		f.mem[k] = make([]byte, len(v))
	}
	err := op()
	f.mem = saved
	return err
}

func (f *Fake) copy(dst *Buffer, doff int64, src *Buffer, soff int64, n int64) error {
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
	return f.record(func() error {
		m, err := f.lookup("Memset", b, off, n)
		if err == nil {
			for i := range m {
				m[i] = v
			}
		}
		return err
	})
}

func (f *Fake) BeginCapture() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if f.rec != nil {
		return fmt.Errorf("BeginCapture: already capturing: %w", ErrNotCapturing)
	}
	if err := f.flush(); err != nil {
		return err
	}
	f.rec = []func() error{}
	return nil
}

func (f *Fake) Capturing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec != nil
}

func (f *Fake) EndCapture() (Graph, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rec == nil {
		return nil, fmt.Errorf("EndCapture: %w", ErrNotCapturing)
	}
	g := &fakeGraph{f: f, ops: f.rec}
	f.rec = nil
	return g, nil
}

// fakeGraph replays the recorded calls in order; a buffer freed since
// the capture fails the replay, as it would corrupt memory on a GPU.
type fakeGraph struct {
	f   *Fake
	ops []func() error
}

func (g *fakeGraph) Launch() error {
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	if g.ops == nil {
		return fmt.Errorf("graph launch: %w", ErrClosed)
	}
	return g.f.record(func() error {
		for _, op := range g.ops {
			if err := op(); err != nil {
				return fmt.Errorf("graph replay: %w", err)
			}
		}
		return nil
	})
}

func (g *fakeGraph) Close() error {
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	g.ops = nil
	return nil
}

func (f *Fake) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if f.rec != nil {
		return fmt.Errorf("Sync: %w", ErrCapturing)
	}
	return f.flush()
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
	f.flush()
	f.closed = true
	f.mem = nil
	f.pinned = nil
	return nil
}
