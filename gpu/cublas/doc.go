// Package cublas binds the parts of NVIDIA's cuBLAS that chorus uses
// (handle create/destroy, stream, math mode, cublasGemmEx) from pure Go
// with purego, like packages cuda and nccl: no cgo and no CUDA toolkit at
// build time. Load opens libcublas.so.13, libcublas.so.12 or libcublas.so
// (also under /usr/local/cuda/lib64) and resolves every symbol up front.
//
// cuBLAS is column-major. chorus tensors are row-major, so MatmulRowMajor
// uses the usual identity: a row-major C[m,n] = A[m,k]·B[k,n] is, read
// column-major, Cᵀ[n,m] = Bᵀ[n,k]·Aᵀ[k,m], which is one GEMM with the
// operands swapped and no transposes.
//
// Every call that enqueues work (and Create) needs the device's CUDA
// context current on the calling thread; chorus runs them on the worker's
// device executor (gpu/device.CUDA.Do). Enum values are those of cuBLAS 12
// and 13 (cublas_api.h, library_types.h).
package cublas
