// chorus VM skinny-matrix kernels: out[M, N] = x[M, K] · w[N, K]ᵀ for
// M = 1..GEMV_MAX_M rows of x (decode steps: one row per sequence), w in
// the layout nn.Linear and Hugging Face checkpoints store ([out, in]),
// float16 and bfloat16 with float32 accumulation. NVRTC compiles this
// file after kernels.cu (F16/BF16) as a module of its own.
//
// Memory-bound by design: every byte of w is read once, with 16-byte
// loads that skip L1 (ld.global.nc.L1::no_allocate) so the rows of x,
// read by every warp, stay there. A warp owns one row of w, or a 1/ks
// share of one (split-K: ks warps of a block take interleaved 512-byte
// pieces of the row, so rows of small matrices still fill the GPU) and
// multiplies each 16-byte piece by all M rows of x before the next;
// GEMV_UNROLL pieces are in flight per lane before the first is used.
// The partial sums meet in shared memory; one thread per (row, m) writes
// the result. The host (gemv_gpu.go) checks K % 8 == 0 and 16-byte
// alignment and picks ks.
//
// gemv_nt3 is three gemv_nt of one x in one launch (the q, k and v
// projections): blocks are dealt to the three weights in order.
//
// gemv_gated computes silu(x·wgᵀ) ⊙ (x·wuᵀ) in one pass: a warp reads
// row n of both weights (the gate/up projections of a gated MLP), so the
// activation and the product need no kernels of their own.

#define GEMV_WARPS 8
#define GEMV_UNROLL 4

struct __align__(16) V4 {
  unsigned x, y, z, w;
};

__device__ __forceinline__ V4 ld_stream(const V4* p) {
  V4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ V4 ld_cached(const V4* p) {
  V4 v;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Pair unpacks two 16-bit values of a 32-bit word into floats.
template <class E>
struct Pair;
template <>
struct Pair<BF16> {
  static __device__ __forceinline__ float lo(unsigned v) { return __uint_as_float(v << 16); }
  static __device__ __forceinline__ float hi(unsigned v) { return __uint_as_float(v & 0xffff0000u); }
};
template <>
struct Pair<F16> {
  static __device__ __forceinline__ float lo(unsigned v) { return h2f((u16)(v & 0xffffu)); }
  static __device__ __forceinline__ float hi(unsigned v) { return h2f((u16)(v >> 16)); }
};

template <class E>
__device__ __forceinline__ float dot2(unsigned a, unsigned b, float acc) {
  acc = fmaf(Pair<E>::lo(a), Pair<E>::lo(b), acc);
  return fmaf(Pair<E>::hi(a), Pair<E>::hi(b), acc);
}

template <class E>
__device__ __forceinline__ float dot8(const V4& a, const V4& b, float acc) {
  acc = dot2<E>(a.x, b.x, acc);
  acc = dot2<E>(a.y, b.y, acc);
  acc = dot2<E>(a.z, b.z, acc);
  return dot2<E>(a.w, b.w, acc);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// gemv_rows accumulates, for the calling warp's share of row `row` of
// NW weights w[0..NW), acc[j][m] += x[m, :] · w[j][row, :] over its
// pieces (k8 16-byte pieces per row; piece i of the share is
// i = kp*32 + lane + t*32*ks).
template <class E, int MT, int NW>
__device__ __forceinline__ void gemv_rows(const V4* const* w, const V4* x, int M, int k8, long long row, int kp, int ks, int lane,
                                          float acc[NW][MT]) {
  const int step = 32 * ks;
  const V4* wr[NW];
#pragma unroll
  for (int j = 0; j < NW; j++) wr[j] = w[j] + row * k8;
  int i = kp * 32 + lane;
  for (; i + (GEMV_UNROLL - 1) * step < k8; i += GEMV_UNROLL * step) {
    V4 wv[NW][GEMV_UNROLL];
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++) wv[j][u] = ld_stream(wr[j] + i + u * step);
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
      for (int m = 0; m < MT; m++)
        if (m < M) {
          V4 xv = ld_cached(x + (long long)m * k8 + i + u * step);
#pragma unroll
          for (int j = 0; j < NW; j++) acc[j][m] = dot8<E>(wv[j][u], xv, acc[j][m]);
        }
  }
  for (; i < k8; i += step) {
    V4 wv[NW];
#pragma unroll
    for (int j = 0; j < NW; j++) wv[j] = ld_stream(wr[j] + i);
#pragma unroll
    for (int m = 0; m < MT; m++)
      if (m < M) {
        V4 xv = ld_cached(x + (long long)m * k8 + i);
#pragma unroll
        for (int j = 0; j < NW; j++) acc[j][m] = dot8<E>(wv[j], xv, acc[j][m]);
      }
  }
}

// GEMV_PREFETCH is the 16-byte pieces of its share of each row a lane
// asks L2 for before PDL_WAIT: 8 give a warp its first 4 KiB (the first
// two batches of GEMV_UNROLL loads), 32 KiB a block, about a quarter of
// L2 for one wave of a 4096-wide matrix.
#define GEMV_PREFETCH 8

// gemv_prefetch asks L2 for the calling lane's first pieces of row `row`
// of NW weights (the same pieces gemv_rows loads first): weights are
// never written during a step, so this may run before PDL_WAIT, while
// the previous kernel finishes, and the loads after the wait hit L2
// instead of waiting for HBM.
template <int NW>
__device__ __forceinline__ void gemv_prefetch(const V4* const* w, int k8, long long row, int kp, int ks, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int step = 32 * ks;
#pragma unroll
  for (int j = 0; j < NW; j++) {
    const V4* wr = w[j] + row * k8;
#pragma unroll
    for (int t = 0; t < GEMV_PREFETCH; t++) {
      const int i = kp * 32 + lane + t * step;
      if (i < k8) asm volatile("prefetch.global.L2 [%0];" ::"l"(wr + i));
    }
  }
#endif
}

// gemv_nt: grid.x = ceil(N / (GEMV_WARPS / ks)) blocks of GEMV_WARPS
// warps; block b owns rows b*rb .. b*rb+rb-1 (rb = GEMV_WARPS / ks).
template <class E, int MT>
__device__ void gemv_nt_impl(const u16* x, const u16* w, u16* out, int M, int N, int K, int ks, int blk) {
  __shared__ float part[GEMV_WARPS][MT];
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int rb = GEMV_WARPS / ks, k8 = K >> 3;
  const long long row = (long long)blk * rb + wp / ks;
  float acc[1][MT];
#pragma unroll
  for (int m = 0; m < MT; m++) acc[0][m] = 0.0f;
  const V4* ws[1] = {(const V4*)w};
  if (row < N) gemv_prefetch<1>(ws, k8, row, wp % ks, ks, lane);
  PDL_ENTRY();
  if (row < N) gemv_rows<E, MT, 1>(ws, (const V4*)x, M, k8, row, wp % ks, ks, lane, acc);
#pragma unroll
  for (int m = 0; m < MT; m++) acc[0][m] = warp_sum(acc[0][m]);
  if (lane == 0)
#pragma unroll
    for (int m = 0; m < MT; m++) part[wp][m] = acc[0][m];
  __syncthreads();
  const int t = threadIdx.x;
  if (t < rb * MT) {
    const int r = t / MT, m = t % MT;
    const long long n = (long long)blk * rb + r;
    if (n < N && m < M) {
      float s = 0.0f;
      for (int j = 0; j < ks; j++) s += part[r * ks + j][m];
      out[(long long)m * N + n] = E::store(s);
    }
  }
}

// gemv_gated: out[m, n] = silu(x[m]·wg[n]) * (x[m]·wu[n]), each product
// rounded to the dtype first (as the unfused matmul_nt, silu and mul do).
template <class E, int MT>
__device__ void gemv_gated_impl(const u16* x, const u16* wg, const u16* wu, u16* out, int M, int N, int K, int ks) {
  __shared__ float part[2][GEMV_WARPS][MT];
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int rb = GEMV_WARPS / ks, k8 = K >> 3;
  const long long row = (long long)blockIdx.x * rb + wp / ks;
  float acc[2][MT];
#pragma unroll
  for (int m = 0; m < MT; m++) acc[0][m] = acc[1][m] = 0.0f;
  const V4* ws[2] = {(const V4*)wg, (const V4*)wu};
  if (row < N) gemv_prefetch<2>(ws, k8, row, wp % ks, ks, lane);
  PDL_ENTRY();
  if (row < N) gemv_rows<E, MT, 2>(ws, (const V4*)x, M, k8, row, wp % ks, ks, lane, acc);
#pragma unroll
  for (int m = 0; m < MT; m++) {
    acc[0][m] = warp_sum(acc[0][m]);
    acc[1][m] = warp_sum(acc[1][m]);
  }
  if (lane == 0)
#pragma unroll
    for (int m = 0; m < MT; m++) {
      part[0][wp][m] = acc[0][m];
      part[1][wp][m] = acc[1][m];
    }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < rb * MT) {
    const int r = t / MT, m = t % MT;
    const long long n = (long long)blockIdx.x * rb + r;
    if (n < N && m < M) {
      float g = 0.0f, u = 0.0f;
      for (int j = 0; j < ks; j++) {
        g += part[0][r * ks + j][m];
        u += part[1][r * ks + j][m];
      }
      g = E::load(E::store(g));
      u = E::load(E::store(u));
      float a = E::load(E::store(g / (1.0f + expf(-g))));
      out[(long long)m * N + n] = E::store(a * u);
    }
  }
}

#define GEMV_KERNELS(name, E, MT)                                                                                         \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                                           \
      gemv_nt_##name##_m##MT(const u16* x, const u16* w, u16* out, int M, int N, int K, int ks) {                         \
    gemv_nt_impl<E, MT>(x, w, out, M, N, K, ks, blockIdx.x);                                                              \
  }                                                                                                                       \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                                           \
      gemv_nt3_##name##_m##MT(const u16* x, const u16* w0, const u16* w1, const u16* w2, u16* o0, u16* o1, u16* o2,       \
                              int n0, int n1, int n2, int M, int K, int ks) {                                             \
    const int rb = GEMV_WARPS / ks, b0 = (n0 + rb - 1) / rb, b1 = (n1 + rb - 1) / rb;                                     \
    const int b = blockIdx.x;                                                                                             \
    if (b < b0)                                                                                                           \
      gemv_nt_impl<E, MT>(x, w0, o0, M, n0, K, ks, b);                                                                    \
    else if (b < b0 + b1)                                                                                                 \
      gemv_nt_impl<E, MT>(x, w1, o1, M, n1, K, ks, b - b0);                                                               \
    else                                                                                                                  \
      gemv_nt_impl<E, MT>(x, w2, o2, M, n2, K, ks, b - b0 - b1);                                                          \
  }                                                                                                                       \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                                           \
      gemv_gated_##name##_m##MT(const u16* x, const u16* wg, const u16* wu, u16* out, int M, int N, int K, int ks) {      \
    gemv_gated_impl<E, MT>(x, wg, wu, out, M, N, K, ks);                                                                  \
  }

#define GEMV_ALL_M(name, E) \
  GEMV_KERNELS(name, E, 1)  \
  GEMV_KERNELS(name, E, 2)  \
  GEMV_KERNELS(name, E, 4)  \
  GEMV_KERNELS(name, E, 8)

GEMV_ALL_M(f16, F16)
GEMV_ALL_M(bf16, BF16)
