// Package worker is the worker side of a chorus session: a register file,
// the interpreter for controller commands (wire.Command), the built-in
// functions every worker offers (worker_id, empty, ...) and the entry point
// of worker processes (Main).
//
// The interpreter (Worker.Handle) is a plain state machine with no
// goroutines or I/O: threaded sessions drive it from a goroutine per worker,
// process sessions from the loop in Serve, which decodes frames from a
// transport.Conn. A failing or panicking function never stops the worker:
// the failure is stored in the result register, recorded for the next reply,
// and announced once with a Failure notice.
//
// A Worker is the registry.Env of the functions it runs and implements
// the registry's capabilities (GPU, Copier, Comms, IPC, Tracer, Memory,
// Funcs):
// functions reach the worker's device, communicators, IPC memory and
// trace through registry.GPUOf, CommsOf, IPCOf and TracerOf, so the
// packages they live in do not import this one.
package worker
