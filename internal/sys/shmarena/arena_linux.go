package shmarena

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

// Header page: magic, then the token peers check (little endian u64s).
const (
	headerMagic = 0x414e455241534843 // "CHSARENA"
	headerSize  = 1 << 16            // one page on every page size Linux uses
	// reserveStep is how far ahead of the highest block fallocate backs
	// the arena, so that growing by many small blocks costs few calls.
	reserveStep = 2 << 20
	// maxDefaultCapacity bounds the default capacity (the host's memory):
	// every peer maps the whole arena, so ranks x capacity of address
	// space per process.
	maxDefaultCapacity = 1 << 40
)

// block is a live allocation: the Go heap address its pages were replaced
// at, and where it lies in the arena.
type block struct {
	addr     uintptr
	off, len int64
}

// Arena is a shared memory file from which host tensors are allocated.
// Its methods are safe for concurrent use.
type Arena struct {
	fd       int
	capacity int64
	token    uint64
	page     int64

	mu       sync.Mutex
	al       *allocator
	reserved int64               // [0, reserved) is backed
	dirty    int64               // [0, dirty) may hold old data: zeroed on reuse
	blocks   []block             // live blocks, sorted by addr
	bases    map[uintptr]uintptr // Go allocation (finalizer's pointer) -> block addr
	stats    Stats
	closed   bool
}

// New creates an arena.
func New(cfg Config) (*Arena, error) {
	if unsafe.Sizeof(uintptr(0)) < 8 {
		return nil, fmt.Errorf("shmarena: needs a 64-bit address space")
	}
	capacity := cfg.Capacity
	if capacity <= 0 {
		var si syscall.Sysinfo_t
		if err := syscall.Sysinfo(&si); err != nil {
			return nil, fmt.Errorf("shmarena: sysinfo: %w", err)
		}
		capacity = min(int64(si.Totalram)*int64(si.Unit), maxDefaultCapacity)
	}
	capacity = alignUp(max(capacity, 2*reserveStep), reserveStep)
	name := cfg.Name
	if name == "" {
		name = "chorus-tensors"
	}
	fd, err := shmem.MemfdCreate(name)
	if err != nil {
		return nil, fmt.Errorf("shmarena: %w", err)
	}
	a := &Arena{fd: fd, capacity: capacity, page: int64(os.Getpagesize()), bases: map[uintptr]uintptr{}}
	fail := func(err error) (*Arena, error) {
		syscall.Close(fd)
		return nil, fmt.Errorf("shmarena: %w", err)
	}
	if err := syscall.Ftruncate(fd, capacity); err != nil {
		return fail(os.NewSyscallError("ftruncate", err))
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return fail(err)
	}
	a.token = binary.LittleEndian.Uint64(tok[:])
	// The header's page only; blocks reserve their room as they come.
	var hdr [16]byte
	binary.LittleEndian.PutUint64(hdr[0:], headerMagic)
	binary.LittleEndian.PutUint64(hdr[8:], a.token)
	if _, err := syscall.Pwrite(fd, hdr[:], 0); err != nil {
		return fail(os.NewSyscallError("pwrite", err))
	}
	a.al = newAllocator(alignUp(headerSize, a.page), capacity)
	a.dirty = a.al.top
	a.stats.Capacity = capacity
	return a, nil
}

// Identity says how a peer maps this arena.
func (a *Arena) Identity() Identity {
	return Identity{PID: os.Getpid(), FD: a.fd, Size: a.capacity, Token: a.token}
}

// Stats returns the arena's counters.
func (a *Arena) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.InUse, s.Reserved = a.al.inUse, a.reserved
	return s
}

// Close stops allocations and closes the file; live blocks stay valid
// (their mappings hold the file) and are freed by the collector as usual.
// Peers can no longer map the arena.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	return syscall.Close(a.fd)
}

// Alloc returns n zeroed bytes of the arena, page aligned, as Go memory:
// the block is freed once no slice of it is reachable.
func (a *Arena) Alloc(n int64) ([]byte, error) {
	if n <= 0 || n > a.capacity {
		return nil, fmt.Errorf("shmarena: allocation of %d bytes (capacity %d)", n, a.capacity)
	}
	size := alignUp(n, a.page)
	off, zero, err := a.carve(size)
	if err != nil {
		return nil, err
	}
	// A page-multiple allocation is page aligned on 4 KiB-page hosts (a
	// large object starts its own span; page-multiple size classes sit at
	// multiples of their size); with larger pages, the block is mapped at
	// the first page boundary of an allocation one page larger.
	raw := make([]byte, size)
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	if int64(addr)%a.page != 0 {
		raw = make([]byte, size+a.page)
		addr = uintptr(alignUp(int64(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))), a.page))
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	if err := mapFixed(addr, size, a.fd, off); err != nil {
		a.uncarve(off)
		return nil, err
	}
	b := raw[addr-base : int64(addr-base)+size]
	clear(b[:zero])
	a.mu.Lock()
	i := sort.Search(len(a.blocks), func(i int) bool { return a.blocks[i].addr > addr })
	a.blocks = append(a.blocks, block{})
	copy(a.blocks[i+1:], a.blocks[i:])
	a.blocks[i] = block{addr: addr, off: off, len: size}
	a.bases[base] = addr
	a.stats.Allocs++
	a.stats.Peak = max(a.stats.Peak, a.al.inUse)
	a.mu.Unlock()
	runtime.SetFinalizer(&raw[0], a.release)
	// b points into raw's allocation, so it keeps raw (and the block)
	// alive like any slice of it.
	return b[:n:n], nil
}

// carve takes a block of size bytes, backs it, and says how many of its
// leading bytes may hold old data.
func (a *Arena) carve(size int64) (off, zero int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, 0, errors.New("shmarena: arena closed")
	}
	off, err = a.al.alloc(size, a.page)
	if err != nil {
		return 0, 0, err
	}
	if end := off + size; end > a.reserved {
		to := min(a.capacity, alignUp(end, reserveStep))
		if err := syscall.Fallocate(a.fd, 0, a.reserved, to-a.reserved); err != nil {
			a.al.freeBlock(off)
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENOMEM) {
				return 0, 0, fmt.Errorf("%w: backing %d bytes: %w", ErrExhausted, to-a.reserved, err)
			}
			return 0, 0, os.NewSyscallError("fallocate", err)
		}
		a.reserved = to
	}
	zero = max(0, min(size, a.dirty-off))
	a.dirty = max(a.dirty, off+size)
	return off, zero, nil
}

func (a *Arena) uncarve(off int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.al.freeBlock(off)
}

// release is the finalizer of a block's Go allocation: private pages back
// at its address, then the block is free.
func (a *Arena) release(p *byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	base := uintptr(unsafe.Pointer(p))
	addr, ok := a.bases[base]
	if !ok {
		return // not ours (cannot happen)
	}
	delete(a.bases, base)
	i := sort.Search(len(a.blocks), func(i int) bool { return a.blocks[i].addr >= addr })
	if i == len(a.blocks) || a.blocks[i].addr != addr {
		return // not ours (cannot happen)
	}
	b := a.blocks[i]
	a.blocks = append(a.blocks[:i], a.blocks[i+1:]...)
	if err := mapAnon(addr, b.len); err != nil {
		// The Go range still shows the block: keep both for good.
		a.stats.Stuck++
		return
	}
	a.al.freeBlock(b.off)
	a.stats.Frees++
	a.trim()
}

// trimMin is the least free room above the highest live block that trim
// gives back to the kernel.
const trimMin = 256 << 20

// trim gives the pages above the highest live block back to the kernel
// when they are many, both against trimMin and against what is in use:
// a worker that once held a huge tensor does not keep its memory for
// good, while the steady churn of a loop (free, allocate the same sizes
// again) never punches holes that peers would fault in again. Pages
// below the highest live block stay (holes there would need backing
// bookkeeping per range; they are reused first anyway).
func (a *Arena) trim() {
	keep := alignUp(a.al.top, reserveStep)
	if a.closed || a.reserved-keep <= max(trimMin, a.al.inUse) {
		return
	}
	const punch = 0x01 | 0x02 // FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
	if err := syscall.Fallocate(a.fd, punch, keep, a.reserved-keep); err != nil {
		return // the pages stay backed: still correct, and reused later
	}
	a.reserved = keep
	a.dirty = min(a.dirty, keep)
	a.stats.Trims++
}

// Locate says where p lies in the arena: its offset, if p is inside one
// live block.
func (a *Arena) Locate(p []byte) (int64, bool) {
	if len(p) == 0 {
		return 0, false
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.blocks), func(i int) bool { return a.blocks[i].addr > addr }) - 1
	if i < 0 {
		return 0, false
	}
	b := a.blocks[i]
	rel := int64(addr - b.addr)
	if rel+int64(len(p)) > b.len {
		return 0, false
	}
	return b.off + rel, true
}

func mapFixed(addr uintptr, size int64, fd int, off int64) error {
	r, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(size), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_SHARED|syscall.MAP_FIXED|syscall.MAP_POPULATE, uintptr(fd), uintptr(off))
	if errno != 0 {
		return fmt.Errorf("shmarena: mapping a block: %w", os.NewSyscallError("mmap", errno))
	}
	if r != addr {
		return fmt.Errorf("shmarena: mmap MAP_FIXED returned %#x, not %#x", r, addr)
	}
	return nil
}

func mapAnon(addr uintptr, size int64) error {
	r, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(size), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_FIXED, ^uintptr(0), 0)
	if errno != 0 {
		return os.NewSyscallError("mmap", errno)
	}
	if r != addr {
		return fmt.Errorf("mmap MAP_FIXED returned %#x, not %#x", r, addr)
	}
	return nil
}
