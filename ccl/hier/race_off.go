//go:build !race

package hier

// raceBuild reports a race-detector build. There, plaintext links copy
// what they send and receive through a buffer of their own: the race
// detector orders a socket write before a later read of the socket by
// anyone (internal/poll's ioSync), but it annotates the write's read of
// the buffer after that release and the read's write of the buffer before
// the acquire, so a tensor sent straight from memory and overwritten
// later by the receiving goroutine, once the ring's data had come back
// through the other hosts, looked like a race (it is not: the system
// call copied the bytes before any peer could answer them). The copies
// make the tensor's accesses ordinary memory operations of the goroutines,
// ordered by the socket's annotations. A held header leaves in a write of
// its own there, not in one writev with the data: writev carries no race
// annotation (package syscall annotates read and write only), so a chunk
// sent in a writev was not ordered before the later overwrite either
// (TestBalancedRingWorkConserving failed so, once, under -race in CI).
// Production builds send and receive straight from and into the tensor.
const raceBuild = false
