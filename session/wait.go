package session

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

// How a waiting goroutine of a threaded session (a worker waiting for its
// next command, the controller waiting for a reply) spends the time before
// it parks. Parking is cheap; being woken is not: the waker's channel send
// readies the goroutine on the waker's own P, and running it elsewhere
// needs an idle P's OS thread woken through the kernel (several
// microseconds, tens in a VM). A broadcast to N parked workers pays that N
// times, one after another, which is what made 8 workers cost 37.7 us on a
// 16-core host. So a waiter first polls, in one of two ways:
//
//   - busy: when every goroutine of the session has a P of its own
//     (workers + 1 <= GOMAXPROCS), poll the published counter with PAUSE
//     between loads, without entering the scheduler, for an adaptive
//     budget in [minBusySpin, maxBusySpin]: it doubles when polling
//     succeeds and halves when the waiter had to park, so a worker whose
//     controller issues a command every few microseconds never parks,
//     while one whose controller computes for milliseconds burns little.
//   - yield: when the session's goroutines outnumber the Ps, a busy poller
//     would hold a P that the goroutine it waits for needs (until the
//     budget expires or sysmon preempts it after 10 ms), so poll a few
//     times with runtime.Gosched in between (workerYields, controllerYields:
//     tuned on a 2-core machine), then park.
//
// runtime.Gosched is not used in busy mode: it goes through the global run
// queue under the scheduler's lock, which with many Ps and many pollers is
// contended and makes goroutines hop between threads.
type waitPolicy struct {
	busy             bool
	minSpin, maxSpin time.Duration // busy mode
	workerYields     int           // yield mode
	controllerYields int           // yield mode
}

const (
	minBusySpin = 2 * time.Microsecond
	maxBusySpin = 50 * time.Microsecond
	// busyFastPolls is how many polls a busy waiter makes before it first
	// reads the clock (a few hundred nanoseconds).
	busyFastPolls = 128
	// pauseCycles is the PAUSE count between two polls.
	pauseCycles = 4
)

// EnvSessionWait overrides the threaded session's wait policy: "busy",
// "yield" or "park" (no polling at all); unset or "auto" picks by
// GOMAXPROCS and the worker count.
const EnvSessionWait = "CHORUS_SESSION_WAIT"

// waitPolicyFor picks the policy for a session of workers goroutines on a
// runtime with procs Ps (GOMAXPROCS). mode is EnvSessionWait's value.
func waitPolicyFor(workers, procs int, mode string) (waitPolicy, error) {
	busy := waitPolicy{busy: true, minSpin: minBusySpin, maxSpin: maxBusySpin}
	yield := waitPolicy{workerYields: 8, controllerYields: 64}
	switch mode {
	case "", "auto":
		if workers+1 <= procs {
			return busy, nil
		}
		return yield, nil
	case "busy":
		return busy, nil
	case "yield":
		return yield, nil
	case "park":
		return waitPolicy{}, nil
	}
	return waitPolicy{}, fmt.Errorf("session: %s=%q: want auto, busy, yield or park", EnvSessionWait, mode)
}

// sessionWaitPolicy is waitPolicyFor for this process.
func sessionWaitPolicy(workers int) (waitPolicy, error) {
	return waitPolicyFor(workers, runtime.GOMAXPROCS(0), os.Getenv(EnvSessionWait))
}

func (p waitPolicy) String() string {
	switch {
	case p.busy:
		return fmt.Sprintf("busy polling up to %v", p.maxSpin)
	case p.workerYields > 0 || p.controllerYields > 0:
		return fmt.Sprintf("yield polling (%d/%d yields)", p.workerYields, p.controllerYields)
	}
	return "park at once"
}
