package transport

import (
	"syscall"
	"unsafe"
)

// Pending reports whether a frame has begun to arrive: part of one is
// already read, or the descriptor is readable now (ppoll with a zero
// timeout). Streams without a descriptor report false.
func (s *Stream) Pending() bool {
	if s.nhdr > 0 || s.inBody {
		return true
	}
	sc, ok := s.rwc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	_ = rc.Control(func(fd uintptr) {
		type pollFd struct {
			fd             int32
			events, revent int16
		}
		const pollIn = 0x1
		p := pollFd{fd: int32(fd), events: pollIn}
		var ts syscall.Timespec
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		ready = errno == 0 && n == 1 && p.revent&pollIn != 0
	})
	return ready
}

var _ Poller = (*Stream)(nil)
