// chorus VM tensor-core skinny products: out[M, N] = x[M, K] · w[N, K]ᵀ
// for M up to TC_MAX_M rows of x (a decode step of several sequences),
// float16 and bfloat16 with float32 accumulation (mma.sync m16n8k16).
// Compiled after kernels_gemv.cu (V4, ld_stream, ld_cached).
//
// Memory-bound like the CUDA-core kernels: every byte of w is read once
// with 16-byte loads that skip L1; the products run on the tensor cores,
// so a piece of w costs one load whatever M is (the CUDA-core kernel pays
// M loads of x and 8·M multiply-adds per piece and stops being
// memory-bound at 8 rows).
//
// A block is TC_WARPS warps; warp i owns rows tile·TC_ROWS + 16i ..
// +15 of w (the mma's A operand, 16 rows) and all MT = 8·NT rows of x
// (B, NT tiles of 8 tokens). Lane (g = lane/4, q = lane%4) loads the
// 16-byte piece q of each 32-element chunk of k from rows g and g+8 of w
// and from token g of every x tile. The mma reads A and B registers in a
// fixed (row, k) layout; since a dot product does not care about the
// order of k, the piece's 8 elements stand for k columns {2q, 2q+1,
// 2q+8, 2q+9} of one mma (its first two registers) and the same of a
// second (its last two), in A and B alike. TC_UNROLL chunks are in flight
// per lane before the first mma.
//
// Split-K: grid.y = splits blocks share a tile, each over cps chunks of
// k. With splits > 1 every block writes its float32 partial sums to
// part[tile][split][weight][token][row], and the last block of a tile to
// finish (a counter per tile, reset by that block for the next launch)
// adds the splits in order and writes out: one launch, no atomics on the
// data, the same sum at every run.

#define TC_WARPS 4
#define TC_ROWS (16 * TC_WARPS)
#define TC_MAX_M 32

template <class E>
struct Mma;
template <>
struct Mma<BF16> {
  static __device__ __forceinline__ void run(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
template <>
struct Mma<F16> {
  static __device__ __forceinline__ void run(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ V4 v4_zero() {
  V4 v;
  v.x = v.y = v.z = v.w = 0u;
  return v;
}

// tc_rows accumulates acc[j][t][0..3] (weight j, token tile t; the mma's
// C fragment: rows r0 = g and r1 = g + 8 of the warp's 16, tokens
// 8t + 2q and 8t + 2q + 1) over chunks [c0, c1) of k.
template <class E, int NT, int NW, int U>
__device__ __forceinline__ void tc_rows(const V4* const* w, const V4* x, int M, int N, int k8, long long rowBase, int c0, int c1,
                                        float acc[NW][NT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const long long r0 = rowBase + g, r1 = r0 + 8;
  const bool ok0 = r0 < N, ok1 = r1 < N;
  for (int c = c0; c < c1; c += U) {
    V4 wa[NW][U], wb[NW][U], xv[NT][U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int piece = (c + u) * 4 + q;
      const bool in = c + u < c1 && piece < k8;
#pragma unroll
      for (int j = 0; j < NW; j++) {
        wa[j][u] = in && ok0 ? ld_stream(w[j] + r0 * k8 + piece) : v4_zero();
        wb[j][u] = in && ok1 ? ld_stream(w[j] + r1 * k8 + piece) : v4_zero();
      }
#pragma unroll
      for (int t = 0; t < NT; t++) {
        const int tok = t * 8 + g;
        xv[t][u] = in && tok < M ? ld_cached(x + (long long)tok * k8 + piece) : v4_zero();
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int j = 0; j < NW; j++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
          Mma<E>::run(acc[j][t], wa[j][u].x, wb[j][u].x, wa[j][u].y, wb[j][u].y, xv[t][u].x, xv[t][u].y);
          Mma<E>::run(acc[j][t], wa[j][u].z, wb[j][u].z, wa[j][u].w, wb[j][u].w, xv[t][u].z, xv[t][u].w);
        }
  }
}

// tc_store writes one output element: the product (NW == 1), or
// silu(g)·u with every product rounded to the dtype first as the unfused
// matmul_nt, silu and mul do (NW == 2).
template <class E, int NW>
__device__ __forceinline__ void tc_store(u16* out, long long i, const float* v) {
  if (NW == 1) {
    out[i] = E::store(v[0]);
  } else {
    const float gv = E::load(E::store(v[0])), uv = E::load(E::store(v[1]));
    const float a = E::load(E::store(gv / (1.0f + expf(-gv))));
    out[i] = E::store(a * uv);
  }
}

// TC_PREFETCH is the chunks of k of its rows a lane asks L2 for before
// PDL_WAIT: 8 give a warp the first 512 bytes of each of its 16 rows of
// each weight (32 KiB a block of one weight).
#define TC_PREFETCH 8

// tc_prefetch asks L2 for the calling lane's first pieces of rows r0
// and r1 of NW weights (those tc_rows loads first): weights are never
// written during a step, so this may run before PDL_WAIT.
template <int NW>
__device__ __forceinline__ void tc_prefetch(const V4* const* w, int N, int k8, long long rowBase, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const long long r0 = rowBase + g, r1 = r0 + 8;
#pragma unroll
  for (int u = 0; u < TC_PREFETCH; u++) {
    const int piece = (c0 + u) * 4 + q;
    if (c0 + u < c1 && piece < k8)
#pragma unroll
      for (int j = 0; j < NW; j++) {
        if (r0 < N) asm volatile("prefetch.global.L2 [%0];" ::"l"(w[j] + r0 * k8 + piece));
        if (r1 < N) asm volatile("prefetch.global.L2 [%0];" ::"l"(w[j] + r1 * k8 + piece));
      }
  }
#endif
}

// tc_tile computes rows tile·TC_ROWS .. +TC_ROWS-1 of one product (NW
// weights of N rows; out [M, N]) over this block's split of k (gtile
// numbers the tile among all the launch's tiles for part and counters).
template <class E, int NT, int NW, int U>
__device__ void tc_tile(const u16* x, const u16* const* wp, u16* out, int M, int N, int K, int cps, int tile, int gtile, float* part,
                        int* counters) {
  constexpr int MT = NT * 8;
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int splits = gridDim.y, s = blockIdx.y;
  const int k8 = K >> 3, nch = (k8 + 3) >> 2;
  const int c0 = s * cps, c1 = min(nch, c0 + cps);
  const V4* w[NW];
#pragma unroll
  for (int j = 0; j < NW; j++) w[j] = (const V4*)wp[j];
  float acc[NW][NT][4];
#pragma unroll
  for (int j = 0; j < NW; j++)
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
      for (int i = 0; i < 4; i++) acc[j][t][i] = 0.0f;
  const long long rowBase = (long long)tile * TC_ROWS + wid * 16;
  tc_prefetch<NW>(w, N, k8, rowBase, c0, c1);
  PDL_ENTRY();
  tc_rows<E, NT, NW, U>(w, (const V4*)x, M, N, k8, rowBase, c0, c1, acc);
  if (splits == 1) {
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const long long n = rowBase + g + (i >> 1) * 8;
        const int m = t * 8 + 2 * q + (i & 1);
        if (n < N && m < M) {
          float v[NW];
#pragma unroll
          for (int j = 0; j < NW; j++) v[j] = acc[j][t][i];
          tc_store<E, NW>(out, (long long)m * N + n, v);
        }
      }
    return;
  }
  // This block's partial sums, then the tile's counter.
  float* mine = part + ((long long)gtile * splits + s) * NW * MT * TC_ROWS;
#pragma unroll
  for (int j = 0; j < NW; j++)
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int r = wid * 16 + g + (i >> 1) * 8, m = t * 8 + 2 * q + (i & 1);
        mine[(j * MT + m) * TC_ROWS + r] = acc[j][t][i];
      }
  __threadfence();
  __syncthreads();
  __shared__ int last;
  if (threadIdx.x == 0) {
    last = atomicAdd(&counters[gtile], 1) == splits - 1;
    if (last) counters[gtile] = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* all = part + (long long)gtile * splits * NW * MT * TC_ROWS;
  for (int e = threadIdx.x; e < M * TC_ROWS; e += blockDim.x) {
    const int m = e / TC_ROWS, r = e % TC_ROWS;
    const long long n = (long long)tile * TC_ROWS + r;
    if (n >= N) continue;
    float v[NW];
#pragma unroll
    for (int j = 0; j < NW; j++) {
      float sum = 0.0f;
      for (int x = 0; x < splits; x++) sum += __ldcg(all + ((long long)x * NW * MT + j * MT + m) * TC_ROWS + r);
      v[j] = sum;
    }
    tc_store<E, NW>(out, (long long)m * N + n, v);
  }
}

// TC_U is the chunks in flight per lane: fewer for two weights and 32
// rows of x (registers).
#define TC_U(NT, NW) ((NW) == 2 && (NT) == 4 ? 2 : 4)

#define TC_KERNELS(name, E, MT)                                                                                         \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                           \
      tc_nt_##name##_m##MT(const u16* x, const u16* w, u16* out, int M, int N, int K, int cps, float* part,               \
                           int* counters) {                                                                            \
    const u16* ws[1] = {w};                                                                                            \
    tc_tile<E, MT / 8, 1, TC_U(MT / 8, 1)>(x, ws, out, M, N, K, cps, blockIdx.x, blockIdx.x, part, counters);          \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                           \
      tc_nt3_##name##_m##MT(const u16* x, const u16* w0, const u16* w1, const u16* w2, u16* o0, u16* o1, u16* o2,       \
                            int n0, int n1, int n2, int M, int K, int cps, float* part, int* counters) {                \
    const int b0 = (n0 + TC_ROWS - 1) / TC_ROWS, b1 = (n1 + TC_ROWS - 1) / TC_ROWS;                                     \
    const int b = blockIdx.x;                                                                                          \
    const u16* ws[1];                                                                                                  \
    if (b < b0) {                                                                                                      \
      ws[0] = w0;                                                                                                      \
      tc_tile<E, MT / 8, 1, TC_U(MT / 8, 1)>(x, ws, o0, M, n0, K, cps, b, b, part, counters);                           \
    } else if (b < b0 + b1) {                                                                                          \
      ws[0] = w1;                                                                                                      \
      tc_tile<E, MT / 8, 1, TC_U(MT / 8, 1)>(x, ws, o1, M, n1, K, cps, b - b0, b, part, counters);                      \
    } else {                                                                                                           \
      ws[0] = w2;                                                                                                      \
      tc_tile<E, MT / 8, 1, TC_U(MT / 8, 1)>(x, ws, o2, M, n2, K, cps, b - b0 - b1, b, part, counters);                 \
    }                                                                                                                  \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                           \
      tc_gated_##name##_m##MT(const u16* x, const u16* wg, const u16* wu, u16* out, int M, int N, int K, int cps,      \
                              float* part, int* counters) {                                                            \
    const u16* ws[2] = {wg, wu};                                                                                       \
    tc_tile<E, MT / 8, 2, TC_U(MT / 8, 2)>(x, ws, out, M, N, K, cps, blockIdx.x, blockIdx.x, part, counters);          \
  }

#define TC_ALL_M(name, E) \
  TC_KERNELS(name, E, 8)  \
  TC_KERNELS(name, E, 16) \
  TC_KERNELS(name, E, 32)

TC_ALL_M(f16, F16)
TC_ALL_M(bf16, BF16)
