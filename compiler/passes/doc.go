// Package passes holds chorus's compiler passes over package ir, and a
// pass manager. A Pass is a named function from module to module that
// leaves its input alone; a Pipeline runs passes in order, verifies the
// IR after each one, and can print it after each one.
//
// The standard pipeline (Default) is:
//
//  1. PlanDevices: every tensor and storage gets a virtual device; operands
//     of one kernel are unified with vdevice.Join, unconstrained fields
//     take a default (vdevice.Default), and a device_copy is inserted
//     where an input lives on another device than its kernel.
//  2. IPCAllreduceRewrite(strategy): sum all-reduces whose input comes
//     from a global alloc_tensor become custom_allreduce on ipc_memory.
//  3. PlanMemory: tensors with disjoint lifetimes share storage, pooled
//     by (device, scope, dtype); the plan is explicit as alloc_storage
//     plus alloc_tensor views. PeakMemory measures the effect.
//  4. LowerGPUIPCAllocStorage: ipc_memory allocations become calls of the
//     runtime's IPC allocator (IPCAllocStorageFunc), sized in exact bytes.
//
// Pipelines can also be written as text (ParsePipeline), for example
// "plan-devices={cuda:0},ipc-allreduce-rewrite=one_shot,plan-memory".
// Golden tests in testdata/ name their pipeline on their first line and
// are regenerated with `go test -update`.
package passes
