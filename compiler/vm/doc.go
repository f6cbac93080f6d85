// Package vm runs compiled IR (package ir, after a pipeline of package
// passes) on every worker of a session; this package is its controller
// side. The controller loads a module once and then calls its functions
// like any other worker function:
//
//	m, _ := passes.Pipeline.Run(...)             // or vm.Pipeline(dev, strategy)
//	prog, err := vm.Load(ctx, s, m)              // every worker parses, verifies, prepares
//	y, err := prog.Call(ctx, "mlp", x, w1, b1)   // DRefs in, a DRef out; asynchronous
//	err = s.Sync(ctx)                            // failures surface here
//
// Capture and Replay record a function once per worker as a CUDA graph
// and replay it; Result picks one of several results; RunStats reads the
// host time the workers spent issuing. Arguments are checked here
// (function, count, DRefs) before anything is sent.
//
// The VM is three packages besides this one: compiler/vm/interp is the
// worker side (the registered worker functions this package calls:
// loading, fusion at load, the interpreter, capture), compiler/kernels
// the compute it runs (Go on the host, cuBLAS and NVRTC-compiled CUDA C
// on GPUs, the decode measurement functions), and compiler/vm/plans the
// resolution of the plan names custom_allreduce uses: Load resolves and
// checks every plan on the controller and sends the plans with the
// module, so workers never read plan files. Linking this package links
// the worker side, so the workers of the same binary offer its
// functions. The sentinel errors, the worker functions' names and the
// kernels' settings (GemvFunc, GemvDefaultRows) and measurement functions
// (BenchStreamFunc, BenchGemmFunc, BenchMatmulNTFunc, BenchLaunchFunc,
// FillUniformFunc, RunStatsFunc: chorus bench decode, docs/performance.md)
// are re-exported here under the names callers use.
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
