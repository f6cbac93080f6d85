// Package shmem holds the Linux primitives that shared-memory code in
// chorus is built from: anonymous memory files (memfd) and their mappings,
// futex sleep and wake on 32-bit words that live in such mappings (across
// processes), and yielding the CPU. Transports and the CPU collectives use
// it; nothing here knows about frames or collectives.
package shmem
