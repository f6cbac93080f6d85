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
// Software-pipelined: a lane issues its next GEMV_UNROLL pieces before it
// uses the GEMV_UNROLL it holds, so between 4 and 8 are always in flight.
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

// gemv_dot adds the products of one 16-byte piece i of NW weight rows
// with the same piece of every row of x.
template <class E, int MT, int NW>
__device__ __forceinline__ void gemv_dot(const V4 (&wv)[NW], const V4* x, int M, int k8, int i, float acc[NW][MT]) {
#pragma unroll
  for (int m = 0; m < MT; m++)
    if (m < M) {
      V4 xv = ld_cached(x + (long long)m * k8 + i);
#pragma unroll
      for (int j = 0; j < NW; j++) acc[j][m] = dot8<E>(wv[j], xv, acc[j][m]);
    }
}

// gemv_full_round reports whether a lane's round of GEMV_UNROLL pieces
// from piece i (every step-th) lies within the row's k8 pieces.
__device__ __forceinline__ bool gemv_full_round(int i, int step, int k8) { return i + (GEMV_UNROLL - 1) * step < k8; }

// gemv_first loads a lane's first round of pieces of its NW rows wr.
template <int NW>
__device__ __forceinline__ void gemv_first(const V4* const* wr, int i, int step, V4 (&cur)[GEMV_UNROLL][NW]) {
#pragma unroll
  for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
    for (int j = 0; j < NW; j++) cur[u][j] = ld_stream(wr[j] + i + u * step);
}

// gemv_rows accumulates, for the calling warp's share of row `row` of
// NW weights w[0..NW), acc[j][m] += x[m, :] · w[j][row, :] over its
// pieces (k8 16-byte pieces per row; piece i of the share is
// i = kp*32 + lane + t*32*ks). Rounds of GEMV_UNROLL pieces are
// software-pipelined: the next round's loads are issued before this
// round's products, so a lane never waits with nothing in flight. On an
// H200 (same run, graph-replayed Llama-3-8B steps) this took batch 1
// from 4.630 to 4.519 ms at context 128 and 4.850 to 4.747 at 4096,
// although the doubled registers hold 3 blocks a multiprocessor instead
// of 8 (gate/up 63.2 to 58.5 us alone); rounds of 2 pipelined gave
// 4.581, rounds of 8 unpipelined a slower gate/up (60.9 us) and q/o.
// With loaded, cur already holds the first round (gemv_grid's early
// loads).
template <class E, int MT, int NW>
__device__ __forceinline__ void gemv_rows(const V4* const* w, const V4* x, int M, int k8, long long row, int kp, int ks, int lane,
                                          float acc[NW][MT], bool loaded, V4 (&cur)[GEMV_UNROLL][NW]) {
  const int step = 32 * ks, round = GEMV_UNROLL * step;
  const V4* wr[NW];
#pragma unroll
  for (int j = 0; j < NW; j++) wr[j] = w[j] + row * k8;
  int i = kp * 32 + lane;
  if (gemv_full_round(i, step, k8)) {
    if (!loaded) gemv_first(wr, i, step, cur);
    for (;;) {
      const int n = i + round;
      const bool more = gemv_full_round(n, step, k8);
      V4 nxt[GEMV_UNROLL][NW];
      if (more) {
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
          for (int j = 0; j < NW; j++) nxt[u][j] = ld_stream(wr[j] + n + u * step);
      }
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++) gemv_dot<E, MT, NW>(cur[u], x, M, k8, i + u * step, acc);
      i = n;
      if (!more) break;
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
        for (int j = 0; j < NW; j++) cur[u][j] = nxt[u][j];
    }
  }
  for (; i < k8; i += step) {
    V4 wv[NW];
#pragma unroll
    for (int j = 0; j < NW; j++) wv[j] = ld_stream(wr[j] + i);
    gemv_dot<E, MT, NW>(wv, x, M, k8, i, acc);
  }
}

// gemv_block computes one row group (block-sized unit of work: rb = GEMV_WARPS
// / ks rows of w, ks warps a row) of NW weights of N rows: out[m, n] =
// x[m]·w[n] (NW == 1), or silu(x[m]·wg[n]) * (x[m]·wu[n]) (NW == 2), each
// product rounded to the dtype first (as the unfused matmul_nt, silu and
// mul do). Every thread of the block calls it; it ends with a barrier
// so part can be reused for the next group.
template <class E, int MT, int NW>
__device__ __forceinline__ void gemv_block(const V4* const* ws, const V4* x, u16* out, int M, int N, int k8, int ks, long long blk,
                                           float (*part)[GEMV_WARPS][MT], bool loaded, V4 (&cur)[GEMV_UNROLL][NW]) {
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int rb = GEMV_WARPS / ks;
  const long long row = blk * rb + wp / ks;
  float acc[NW][MT];
#pragma unroll
  for (int j = 0; j < NW; j++)
#pragma unroll
    for (int m = 0; m < MT; m++) acc[j][m] = 0.0f;
  if (row < N) gemv_rows<E, MT, NW>(ws, x, M, k8, row, wp % ks, ks, lane, acc, loaded, cur);
#pragma unroll
  for (int j = 0; j < NW; j++)
#pragma unroll
    for (int m = 0; m < MT; m++) acc[j][m] = warp_sum(acc[j][m]);
  if (lane == 0)
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
      for (int m = 0; m < MT; m++) part[j][wp][m] = acc[j][m];
  __syncthreads();
  const int t = threadIdx.x;
  if (t < rb * MT) {
    const int r = t / MT, m = t % MT;
    const long long n = blk * rb + r;
    if (n < N && m < M) {
      float s[NW];
#pragma unroll
      for (int j = 0; j < NW; j++) {
        s[j] = 0.0f;
        for (int q = 0; q < ks; q++) s[j] += part[j][r * ks + q][m];
      }
      if (NW == 1) {
        out[(long long)m * N + n] = E::store(s[0]);
      } else {
        const float g = E::load(E::store(s[0])), u = E::load(E::store(s[NW - 1]));
        const float a = E::load(E::store(g / (1.0f + expf(-g))));
        out[(long long)m * N + n] = E::store(a * u);
      }
    }
  }
  __syncthreads();
}

// GemvSeg is a row group's place: the weights, output and rows of the
// segment it falls in (gemv_nt3 deals groups to q, k and v in order).
template <int NW>
struct GemvSeg {
  const V4* w[NW];
  u16* out;
  int n;
  long long blk;
};

template <int NW>
__device__ __forceinline__ GemvSeg<NW> gemv_seg(const u16* const* w, u16* const* out, const int* n, int S, int rb, long long b) {
  GemvSeg<NW> g;
  int s = 0;
  long long nb = ((long long)n[0] + rb - 1) / rb;
  if (S > 1 && b >= nb) {
    b -= nb;
    s = 1;
    nb = ((long long)n[1] + rb - 1) / rb;
    if (S > 2 && b >= nb) {
      b -= nb;
      s = 2;
    }
  }
#pragma unroll
  for (int j = 0; j < NW; j++) g.w[j] = (const V4*)(s == 0 ? w[j] : s == 1 ? w[NW + j] : w[2 * NW + j]);
  g.out = s == 0 ? out[0] : s == 1 ? out[1] : out[2];
  g.n = s == 0 ? n[0] : s == 1 ? n[1] : n[2];
  g.blk = b;
  return g;
}

// gemv_grid runs row groups blockIdx.x, blockIdx.x + gridDim.x, ... of S
// segments (rows n0, n1, n2; NW weights each, w[s*NW + j]). The host
// sizes the grid to one balanced wave (waveGrid), so every block does
// the same number of groups and none waits to be placed. On an H200 a
// Llama-3-8B step took 5.04-5.07 ms against 5.35 with a block per row
// group (same run; gate/up 61.8 against 68.2 us alone); a wave of half
// the blocks the GPU holds (so that the next kernel's blocks could start
// beside it) took 5.68.
template <class E, int MT, int NW, int S>
__device__ void gemv_grid(const u16* x, const u16* const* w, u16* const* out, const int* n, int M, int K, int ks, int pre) {
  __shared__ float part[NW][GEMV_WARPS][MT];
  const int rb = GEMV_WARPS / ks, k8 = K >> 3;
  long long total = 0;
  for (int s = 0; s < S; s++) total += ((long long)n[s] + rb - 1) / rb;
  // With pre (the host's promise that no kernel of the stream since the
  // call's first one writes w), a lane loads its first round of w before
  // the wait, so the loads are in flight while the kernel before
  // finishes. Without it nothing is read before the wait: a weight
  // operand may be another kernel's output. Asking L2 for each lane's
  // first 8 pieces of w before the wait (a hint, safe whatever w is) made
  // a step slower (H200, Llama-3-8B, batch 1, graph-replayed, same run:
  // 4.362 ms without, 4.402 with 8 pieces, 4.531 with 16).
  V4 cur[GEMV_UNROLL][NW];
  bool loaded = false;
  if (pre && blockIdx.x < total) {
    GemvSeg<NW> g = gemv_seg<NW>(w, out, n, S, rb, blockIdx.x);
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, i = (wp % ks) * 32 + lane;
    const long long row = g.blk * rb + wp / ks;
    if (row < g.n && gemv_full_round(i, 32 * ks, k8)) {
      const V4* wr[NW];
#pragma unroll
      for (int j = 0; j < NW; j++) wr[j] = g.w[j] + row * k8;
      gemv_first<NW>(wr, i, 32 * ks, cur);
      loaded = true;
    }
  }
  PDL_ENTRY();
  for (long long b = blockIdx.x; b < total; b += gridDim.x) {
    GemvSeg<NW> g = gemv_seg<NW>(w, out, n, S, rb, b);
    gemv_block<E, MT, NW>(g.w, (const V4*)x, g.out, M, g.n, k8, ks, g.blk, part, loaded, cur);
    loaded = false;
  }
}

// gemv_nt: out[M, N] = x · wᵀ. gemv_nt3: three of one x (q, k, v).
// gemv_gated: silu(x · wgᵀ) ⊙ (x · wuᵀ).
#define GEMV_KERNELS(name, E, MT)                                                                                   \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                                     \
      gemv_nt_##name##_m##MT(const u16* x, const u16* w, u16* out, int M, int N, int K, int ks, int pre) {          \
    const u16* ws[1] = {w};                                                                                         \
    u16* os[1] = {out};                                                                                             \
    const int ns[1] = {N};                                                                                          \
    gemv_grid<E, MT, 1, 1>(x, ws, os, ns, M, K, ks, pre);                                                           \
  }                                                                                                                 \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                                     \
      gemv_nt3_##name##_m##MT(const u16* x, const u16* w0, const u16* w1, const u16* w2, u16* o0, u16* o1, u16* o2, \
                              int n0, int n1, int n2, int M, int K, int ks, int pre) {                              \
    const u16* ws[3] = {w0, w1, w2};                                                                                \
    u16* os[3] = {o0, o1, o2};                                                                                      \
    const int ns[3] = {n0, n1, n2};                                                                                 \
    gemv_grid<E, MT, 1, 3>(x, ws, os, ns, M, K, ks, pre);                                                           \
  }                                                                                                                 \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                                     \
      gemv_gated_##name##_m##MT(const u16* x, const u16* wg, const u16* wu, u16* out, int M, int N, int K, int ks,  \
                                int pre) {                                                                          \
    const u16* ws[2] = {wg, wu};                                                                                    \
    u16* os[1] = {out};                                                                                             \
    const int ns[1] = {N};                                                                                          \
    gemv_grid<E, MT, 2, 1>(x, ws, os, ns, M, K, ks, pre);                                                           \
  }

#define GEMV_ALL_M(name, E) \
  GEMV_KERNELS(name, E, 1)  \
  GEMV_KERNELS(name, E, 2)  \
  GEMV_KERNELS(name, E, 4)  \
  GEMV_KERNELS(name, E, 8)

GEMV_ALL_M(f16, F16)
GEMV_ALL_M(bf16, BF16)

// One-row products (decode at batch 1): gemv1_nt, gemv1_nt3, gemv1_gated
// compute what gemv_nt, gemv_nt3 and gemv_gated do for M = 1, one block
// of ROW_WARPS warps a multiprocessor. Block b of G owns the rows
// [b*N/G, (b+1)*N/G) of the weights' rows taken as one sequence (q, k
// and v in order for nt3); its warp w takes rows r0+w, r0+w+ROW_WARPS,
// ... whole (no split of k), and walks their rounds (32 lanes x one
// 16-byte piece of each of the NW weights) as one sequence t, in batches
// of U rounds (8/NW, 8 KiB a warp in flight, or fewer where that does
// not divide a row: TP's down, k 7168, takes 7), the next batch's loads
// issued before the batch held is multiplied. x lives in shared memory
// (one copy a block).
//
// With pre (the host's promise that w is fixed), each warp copies its
// first rounds into ROW_PF_BYTES of dynamic shared memory with cp.async
// before the PDL wait, so they stream while the kernel before ends, and
// uses them while its first global batch is in flight. A lane reads back
// only the pieces it copied (cp.async.wait_all of that lane, no
// barrier). On an H200 (same call, graph-replayed) a Llama-3-8B step at
// batch 1 took 4.209-4.226 ms against 4.300-4.314 with gemv_nt's
// split-K kernels (context 4096: 4.401-4.447 against 4.549-4.569). A
// chain of the same products alone with a kernel of this design
// reached 0.81 of the streaming bound launched per product, 0.845 with
// 64-128 KiB copied early and 0.81 with 192 KiB (the L1 left for the
// loads in flight shrinks).
#define ROW_WARPS 16
#define ROW_THREADS (ROW_WARPS * 32)
#define ROW_MAXK 16384
#define ROW_PF_BYTES 131072

__device__ __forceinline__ void row_cp_async16(V4* dst, const V4* src) {
  unsigned d;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

// RowMap finds a row of the sequence in the S segments of NW weights.
template <int NW, int S>
struct RowMap {
  const V4* w[S * NW];
  u16* out[S];
  long long n[S];
  int k8;
  __device__ __forceinline__ int seg(long long& r) const {
    int s = 0;
#pragma unroll
    for (int i = 0; i + 1 < S; i++)
      if (s == i && r >= n[i]) {
        r -= n[i];
        s = i + 1;
      }
    return s;
  }
  // Segments are picked by selects over constant indices (a dynamic
  // index would put the arrays in local memory).
  __device__ __forceinline__ const V4* row(long long r, int j) const {
    const int s = seg(r);
    const V4* p = w[j];
#pragma unroll
    for (int i = 1; i < S; i++)
      if (s == i) p = w[i * NW + j];
    return p + r * k8;
  }
  __device__ __forceinline__ u16* dst(int s) const {
    u16* p = out[0];
#pragma unroll
    for (int i = 1; i < S; i++)
      if (s == i) p = out[i];
    return p;
  }
};

// row_batch loads the U rounds from t0 of a warp's sequence (one row:
// batches never straddle rows, the host picks U dividing R).
template <int NW, int S, int U>
__device__ __forceinline__ void row_batch(const RowMap<NW, S>& mp, long long row0, int R, int t0, int lane, V4 (&v)[U][NW]) {
  const long long r = row0 + (long long)(t0 / R) * ROW_WARPS;
  const int c = (t0 % R) * 32 + lane;
#pragma unroll
  for (int j = 0; j < NW; j++) {
    const V4* p = mp.row(r, j) + c;
#pragma unroll
    for (int u = 0; u < U; u++) v[u][j] = ld_stream(p + u * 32);
  }
}

template <class E, int NW, int S, int U>
__device__ __forceinline__ void gemv_row(const u16* x, const RowMap<NW, S>& mp, int K, int pre) {
  extern __shared__ V4 row_pf[];
  __shared__ V4 xs[ROW_MAXK / 8];
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int k8 = K >> 3, R = k8 >> 5;
  long long ntot = 0;
#pragma unroll
  for (int s = 0; s < S; s++) ntot += mp.n[s];
  const long long r0 = (long long)blockIdx.x * ntot / gridDim.x, r1 = (long long)(blockIdx.x + 1) * ntot / gridDim.x;
  const long long rows = r1 - r0 > wp ? (r1 - r0 - wp + ROW_WARPS - 1) / ROW_WARPS : 0;
  const int T = (int)rows * R;
  const long long row0 = r0 + wp;
  V4* mine = row_pf + wp * (ROW_PF_BYTES / 16 / ROW_WARPS);
  int have = 0;
  if (pre) {
    const int cap = ROW_PF_BYTES / 16 / ROW_WARPS / (32 * NW);
    have = min(T, cap - cap % U);
    for (int t = 0; t < have; t++) {
      const long long r = row0 + (long long)(t / R) * ROW_WARPS;
#pragma unroll
      for (int j = 0; j < NW; j++) row_cp_async16(mine + (t * NW + j) * 32 + lane, mp.row(r, j) + (t % R) * 32 + lane);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  PDL_ENTRY();
  for (int i = threadIdx.x; i < k8; i += ROW_THREADS) xs[i] = ((const V4*)x)[i];
  __syncthreads();
  if (T == 0) return;
  if (have) asm volatile("cp.async.wait_all;" ::: "memory");
  V4 ahead[U][NW];
  if (have < T) row_batch<NW, S, U>(mp, row0, R, have, lane, ahead);
  float acc[NW];
#pragma unroll
  for (int j = 0; j < NW; j++) acc[j] = 0.0f;
  for (int t0 = 0; t0 < T; t0 += U) {
    V4 cur[U][NW];
    if (t0 < have) {
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int j = 0; j < NW; j++) cur[u][j] = mine[((t0 + u) * NW + j) * 32 + lane];
    } else {
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int j = 0; j < NW; j++) cur[u][j] = ahead[u][j];
      if (t0 + U < T) row_batch<NW, S, U>(mp, row0, R, t0 + U, lane, ahead);
    }
    const int j0 = t0 % R;
#pragma unroll
    for (int u = 0; u < U; u++) {
      const V4 xv = xs[(j0 + u) * 32 + lane];
#pragma unroll
      for (int j = 0; j < NW; j++) acc[j] = dot8<E>(cur[u][j], xv, acc[j]);
    }
    if (j0 + U == R) {
      float s[NW];
#pragma unroll
      for (int j = 0; j < NW; j++) {
        s[j] = warp_sum(acc[j]);
        acc[j] = 0.0f;
      }
      if (lane == 0) {
        long long r = row0 + (long long)(t0 / R) * ROW_WARPS;
        const int sg = mp.seg(r);
        if (NW == 1) {
          mp.dst(sg)[r] = E::store(s[0]);
        } else {
          const float g = E::load(E::store(s[0])), u = E::load(E::store(s[NW - 1]));
          const float a = E::load(E::store(g / (1.0f + expf(-g))));
          mp.dst(sg)[r] = E::store(a * u);
        }
      }
    }
  }
}

// One kernel per batch length U (suffix _u<U>, none for the longest): a
// row is a whole number of batches, so k of R rounds takes the longest U
// of its weights' list dividing R (gemv.go, rowBatch).
#define GEMV_ROW_NT(name, E, U, sfx)                                                                            \
  extern "C" __global__ void __launch_bounds__(ROW_THREADS, 1)                                                  \
      gemv1_nt_##name##sfx(const u16* x, const u16* w, u16* out, int N, int K, int pre) {                     \
    RowMap<1, 1> mp;                                                                                            \
    mp.w[0] = (const V4*)w;                                                                                     \
    mp.out[0] = out;                                                                                            \
    mp.n[0] = N;                                                                                                \
    mp.k8 = K >> 3;                                                                                             \
    gemv_row<E, 1, 1, U>(x, mp, K, pre);                                                                        \
  }
#define GEMV_ROW_NT3(name, E, U, sfx)                                                                           \
  extern "C" __global__ void __launch_bounds__(ROW_THREADS, 1)                                                  \
      gemv1_nt3_##name##sfx(const u16* x, const u16* w0, const u16* w1, const u16* w2, u16* o0, u16* o1,      \
                              u16* o2, int n0, int n1, int n2, int K, int pre) {                                \
    RowMap<1, 3> mp;                                                                                            \
    mp.w[0] = (const V4*)w0;                                                                                    \
    mp.w[1] = (const V4*)w1;                                                                                    \
    mp.w[2] = (const V4*)w2;                                                                                    \
    mp.out[0] = o0;                                                                                             \
    mp.out[1] = o1;                                                                                             \
    mp.out[2] = o2;                                                                                             \
    mp.n[0] = n0;                                                                                               \
    mp.n[1] = n1;                                                                                               \
    mp.n[2] = n2;                                                                                               \
    mp.k8 = K >> 3;                                                                                             \
    gemv_row<E, 1, 3, U>(x, mp, K, pre);                                                                        \
  }
#define GEMV_ROW_GATED(name, E, U, sfx)                                                                         \
  extern "C" __global__ void __launch_bounds__(ROW_THREADS, 1)                                                  \
      gemv1_gated_##name##sfx(const u16* x, const u16* wg, const u16* wu, u16* out, int N, int K, int pre) {  \
    RowMap<2, 1> mp;                                                                                            \
    mp.w[0] = (const V4*)wg;                                                                                    \
    mp.w[1] = (const V4*)wu;                                                                                    \
    mp.out[0] = out;                                                                                            \
    mp.n[0] = N;                                                                                                \
    mp.k8 = K >> 3;                                                                                             \
    gemv_row<E, 2, 1, U>(x, mp, K, pre);                                                                        \
  }
#define GEMV_ROW_KERNELS(name, E)                                                    \
  GEMV_ROW_NT(name, E, 8, ) GEMV_ROW_NT(name, E, 7, _u7) GEMV_ROW_NT(name, E, 6, _u6)     \
  GEMV_ROW_NT(name, E, 5, _u5) GEMV_ROW_NT3(name, E, 8, ) GEMV_ROW_NT3(name, E, 7, _u7)  \
  GEMV_ROW_NT3(name, E, 6, _u6) GEMV_ROW_NT3(name, E, 5, _u5) GEMV_ROW_GATED(name, E, 4, ) \
  GEMV_ROW_GATED(name, E, 3, _u3)

GEMV_ROW_KERNELS(f16, F16)
GEMV_ROW_KERNELS(bf16, BF16)
