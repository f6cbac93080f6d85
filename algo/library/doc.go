// Package library holds collective algorithms written in the DSL of
// package algo/dsl, by name: allreduce (one-shot, two-shot, ring, LL
// packets, port channels), allgather (mesh, ring) and reduce-scatter
// (all-pairs). Each supports 2..8 ranks and any number of instances.
//
//	pl, err := library.Build("allreduce_ring", 8, library.Options{Instances: 2})
//
// Names lists the algorithms; Describe says what one does; Program returns
// the DSL program before lowering, for inspection. Every plan is checked
// by the tests with algo/verify: it computes its collective without
// deadlock or race for 2..8 ranks.
package library
