// Package run makes an execution plan (package algo/plan) a collective of
// a session: Load sends the plan to every worker, where the CPU executor
// (algo/cpuexec) joins it with an id the controller made (as
// Session.InitCCL does); Run calls it on tensors in registers, as
// asynchronously as CallPacked (failures surface at the next Sync); Close
// releases it.
//
//	c, err := run.Load(ctx, s, p, 0)           // every worker joins
//	err = c.Run(ctx, send, recv, reduce.Sum)    // asynchronous
//	err = s.Sync(ctx)                           // mismatches, timeouts
//	c.Close()
//
// The worker functions are registered in registry.Global, so programs that
// start their own workers can call them too: chorus.plan.load(plan_json,
// id, timeout_ms) -> handle, chorus.plan.run(handle, send, recv, op),
// chorus.plan.close(handle), chorus.plan.bench(handle, dtype, in_count,
// out_count, iters, warmup) -> [time_us, wrong]. Bench and Counts serve
// `chorus plan run` and `chorus bench --plan`.
//
// LoadGPU does the same on the workers' GPUs (algo/gpuexec through
// algo/gpuworker; chorus.plan.gpu_load/gpu_run/gpu_close/gpu_bench), and
// GPUCopyBench times a plain device copy (chorus.plan.gpu_copy_bench), the
// anchor of `chorus bench planops`.
package run
