// Package interp is the worker side of the compiler's VM: it loads
// compiled IR (package ir, device-planned by package passes) on one
// worker and runs its functions. The controller side, package
// compiler/vm, drives it through these worker functions, registered in
// registry.Global (so every binary that links the VM offers them to its
// workers):
//
//	chorus.vm.load(text string, [plan name, plan JSON]...) -> *Module
//	                                                parse, VerifyDevices, prepare
//	chorus.vm.run(module, name string, args...)  -> the result (nil for none,
//	                                                []any for several)
//	chorus.vm.result(results, i int)             -> the i-th of several results
//	chorus.vm.capture(module, name string, args...) -> *Graph (Module.Capture:
//	                                                a warm-up run, then a run
//	                                                captured as a CUDA graph)
//	chorus.vm.replay(graph)                      -> the result(s), the same
//	                                                tensors at every replay
//	chorus.vm.run_stats(module)                  -> the host side of its runs
//	chorus.ipc.alloc_storage(nbytes, alignment)  -> *tensor.Storage in ipc_memory
//	                                                (passes.IPCAllocStorageFunc)
//
// The package reaches its worker only through registry.Env and the
// registry's capabilities (Comms for collectives, IPC for the custom
// all-reduce, Copier for device_copy, GPU for Capture, Tracer for the
// trace's GPU spans, Funcs for call_packed), so it does not import the
// worker package.
//
// # Loading
//
// Loading translates each function once: operands become slot numbers,
// immediates are decoded, registered functions are looked up as
// GetGlobalFunc does (registry.LookupFunc: the worker's built-ins, then
// its registry; an unknown name fails the load), and virtual devices are
// mapped to the worker: {cpu} is host memory and {cuda:0} is the
// worker's own GPU (Session Options.DeviceIDs picks it); a module for
// cuda on a CPU worker, other virtual ids, and ipc_memory or
// custom_allreduce on the host are load errors (ErrUnsupported).
//
// A custom_allreduce whose strategy is a string names an execution plan.
// The controller resolves the names (package compiler/vm/plans) and sends
// the plans with the module text; a module loaded here without them
// (LoadText, LoadModule) resolves them on this worker. Each worker loads
// one GPU executor per plan (algo/gpuworker; collective, in the order the
// plans first appear) before the module is ready.
//
// When a function is loaded, fuse.go replaces three instruction patterns
// of the decoder with one instruction each: the gated MLP (one pass over
// gate and up, SiLU and the product in the epilogue), three products of
// one input (q, k, v in one launch) and a residual add with the RMSNorm
// of its sum. The IR is unchanged; where a kernel does not take the
// operands, and on CPUs, the fused instruction runs the original ops.
//
// # Running
//
// A run executes the bindings in order (ir.Function.Bindings):
//
//   - alloc_tensor / alloc_storage: the worker's allocator
//     (registry.Env.Alloc with the binding's device and scope; a storage
//     is a uint8 tensor's storage). Allocations whose memory never
//     reaches a result are workspace: made by the first run and reused by
//     later runs of the same function on that worker (the workers run
//     calls one at a time, in order, so reuse is safe; on GPUs the reuse
//     is ordered on the worker's stream). The program thus keeps its
//     workspace between calls, as a VM with a pooled allocator would;
//     passes.PeakMemory is what one call holds.
//     Results are allocated afresh by every run.
//   - views: alloc_tensor of a storage (tensor.View), reshape, alias.
//   - call_packed: the registered function, with register values and
//     immediates (ints as int64, symbols as strings, devices mapped);
//     a declared storage result may be a storage or a tensor.
//   - allreduce, allgather, reduce_scatter, broadcast (from worker 0):
//     the session's communicator, registry.Comm(env, false) (InitCCL
//     first).
//   - custom_allreduce: registry.CustomAllReduce (GPU tensors; strategy
//     one_shot/two_shot/auto), or the plan's GPU executor.
//   - device_copy: through registry.ToHost / registry.FromHost.
//   - matmul, matmul_nt, add, gelu and the decoder ops: the kernels of
//     package compiler/kernels, on the host in Go or on the worker's GPU
//     (cuBLAS and CUDA C on its device executor and stream), by where
//     the operands live.
//
// Errors name the worker, the function, the binding index and the
// binding's text, and wrap the cause (ErrShape, ErrUnsupported, ccl
// errors, ...). Nothing panics across the API: the worker recovers
// panics anyway, but the VM checks operands before kernels index them.
package interp
