// Command chorus is the chorus command-line tool: it prints what the
// machine offers (info), runs the demo, runs benchmarks, lists the
// functions workers can call, and doubles as the worker program of process
// sessions (a process started by a session turns into a worker before any
// command is parsed).
package main
