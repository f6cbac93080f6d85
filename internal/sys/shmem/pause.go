package shmem

import (
	"runtime"
	"sync"
	"time"
	_ "unsafe" // go:linkname
)

// Pause spins the CPU for about cycles short delays (PAUSE on amd64, YIELD
// on arm64) without giving up the thread: the polite way to busy-poll a
// word another core is about to write, which also leaves a hyper-thread
// sibling its share of the core.
func Pause(cycles uint32) { procyield(cycles) }

// procyield is the runtime's own spin-wait primitive (sync.Mutex spins
// with it); it is kept reachable by go:linkname on purpose (see the
// comment on it in runtime/stubs.go).
//
//go:linkname procyield runtime.procyield
func procyield(cycles uint32)

// TargetPollTime is the time between two polls of a busy waiter that
// PollPauses aims at: the delay it adds to noticing a new value, against
// the load it puts on the shared line and on a hyper-thread sibling.
const TargetPollTime = 50 * time.Nanosecond

var (
	pauseOnce    sync.Once
	pausesInPoll uint32
)

// PollPauses is the number of PAUSEs (Pause(1) calls' worth) that take
// about TargetPollTime, measured once per process: a PAUSE takes about 10
// cycles on older Intel cores, 140 on Skylake and later, 65 on recent AMD
// cores, so a fixed count gives poll intervals 14x apart.
func PollPauses() uint32 {
	pauseOnce.Do(func() {
		const n = 2000
		best := time.Duration(1 << 62)
		for range 3 {
			t0 := time.Now()
			for range n {
				Pause(1)
			}
			best = min(best, time.Since(t0))
		}
		pausesInPoll = PausesFor(best / n)
	})
	return pausesInPoll
}

// PausesFor is the PAUSE count per poll for a PAUSE that takes per
// (between 1 and 16).
func PausesFor(per time.Duration) uint32 {
	if per <= 0 {
		return 16
	}
	return uint32(min(16, max(1, (TargetPollTime+per/2)/per)))
}

// RelaxPauses is the argument of Relax for a process in which waiters
// goroutines may poll at the same time: PollPauses when each of them can
// hold a P of its own (waiters < GOMAXPROCS, leaving one for the rest of
// the program), 0 otherwise. Read it once, when the waiter is set up:
// runtime.GOMAXPROCS takes the scheduler's lock.
func RelaxPauses(waiters int) uint32 {
	if waiters < runtime.GOMAXPROCS(0) {
		return PollPauses()
	}
	return 0
}

// Relax is what a busy waiter does between two polls: PAUSE for about
// TargetPollTime when pauses > 0, else runtime.Gosched, which lets the
// goroutine being waited for run on this P. Gosched is not used when Ps
// are to spare because it calls the runtime's wakep: every poll then
// woke an idle P's thread to look for work, so each polling process kept
// a second core busy, and with 8 polling processes on 16 cores those
// threads took the cores the peers needed.
func Relax(pauses uint32) {
	if pauses > 0 {
		Pause(pauses)
		return
	}
	runtime.Gosched()
}

// GracePolls is how many polls (about 2 us) Grace makes.
const GracePolls = 40

// Grace polls ready GracePolls times, PollPauses apart, and reports
// whether it became true. A waiter calls it after announcing that it
// will sleep and finding nothing, before it sleeps: a publisher that
// does not fence between its plain store and its look at the
// announcement may have looked before the announcement was visible,
// while its store was still in its store buffer; a store leaves the
// buffer within a few hundred nanoseconds, so the waiter finds it here
// instead of sleeping until a timeout ends.
func Grace(ready func() bool) bool {
	pc := PollPauses()
	for range GracePolls {
		Pause(pc)
		if ready() {
			return true
		}
	}
	return false
}
