package session

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/transport/shm"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// Worker counts a session accepts, per kind; a larger NumWorkers is
// refused before anything starts (ErrTooManyWorkers).
const (
	// MaxProcessWorkers bounds the worker processes of a process session
	// (and of one host of a multi-host session): the shared-memory
	// command log has at most shm.MaxLogConsumers readers. The stream
	// transport has the same bound, so that what a session may hold does
	// not depend on its transport.
	MaxProcessWorkers = shm.MaxLogConsumers
	// MaxThreadedWorkers bounds the goroutine workers of a threaded
	// session. Every command visits every worker and each costs about
	// 40 KB: 4096 workers took 165 MB and 13 ms per call and sync,
	// 16384 took 660 MB and 65 ms (2-core machine); 100000 accepted
	// printed one line every 0.4 s.
	MaxThreadedWorkers = 4096
)

// ErrTooManyWorkers: NumWorkers is above the session kind's maximum.
var ErrTooManyWorkers = errors.New("too many workers")

// ErrInsideWorker: a process session was asked for by a process that
// is itself a worker of one. Its program did not call worker.Main first
// in main, so the re-executed worker ran main again; each worker would
// start workers of its own, without end.
var ErrInsideWorker = errors.New("a worker process started a process session: the program does not call worker.Main() first in main")

// checkMax refuses a worker count above kind's maximum.
func checkMax(kind string, n int) error {
	limit := MaxThreadedWorkers
	if kind == "process" {
		limit = MaxProcessWorkers
	}
	if n > limit {
		return fmt.Errorf("session: num_workers %d: %w for a %s session (at most %d)", n, ErrTooManyWorkers, kind, limit)
	}
	return nil
}

// refuseInsideWorker fails when this process is a worker of a process
// session (worker.EnvSpec is set): starting another session here is a
// program that forgot worker.Main, and would multiply processes.
func refuseInsideWorker() error {
	if !worker.IsWorkerProcess() {
		return nil
	}
	return fmt.Errorf("session: %w (%s=%q is set: this process was started as a worker); call worker.Main() before anything else in main (or TestMain), after registering functions",
		ErrInsideWorker, worker.EnvSpec, config.Process().Get(config.WorkerSpec))
}
