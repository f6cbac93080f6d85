// Package gpuexec runs MSCCL++ execution plans (package algo/plan) on GPUs.
//
// It compiles rather than interprets: Generate turns one rank of a plan,
// for one dtype and reduce op, into CUDA C with one function of
// straight-line code per thread block (every op unrolled, every channel,
// slot and chunk index a constant) and a kernel that switches on
// blockIdx.x. The source is compiled by NVRTC and cached on disk
// (gpu/nvrtc CompileCached). Signals are system-scope release adds on
// the peer's inbound counter, waits acquire loads; LL packets carry their
// flag next to their data; every wait polls an abort word in device
// memory and a clock-cycle timeout and records (rank, thread block, op)
// in a mapped host error record when it gives up. Port channels are
// served by a host proxy (Proxy) that drains a FIFO in mapped host memory
// and moves data with the copy engine. Switch channels (NVLink multicast)
// are refused before launch.
//
// The host side (Executor, on ccl/ipc memory) plans the buffers, checks
// the call on every rank before launch, stages what peers must reach, and
// keeps all per-call state (call counter, barrier words, tickets) in
// device memory so a call can be captured in a CUDA graph.
//
// docs/gpu-executor.md gives the design, the per-op memory-ordering
// guarantees and what is not done.
package gpuexec
