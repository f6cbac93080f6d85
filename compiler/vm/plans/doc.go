// Package plans resolves the names of execution plans in compiled IR: a
// custom_allreduce whose strategy is a string names a plan (algo/plan),
// a library algorithm (algo/library, algo/handplan) built for the
// session's worker count, or else a plan file. Resolve turns a name into
// a checked plan (an allreduce of the right size that the GPU executor
// can run, verifier included) and Specs lists the names a module uses.
//
// Resolution is its own package because both sides of the VM need it
// and neither owns it: the controller (compiler/vm.Load) resolves and
// checks every plan before anything is sent, and ships the plans with
// the module text, so workers never read files; a worker that loads a
// module by itself (compiler/vm/interp.LoadText) resolves the names it
// was not sent. What a plan runs on is the interpreter's business
// (algo/gpuworker), not this package's.
package plans
