// Package nvrtc binds NVIDIA's runtime compiler (libnvrtc) from pure Go:
// CUDA C source in, a cubin for one GPU architecture out, with the
// compiler's log in the error when compilation fails. Compile results are
// cached on disk by CompileCached, keyed by the source hash, the target
// architecture and the NVRTC version, so each kernel is compiled once per
// machine even when several processes start at the same time. Report
// compiles with ptxas's resource report (registers, shared memory, stack
// frame and spills of each kernel), which needs no GPU: the tests build
// every kernel module that way in CI, with CUDA 11.8's libnvrtc.so.11.2
// (Debian's libnvrtc11.2), the last library name Load tries.
package nvrtc
