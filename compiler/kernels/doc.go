// Package kernels is the compute of the compiler's VM (compiler/vm): the
// kernels its instructions run, on the host in Go and on a worker's GPU
// through cuBLAS and CUDA C compiled at run time by NVRTC, and the
// measurement functions built on them.
//
// # Host
//
// CPUMatmul, CPUMatmulNT (blocked over k and n), CPUAdd (numpy
// broadcasting), CPUGelu (tanh approximation) and the decoder ops
// (CPUEmbedding, CPURMSNorm, CPULayerNorm, CPURope, CPURopeTable,
// CPUAttention, CPUSilu, CPUMul, CPUArgmax): float32, float16 and
// bfloat16 compute in float32 (half inputs widened, one rounding per
// output), float64 in float64. Gelu, Silu, RopeAngle and RopeTableAngle
// are the scalar definitions the kernels and their tests share.
//
// # GPU
//
// A GPU (Open) is one worker's kernels: a cuBLAS handle bound to the
// worker's stream and the CUDA C modules (kernels*.cu, cached on disk by
// gpu/nvrtc), every call on the worker's device executor
// (device.CUDA.Do), so kernels are ordered with the worker's copies,
// collectives and IPC all-reduces, and a session Sync covers them.
// Matmul goes through cublasGemmEx (float accumulation, no TF32);
// MatmulNT with a few rows of x (float16, bfloat16) runs a skinny-matrix
// kernel that streams the weight once: CUDA cores up to
// GemvDefaultCoreRows rows (kernels_gemv.cu: whole rows a warp where
// rowBatch says so, else split-K, planGemv), tensor cores
// above for the q/k/v triple and small weights (kernels_tc.cu, planTC,
// split-K summed by each tile's last block); GemvFunc sets the row
// threshold per worker process (default GemvDefaultRows, at most
// GemvMaxM). Attention of 16 or more tokens a sequence (prefill) runs on
// the tensor cores a tile of the cache at a time (kernels_prefill.cu,
// planPrefill), decode (one token a sequence, head dims 64 and 128) on
// the tensor cores with the cache split over blocks and, where the VM
// fused rope before it, the rotation and the cache append folded in
// (dec_attn, planDecode, TryRopeAttention); other attention with head
// dims 64-256 runs split-KV on the CUDA cores (kernels_attn.cu,
// planAttention), over one cache or a batch's caches (one per
// sequence). TryGated, TryNT3, TryAddNorm and TrySiluMul are
// the fused kernels the VM's fusions at load run where they take the
// operands (false: run the original ops).
//
// On compute capability 9.0+ the kernels launch with programmatic
// dependent launch (pdl.go): each lets the next be launched before it
// waits for the one before, the skinny products read their first pieces
// of W where the VM proves them fixed, and every kernel waits
// (griddepcontrol.wait) before it touches any other buffer. cuBLAS, the
// measurement kernels and the first kernel of a VM call launch the
// ordinary way.
//
// # Measurements
//
// FillUniformFunc, BenchStreamFunc, BenchGemmFunc, BenchMatmulNTFunc and
// BenchLaunchFunc are worker functions (registered in registry.Global)
// that serve chorus bench decode (docs/performance.md, Decode): the
// bounds a decode step is compared with, measured in the same run, and
// the costs it is made of.
package kernels
