// chorus VM measurement kernels (bench_gpu.go): the read-only streaming
// kernel that gives a GPU's memory-bandwidth bound, an empty kernel for
// launch costs, and a uniform random fill. Compiled after kernels.cu and
// kernels_gemv.cu (V4, ld_stream), as a module of its own.

// bench_stream reads n 16-byte pieces once (grid-stride, four loads in
// flight per thread before their use) and writes one word per block, so
// nothing but the reads costs bandwidth.
extern "C" __global__ void bench_stream(const V4* p, long long n, unsigned* out) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    V4 a = ld_stream(p + i), b = ld_stream(p + i + stride), c = ld_stream(p + i + 2 * stride), d = ld_stream(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    V4 a = ld_stream(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(out + blockIdx.x, acc);
}

extern "C" __global__ void bench_noop() {}

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// fill_uniform: p[i] = lo + (hi - lo) * u(seed, i), u uniform in [0, 1).
template <class E>
__device__ void fill_uniform_impl(typename E::T* p, long long n, unsigned long long seed, float lo, float hi) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float u = (float)(mix64(seed ^ (unsigned long long)i) >> 40) * (1.0f / 16777216.0f);
    p[i] = E::store(lo + (hi - lo) * u);
  }
}

extern "C" __global__ void fill_uniform_f32(float* p, long long n, unsigned long long seed, float lo, float hi) {
  fill_uniform_impl<F32>(p, n, seed, lo, hi);
}
extern "C" __global__ void fill_uniform_f16(u16* p, long long n, unsigned long long seed, float lo, float hi) {
  fill_uniform_impl<F16>(p, n, seed, lo, hi);
}
extern "C" __global__ void fill_uniform_bf16(u16* p, long long n, unsigned long long seed, float lo, float hi) {
  fill_uniform_impl<BF16>(p, n, seed, lo, hi);
}
