// Declarations that stand in for NVRTC's built-ins so that g++
// -fsyntax-only can check generated kernels on a machine without CUDA
// (codegen_test.go). Only syntax and names are checked, not PTX.
#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
struct chorus_dim3 { unsigned x, y, z; };
extern chorus_dim3 threadIdx, blockIdx, blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
void __syncthreads();
long long clock64();
float __uint_as_float(unsigned);
unsigned __float_as_uint(float);
float fminf(float, float);
float fmaxf(float, float);
