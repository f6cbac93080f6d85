// chorus VM prefill attention: the attention op's second half (after
// kv_append) when every sequence brings many tokens (a prompt or a chunk
// of one), float16 and bfloat16, head dims 64 and 128, up to 8 query
// heads a kv head. A module of its own (prefill.go): compiled after
// kernels.cu (F16, BF16, PDL_ENTRY), nothing else.
//
// The split-KV kernel (kernels_attn.cu) gives every token a block of its
// own, so a prompt of n tokens reads each cache row once per token that
// sees it: on an H200 a 512-token Llama-3-8B prompt spent 332 us a layer
// there. prefill_attn is flash-attention-2 on the tensor cores: grid
// (query blocks, kv heads, sequences), exactly PF_WARPS warps a block
// (the tile copy is unrolled for that many threads). A block takes
// PF_ROWS query rows, row r being head r % G (of the G = hq / hkv that
// share the kv head) of token r / G of its run of tq = PF_ROWS / G
// tokens, and walks the cache in tiles of PF_KEYS rows: the block copies
// a tile's K and V to shared memory once (V transposed; every load of a
// tile issued before the first store), and each warp computes S = Q Kᵀ
// for its 16 rows (mma.sync m16n8k16, float32 accumulation), masks the
// rows past each token's position, keeps the running max and sum (online
// softmax, base 2), and adds P V (P rounded to the dtype, as flash
// attention does) into its float32 output. The output is divided by the
// sum and rounded to the dtype once.
//
// Semantics are the attention op's: token t of sequence b attends cache
// rows 0..pos[t] of that sequence's caches, scale 1/sqrt(d); a position
// outside the cache gives a NaN output row (as attn_split). The tiles
// run to the largest position of the block's tokens; rows between a
// token's position and that one get weight zero (a cache row there that
// holds Inf or NaN would still reach the output: a prefill's rows are
// all written by then).
//
// mma fragments (PTX ISA, m16n8k16, 16-bit A and B, g = lane / 4, c =
// lane % 4): A (16 x 16, row-major) a0 = (g, 2c..2c+1), a1 = (g + 8,
// 2c..), a2 = (g, 2c + 8..), a3 = (g + 8, 2c + 8..); B (16 x 8) b0 = (k
// 2c..2c+1, n g), b1 = (k 2c + 8.., n g); C (16 x 8) c0, c1 = (g,
// 2c..2c+1), c2, c3 = (g + 8, 2c..); the lower index in the low half of
// a 32-bit register. S's C fragments of key tiles 2j and 2j + 1 are the A
// fragment of keys 16j..16j+15 of P.

#define PF_WARPS 4
#define PF_ROWS (16 * PF_WARPS)
#define PF_KEYS 64

template <class E>
struct PfMma;
template <>
struct PfMma<BF16> {
  static __device__ __forceinline__ void run(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct PfMma<F16> {
  static __device__ __forceinline__ void run(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

struct __align__(16) PfV4 {
  unsigned x, y, z, w;
};

__device__ __forceinline__ float pf_neg_inf() { return __uint_as_float(0xff800000u); }

// pf_pack rounds lo and hi to the dtype, lo in the low half.
template <class E>
__device__ __forceinline__ unsigned pf_pack(float lo, float hi) {
  return (unsigned)E::store(lo) | ((unsigned)E::store(hi) << 16);
}

template <class E, int D>
__device__ void prefill_attn_impl(const u16* q, const u16* kc, const u16* vc, const int* pos, u16* out, int hq, int hkv, int seq,
                                  int tps, int tq, float scale2) {
  constexpr int KS = D + 8;        // K tile row stride (elements): fragment loads hit 32 banks
  constexpr int VS = PF_KEYS + 8;  // Vᵀ tile row stride
  constexpr int DK = D / 16;       // k steps of Q Kᵀ
  constexpr int DN = D / 8;        // n tiles of the output
  constexpr int NK = PF_KEYS / 8;  // n tiles of S
  constexpr int PF_COPY = PF_KEYS * D / 8 / (PF_WARPS * 32);  // 16-byte pieces of K (and of V) a thread copies a tile
  __shared__ __align__(16) u16 ks[PF_KEYS * KS];
  __shared__ __align__(16) u16 vt[D * VS];
  __shared__ int lim[PF_ROWS];
  __shared__ int top;
  const int G = hq / hkv, kh = blockIdx.y, b = blockIdx.z;
  const int qb = gridDim.x - 1 - blockIdx.x;  // the blocks with the most rows first
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const long long t0 = (long long)b * tps + (long long)qb * tq;  // the block's first token
  const int nt = min(tq, tps - qb * tq);
  // lim[r]: row r's position; -1 no row (past the tokens), -2 a position
  // outside the cache (NaN output). top: the largest position.
  if (threadIdx.x == 0) top = -1;
  __syncthreads();
  for (int r = threadIdx.x; r < PF_ROWS; r += blockDim.x) {
    const int i = r / G;
    int l = -1;
    if (i < nt && i < tq) {
      const int p = pos[t0 + i];
      l = p < 0 || p >= seq ? -2 : p;
    }
    lim[r] = l;
    if (l >= 0) atomicMax(&top, l);
  }
  __syncthreads();
  // This warp's rows g and g + 8 of 16: their positions (rows without
  // one attend row 0 only, so that every row has a finite max from the
  // first tile on; they are not stored) and q as A fragments.
  const int rlo = w * 16 + g, rhi = rlo + 8;
  const int llo = lim[rlo], lhi = lim[rhi];
  const int plo = max(llo, 0), phi = max(lhi, 0);
  unsigned qf[DK][4];
  {
    const u16* qlo = llo != -1 ? q + ((t0 + rlo / G) * hq + kh * G + rlo % G) * D : nullptr;
    const u16* qhi = lhi != -1 ? q + ((t0 + rhi / G) * hq + kh * G + rhi % G) * D : nullptr;
#pragma unroll
    for (int kk = 0; kk < DK; kk++) {
      const int e = kk * 16 + 2 * c;
      qf[kk][0] = qlo ? *(const unsigned*)(qlo + e) : 0u;
      qf[kk][1] = qhi ? *(const unsigned*)(qhi + e) : 0u;
      qf[kk][2] = qlo ? *(const unsigned*)(qlo + e + 8) : 0u;
      qf[kk][3] = qhi ? *(const unsigned*)(qhi + e + 8) : 0u;
    }
  }
  float o[DN][4];
#pragma unroll
  for (int n = 0; n < DN; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
  float mlo = pf_neg_inf(), mhi = pf_neg_inf(), slo = 0.0f, shi = 0.0f;
  const long long rs = (long long)hkv * D;  // elements between cache rows
  const u16* kb = kc + (long long)b * seq * rs + (long long)kh * D;
  const u16* vb = vc + (long long)b * seq * rs + (long long)kh * D;
  const int tiles = (top + PF_KEYS) / PF_KEYS;  // rows 0..top
  for (int kt = 0; kt < tiles; kt++) {
    const int j0 = kt * PF_KEYS;
    __syncthreads();  // every warp is done with the last tile
    // Copy rows j0.. (zeros past top): lane pairs take a row's 32-byte
    // sector, a warp 16 rows; every load of the tile is issued before the
    // first store (one memory latency a tile, not PF_COPY).
    PfV4 kv[PF_COPY], vv[PF_COPY];
#pragma unroll
    for (int u = 0; u < PF_COPY; u++) {
      const int i = threadIdx.x + u * PF_WARPS * 32;
      const int key = (i >> 1) % PF_KEYS, col = (((i >> 1) / PF_KEYS) * 2 + (i & 1)) * 8;
      kv[u].x = kv[u].y = kv[u].z = kv[u].w = 0u;
      vv[u] = kv[u];
      if (j0 + key <= top) {
        kv[u] = *(const PfV4*)(kb + (long long)(j0 + key) * rs + col);
        vv[u] = *(const PfV4*)(vb + (long long)(j0 + key) * rs + col);
      }
    }
#pragma unroll
    for (int u = 0; u < PF_COPY; u++) {
      const int i = threadIdx.x + u * PF_WARPS * 32;
      const int key = (i >> 1) % PF_KEYS, col = (((i >> 1) / PF_KEYS) * 2 + (i & 1)) * 8;
      *(PfV4*)(ks + key * KS + col) = kv[u];
      const unsigned vw[4] = {vv[u].x, vv[u].y, vv[u].z, vv[u].w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        vt[(col + 2 * e) * VS + key] = (u16)(vw[e] & 0xffffu);
        vt[(col + 2 * e + 1) * VS + key] = (u16)(vw[e] >> 16);
      }
    }
    __syncthreads();
    // S = Q Kᵀ for the warp's 16 rows and the tile's PF_KEYS keys.
    float s[NK][4];
#pragma unroll
    for (int n = 0; n < NK; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DK; kk++)
#pragma unroll
      for (int n = 0; n < NK; n++) {
        const u16* kr = ks + (n * 8 + g) * KS + kk * 16 + 2 * c;
        PfMma<E>::run(s[n], qf[kk], *(const unsigned*)kr, *(const unsigned*)(kr + 8));
      }
    // Mask, scale (base 2), the rows' new max over the quad.
    float nlo = mlo, nhi = mhi;
#pragma unroll
    for (int n = 0; n < NK; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = j0 + n * 8 + 2 * c + (e & 1);
        const bool ok = key <= (e < 2 ? plo : phi);
        const float v = ok ? s[n][e] * scale2 : pf_neg_inf();
        s[n][e] = v;
        if (e < 2)
          nlo = fmaxf(nlo, v);
        else
          nhi = fmaxf(nhi, v);
      }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      nlo = fmaxf(nlo, __shfl_xor_sync(0xffffffffu, nlo, x));
      nhi = fmaxf(nhi, __shfl_xor_sync(0xffffffffu, nhi, x));
    }
    const float clo = exp2f(mlo - nlo), chi = exp2f(mhi - nhi);
    mlo = nlo;
    mhi = nhi;
    slo *= clo;
    shi *= chi;
#pragma unroll
    for (int n = 0; n < DN; n++) {
      o[n][0] *= clo;
      o[n][1] *= clo;
      o[n][2] *= chi;
      o[n][3] *= chi;
    }
#pragma unroll
    for (int n = 0; n < NK; n++) {
      s[n][0] = exp2f(s[n][0] - mlo);
      s[n][1] = exp2f(s[n][1] - mlo);
      s[n][2] = exp2f(s[n][2] - mhi);
      s[n][3] = exp2f(s[n][3] - mhi);
      slo += s[n][0] + s[n][1];
      shi += s[n][2] + s[n][3];
    }
    // O += P V: P's A fragments from S's C fragments, V from Vᵀ.
#pragma unroll
    for (int kk = 0; kk < PF_KEYS / 16; kk++) {
      unsigned a[4];
      a[0] = pf_pack<E>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pf_pack<E>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pf_pack<E>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pf_pack<E>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < DN; n++) {
        const u16* vr = vt + (n * 8 + g) * VS + kk * 16 + 2 * c;
        PfMma<E>::run(o[n], a, *(const unsigned*)vr, *(const unsigned*)(vr + 8));
      }
    }
  }
#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    slo += __shfl_xor_sync(0xffffffffu, slo, x);
    shi += __shfl_xor_sync(0xffffffffu, shi, x);
  }
  const float nan = __uint_as_float(0x7fc00000u);
  if (llo != -1) {
    u16* dst = out + ((t0 + rlo / G) * hq + kh * G + rlo % G) * D + 2 * c;
    const float inv = llo == -2 ? nan : 1.0f / slo;
#pragma unroll
    for (int n = 0; n < DN; n++) *(unsigned*)(dst + n * 8) = pf_pack<E>(o[n][0] * inv, o[n][1] * inv);
  }
  if (lhi != -1) {
    u16* dst = out + ((t0 + rhi / G) * hq + kh * G + rhi % G) * D + 2 * c;
    const float inv = lhi == -2 ? nan : 1.0f / shi;
#pragma unroll
    for (int n = 0; n < DN; n++) *(unsigned*)(dst + n * 8) = pf_pack<E>(o[n][2] * inv, o[n][3] * inv);
  }
}

#define PREFILL_ATTN(name, E, D)                                                                                          \
  extern "C" __global__ void __launch_bounds__(PF_WARPS * 32)                                                              \
      prefill_attn_##name##_d##D(const u16* q, const u16* kc, const u16* vc, const int* pos, u16* out, int hq, int hkv,   \
                                 int seq, int tps, int tq, float scale2) {                                                \
    PDL_ENTRY();                                                                                                          \
    prefill_attn_impl<E, D>(q, kc, vc, pos, out, hq, hkv, seq, tps, tq, scale2);                                          \
  }

PREFILL_ATTN(f16, F16, 64)
PREFILL_ATTN(f16, F16, 128)
PREFILL_ATTN(bf16, BF16, 64)
PREFILL_ATTN(bf16, BF16, 128)
