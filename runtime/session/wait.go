package session

import (
	"fmt"
	"runtime"
	"time"

	"github.com/chorus-rt/chorus/internal/config"
)

// How a waiting goroutine of a threaded session (a worker waiting for its
// next command, the controller waiting for a reply) spends the time before
// it parks, and how it parks. Being woken is what costs: several
// microseconds for a thread on another core, tens in a VM.
//
//   - busy: when every goroutine of the session has a P of its own
//     (workers + 1 <= GOMAXPROCS), poll the published counter with PAUSE
//     between loads (shmem.PollPauses, about shmem.TargetPollTime), without entering
//     the scheduler, for an adaptive budget in [minBusySpin, maxBusySpin]
//     (nextBudget: twice the last wait if polling that long would have
//     covered it, half the budget after a longer wait). Then park in the
//     kernel (mlog.parkFutex, Linux): the producer's FUTEX_WAKE wakes the
//     thread directly and it takes an idle P, which the policy
//     guarantees; a channel wake-up would leave the woken goroutine in the
//     polling producer's runnext slot for 3-60 us (see parkFutex).
//   - yield: when the session's goroutines outnumber the Ps, a busy poller
//     would hold a P that the goroutine it waits for needs (until the
//     budget expires or sysmon preempts it after 10 ms), so poll a few
//     times with runtime.Gosched in between (workerYields, controllerYields:
//     tuned on a 2-core machine), then park on a channel: the waker's P
//     runs the woken goroutine as soon as the waker yields or parks.
//   - park: no polling, channel parking (CHORUS_SESSION_WAIT=park).
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
	// busyClockEvery is how many polls a busy waiter makes between two
	// reads of the clock (a poll is shmem.PollPauses PAUSEs, about
	// shmem.TargetPollTime).
	busyClockEvery = 16
)

// nextBudget is a busy waiter's next polling budget after a wait of
// waited (polling, and parking if the budget ran out). A wait that
// polling the maximum budget would have covered raises the budget to
// twice that wait, so one slow round (a park, a wake-up, a preempted
// thread) does not leave the waiter parking from then on: halving on
// every park, as the first version did, kept an 8-worker session in a
// state where every round parked, every round therefore took longer than
// any budget, and every budget stayed at its minimum. A longer wait
// (the controller computes between commands) halves the budget: an idle
// session burns little.
func nextBudget(p waitPolicy, budget, waited time.Duration) time.Duration {
	if waited > p.maxSpin {
		return max(p.minSpin, budget/2)
	}
	return min(p.maxSpin, max(budget, 2*waited, p.minSpin))
}

// EnvSessionWait is the default of Options.Wait: the threaded session's
// wait policy, "busy", "yield" or "park" (no polling at all); unset or
// "auto" picks by GOMAXPROCS and the worker count.
const EnvSessionWait = "CHORUS_SESSION_WAIT"

// waitPolicyFor picks the policy for a session of workers goroutines on a
// runtime with procs Ps (GOMAXPROCS). mode is Options.Wait, or else
// EnvSessionWait's value.
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
	return waitPolicy{}, fmt.Errorf("session: wait policy %q (Options.Wait or %s): want auto, busy, yield or park", mode, EnvSessionWait)
}

// sessionWaitPolicy is waitPolicyFor for this process: mode, or else
// the environment's.
func sessionWaitPolicy(workers int, mode string) (waitPolicy, error) {
	if mode == "" {
		mode = config.Process().Get(config.SessionWait)
	}
	return waitPolicyFor(workers, runtime.GOMAXPROCS(0), mode)
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
