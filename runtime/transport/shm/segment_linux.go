package shm

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chorus-rt/chorus/runtime/transport"
)

// newSegment makes a memfd of size bytes, seals its size (so that no one
// can shrink the file under a mapping: accesses past its end would
// fault) and maps it shared. The caller owns both.
func newSegment(name string, size uint64) (m []byte, f *os.File, err error) {
	fd, err := memfdCreate(name)
	if err != nil {
		return nil, nil, err
	}
	f = os.NewFile(uintptr(fd), name)
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := syscall.Ftruncate(fd, int64(size)); err != nil {
		return nil, nil, os.NewSyscallError("ftruncate", err)
	}
	if _, err := fcntl(fd, fAddSeals, fSealShrink|fSealGrow|fSealSeal); err != nil {
		return nil, nil, err
	}
	m, err = syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, os.NewSyscallError("mmap", err)
	}
	return m, f, nil
}

// readSegment checks that f is a memfd whose size is sealed and at least
// minSize bytes, and reads its first len(h) bytes into h (a header, to be
// validated before anything is mapped). It returns the file's size; what
// names the kind of segment in errors.
func readSegment(f *os.File, h []byte, minSize int64, what string) (int64, error) {
	fd := int(f.Fd())
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	seals, err := fcntl(fd, fGetSeals, 0)
	if err != nil {
		return 0, fmt.Errorf("shm: not a shared-memory %s: %w", what, err)
	}
	if seals&(fSealShrink|fSealGrow) != fSealShrink|fSealGrow {
		return 0, fmt.Errorf("shm: %s size is not sealed", what)
	}
	if st.Size < minSize {
		return 0, fmt.Errorf("shm: %s too small (%d bytes)", what, st.Size)
	}
	if n, err := syscall.Pread(fd, h, 0); err != nil || n != len(h) {
		return 0, fmt.Errorf("shm: reading %s header: n=%d: %v", what, n, err)
	}
	return st.Size, nil
}

// mapSegment maps size bytes of f shared.
func mapSegment(f *os.File, size uint64) ([]byte, error) {
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return m, nil
}

// life is what an end of a segment (Conn, LogWriter, LogReader) shares
// between its goroutines: whether Close has begun, the calls of other
// goroutines in flight (Abort, wake-ups), which Close waits for before
// it unmaps, and why Abort stopped it.
type life struct {
	otherCalls guard
	closed     atomic.Bool
	abortErr   atomic.Pointer[error]
}

// enter registers a call in flight; it fails once Close has begun.
func (l *life) enter(g *guard) bool {
	g.n.Add(1)
	if l.closed.Load() {
		g.n.Add(-1)
		return false
	}
	return true
}

// wakeWord bumps one futex word of the segment unless Close has begun.
func (l *life) wakeWord(seq *uint32) {
	if !l.enter(&l.otherCalls) {
		return
	}
	bump(seq)
	l.otherCalls.n.Add(-1)
}

// abort records err (wrapped with transport.ErrPeerGone; what says what
// was aborted when err is nil) as the reason every later call fails. It
// reports false if Close has begun or an earlier Abort won; otherwise the
// caller, inside the otherCalls guard until it calls the returned func,
// marks the segment and wakes the waiters.
func (l *life) abort(err error, what string) (first bool, leave func()) {
	if !l.enter(&l.otherCalls) {
		return false, nil
	}
	var e error
	if err == nil {
		e = fmt.Errorf("%w: %s aborted", transport.ErrPeerGone, what)
	} else {
		e = fmt.Errorf("%w: %w", transport.ErrPeerGone, err)
	}
	if !l.abortErr.CompareAndSwap(nil, &e) {
		l.otherCalls.n.Add(-1)
		return false, nil
	}
	return true, func() { l.otherCalls.n.Add(-1) }
}

// drain waits until no call of gs (and no other call) is in flight; Close
// has begun, so no new one enters.
func (l *life) drain(gs ...*guard) {
	for busy := true; busy; {
		busy = l.otherCalls.n.Load() != 0
		for _, g := range gs {
			busy = busy || g.n.Load() != 0
		}
		if busy {
			time.Sleep(20 * time.Microsecond)
		}
	}
}
