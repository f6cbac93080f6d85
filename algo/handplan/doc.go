// Package handplan builds a few execution plans by hand (all-pairs
// allreduce, with the Simple or the LL protocol, allgather and
// reduce-scatter for any number of ranks, optionally split over several
// thread blocks): test and benchmark plans for the CPU executor that do not
// depend on the DSL or its algorithm library.
package handplan
