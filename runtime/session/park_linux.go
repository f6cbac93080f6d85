package session

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

// haveFutex: busy-policy waiters park in the kernel (mlog.parkFutex).
const haveFutex = true

// futexSafety bounds one futex sleep; every wake-up is explicit, this
// only limits what a lost one could cost.
const futexSafety = 100 * time.Millisecond

// firstSleep bounds a consumer's first futex sleep after it counted
// itself among the sleepers (parkFutex says why).
const firstSleep = 50 * time.Microsecond

// futexWait sleeps while w holds val, for at most d. atomic.Uint32 is a
// plain uint32 in memory; a heap object never moves.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	shmem.FutexWait((*uint32)(unsafe.Pointer(w)), val, d)
}

// futexWake wakes every thread sleeping on w.
func futexWake(w *atomic.Uint32) { shmem.FutexWake((*uint32)(unsafe.Pointer(w))) }
