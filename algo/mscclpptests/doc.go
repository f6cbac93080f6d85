// Package mscclpptests holds chorus's equivalents of the programs in
// MSCCL++'s own DSL tests (python/mscclpp/language/tests: single_node,
// multi_node and unit_tests), written with chorus's Go DSL (algo/dsl) so
// that each emits a plan of the same shape as the MSCCL++ program: the same
// collective name, chunk counts, channels, op kinds and synchronization. They
// are test programs: every one loads, validates, round-trips through JSON
// and gets an expected verifier verdict, and every one that verifies runs
// on the CPU executor with no wrong element (see the tests; docs/plans.md
// sums up the verdicts, each program's Why gives its reason).
//
// The code is chorus's own; only the shapes follow MSCCL++. Where MSCCL++'s
// newer writer emits a different JSON shape for the same op (the switch
// store as src_buff/dst_buff with a "rank" on the local reference), the
// program post-processes the lowered plan into that shape (BufferForm).
package mscclpptests
