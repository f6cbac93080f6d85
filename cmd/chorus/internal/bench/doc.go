// Package bench holds the measurement loops behind `chorus bench`: they
// start real sessions, time operations with the monotonic clock, and
// report medians and tails. Output formatting (tables, JSON lines) lives
// here too so that scripts and docs see one format.
package bench
