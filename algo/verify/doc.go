// Package verify checks MSCCL++ execution plans (package algo/plan): that a
// plan computes its collective on every rank, cannot deadlock and has no
// data race, for every schedule of its thread blocks.
//
//	rep, err := verify.Verify(p)
//	var e *verify.Error
//	if errors.As(err, &e) { // e.Kind, e.Rank, e.TB, e.Op, e.Msg
//	}
//	errors.Is(err, verify.ErrRace) // also ErrDeadlock, ErrWrongResult, ...
//
// The method is a symbolic execution of every thread block of every rank.
// Each chunk of each buffer is cut into cells (enough to represent every
// thread-block-group part and pipeline slice) holding a symbolic value: a
// multiset of input contributions combined by a reduce op, or undefined.
// Op semantics come from (*plan.Plan).OpAccess and nothing else. A
// scheduler runs any enabled op until none is; signal/wait pairs are
// counted per (sender, receiver, channel type, channel), barriers and
// semaphores are counted, and LL packet reads wait for the packets. Because
// every blocking condition is monotone and has a single consumer, the
// semantics are confluent, so one maximal execution decides deadlock
// freedom and gives the happens-before relation of all executions. Races
// are found with vector clocks over that relation (ops of one thread block
// are ordered only across a nop or barrier; port-channel transfers run on a
// proxy ordered by signal and flush), and the output cells are compared with
// the collective's result at the end.
//
// docs/plans.md gives the model, the confluence argument and the limits
// (constructs reported as Unsupported instead of a verdict).
//
// The package depends on the standard library and algo/plan only.
package verify
