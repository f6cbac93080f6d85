// Package mlp is a tensor-parallel MLP, end to end: built
// with the compiler/ir builder, compiled through a pipeline of
// compiler/passes, run by compiler/vm on every worker of a session, and
// checked against a float64 reference computed here.
//
// The model is Megatron-style: y = gelu(x·W1 + b1)·W2 + b2 with W1
// split by columns and W2 by rows over n workers. Worker r holds
// W1[:, r·F/n:(r+1)·F/n], b1's matching slice and W2's matching rows, so
// its hidden slice needs no communication; its product with its rows of
// W2 is a partial sum of the output, completed by an all-reduce before the
// replicated bias b2 is added. Every worker generates its own shard from a
// seed ("mlp.param"): element (i, j) of a full parameter is a hash of
// (seed, parameter, i, j), so shards agree with the reference whatever n.
//
// On CPU workers the program is compiled with vm.Pipeline(cpu) (no IPC
// rewrite; the all-reduce runs on the "cpu" collective backend); on GPU
// workers with passes.Default (the all-reduce becomes custom_allreduce on
// ipc_memory, matmul runs in cuBLAS). Demo prints what it did; Bench
// measures time per step.
package mlp
