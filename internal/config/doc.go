// Package config is the one place chorus reads its environment. Every
// CHORUS_ variable a program, a worker process or a test reads is a Var
// in this package's table, with its default, its meaning and its reader;
// docs/configuration.md is generated from the table (go run
// ./cmd/confdoc), and internal/lint fails when the code names a variable
// the table lacks or the page is stale.
//
// Library code does not read variables: it takes options structs
// (session.Options, cpu.Options, hier.Tuning, worker.Options, ...). The
// program's edge decodes the environment once into those options: the
// chorus binary, a session constructor's defaults for fields left zero
// (an option set in code wins), and process-wide settings decided on
// first use (the clock, the kernel cache, the trace clock's skew). A
// worker process reads nothing but its spec, which the controller
// encodes from the session's options; the spec's variable is Internal,
// not part of the user surface.
//
// It imports nothing of chorus.
package config
