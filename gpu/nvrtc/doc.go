// Package nvrtc binds NVIDIA's runtime compiler (libnvrtc) from pure Go:
// CUDA C source in, a cubin for one GPU architecture out, with the
// compiler's log in the error when compilation fails. Compile results are
// cached on disk by CompileCached, keyed by the source hash, the target
// architecture and the NVRTC version, so each kernel is compiled once per
// machine even when several processes start at the same time.
package nvrtc
