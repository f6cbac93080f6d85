//go:build race

package shm

import (
	"runtime"
	"sync"
	"unsafe"
)

// The race detector does not see the synchronization done through atomics
// on the mmap'd segment (it ignores memory outside the Go heap), so two ends
// in one process would look unsynchronized to it. In race builds each ring
// therefore gets a heap word, shared by all ends in this process that map
// the same segment (keyed by the segment id): publishing releases it,
// observing new data acquires it.

type raceSync struct {
	words [2]uint64
	refs  int
}

var (
	raceMu  sync.Mutex
	raceReg = map[uint64]*raceSync{}
)

func raceAttach(id uint64) *raceSync {
	raceMu.Lock()
	defer raceMu.Unlock()
	s := raceReg[id]
	if s == nil {
		s = new(raceSync)
		raceReg[id] = s
	}
	s.refs++
	return s
}

func raceDetach(id uint64, s *raceSync) {
	raceMu.Lock()
	defer raceMu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(raceReg, id)
	}
}

func (s *raceSync) release(ring int) { runtime.RaceReleaseMerge(unsafe.Pointer(&s.words[ring])) }
func (s *raceSync) acquire(ring int) { runtime.RaceAcquire(unsafe.Pointer(&s.words[ring])) }
