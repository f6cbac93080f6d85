// Package vm runs compiled IR (package ir, after a pipeline of package
// passes) on every worker of a session. The controller loads a module
// once and then calls its functions like any other worker function:
//
//	m, _ := passes.Pipeline.Run(...)             // or vm.Pipeline(dev, strategy)
//	prog, err := vm.Load(ctx, s, m)              // every worker parses, verifies, prepares
//	y, err := prog.Call(ctx, "mlp", x, w1, b1)   // DRefs in, a DRef out; asynchronous
//	err = s.Sync(ctx)                            // failures surface here
//
// # Worker side
//
// The VM registers these functions in registry.Global (so every binary
// that links the package offers them to its workers):
//
//	chorus.vm.load(text string) -> *Module       parse, VerifyDevices, prepare
//	chorus.vm.run(module, name string, args...)  -> the result (nil for none,
//	                                                []any for several)
//	chorus.vm.result(results, i int)             -> the i-th of several results
//	chorus.vm.capture(module, name string, args...) -> *Graph (Module.Capture:
//	                                                a warm-up run, then a run
//	                                                captured as a CUDA graph)
//	chorus.vm.replay(graph)                      -> the result(s), the same
//	                                                tensors at every replay
//	chorus.ipc.alloc_storage(nbytes, alignment)  -> *tensor.Storage in ipc_memory
//	                                                (passes.IPCAllocStorageFunc)
//
// Loading translates each function once: operands become slot numbers,
// immediates are decoded, registered functions are looked up as
// GetGlobalFunc does (registry.LookupFunc: the worker's built-ins, then
// its registry; an unknown name fails the load), and
// virtual devices are mapped to the worker: {cpu} is host memory and
// {cuda:0} is the worker's own GPU (Session Options.DeviceIDs picks it);
// a module for cuda on a CPU worker, other virtual ids, and ipc_memory or
// custom_allreduce on the host are load errors (ErrUnsupported).
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
//     the session's communicator, registry.Comm(env, false) (InitCCL first).
//   - custom_allreduce: registry.CustomAllReduce (GPU tensors; strategy
//     one_shot/two_shot/auto); a string strategy names an execution plan
//     (ResolvePlan) run by the GPU executor (algo/gpuworker), loaded with
//     the module.
//   - device_copy: through registry.ToHost / registry.FromHost.
//   - matmul, add (numpy broadcasting), gelu (tanh approximation) and
//     the decoder ops: the kernels of package compiler/kernels. On
//     the host in Go; float32, float16 and bfloat16 compute in float32
//     (half inputs widened, one rounding per output), float64 in float64;
//     matmul is blocked over k and n. On a GPU: matmul through cuBLAS
//     (cublasGemmEx, float accumulation, no TF32), add and gelu as CUDA C
//     kernels (kernels.cu, NVRTC, cached on disk), all on the worker's
//     device executor and stream.
//
// Errors name the worker, the function, the binding index and the
// binding's text, and wrap the cause (ErrShape, ErrUnsupported, ccl
// errors, ...). Nothing panics across the API: the worker recovers
// panics anyway, but the VM checks operands before kernels index them.
//
// # Decode kernels and fusion at load
//
// On GPUs, matmul_nt with at most GemvDefaultRows rows of x (float16,
// bfloat16) runs a skinny-matrix kernel that streams the weight once;
// attention with head dims 64-256 runs split-KV (compiler/kernels). When a function is loaded,
// fuse.go replaces three instruction patterns of the decoder with one
// instruction each: the gated MLP (one pass over gate and up, SiLU and
// the product in the epilogue), three products of one input (q, k, v in
// one launch) and a residual add with the RMSNorm of its sum. The IR is
// unchanged; where a kernel does not take the operands, and on CPUs, the
// fused instruction runs the original ops. GemvFunc switches a worker's
// products to cuBLAS; the measurement functions (BenchStreamFunc,
// BenchGemmFunc, BenchMatmulNTFunc, BenchLaunchFunc, FillUniformFunc,
// RunStatsFunc) serve chorus bench decode (docs/performance.md, Decode).
//
// # CPU and GPU programs
//
// IPC memory and the custom all-reduce exist only on GPU workers. CPU
// programs are compiled without ipc-allreduce-rewrite (Pipeline(cpu)), so
// they keep allreduce and run it on the "cpu" collective backend; a CPU
// program that still contains ipc_memory or custom_allreduce fails to
// load with ErrUnsupported rather than silently running another
// algorithm. GPU programs use passes.Default.
package vm
