// Package session is the controller side of chorus: a Session drives N
// workers in lock-step through numbered registers, as in TVM's Disco.
//
// A DRef names "the object in register r on every worker". CallPacked,
// KillReg (DRef.Release), CopyToWorker0 and DebugSetRegister are
// asynchronous: they return once the command is queued, and a failure on a
// worker is reported by the next synchronous call (SyncWorker, Sync,
// DebugGetFromRemote, CopyFromWorker0, GetGlobalFunc) or by any later call
// that uses the failed result. GetGlobalFunc waits for every worker so that
// an unknown name is reported at once.
//
// Two kinds of session share this package's Session type:
//   - NewThreaded: workers are goroutines of this process;
//   - NewProcess: workers are child processes (this binary re-executed, or
//     any Go program that calls worker.Main), connected by shared-memory
//     rings (default: commands through one log every worker reads,
//     replies through each worker's ring) or a byte stream.
//
// A session holds at most MaxThreadedWorkers (threaded) or
// MaxProcessWorkers (process, per host) workers; more is refused up front
// (ErrTooManyWorkers). A process session cannot be started inside a
// worker process (ErrInsideWorker): that is a program whose main does not
// begin with worker.Main, and each worker would start workers of its own.
//
// Faults are contained: a failing or panicking function leaves the session
// usable; a worker process that dies fails the session with an error naming
// the worker and its exit status (ErrWorkerLost), and Shutdown still
// returns; workers exit by themselves if the controller dies.
package session
