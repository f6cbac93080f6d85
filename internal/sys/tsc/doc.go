// Package tsc is a cheap clock for hot paths that read the time once or
// twice per operation: the workers' flight recorder (every command and
// collective) and the benchmarks' per-call stopwatch. A Clock reads the
// processor's time-stamp counter (a few ns) and turns ticks into the
// nanoseconds of an OS clock its owner supplies, calibrated against it
// as it runs; where the counter is not trustworthy (the kernel does not
// keep time with it) or CHORUS_CLOCK=os, every read is the OS clock.
// internal/config reads the variable.
//
// It imports nothing of chorus but internal/config.
package tsc
