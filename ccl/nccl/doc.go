// Package nccl is the "nccl" collective backend: ccl.Comm on GPU tensors
// through libnccl. Every NCCL call runs on the rank's device thread, on
// the device's stream (ccl.Config.Exec), so collectives are ordered with
// the worker's other device work and a SyncWorker waits for them.
//
// NCCL itself does not compare arguments across ranks (a count mismatch
// hangs or corrupts memory), so each collective first all-gathers a small
// descriptor (collective, dtype, count, op, root, whether the local
// arguments were valid) and every rank checks them, exactly as the cpu
// backend does; Options.SkipChecks trades that safety for one fewer
// NCCL call per collective.
package nccl
