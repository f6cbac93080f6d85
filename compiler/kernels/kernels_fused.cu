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

// ADDNORM_VR is the most 16-byte pieces of its row a thread of
// add_rms_norm_v keeps in registers (a row of up to 8 x ADDNORM_VR x
// blockDim.x elements: 8192 at 256 threads).
#define ADDNORM_VR 4

// pack2 rounds two floats to the dtype and packs them as a 32-bit word
// (lo in the low half), as Pair<E> unpacks them.
template <class E>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  return (unsigned)E::store(lo) | ((unsigned)E::store(hi) << 16);
}

// add_rms_norm_v is add_rms_norm for 16-bit rows of h = 8 * h8 elements
// with 16-byte aligned operands: a thread's pieces of the row move as
// 16-byte vectors, and with pre (the host's promise that no kernel of
// the call writes w: GPU.SetFixedWeights) its pieces of the weight are
// loaded before PDL_WAIT, else just after it; then the block reads x and
// y once, reduces, and writes sum and out. The arithmetic and roundings
// are add_rms_norm's.
template <class E>
__device__ __forceinline__ void addnorm_w(const V4* w, int h8, V4 (&wv)[ADDNORM_VR]) {
#pragma unroll
  for (int i = 0; i < ADDNORM_VR; i++) {
    const int j = threadIdx.x + i * blockDim.x;
    if (j < h8) wv[i] = ld_cached(w + j);
  }
}

template <class E>
__device__ void add_rms_norm_v_impl(const V4* x, const V4* y, V4* sum, const V4* w, V4* out, int h8, float eps, int pre) {
  const long long off = (long long)blockIdx.x * h8;
  V4 wv[ADDNORM_VR], sv[ADDNORM_VR];
  if (pre) addnorm_w<E>(w, h8, wv);
  PDL_ENTRY();
  if (!pre) addnorm_w<E>(w, h8, wv);
  V4 xv[ADDNORM_VR], yv[ADDNORM_VR];
#pragma unroll
  for (int i = 0; i < ADDNORM_VR; i++) {
    const int j = threadIdx.x + i * blockDim.x;
    if (j < h8) {
      xv[i] = x[off + j];
      yv[i] = y[off + j];
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < ADDNORM_VR; i++) {
    const int j = threadIdx.x + i * blockDim.x;
    if (j < h8) {
      const unsigned xs[4] = {xv[i].x, xv[i].y, xv[i].z, xv[i].w}, ys[4] = {yv[i].x, yv[i].y, yv[i].z, yv[i].w};
      unsigned s[4];
#pragma unroll
      for (int q = 0; q < 4; q++) {
        s[q] = pack2<E>(Pair<E>::lo(xs[q]) + Pair<E>::lo(ys[q]), Pair<E>::hi(xs[q]) + Pair<E>::hi(ys[q]));
        const float lo = Pair<E>::lo(s[q]), hi = Pair<E>::hi(s[q]);
        ss += lo * lo;
        ss += hi * hi;
      }
      sv[i] = V4{s[0], s[1], s[2], s[3]};
      sum[off + j] = sv[i];
    }
  }
  const float inv = rsqrtf(fused_block_sum(ss) / (float)(8 * h8) + eps);
#pragma unroll
  for (int i = 0; i < ADDNORM_VR; i++) {
    const int j = threadIdx.x + i * blockDim.x;
    if (j < h8) {
      const unsigned ss4[4] = {sv[i].x, sv[i].y, sv[i].z, sv[i].w}, ws[4] = {wv[i].x, wv[i].y, wv[i].z, wv[i].w};
      unsigned o[4];
#pragma unroll
      for (int q = 0; q < 4; q++)
        o[q] = pack2<E>(E::load(E::store(Pair<E>::lo(ss4[q]) * inv)) * Pair<E>::lo(ws[q]),
                        E::load(E::store(Pair<E>::hi(ss4[q]) * inv)) * Pair<E>::hi(ws[q]));
      out[off + j] = V4{o[0], o[1], o[2], o[3]};
    }
  }
}

#define FUSED_V_KERNELS(name, E)                                                                                  \
  extern "C" __global__ void add_rms_norm_v_##name(const V4* x, const V4* y, V4* sum, const V4* w, V4* out, int h8, \
                                                   float eps, int pre) {                                          \
    add_rms_norm_v_impl<E>(x, y, sum, w, out, h8, eps, pre);                                                      \
  }

FUSED_V_KERNELS(f16, F16)
FUSED_V_KERNELS(bf16, BF16)

// silu_mul: out = silu(g) ⊙ u over n8 16-byte pieces of 16-bit
// elements, the gated MLP's activation when its two products ran apart
// (prefill rows): the silu rounded to the dtype before the product, as
// the silu and mul kernels one after the other, in one pass with 16-byte
// loads and stores. The unfused pair took 36 and 37 us a layer of a
// 512-token Llama-3-8B prefill on an H200 (ncu).
template <class E>
__device__ void silu_mul_impl(const V4* g, const V4* u, V4* out, long long n8) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += stride) {
    const V4 gv = g[i], uv = u[i];
    const unsigned gs[4] = {gv.x, gv.y, gv.z, gv.w}, us[4] = {uv.x, uv.y, uv.z, uv.w};
    unsigned o[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const float gl = Pair<E>::lo(gs[q]), gh = Pair<E>::hi(gs[q]);
      const float al = E::load(E::store(gl / (1.0f + expf(-gl)))), ah = E::load(E::store(gh / (1.0f + expf(-gh))));
      o[q] = pack2<E>(al * Pair<E>::lo(us[q]), ah * Pair<E>::hi(us[q]));
    }
    out[i] = V4{o[0], o[1], o[2], o[3]};
  }
}

#define SILU_MUL_KERNELS(name, E)                                                                         \
  extern "C" __global__ void silu_mul_##name(const V4* g, const V4* u, V4* out, long long n8) {           \
    PDL_ENTRY();                                                                                          \
    silu_mul_impl<E>(g, u, out, n8);                                                                      \
  }

SILU_MUL_KERNELS(f16, F16)
SILU_MUL_KERNELS(bf16, BF16)

#define FUSED_KERNELS(name, E)                                                                                       \
  extern "C" __global__ void add_rms_norm_##name(const E::T* x, const E::T* y, E::T* sum, const E::T* w, E::T* out, \
                                                 long long h, float eps) { PDL_ENTRY();                                          \
    add_rms_norm_impl<E>(x, y, sum, w, out, h, eps);                                                                \
  }

FUSED_KERNELS(f32, F32)
FUSED_KERNELS(f16, F16)
FUSED_KERNELS(bf16, BF16)
