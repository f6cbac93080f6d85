//go:build !linux

package session

import (
	"sync/atomic"
	"time"
)

// haveFutex: without futexes every policy parks on channels.
const haveFutex = false

const futexSafety = 100 * time.Millisecond

const firstSleep = 50 * time.Microsecond

func futexWait(*atomic.Uint32, uint32, time.Duration) {
	panic("session: futexWait without futexes") // unreachable: mlog.futex is false
}

func futexWake(*atomic.Uint32) {
	panic("session: futexWake without futexes") // unreachable: mlog.futex is false
}
