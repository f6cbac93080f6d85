// Package segment is the rendezvous through a named shared-memory file
// that the CPU collectives (ccl/cpu) and the plan executor (algo/cpuexec)
// use to find each other: rank 0 creates the file, with its header, under
// a temporary name and links it into place, so no rank ever opens a
// half-made file; the other ranks poll for the name until a deadline;
// every rank maps it after checking its size. The file lives in /dev/shm
// (tmpfs) when there is one, named after a hash of the communicator's id.
// What the segment holds, and when rank 0 removes the name, is the
// caller's.
package segment
