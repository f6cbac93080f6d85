// Package tensor defines chorus's n-dimensional arrays: element types
// (DType), shapes, devices (cpu, cuda:N), and contiguous storage tagged with
// a memory scope ("global" unless a compiler pass or allocator says
// otherwise). A Tensor is a typed view (dtype, shape, byte offset) over a
// Storage, so several tensors can share one allocation.
//
// It also carries the host-side helpers that tests and benchmarks need:
// filling, seeded random data, float16/bfloat16 conversion and comparison
// with tolerances. The package sits at the bottom of chorus's dependency
// graph and imports nothing else from the module.
package tensor
