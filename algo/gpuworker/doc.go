// Package gpuworker makes a GPU executor of an execution plan
// (algo/gpuexec) on a chorus worker: the worker's GPU, stream and CUDA
// context, its IPC allocator and host control communicator (after
// InitCCL with a GPU backend), and a device hook so that SyncDevice
// reports a wait that gave up and a lost peer aborts the kernels. It is
// the one place where gpuexec meets package worker; algo/run (sessions)
// and compiler/vm (custom_allreduce naming a plan) both load plans
// through it.
package gpuworker
