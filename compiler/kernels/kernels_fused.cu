// chorus VM fused decoder kernels (fuse.go), compiled with
// kernels_gemv.cu: the residual add and the RMSNorm that follows it.

// fused_block_sum: the sum of v over the block, in every thread
// (blockDim.x a multiple of 32, at most 1024).
__device__ float fused_block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) part[w] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// add_rms_norm: one block per row of h elements: sum = x + y (rounded to
// the dtype, as add stores it), out = rms_norm(sum) · w (the normalized
// value rounded to the dtype before the weight, as rms_norm does), the
// same arithmetic as the add and rms_norm kernels one after the other.
template <class E>
__device__ void add_rms_norm_impl(const typename E::T* x, const typename E::T* y, typename E::T* sum, const typename E::T* w,
                                  typename E::T* out, long long h, float eps) {
  const long long off = (long long)blockIdx.x * h;
  if (h <= (long long)NORM_REGS * blockDim.x) {
    // Every load before the first store (sum may alias nothing, but the
    // compiler cannot know): see NORM_REGS.
    float a[NORM_REGS], b[NORM_REGS];
#pragma unroll
    for (int i = 0; i < NORM_REGS; i++) {
      const long long j = threadIdx.x + (long long)i * blockDim.x;
      a[i] = j < h ? E::load(x[off + j]) : 0.0f;
      b[i] = j < h ? E::load(y[off + j]) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_REGS; i++) {
      const long long j = threadIdx.x + (long long)i * blockDim.x;
      typename E::T s = E::store(a[i] + b[i]);
      if (j < h) sum[off + j] = s;
      a[i] = E::load(s);
      ss += a[i] * a[i];
    }
    const float inv = rsqrtf(fused_block_sum(ss) / (float)h + eps);
#pragma unroll
    for (int i = 0; i < NORM_REGS; i++) {
      const long long j = threadIdx.x + (long long)i * blockDim.x;
      if (j < h) out[off + j] = E::store(E::load(E::store(a[i] * inv)) * E::load(w[j]));
    }
    return;
  }
  float ss = 0.0f;
  for (long long j = threadIdx.x; j < h; j += blockDim.x) {
    typename E::T s = E::store(E::load(x[off + j]) + E::load(y[off + j]));
    sum[off + j] = s;
    float v = E::load(s);
    ss += v * v;
  }
  float inv = rsqrtf(fused_block_sum(ss) / (float)h + eps);
  for (long long j = threadIdx.x; j < h; j += blockDim.x)
    out[off + j] = E::store(E::load(E::store(E::load(sum[off + j]) * inv)) * E::load(w[j]));
}

#define FUSED_KERNELS(name, E)                                                                                       \
  extern "C" __global__ void add_rms_norm_##name(const E::T* x, const E::T* y, E::T* sum, const E::T* w, E::T* out, \
                                                 long long h, float eps) { PDL_ENTRY();                                          \
    add_rms_norm_impl<E>(x, y, sum, w, out, h, eps);                                                                \
  }

FUSED_KERNELS(f32, F32)
FUSED_KERNELS(f16, F16)
FUSED_KERNELS(bf16, BF16)
