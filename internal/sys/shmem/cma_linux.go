package shmem

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

type iovec struct {
	base unsafe.Pointer
	len  uintptr
}

type remoteIovec struct {
	base uintptr
	len  uintptr
}

// ReadProcess copies len(dst) bytes at address addr of process pid into
// dst with one process_vm_readv (a single kernel copy, no staging), the
// way Open MPI's CMA transport does. It fails, and never returns a short
// count as success, if the kernel copied less (a fault in the remote
// range, an exited process). The caller needs ptrace access to pid (same
// user, and Yama's ptrace_scope permitting).
func ReadProcess(pid int, dst []byte, addr uintptr) error {
	for len(dst) > 0 {
		local := iovec{base: unsafe.Pointer(&dst[0]), len: uintptr(len(dst))}
		remote := remoteIovec{base: addr, len: uintptr(len(dst))}
		n, _, errno := syscall.Syscall6(sysProcessVMReadv, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
		if errno != 0 {
			return os.NewSyscallError("process_vm_readv", errno)
		}
		if n == 0 {
			return fmt.Errorf("process_vm_readv: pid %d: copied nothing of %d bytes at %#x", pid, len(dst), addr)
		}
		// A partial copy ends at a page that could not be read; the
		// retry reports why.
		dst = dst[n:]
		addr += n
	}
	return nil
}
