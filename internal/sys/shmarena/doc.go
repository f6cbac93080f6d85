// Package shmarena puts a process's large host tensors in shared memory
// that other processes of the same session map, so that the cpu collective
// backend reads peers' buffers and writes its reduced part into their
// outputs with plain loads and stores, as ranks of one process do.
//
// An Arena is one memfd, sized sparse to its capacity (ftruncate), from
// which an offset allocator (first fit, coalescing, page-aligned blocks)
// carves blocks. Backing pages are reserved with fallocate before a block
// is handed out, so running out of memory is an error (ErrExhausted) and
// never a SIGBUS; freed blocks keep their pages and are reused (no hole is
// punched per free: peers' page tables would be zapped and re-faulted).
//
// A block is handed out as a Go heap allocation whose pages were replaced
// (mmap MAP_FIXED|MAP_SHARED) by the block's pages of the memfd: to Go it
// is an ordinary []byte, kept alive by every slice of it, so the garbage
// collector decides when it is dead exactly as for any other memory. A
// finalizer on the allocation puts private anonymous pages back at its
// address (so the runtime can reuse the range) and frees the block. No
// slice of a tensor can outlive its block, which a release tied to the
// tensor's Storage could not guarantee.
//
// Peers map an arena with MapPeer from its Identity (pid, descriptor
// number, size, random token): opening /proc/PID/fd/FD (read-write: the
// memfd's own mode allows its owner both) needs the same ptrace read
// permission as reading the process's memory; the token in the arena's
// header page proves that the file is the one announced.
package shmarena
