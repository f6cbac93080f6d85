package shm

import (
	"syscall"
	"time"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

const (
	fAddSeals   = 1033 // F_LINUX_SPECIFIC_BASE + 9
	fGetSeals   = 1034
	fSealSeal   = 0x1
	fSealShrink = 0x2
	fSealGrow   = 0x4
)

func memfdCreate(name string) (int, error)    { return shmem.MemfdCreate(name) }
func fcntl(fd int, cmd, arg int) (int, error) { return shmem.Fcntl(fd, cmd, arg) }

func futexWait(addr *uint32, val uint32, d time.Duration) syscall.Errno {
	return shmem.FutexWait(addr, val, d)
}

// waitSleep is Conn.wait's sleep (a test records the slices).
var waitSleep = futexWait

func futexWake(addr *uint32) { shmem.FutexWake(addr) }

func schedYield() { shmem.Yield() }
