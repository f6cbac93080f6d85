// Package nccl binds NVIDIA's collective library (libnccl.so.2) from pure
// Go with purego: version, unique ids, communicator init (per rank, with
// the 128-byte unique id passed by value as the C ABI requires), split,
// abort, async error query, every collective, and send/recv inside group
// calls. Load resolves every symbol up front.
//
// Data types and reduction ops are NCCL's enums (nccl.h of NCCL 2.28);
// DTypeOf maps chorus dtypes onto them and fails for the ones NCCL lacks
// (bool, int16).
package nccl
