// Package nccl is the "nccl" collective backend: ccl.Comm on GPU tensors
// through libnccl. Every NCCL call runs through the rank's device executor
// (ccl.Config.Exec: its context current, its stream), so collectives are
// ordered with the worker's other device work and a SyncWorker waits for
// them.
//
// NCCL itself does not compare arguments across ranks (a count mismatch
// hangs or corrupts memory), so each collective first all-gathers a small
// descriptor (collective, dtype, count, op, root, whether the local
// arguments were valid) and every rank checks them, exactly as the cpu
// backend does: on the host through ccl.Config.Control when there is one
// (about a microsecond), else through NCCL and a stream synchronization.
// Options.SkipChecks turns the checks off, in test binaries only.
package nccl
