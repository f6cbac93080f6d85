// Package trace is chorus's observability model: events on tracks
// (controller, worker N, worker N gpu; threads commands, collectives,
// faults, stream N), a per-worker Recorder that keeps them in fixed-size
// structs (no allocation per event), a flight recorder (Ring: the last
// events of a worker, always on, readable from another process through
// shared memory while the worker is frozen or dead), a writer and reader
// of the Trace Event Format (the JSON that Perfetto and chrome://tracing
// open), a validator of the invariants chorus's traces keep, and the
// summary behind `chorus trace summary` (per-op totals, stragglers).
//
// Timestamps are wall-clock nanoseconds since the Unix epoch (Now): worker
// processes of one host share that clock, so their events line up. Within
// a process Now advances with the monotonic clock from an anchor taken at
// start, so a clock step cannot reorder a process's own events. A flight
// recorder that is not also tracing reads that clock through the
// time-stamp counter (internal/sys/tsc: a few ns instead of a vDSO call),
// calibrated against Now, so its readers see the same clock.
//
// The package imports only internal/sys/tsc; sessions and workers map the
// shared memory and decide what to record (docs/observability.md).
package trace
