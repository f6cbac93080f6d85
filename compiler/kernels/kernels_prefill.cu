// chorus VM attention on the tensor cores: the attention op's second
// half (after kv_append) when every sequence brings many tokens (a prompt
// or a chunk of one: prefill_attn, up to 8 query heads a kv head) or one
// (decode: dec_attn, below, up to 16), float16 and bfloat16, head dims 64
// and 128. A module of its own (prefill.go): compiled after kernels.cu
// (F16, BF16, PDL_ENTRY), nothing else.
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

// pf_softmax_step is one step of the online softmax (base 2) over the
// scores s of a row pair (C fragments: elements 0-1 of row lo, 2-3 of
// row hi), already scaled and masked, whose per-lane maxima are nlo and
// nhi (including the running ones mlo and mhi): the maxima over the
// quad, the running sums and outputs o rescaled to them, and s replaced
// by its exponentials, added to the sums. With H == 1 (dec_attn's _g8
// kernels: the rows hi unused) only row lo, so that row hi's outputs and
// sums take no registers.
template <int NK, int DN, int H = 2>
__device__ __forceinline__ void pf_softmax_step(float (&s)[NK][4], float nlo, float nhi, float& mlo, float& mhi, float& slo, float& shi,
                                                float (&o)[DN][4]) {
#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    nlo = fmaxf(nlo, __shfl_xor_sync(0xffffffffu, nlo, x));
    if constexpr (H == 2) nhi = fmaxf(nhi, __shfl_xor_sync(0xffffffffu, nhi, x));
  }
  const float clo = exp2f(mlo - nlo);
  mlo = nlo;
  slo *= clo;
  float chi = 1.0f;
  if constexpr (H == 2) {
    chi = exp2f(mhi - nhi);
    mhi = nhi;
    shi *= chi;
  }
#pragma unroll
  for (int n = 0; n < DN; n++) {
    o[n][0] *= clo;
    o[n][1] *= clo;
    if constexpr (H == 2) {
      o[n][2] *= chi;
      o[n][3] *= chi;
    }
  }
#pragma unroll
  for (int n = 0; n < NK; n++) {
    s[n][0] = exp2f(s[n][0] - mlo);
    s[n][1] = exp2f(s[n][1] - mlo);
    slo += s[n][0] + s[n][1];
    if constexpr (H == 2) {
      s[n][2] = exp2f(s[n][2] - mhi);
      s[n][3] = exp2f(s[n][3] - mhi);
      shi += s[n][2] + s[n][3];
    }
  }
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
    pf_softmax_step<NK, DN>(s, nlo, nhi, mlo, mhi, slo, shi, o);
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

// dec_attn: decode attention (one token a sequence) on the tensor cores,
// the cache split over blocks (flash-decoding). The split-KV kernel of
// kernels_attn.cu reduces every cache row's dot products across a warp
// with shuffles, one row after another: at batch 8 and context 4096 a
// Llama-3-8B step spent about 3.6 ms of its 8.8 in attention on an H200,
// where the cache rows it reads take 1.0 ms at the memory bandwidth.
// prefill_attn for decode fills 4 of a block's 64 query rows and gives a
// (sequence, kv head) one block, too few to fill the GPU below batch 32.
//
// Grid (splits, kv heads, sequences), PF_WARPS warps. Block (s, kh, b)
// takes cache rows [s·ch, min((s+1)·ch, pos[b]+1)) of kv head kh, ch =
// dec_chunk (attn_chunk of kernels_attn.cu: the same rule, so that
// attn_combine reads the same splits). Its G = hq / hkv query heads (at
// most 16) are the rows of one 16-row A operand that every warp holds
// (staged through shared memory, rows past G zero). Warp w walks the
// block's rows DEC_KEYS at a time (rows DEC_KEYS·w.., then DEC_KEYS·
// PF_WARPS further), every load of them issued before the first is used,
// on its own: no shared memory and no barrier in the loop (a first
// version copied 64-row tiles to shared memory between barriers, 16 rows
// a warp, and streamed at half the bandwidth: each tile waited one memory
// latency with little else in flight). Each lane loads its parts of K
// and V straight into registers, in 16-byte pieces that a warp's lanes
// take side by side (whole 32-byte sectors), and the mma fragments
// come from those registers: a dot product does not depend on the order
// of the head dim, so lane c of a quad holds, as the k step's B operand,
// head-dim elements (kk/2)·32 + 8c + 4(kk%2) + {0,1} (b0) and {2,3} (b1),
// and q's A fragments use the same order; V's B fragments take column g
// of n tile n from head-dim element (n/8)·64 + 8g + n%8, so the output's
// columns come in that order too and are put back when the warps merge.
// S = Q Kᵀ (2 n tiles), online softmax (base 2), O += P V (one k step of
// 16 rows). At the end the warps merge through shared memory (one warp
// after another into one output, 8 KB: a copy a warp would take 32 KB of
// shared memory, which other kernels' blocks then cannot use) and the
// block writes the output (one split) or, per head, its split's max,
// sum and unnormalized output. With cnt (fuse: a plan of at most
// DEC_TAIL splits) the last block of a (sequence, kv head) to finish
// merges them (dec_merge; a split's results as it reads them, the max in
// base 2; one split with rows writes the output), else attn_combine does
// after it (the max in natural log units, as it takes them).
//
// dec_attn_rope also does what rope_table of q and k and kv_append did
// before it: it rotates q as it stages it, and the block whose split
// holds row pos[b] rotates the new k and writes k and v to that row and
// to shared memory, where the warp whose group holds the row takes it
// from (a later group reads it back from global memory: a block sees its
// own global writes after __syncthreads). Sines and cosines as
// rope_table computes them.
//
// The _g8 kernels (H = 1) are for at most 8 query heads a kv head: rows
// 8-15 of Q, of the scores and of the output are zero or dropped, so
// their accumulators, softmax state and q fragments take no registers
// (ncu, H200: 184 registers a thread against 200; either way 2 blocks of
// 4 warps a multiprocessor, 12% occupancy, which is what bounds the
// kernel: 72-74% of the DRAM bandwidth at batch 32 and context 4096). A
// warp loads its next group's K once this group's scores are computed and
// its V once this group's V is used. Against the kernel before both
// (BenchmarkGPUDecodeAttention, H200, Llama-3-8B's heads, a 4133-row
// cache, both builds in one call): batch 1 at position 4100 15.7 -> 13.7
// us, batch 8 and 32 at position 130 10.5 -> 9.0 and 11.5 -> 10.1, batch
// 32 at 4100 141.6 -> 138.0, batch 8 at 4100 and batch 1 at 130
// unchanged (46.8 -> 46.9, 11.4 -> 11.6); the early loads alone (an
// earlier call) gave batch 8 at 4100 47.8-48.1 -> 46.4-46.5. A decode
// step at context 4096, graph-replayed, same call: batch 1 4.272 ->
// 4.221 ms, batch 8 5.511 -> 5.493, batch 32 9.562 -> 9.539. Capping the
// 16-row kernel at 168 registers for 3 blocks a multiprocessor spilled
// (batch 32 at 4100: 141 -> 203 us; 128 registers, 300).
//
// DEC_KEYS: 16 rows a warp at once against 32 (H200, Llama-3-8B,
// graph-replayed, both builds twice in one call): batch 8 4.548-4.554
// ms against 4.626-4.636 at context 128 and 5.687-5.692 against
// 5.741-5.811 at 4096, batch 1 4.035-4.036 against 4.046-4.065 at 128
// and 4.294-4.309 against 4.269-4.274 at 4096 (a warp's 16 rows of K
// and V take half the registers, and a short split spreads over more
// warps).
#define DEC_MAX_HALF 128
#define DEC_MAX_GROUP 16
#define DEC_KEYS 16  // cache rows a warp loads at once
struct DecFreqs {
  float v[DEC_MAX_HALF];
};

// dec_chunk is attn_chunk (kernels_attn.cu; keep the two the same).
__device__ __forceinline__ int dec_chunk(int p, int fill, int chunk) {
  const int c = ((p + fill) / fill + 7) / 8 * 8;
  return min(chunk, c);
}

// DEC_TAIL is how many splits' results a thread of the merging block
// loads at once: the most splits decodePlan merges this way
// (decodeFuseSplits), so that the merge is one round of loads.
#define DEC_TAIL 8

// dec_merge is run by the last block of a (sequence, kv head) to finish:
// it merges the na splits with rows of its G heads (rows hb .. hb + G -
// 1 of part, each split's D + 4 floats: max (base 2), sum, two unused,
// the unnormalized output) into out. A thread takes 4 output elements of
// a head and loads DEC_TAIL splits' max, sum and outputs at once, then
// adds them in split order scaled to their largest max (online, from one
// group of splits to the next).
template <class E, int D>
__device__ __forceinline__ void dec_merge(const float* part, u16* out, long long hb, int G, int splits, int na) {
  constexpr int PS = D + 4;  // floats a split's results take
  constexpr int Q = D / 4;
  for (int i = threadIdx.x; i < G * Q; i += blockDim.x) {
    const int r = i / Q, j = (i % Q) * 4;
    const float* ph = part + (hb + r) * splits * PS;
    float M = pf_neg_inf(), L = 0.0f;
    F4 v = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = 0; s0 < na; s0 += DEC_TAIL) {
      float m[DEC_TAIL], l[DEC_TAIL];
      F4 o[DEC_TAIL];
#pragma unroll
      for (int u = 0; u < DEC_TAIL; u++)
        if (s0 + u < na) {
          m[u] = ld_cg(ph + (s0 + u) * PS);
          l[u] = ld_cg(ph + (s0 + u) * PS + 1);
          o[u] = ld_cg4(ph + (s0 + u) * PS + 4 + j);
        }
      float Mn = M;
#pragma unroll
      for (int u = 0; u < DEC_TAIL; u++)
        if (s0 + u < na && l[u] > 0.0f) Mn = fmaxf(Mn, m[u]);
      const float sc = L > 0.0f ? exp2f(M - Mn) : 0.0f;  // the splits before, to the new max
      L *= sc;
      v.x *= sc;
      v.y *= sc;
      v.z *= sc;
      v.w *= sc;
#pragma unroll
      for (int u = 0; u < DEC_TAIL; u++)
        if (s0 + u < na && l[u] > 0.0f) {
          const float c = exp2f(m[u] - Mn);
          L += l[u] * c;
          v.x += c * o[u].x;
          v.y += c * o[u].y;
          v.z += c * o[u].z;
          v.w += c * o[u].w;
        }
      M = Mn;
    }
    u16* po = out + (hb + r) * D + j;
    po[0] = E::store(v.x / L);
    po[1] = E::store(v.y / L);
    po[2] = E::store(v.z / L);
    po[3] = E::store(v.w / L);
  }
}

// dec_sincos is the sine and cosine of the angle (float)p · f, as
// rope_table computes them.
__device__ __forceinline__ void dec_sincos(int p, float f, float& s, float& c) {
  const float ang = __fmul_rn((float)p, f);
  double sd, cd;
  sincos((double)ang, &sd, &cd);
  s = (float)sd;
  c = (float)cd;
}

// dec_rot turns the pairs (elements e .. e + 7 of a, the same of b) by
// the angles whose cosines and sines are cs[0 .. 7] and sn[0 .. 7], as
// rope_table turns pair (i, i + d/2).
template <class E>
__device__ __forceinline__ void dec_rot(PfV4& a, PfV4& b, const float* cs, const float* sn) {
  unsigned* wa = &a.x;
  unsigned* wb = &b.x;
#pragma unroll
  for (int x = 0; x < 4; x++) {
    float y[2][2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float x1 = E::load((u16)(wa[x] >> (16 * h))), x2 = E::load((u16)(wb[x] >> (16 * h)));
      const float c = cs[2 * x + h], sv = sn[2 * x + h];
      y[0][h] = x1 * c - x2 * sv;
      y[1][h] = x2 * c + x1 * sv;
    }
    wa[x] = pf_pack<E>(y[0][0], y[0][1]);
    wb[x] = pf_pack<E>(y[1][0], y[1][1]);
  }
}

__device__ __forceinline__ unsigned dec_word(const PfV4& v, int x) { return x == 0 ? v.x : x == 1 ? v.y : x == 2 ? v.z : v.w; }

// dec_kdim is the first of the two head-dim elements in word half (0:
// b0, 1: b1) of k step kk for lane c of a quad (see above).
__device__ __forceinline__ int dec_kdim(int kk, int c, int half) { return (kk >> 1) * 32 + c * 8 + (kk & 1) * 4 + half * 2; }

// dec_odim is the head-dim element of column j of output n tile n.
__device__ __forceinline__ int dec_odim(int n, int j) { return (n >> 3) * 64 + j * 8 + (n & 7); }

// dec_load_k and dec_load_v load the K and V rows of group k0
// (DEC_KEYS rows from k0) a lane takes into kr and vr: group u (rows
// k0 + 16u ..): K rows + g and + 8 + g, pieces c, c + 4, ... (head-dim
// elements 32j + 8c ..); V rows + 2c, + 1, + 8, + 9, pieces at head-dim
// elements 64j + 8g ..; rows at or past lim: zeros. With ONLY, they load
// row lim alone, from kb and vb (one row each), and leave the others.
template <int D, bool ONLY>
__device__ __forceinline__ void dec_load_k(const u16* kb, long long rs, int k0, int lim, int g, int c,
                                           PfV4 (&kr)[DEC_KEYS / 16][2][D / 32]) {
  const PfV4 zero = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int u = 0; u < DEC_KEYS / 16; u++)
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
      const int row = k0 + 16 * u + nt * 8 + g;
#pragma unroll
      for (int j = 0; j < D / 32; j++) {
        if (ONLY) {
          if (row == lim) kr[u][nt][j] = *(const PfV4*)(kb + j * 32 + c * 8);
        } else {
          kr[u][nt][j] = row < lim ? *(const PfV4*)(kb + (long long)row * rs + j * 32 + c * 8) : zero;
        }
      }
    }
}

template <int D, bool ONLY>
__device__ __forceinline__ void dec_load_v(const u16* vb, long long rs, int k0, int lim, int g, int c,
                                           PfV4 (&vr)[DEC_KEYS / 16][4][D / 64]) {
  const PfV4 zero = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int u = 0; u < DEC_KEYS / 16; u++)
#pragma unroll
    for (int x = 0; x < 4; x++) {
      const int row = k0 + 16 * u + (x >> 1) * 8 + 2 * c + (x & 1);
#pragma unroll
      for (int j = 0; j < D / 64; j++) {
        if (ONLY) {
          if (row == lim) vr[u][x][j] = *(const PfV4*)(vb + j * 64 + g * 8);
        } else {
          vr[u][x][j] = row < lim ? *(const PfV4*)(vb + (long long)row * rs + j * 64 + g * 8) : zero;
        }
      }
    }
}

template <int D, bool ONLY>
__device__ __forceinline__ void dec_load(const u16* kb, const u16* vb, long long rs, int k0, int lim, int g, int c,
                                         PfV4 (&kr)[DEC_KEYS / 16][2][D / 32], PfV4 (&vr)[DEC_KEYS / 16][4][D / 64]) {
  dec_load_k<D, ONLY>(kb, rs, k0, lim, g, c, kr);
  dec_load_v<D, ONLY>(vb, rs, k0, lim, g, c, vr);
}

// dec_attn_impl: with pre (the host's promise that no kernel of the
// stream since the call's first one writes pos or a cache row before
// its sequence's position: GPU.SetFixedWeights), a block reads its
// position, computes the rotation's sines and cosines and loads the
// cache rows of its warps' first groups before its PDL wait, beside the
// kernel before it (the q/k/v product); row pos[b] (this kernel's
// append, or kv_append's before it) and q only after. On an H200
// (Llama-3-8B, graph-replayed, both builds twice in one call) that took
// batch 1 from 4.077-4.088 to 4.003-4.012 ms a step at context 128
// (4.306-4.325 to 4.262-4.276 at 4096) and batch 8 from 4.658-4.698 to
// 4.587-4.595 (context 4096 unchanged, 5.76-5.79). The same kernel with
// everything after the wait (no promise) was 1.005-1.016x slower than
// the one before it, which rotated q pair by pair as it staged it.
template <class E, int D, bool ROPE, int H>
__device__ void dec_attn_impl(const u16* q, const u16* knew, const u16* vnew, u16* kc, u16* vc, const int* pos, u16* out, float* part,
                              int* cnt, int hq, int hkv, int seq, int chunk, int fill, float scale2, int pre,
                              const DecFreqs* fr) {
  constexpr int DK = D / 16;  // k steps of Q Kᵀ
  constexpr int DN = D / 8;   // n tiles of the output
  constexpr int QP = DEC_MAX_GROUP * D / 16;  // pairs of 16-byte pieces of q (i, i + D/2)
  static_assert(QP <= PF_WARPS * 32, "a thread stages one pair of q's pieces");
  __shared__ __align__(16) u16 qs[DEC_MAX_GROUP * D];
  __shared__ __align__(16) u16 ks[D], vs[D];  // the appended row
  __shared__ float cs[DEC_MAX_HALF], sn[DEC_MAX_HALF];
  __shared__ float mw[PF_WARPS * DEC_MAX_GROUP], lw[PF_WARPS * DEC_MAX_GROUP];
  __shared__ float ow[DEC_MAX_GROUP * D];  // the merged output, head-dim order
  PDL_LAUNCH();
  if (!pre) PDL_WAIT();
  const int s = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, splits = gridDim.x;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int G = hq / hkv;
  const bool fuse = cnt != nullptr;  // the last block merges the splits (else attn_combine)
  const int p = pos[b];
  const long long hb = (long long)b * hq + (long long)kh * G;  // the block's first (token, head) row
  const float nan = __uint_as_float(0x7fc00000u);
  if (p < 0 || p >= seq) {  // NaN rows, as attn_split (no append)
    PDL_WAIT();
    if (s == 0)
      for (int i = threadIdx.x; i < G * D; i += blockDim.x) out[hb * D + i] = E::store(nan);
    if (!fuse && splits > 1)
      for (int i = threadIdx.x; i < G; i += blockDim.x) {
        float* pp = part + ((hb + i) * splits + s) * (D + 2);
        pp[0] = nan;
        pp[1] = 0.0f;
      }
    return;
  }
  const int ch = dec_chunk(p, fill, chunk);
  const int r0 = s * ch;
  if (r0 > p) return;  // no rows; dec_merge and attn_combine read only splits with rows
  const int na = min(splits, p / ch + 1);  // the splits with rows
  const int r1 = min(r0 + ch, p + 1);
  const long long rs = (long long)hkv * D;  // elements between cache rows
  u16* kb = kc + (long long)b * seq * rs + (long long)kh * D;
  u16* vb = vc + (long long)b * seq * rs + (long long)kh * D;
  if (ROPE)
    for (int i = threadIdx.x; i < D / 2; i += blockDim.x) dec_sincos(p, fr->v[i], sn[i], cs[i]);
  // The warp's first group: the rows before p now (every row where
  // they are all there: no pre, no append), row p after the wait.
  PfV4 kr[DEC_KEYS / 16][2][D / 32], vr[DEC_KEYS / 16][4][D / 64];
  const int lim = pre || ROPE ? min(r1, p) : r1;
  dec_load<D, false>(kb, vb, rs, r0 + DEC_KEYS * w, lim, g, c, kr, vr);
  PDL_WAIT();
  if (ROPE) __syncthreads();  // cs, sn
  // q of the G heads (rotated), zeros past them; and the new cache row.
  // Every load first, then the rotations and stores.
  const PfV4 zero = {0u, 0u, 0u, 0u};
  const bool app = ROPE && p < r1;  // this split holds row p: append the rotated k and v
  {
    const int i = threadIdx.x, r = i / (D / 16), e = (i % (D / 16)) * 8;
    PfV4 qa = zero, qb = zero, na = zero, nb = zero, nv = zero;
    if (i < QP && r < G) {
      qa = *(const PfV4*)(q + (hb + r) * D + e);
      qb = *(const PfV4*)(q + (hb + r) * D + e + D / 2);
    }
    const long long nr = ((long long)b * hkv + kh) * D;
    if (app && i < D / 16) {
      na = *(const PfV4*)(knew + nr + i * 8);
      nb = *(const PfV4*)(knew + nr + i * 8 + D / 2);
    }
    if (app && i < D / 8) nv = *(const PfV4*)(vnew + nr + i * 8);
    if (i < QP) {
      if (ROPE && r < G) dec_rot<E>(qa, qb, cs + e, sn + e);
      *(PfV4*)(qs + r * D + e) = qa;
      *(PfV4*)(qs + r * D + e + D / 2) = qb;
    }
    if (app && i < D / 16) {
      dec_rot<E>(na, nb, cs + i * 8, sn + i * 8);
      *(PfV4*)(ks + i * 8) = na;
      *(PfV4*)(ks + i * 8 + D / 2) = nb;
      *(PfV4*)(kb + (long long)p * rs + i * 8) = na;
      *(PfV4*)(kb + (long long)p * rs + i * 8 + D / 2) = nb;
    }
    if (app && i < D / 8) {
      *(PfV4*)(vs + i * 8) = nv;
      *(PfV4*)(vb + (long long)p * rs + i * 8) = nv;
    }
  }
  __syncthreads();
  if (lim < r1) {  // row p, if in the warp's first group
    if (ROPE)
      dec_load<D, true>(ks, vs, rs, r0 + DEC_KEYS * w, p, g, c, kr, vr);
    else
      dec_load<D, true>(kb + (long long)p * rs, vb + (long long)p * rs, rs, r0 + DEC_KEYS * w, p, g, c, kr, vr);
  }
  unsigned qf[DK][4];
#pragma unroll
  for (int kk = 0; kk < DK; kk++) {
    qf[kk][0] = *(const unsigned*)(qs + g * D + dec_kdim(kk, c, 0));
    qf[kk][1] = H == 2 ? *(const unsigned*)(qs + (g + 8) * D + dec_kdim(kk, c, 0)) : 0u;
    qf[kk][2] = *(const unsigned*)(qs + g * D + dec_kdim(kk, c, 1));
    qf[kk][3] = H == 2 ? *(const unsigned*)(qs + (g + 8) * D + dec_kdim(kk, c, 1)) : 0u;
  }
  float o[DN][4];
#pragma unroll
  for (int n = 0; n < DN; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
  float mlo = pf_neg_inf(), mhi = pf_neg_inf(), slo = 0.0f, shi = 0.0f;
  // The next group's K is loaded once this group's scores are computed
  // and its V once this group's V is used, so a warp has rows in flight
  // while it computes the softmax and the output.
  static_assert(DEC_KEYS == 16, "one 16-row group a warp at a time");
  for (int k0 = r0 + DEC_KEYS * w; k0 < r1; k0 += DEC_KEYS * PF_WARPS) {
    const int kn = k0 + DEC_KEYS * PF_WARPS;  // the warp's next group
    float sc[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
#pragma unroll
      for (int e = 0; e < 4; e++) sc[nt][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < DK; kk++)
        PfMma<E>::run(sc[nt], qf[kk], dec_word(kr[0][nt][kk >> 1], (kk & 1) * 2), dec_word(kr[0][nt][kk >> 1], (kk & 1) * 2 + 1));
    }
    if (kn < r1) dec_load_k<D, false>(kb, rs, kn, r1, g, c, kr);
    float nlo = mlo, nhi = mhi;
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = k0 + nt * 8 + 2 * c + (e & 1);
        const float v = key < r1 ? sc[nt][e] * scale2 : pf_neg_inf();
        sc[nt][e] = v;
        if (e < 2)
          nlo = fmaxf(nlo, v);
        else
          nhi = fmaxf(nhi, v);
      }
    // key k0 < r1 is among the 16, so the new maxima are finite
    pf_softmax_step<2, DN, H>(sc, nlo, nhi, mlo, mhi, slo, shi, o);
    unsigned a[4];
    a[0] = pf_pack<E>(sc[0][0], sc[0][1]);
    a[1] = H == 2 ? pf_pack<E>(sc[0][2], sc[0][3]) : 0u;
    a[2] = pf_pack<E>(sc[1][0], sc[1][1]);
    a[3] = H == 2 ? pf_pack<E>(sc[1][2], sc[1][3]) : 0u;
#pragma unroll
    for (int n = 0; n < DN; n++) {
      // rows 2c, 2c + 1 (b0) and 8 + 2c, 9 + 2c (b1), element n % 8 of
      // piece n / 8
      const unsigned sel = (n & 1) ? 0x7632u : 0x5410u;
      const int x = (n & 7) >> 1;
      const unsigned b0 = __byte_perm(dec_word(vr[0][0][n >> 3], x), dec_word(vr[0][1][n >> 3], x), sel);
      const unsigned b1 = __byte_perm(dec_word(vr[0][2][n >> 3], x), dec_word(vr[0][3][n >> 3], x), sel);
      if (H == 2) {
        PfMma<E>::run(o[n], a, b0, b1);
      } else {  // rows g + 8 come out zero and are dropped
        float t[4] = {o[n][0], o[n][1], 0.0f, 0.0f};
        PfMma<E>::run(t, a, b0, b1);
        o[n][0] = t[0];
        o[n][1] = t[1];
      }
    }
    if (kn < r1) dec_load_v<D, false>(vb, rs, kn, r1, g, c, vr);
  }
#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    slo += __shfl_xor_sync(0xffffffffu, slo, x);
    shi += __shfl_xor_sync(0xffffffffu, shi, x);
  }
  // Merge the warps: each one's max and sum per head, then, one warp
  // after another, its output scaled to the heads' common max added into
  // ow (rows past G are not kept); a warp with no rows has sum 0.
  if (c == 0) {
    mw[w * DEC_MAX_GROUP + g] = mlo;
    lw[w * DEC_MAX_GROUP + g] = slo;
    mw[w * DEC_MAX_GROUP + g + 8] = mhi;
    lw[w * DEC_MAX_GROUP + g + 8] = shi;
  }
  __syncthreads();
  float wt[2];  // this warp's weights of rows g and g + 8
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = g + 8 * h;
    float M = pf_neg_inf();
#pragma unroll
    for (int x = 0; x < PF_WARPS; x++)
      if (lw[x * DEC_MAX_GROUP + r] > 0.0f) M = fmaxf(M, mw[x * DEC_MAX_GROUP + r]);
    wt[h] = lw[w * DEC_MAX_GROUP + r] > 0.0f ? exp2f(mw[w * DEC_MAX_GROUP + r] - M) : 0.0f;
  }
#pragma unroll
  for (int x = 0; x < PF_WARPS; x++) {
    if (w == x) {
#pragma unroll
      for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 2 * H; e++) {
          const int r = g + 8 * (e >> 1), j = dec_odim(n, 2 * c + (e & 1));
          if (r < G) ow[r * D + j] = (x == 0 ? 0.0f : ow[r * D + j]) + o[n][e] * wt[e >> 1];
        }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int r = i / D, j = i % D;
    float M = pf_neg_inf(), L = 0.0f;
#pragma unroll
    for (int x = 0; x < PF_WARPS; x++)
      if (lw[x * DEC_MAX_GROUP + r] > 0.0f) M = fmaxf(M, mw[x * DEC_MAX_GROUP + r]);
#pragma unroll
    for (int x = 0; x < PF_WARPS; x++) {
      const float l = lw[x * DEC_MAX_GROUP + r];
      if (l > 0.0f) L += l * exp2f(mw[x * DEC_MAX_GROUP + r] - M);
    }
    const float v = ow[r * D + j];
    if (splits == 1 || (fuse && na == 1)) {
      out[(hb + r) * D + j] = E::store(v / L);
    } else if (fuse) {
      float* pp = part + ((hb + r) * splits + s) * (D + 4);
      if (j == 0) {
        pp[0] = M;
        pp[1] = L;
      }
      pp[4 + j] = v;
    } else {
      float* pp = part + ((hb + r) * splits + s) * (D + 2);
      if (j == 0) {
        pp[0] = M * 0.6931471805599453f;  // base 2 to natural log units
        pp[1] = L;
      }
      pp[2 + j] = v;
    }
  }
  if (!fuse || splits == 1 || na == 1) return;
  // The (sequence, kv head)'s counter; its last block merges the splits.
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int* cn = cnt + (long long)b * hkv + kh;
    last = atomicAdd(cn, 1) == na - 1;
    if (last) *cn = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  dec_merge<E, D>(part, out, hb, G, splits, na);
}

#define DEC_ATTN_H(name, E, D, H, tail)                                                                                    \
  extern "C" __global__ void __launch_bounds__(PF_WARPS * 32)                                                              \
      dec_attn_##name##_d##D##tail(const u16* q, u16* kc, u16* vc, const int* pos, u16* out, float* part, int* cnt, int hq,   \
                                   int hkv, int seq, int chunk, int fill, float scale2, int pre) {                         \
    dec_attn_impl<E, D, false, H>(q, nullptr, nullptr, kc, vc, pos, out, part, cnt, hq, hkv, seq, chunk, fill, scale2, pre, \
                                  nullptr);                                                                                \
  }                                                                                                                        \
  extern "C" __global__ void __launch_bounds__(PF_WARPS * 32)                                                              \
      dec_attn_rope_##name##_d##D##tail(const u16* q, const u16* k, const u16* v, u16* kc, u16* vc, const int* pos,       \
                                        u16* out, float* part, int* cnt, int hq, int hkv, int seq, int chunk, int fill,   \
                                        float scale2, int pre, DecFreqs f) {                                               \
    dec_attn_impl<E, D, true, H>(q, k, v, kc, vc, pos, out, part, cnt, hq, hkv, seq, chunk, fill, scale2, pre, &f);        \
  }
// Every dtype and head dim twice: up to 16 query heads a kv head, and
// (_g8) up to 8.
#define DEC_ATTN(name, E, D) DEC_ATTN_H(name, E, D, 2, ) DEC_ATTN_H(name, E, D, 1, _g8)

DEC_ATTN(f16, F16, 64)
DEC_ATTN(f16, F16, 128)
DEC_ATTN(bf16, BF16, 64)
DEC_ATTN(bf16, BF16, 128)
