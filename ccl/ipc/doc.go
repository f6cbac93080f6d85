// Package ipc is CUDA IPC memory (the "ipc_memory" storage scope) and the
// custom all-reduce that runs on it.
//
// An Allocator hands out device memory whose handle every rank of a
// communicator has opened: each allocation brings the data, a scratch
// region for two-shot, and the barrier arrays the kernels synchronise
// through (zeroed and synchronised before the handles are exchanged).
// Allocation is collective and checked across ranks (ErrOrder), so a rank
// that allocates in a different order or size gets an error, never a hang.
//
// An AllReducer runs one-shot and two-shot all-reduce kernels (CUDA C in
// kernels.cu, compiled by NVRTC at run time) for float32, float16 and
// bfloat16 with sum, min and max, any element count, 1 to 8 ranks, and
// routes to NCCL where asked or where auto's table says NCCL is faster.
// docs/ipc.md describes the protocol, the routes and the measurements.
package ipc
