package shmem

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

const (
	mfdCloexec      = 0x1
	mfdAllowSealing = 0x2

	futexWaitOp  = 0 // FUTEX_WAIT, shared (no FUTEX_PRIVATE_FLAG)
	futexWakeOp  = 1 // FUTEX_WAKE, shared
	futexWakeAll = 1 << 30
)

// MemfdCreate creates an anonymous, sealable, close-on-exec memory file.
func MemfdCreate(name string) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(p)), mfdCloexec|mfdAllowSealing, 0)
	if errno != 0 {
		return -1, os.NewSyscallError("memfd_create", errno)
	}
	return int(fd), nil
}

// Map maps size bytes of fd shared, readable and writable.
func Map(fd int, size int) ([]byte, error) {
	m, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return m, nil
}

// Unmap releases a mapping made by Map.
func Unmap(m []byte) error { return syscall.Munmap(m) }

// Fcntl is fcntl(2) with an integer argument.
func Fcntl(fd int, cmd, arg int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if errno != 0 {
		return -1, os.NewSyscallError("fcntl", errno)
	}
	return int(r), nil
}

// FutexWait sleeps while *addr == val, for at most d. Every outcome (woken,
// value already changed, timeout, signal) is reported as a plain return: the
// caller re-checks its condition.
//
// The sleep is announced to the Go scheduler as blocking (as the runtime
// does for its own futex sleeps), so the thread's P is handed off at once.
// With a plain syscall.Syscall6 the P would stay attached to the sleeping
// thread until sysmon retakes it (20 us to 10 ms), starving this process's
// other goroutines meanwhile, which on a machine with few cores is exactly
// the situation of a controller with several sessions asleep at once.
// addr must not move: a mapping, or a Go heap object (which never moves).
func FutexWait(addr *uint32, val uint32, d time.Duration) syscall.Errno {
	ts := syscall.NsecToTimespec(int64(d))
	return futexWaitBlocking(addr, val, &ts)
}

// futexWaitBlocking calls only nosplit functions between entersyscallblock
// and exitsyscall; ts does not move while the goroutine is in a system call.
//
//go:nosplit
//go:norace
func futexWaitBlocking(addr *uint32, val uint32, ts *syscall.Timespec) syscall.Errno {
	entersyscallblock()
	_, _, e := syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
	exitsyscall()
	return e
}

// These runtime functions are the ones package syscall and the runtime's
// own blocking sleeps use; they are kept reachable by go:linkname on
// purpose (see the comments on them in runtime/proc.go).
//
//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// FutexWake wakes every waiter sleeping on addr, in any process.
func FutexWake(addr *uint32) {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, futexWakeAll, 0, 0, 0)
}

// Yield gives the CPU to another runnable thread, if any (sched_yield).
func Yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
