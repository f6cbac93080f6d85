// Package pollread reads a socket by polling it for a while before it
// parks the goroutine in Go's network poller.
//
// A blocking read that finds no data parks the goroutine; the data's
// arrival then wakes a thread (epoll, then the scheduler), which on an
// idle core in a VM costs tens of microseconds: more than the transfer of
// a small message between hosts. A Reader with a spin budget retries a
// non-blocking read(2) in a loop for up to that budget first, as MPI's
// TCP transport does, and parks only after it. Spinning costs a core for
// the budget, so whoever owns the socket decides when it is worth it
// (ccl/hier: opt-in, for small collectives) and can change
// the budget at any time (SetSpin). With a zero budget a Reader is the
// connection's own Read.
//
// Deadlines and Close work as on the connection: a spinning read stops
// with the connection's deadline error or net.ErrClosed.
//
// It imports nothing of chorus.
package pollread
