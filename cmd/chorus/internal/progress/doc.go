// Package progress shows how far a long benchmark or plan run is: one line
// on stderr, rewritten in place ("allreduce 16 MiB (7/15) ~12 s left"),
// erased at the end, and nothing at all when stderr is not a terminal, so
// logs, pipes and JSON lines never see it.
package progress
