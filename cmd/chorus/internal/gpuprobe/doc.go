// Package gpuprobe finds the GPU libraries chorus can use (the CUDA driver,
// NVRTC, NCCL and cuBLAS) by loading them at run time, without cgo, and reports
// what it found. `chorus info` prints its report; the full bindings come in
// their own packages.
package gpuprobe
