// chorus VM split-KV attention (flash-decoding): the attention op's
// second half (after kv_append) for head dims of 64, 128 and 256 and up
// to 8 query heads per kv head. Compiled with kernels_gemv.cu.
//
// attn_split: grid (splits, kv heads, tokens), ATTN_WARPS warps a block.
// Block (s, kh, t) reads cache rows [s·chunk, min((s+1)·chunk, pos[t]+1))
// of kv head kh once for all G = hq/hkv query heads that share it (the
// old kernel read them once per query head); warp w takes rows w,
// w + ATTN_WARPS, ... two at a time, lanes holding EPL consecutive
// elements of a row (8- or 16-byte loads). Each warp keeps an online
// softmax per head; the block merges its warps and writes, per (t, head,
// split), the running max, the sum and the unnormalized output
// (splits > 1), or the output itself (splits == 1).
// attn_combine: grid (heads, tokens), one thread per element of the head
// dim, merges the splits that reach the token's position.
//
// A token at position p spreads rows 0..p over the splits (attn_chunk):
// the grid is fixed by the cache's size (a captured graph serves every
// position), but a short context in a long cache runs on many blocks of
// a few rows each instead of a few blocks that read their rows one
// latency after another (128 rows of a 4133-row cache: 17 blocks of 8
// rows a kv head instead of 2 of 64).
//
// attn_rope_split is attn_split of one decode token per sequence with
// the rotary embedding (table form) and the cache append folded in: it
// rotates q and the new k as it loads them (lane l and lane l ^ 16 hold
// the pair (i, i + d/2)), rounds them to the dtype as rope_table stores
// them, writes the new k and v to cache row p in the block whose split
// holds p, and uses them from registers for that row. Three launches
// (rope of q, rope of k, kv_append: 8.2 us a layer on an H200) go.

#define ATTN_WARPS 4

__device__ __forceinline__ float attn_qnan() { return __uint_as_float(0x7fc00000u); }
__device__ __forceinline__ float attn_neg_inf() { return __uint_as_float(0xff800000u); }

template <class E, int EPL>
struct RowLoad;
template <class E>
struct RowLoad<E, 2> {  // 2 x 16-bit: one 4-byte load
  static __device__ __forceinline__ void load(const typename E::T* p, float* f) {
    unsigned v = *(const unsigned*)p;
    f[0] = E::load((typename E::T)(v & 0xffffu));
    f[1] = E::load((typename E::T)(v >> 16));
  }
};
template <class E>
struct RowLoad<E, 4> {  // 4 x 16-bit: one 8-byte load
  static __device__ __forceinline__ void load(const typename E::T* p, float* f) {
    unsigned long long v = *(const unsigned long long*)p;
#pragma unroll
    for (int i = 0; i < 4; i++) f[i] = E::load((typename E::T)((v >> (16 * i)) & 0xffffu));
  }
};
template <class E>
struct RowLoad<E, 8> {  // 8 x 16-bit: one 16-byte load
  static __device__ __forceinline__ void load(const typename E::T* p, float* f) {
    V4 v = ld_cached((const V4*)p);
    unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      f[2 * i] = E::load((typename E::T)(w[i] & 0xffffu));
      f[2 * i + 1] = E::load((typename E::T)(w[i] >> 16));
    }
  }
};

// attn_chunk: the rows of each split for a token at position p >= 0: the
// fewest, a multiple of 8, that cover rows 0..p with fill splits (the
// splits that fill the GPU with blocks; fill <= splits), at most the
// plan's chunk (then the splits cover the whole cache). attnPlan.chunkAt
// in attn.go is the same rule (its test checks the cover).
__device__ __forceinline__ int attn_chunk(int p, int fill, int chunk) {
  const int c = ((p + fill) / fill + 7) / 8 * 8;
  return min(chunk, c);
}

// AttnFreqs: the rotary table (inverse frequencies, head_dim / 2 <= 128)
// by value, as rope_table takes it.
#define ATTN_MAX_HALF 128
struct AttnFreqs {
  float v[ATTN_MAX_HALF];
};

template <class E, int EPL, int GM, bool ROPE>
__device__ void attn_split_impl(const typename E::T* q, const typename E::T* knew, const typename E::T* vnew, typename E::T* kc,
                                typename E::T* vc, const int* pos, typename E::T* out, float* part, int hq, int hkv, int seq,
                                int chunk, int fill, float scale, int tps, const AttnFreqs* fr) {
  constexpr int D = 32 * EPL;
  __shared__ float sm[ATTN_WARPS][GM], sl[ATTN_WARPS][GM];
  __shared__ float sacc[ATTN_WARPS][GM][D];
  const int s = blockIdx.x, kh = blockIdx.y, t = blockIdx.z, splits = gridDim.x;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int G = hq / hkv;
  const int p = pos[t];
  if (p < 0 || p >= seq) {
    if (s == 0)
      for (int i = threadIdx.x; i < G * D; i += blockDim.x) out[((long long)t * hq + kh * G + i / D) * D + i % D] = E::store(attn_qnan());
    if (splits > 1 && lane == 0 && w == 0)
      for (int g = 0; g < G; g++) {
        float* pp = part + (((long long)t * hq + kh * G + g) * splits + s) * (D + 2);
        pp[0] = attn_qnan();
        pp[1] = 0.0f;
      }
    return;
  }
  float qr[GM][EPL], acc[GM][EPL], m[GM], l[GM];
#pragma unroll
  for (int g = 0; g < GM; g++) {
    m[g] = attn_neg_inf();
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      acc[g][e] = 0.0f;
      qr[g][e] = 0.0f;
    }
    if (g < G) RowLoad<E, EPL>::load(q + ((long long)t * hq + kh * G + g) * D + lane * EPL, qr[g]);
  }
  const int ch = attn_chunk(p, fill, chunk);
  const int r0 = s * ch;
  const int r1 = min(r0 + ch, p + 1);
  if (r0 > p) return;  // no rows, and attn_combine reads only splits with rows
  const long long rs = (long long)hkv * D;  // elements between rows
  const long long cb = (long long)(t / tps) * seq * rs;  // token t's cache (a batch: one per sequence)
  float kn[EPL], vn[EPL];  // the new row (ROPE)
  if (ROPE) {
    // lane l holds elements i = l*EPL.. of the first half (l < 16) or
    // i + d/2 of the second: the pair's other element is in lane l ^ 16
    float cs[EPL], sn[EPL];
    const bool lo = lane < 16;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      const float ang = __fmul_rn((float)p, fr->v[(lane & 15) * EPL + e]);
      double sd, cd;
      sincos((double)ang, &sd, &cd);
      sn[e] = (float)sd;
      cs[e] = (float)cd;
    }
#pragma unroll
    for (int g = 0; g < GM; g++) {
      if (g >= G) break;
#pragma unroll
      for (int e = 0; e < EPL; e++) {
        const float o = qr[g][e], pr = __shfl_xor_sync(0xffffffffu, o, 16);
        qr[g][e] = E::load(E::store(lo ? o * cs[e] - pr * sn[e] : o * cs[e] + pr * sn[e]));
      }
    }
    RowLoad<E, EPL>::load(knew + ((long long)t * hkv + kh) * D + lane * EPL, kn);
    RowLoad<E, EPL>::load(vnew + ((long long)t * hkv + kh) * D + lane * EPL, vn);
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      const float o = kn[e], pr = __shfl_xor_sync(0xffffffffu, o, 16);
      kn[e] = E::load(E::store(lo ? o * cs[e] - pr * sn[e] : o * cs[e] + pr * sn[e]));
    }
    if (w == 0 && r0 <= p && p < r0 + ch) {
      typename E::T* kd = kc + cb + (long long)p * rs + (long long)kh * D + lane * EPL;
      typename E::T* vd = vc + cb + (long long)p * rs + (long long)kh * D + lane * EPL;
#pragma unroll
      for (int e = 0; e < EPL; e++) {
        kd[e] = E::store(kn[e]);
        vd[e] = E::store(vn[e]);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < GM; g++)
#pragma unroll
    for (int e = 0; e < EPL; e++) qr[g][e] *= scale;
  const typename E::T* kb = kc + cb + (long long)kh * D + lane * EPL;
  const typename E::T* vb = vc + cb + (long long)kh * D + lane * EPL;
  for (int r = r0 + w; r < r1; r += 2 * ATTN_WARPS) {
    const bool two = r + ATTN_WARPS < r1;
    float kf[2][EPL], vf[2][EPL];
    RowLoad<E, EPL>::load(kb + r * rs, kf[0]);
    RowLoad<E, EPL>::load(vb + r * rs, vf[0]);
    if (two) {
      RowLoad<E, EPL>::load(kb + (r + ATTN_WARPS) * rs, kf[1]);
      RowLoad<E, EPL>::load(vb + (r + ATTN_WARPS) * rs, vf[1]);
    }
    if (ROPE) {  // the new row, from registers (its cache row is being written)
#pragma unroll
      for (int j = 0; j < 2; j++)
        if (r + j * ATTN_WARPS == p)
#pragma unroll
          for (int e = 0; e < EPL; e++) {
            kf[j][e] = kn[e];
            vf[j][e] = vn[e];
          }
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
      if (j == 1 && !two) break;
#pragma unroll
      for (int g = 0; g < GM; g++) {
        if (g >= G) break;
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; e++) d = fmaf(qr[g][e], kf[j][e], d);
        d = warp_sum(d);
        float mn = fmaxf(m[g], d);
        float corr = expf(m[g] - mn), pe = expf(d - mn);
        l[g] = l[g] * corr + pe;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[g][e] = fmaf(acc[g][e], corr, pe * vf[j][e]);
        m[g] = mn;
      }
    }
  }
#pragma unroll
  for (int g = 0; g < GM; g++) {
    if (g >= G) break;
    if (lane == 0) {
      sm[w][g] = m[g];
      sl[w][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < EPL; e++) sacc[w][g][lane * EPL + e] = acc[g][e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int g = i / D, j = i % D;
    float M = attn_neg_inf();
    for (int x = 0; x < ATTN_WARPS; x++) M = fmaxf(M, sm[x][g]);
    float L = 0.0f, v = 0.0f;
    for (int x = 0; x < ATTN_WARPS; x++)
      if (sl[x][g] > 0.0f) {
        float c = expf(sm[x][g] - M);
        L += sl[x][g] * c;
        v += sacc[x][g][j] * c;
      }
    const long long h = (long long)t * hq + kh * G + g;
    if (splits == 1) {
      out[h * D + j] = E::store(v / L);
    } else {
      float* pp = part + (h * splits + s) * (D + 2);
      if (j == 0) {
        pp[0] = M;
        pp[1] = L;
      }
      pp[2 + j] = v;
    }
  }
}

// attn_combine: out[t, h, :] from the splits' (max, sum, output) triples.
// Only the splits that reach the token's position are read (pos[t] /
// chunk + 1 of them): a short context in a long cache costs what its
// rows cost. Every load is issued in one round: each thread's (max, sum)
// of a split (a thread per split, at most ATTN_MAX_SPLITS, kept in
// shared memory) and its element of the first ATTN_COMBINE_PRE splits;
// then the largest max, the splits' weights and the weighted sum. Three
// rounds of loads (the maxima, then the sums, then the elements) took
// 4.5 us a call at batch 1 on an H200 (ncu).
#define ATTN_MAX_SPLITS 1024
#define ATTN_COMBINE_PRE 16
template <class E>
__device__ void attn_combine_impl(const float* part, const int* pos, typename E::T* out, int hq, int d, int splits, int chunk, int fill) {
  __shared__ float sm[ATTN_MAX_SPLITS], sl[ATTN_MAX_SPLITS];
  __shared__ float red[32];
  const int h = blockIdx.x, t = blockIdx.y, j = threadIdx.x;
  const int lane = j & 31, w = j >> 5, nw = (blockDim.x + 31) >> 5;
  const float* pp = part + ((long long)t * hq + h) * splits * (d + 2);
  const int p = pos[t];
  const int na = p < 0 ? 1 : min(splits, p / attn_chunk(p, fill, chunk) + 1);
  float pre[ATTN_COMBINE_PRE];
#pragma unroll
  for (int s = 0; s < ATTN_COMBINE_PRE; s++) pre[s] = s < na && j < d ? pp[s * (d + 2) + 2 + j] : 0.0f;
  // the largest max over the splits with rows
  float M = attn_neg_inf();
  for (int s = j; s < na; s += blockDim.x) {
    const float m = pp[s * (d + 2)], l = pp[s * (d + 2) + 1];
    sm[s] = m;
    sl[s] = l;
    if (l > 0.0f) M = fmaxf(M, m);
  }
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  if (lane == 0) red[w] = M;
  __syncthreads();
  M = attn_neg_inf();
  for (int i = 0; i < nw; i++) M = fmaxf(M, red[i]);
  __syncthreads();
  // each split's weight (in place of its max), and their sum with the sums
  float L = 0.0f;
  for (int s = j; s < na; s += blockDim.x) {
    const float l = sl[s];
    const float c = l > 0.0f ? expf(sm[s] - M) : 0.0f;
    sl[s] = c;
    L += l * c;
  }
  for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
  if (lane == 0) red[w] = L;
  const bool nan = sm[0] != sm[0];  // a position outside the cache leaves a NaN max in every split
  __syncthreads();
  L = 0.0f;
  for (int i = 0; i < nw; i++) L += red[i];
  if (j >= d) return;
  float v0 = 0.0f, v1 = 0.0f, v2 = 0.0f, v3 = 0.0f;
#pragma unroll
  for (int s = 0; s < ATTN_COMBINE_PRE; s += 4) {
    if (s + 3 < na) {
      v0 += sl[s] * pre[s];
      v1 += sl[s + 1] * pre[s + 1];
      v2 += sl[s + 2] * pre[s + 2];
      v3 += sl[s + 3] * pre[s + 3];
    } else {
      if (s < na) v0 += sl[s] * pre[s];
      if (s + 1 < na) v0 += sl[s + 1] * pre[s + 1];
      if (s + 2 < na) v0 += sl[s + 2] * pre[s + 2];
    }
  }
  int s = ATTN_COMBINE_PRE;
  for (; s + 3 < na; s += 4) {
    v0 += sl[s] * pp[s * (d + 2) + 2 + j];
    v1 += sl[s + 1] * pp[(s + 1) * (d + 2) + 2 + j];
    v2 += sl[s + 2] * pp[(s + 2) * (d + 2) + 2 + j];
    v3 += sl[s + 3] * pp[(s + 3) * (d + 2) + 2 + j];
  }
  for (; s < na; s++) v0 += sl[s] * pp[s * (d + 2) + 2 + j];
  float v = (v0 + v1) + (v2 + v3);
  if (nan) v = attn_qnan();
  out[((long long)t * hq + h) * d + j] = E::store(v / L);
}

#define ATTN_SPLIT_AS(sfx, E, EPL, GM)                                                                                     \
  extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32)                                                            \
      attn_split_##sfx(const E::T* q, E::T* kc, E::T* vc, const int* pos, E::T* out, float* part, int hq, int hkv, \
                                 int seq, int chunk, int fill, float scale, int tps) {                                     \
    PDL_ENTRY();                                                                                                           \
    attn_split_impl<E, EPL, GM, false>(q, nullptr, nullptr, kc, vc, pos, out, part, hq, hkv, seq, chunk, fill, scale, tps, \
                                       nullptr);                                                                           \
  }                                                                                                                        \
  extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32)                                                            \
      attn_rope_split_##sfx(const E::T* q, const E::T* k, const E::T* v, E::T* kc, E::T* vc, const int* pos,     \
                                      E::T* out, float* part, int hq, int hkv, int seq, int chunk, int fill, float scale,     \
                                      AttnFreqs f) {                                                                       \
    PDL_ENTRY();                                                                                                           \
    attn_split_impl<E, EPL, GM, true>(q, k, v, kc, vc, pos, out, part, hq, hkv, seq, chunk, fill, scale, 1, &f);           \
  }

// ATTN_SPLIT: kernels for up to GM query heads a kv head (registers
// for GM heads' q and output whatever G is); ATTN_SPLIT_Q4: the same
// for at most 4.
#define ATTN_SPLIT(name, E, EPL, GM) ATTN_SPLIT_AS(name##_e##EPL, E, EPL, GM)
#define ATTN_SPLIT_Q4(name, E, EPL) ATTN_SPLIT_AS(name##_e##EPL##_q4, E, EPL, 4)

#define ATTN_KERNELS(name, E)                                                                                              \
  ATTN_SPLIT(name, E, 2, 8)                                                                                                \
  ATTN_SPLIT(name, E, 4, 8)                                                                                                \
  ATTN_SPLIT(name, E, 8, 4)                                                                                                \
  ATTN_SPLIT_Q4(name, E, 2)                                                                                                \
  ATTN_SPLIT_Q4(name, E, 4)                                                                                                \
  extern "C" __global__ void attn_combine_##name(const float* part, const int* pos, E::T* out, int hq, int d, int splits,  \
                                                 int chunk, int fill) {                                                    \
    PDL_ENTRY();                                                                                                           \
    attn_combine_impl<E>(part, pos, out, hq, d, splits, chunk, fill);                                                      \
  }

ATTN_KERNELS(f16, F16)
ATTN_KERNELS(bf16, BF16)
