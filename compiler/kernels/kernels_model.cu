// chorus VM decoder kernels: elementwise mul with numpy broadcasting,
// SiLU, embedding, rms_norm, layer_norm, rope, the KV-cache append,
// attention over the cache and argmax, for float32, float16 and bfloat16,
// computing in float. NVRTC compiles this file after kernels.cu (whose
// element types F32/F16/BF16 and Bcast it uses) as a module of its own,
// made at the first decoder op. Token ids and positions are read from
// device memory, so a captured CUDA graph replays with whatever the
// caller wrote there since; ids or positions out of range give NaN rows
// (a kernel cannot return an error; the CPU kernels fail instead).

struct AddOp { static __device__ __forceinline__ float f(float a, float b) { return a + b; } };
struct MulOp { static __device__ __forceinline__ float f(float a, float b) { return a * b; } };

template <class E, class O>
__device__ void binary_impl(const typename E::T* x, const typename E::T* y, typename E::T* out, const Bcast& p) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
    long long ix = 0, iy = 0, r = i;
    for (int d = p.rank - 1; d >= 0; d--) {
      long long c = r % p.shape[d];
      r /= p.shape[d];
      ix += c * p.sx[d];
      iy += c * p.sy[d];
    }
    out[i] = E::store(O::f(E::load(x[ix]), E::load(y[iy])));
  }
}

__device__ __forceinline__ float qnan() { return __uint_as_float(0x7fc00000u); }
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

template <class E>
__device__ void silu_impl(const typename E::T* x, typename E::T* out, long long n) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = E::load(x[i]);
    out[i] = E::store(v / (1.0f + expf(-v)));
  }
}

// embedding: out[t, j] = table[ids[t], j]; one thread per output element.
template <class E>
__device__ void embedding_impl(const int* ids, const typename E::T* table, typename E::T* out, long long nids, long long vocab, long long h) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nids * h; i += stride) {
    long long t = i / h, j = i % h;
    int id = ids[t];
    out[i] = (id < 0 || id >= vocab) ? E::store(qnan()) : table[(long long)id * h + j];
  }
}

// block_sum: the sum of v over the block, in every thread (blockDim.x a
// multiple of 32, at most 1024).
__device__ float block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();  // part may still be read by a previous call
  if (lane == 0) part[w] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// rms_norm and layer_norm: one block per row of h elements; rms_norm
// keeps a row of up to NORM_REGS x blockDim.x in registers (kernels.cu).

template <class E>
__device__ void rms_norm_impl(const typename E::T* x, const typename E::T* w, typename E::T* out, long long h, float eps) {
  const typename E::T* xr = x + (long long)blockIdx.x * h;
  typename E::T* orow = out + (long long)blockIdx.x * h;
  if (h <= (long long)NORM_REGS * blockDim.x) {
    float v[NORM_REGS];
#pragma unroll
    for (int i = 0; i < NORM_REGS; i++) {
      const long long j = threadIdx.x + (long long)i * blockDim.x;
      v[i] = j < h ? E::load(xr[j]) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_REGS; i++) ss += v[i] * v[i];
    const float inv = rsqrtf(block_sum(ss) / (float)h + eps);
#pragma unroll
    for (int i = 0; i < NORM_REGS; i++) {
      const long long j = threadIdx.x + (long long)i * blockDim.x;
      if (j < h) orow[j] = E::store(E::load(E::store(v[i] * inv)) * E::load(w[j]));
    }
    return;
  }
  float ss = 0.0f;
  for (long long j = threadIdx.x; j < h; j += blockDim.x) {
    float v = E::load(xr[j]);
    ss += v * v;
  }
  float inv = rsqrtf(block_sum(ss) / (float)h + eps);
  // The normalized value is rounded to the dtype before the weight
  // multiplies it, as transformers' RMSNorm does (a no-op for float32).
  for (long long j = threadIdx.x; j < h; j += blockDim.x)
    orow[j] = E::store(E::load(E::store(E::load(xr[j]) * inv)) * E::load(w[j]));
}

template <class E>
__device__ void layer_norm_impl(const typename E::T* x, const typename E::T* w, const typename E::T* b, typename E::T* out, long long h, float eps) {
  const typename E::T* xr = x + (long long)blockIdx.x * h;
  typename E::T* orow = out + (long long)blockIdx.x * h;
  float s = 0.0f;
  for (long long j = threadIdx.x; j < h; j += blockDim.x) s += E::load(xr[j]);
  float mean = block_sum(s) / (float)h;
  float ss = 0.0f;
  for (long long j = threadIdx.x; j < h; j += blockDim.x) {
    float d = E::load(xr[j]) - mean;
    ss += d * d;
  }
  float inv = rsqrtf(block_sum(ss) / (float)h + eps);
  for (long long j = threadIdx.x; j < h; j += blockDim.x)
    orow[j] = E::store((E::load(xr[j]) - mean) * inv * E::load(w[j]) + E::load(b[j]));
}

// rope, rotate-half form: pair (i, i + d/2) of head (t, h) turns by
// pos[t] * theta^(-2i/d), the angle in double precision as on the CPU.
template <class E>
__device__ void rope_impl(const typename E::T* x, const int* pos, typename E::T* out, long long t, long long heads, long long d, double theta) {
  long long half = d / 2, n = t * heads * half;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    long long i = idx % half, th = idx / half;  // th = token * heads + head
    long long base = th * d;
    int p = pos[th / heads];
    if (p < 0) {
      out[base + i] = E::store(qnan());
      out[base + i + half] = E::store(qnan());
      continue;
    }
    double s, c;
    sincos((double)p * pow(theta, -2.0 * (double)i / (double)d), &s, &c);
    float x1 = E::load(x[base + i]), x2 = E::load(x[base + i + half]);
    out[base + i] = E::store(x1 * (float)c - x2 * (float)s);
    out[base + i + half] = E::store(x2 * (float)c + x1 * (float)s);
  }
}

// rope_table: the table form. Pair i of head (t, h) turns by
// (float)pos[t] * f.v[i], a float32 product as Hugging Face's rotary
// embedding computes it; sine and cosine of that float angle in double,
// rounded to float. The table travels by value in the kernel's
// parameters (ROPE_MAX_HALF floats), so a captured graph keeps it.
#define ROPE_MAX_HALF 256
struct RopeFreqs {
  float v[ROPE_MAX_HALF];
};

template <class E>
__device__ void rope_table_impl(const typename E::T* x, const int* pos, typename E::T* out, long long t, long long heads, long long d, const RopeFreqs& f) {
  long long half = d / 2, n = t * heads * half;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    long long i = idx % half, th = idx / half;
    long long base = th * d;
    int p = pos[th / heads];
    if (p < 0) {
      out[base + i] = E::store(qnan());
      out[base + i + half] = E::store(qnan());
      continue;
    }
    float ang = __fmul_rn((float)p, f.v[i]);
    double s, c;
    sincos((double)ang, &s, &c);
    float fs = (float)s, fc = (float)c;
    float x1 = E::load(x[base + i]), x2 = E::load(x[base + i + half]);
    out[base + i] = E::store(x1 * fc - x2 * fs);
    out[base + i + half] = E::store(x2 * fc + x1 * fs);
  }
}

// kv_append: cache rows pos[t] (row = kv_heads * head_dim elements) get
// k[t] and v[t]; positions outside the cache are skipped (attention then
// writes NaN for that token). A batch (tps tokens per sequence) puts
// token t's row in cache t / tps, seq rows after the previous one.
template <class E>
__device__ void kv_append_impl(const typename E::T* k, const typename E::T* v, typename E::T* kc, typename E::T* vc, const int* pos, long long t, long long row, long long seq, long long tps) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < t * row; i += stride) {
    int p = pos[i / row];
    if (p < 0 || p >= seq) continue;
    long long dst = (i / row / tps * seq + p) * row + i % row;
    kc[dst] = k[i];
    vc[dst] = v[i];
  }
}

#define ATT_WARPS 4
#define ATT_MAX_D 256
#define ATT_PER (ATT_MAX_D / 32)

// attention: one block of ATT_WARPS warps per (query head, token). Each
// warp takes every ATT_WARPS-th cache row in 0..pos[t] with an online
// softmax (lanes split the head dim, a shuffle sums the dot product); the
// warps' partial results are combined at the end.
template <class E>
__device__ void attention_impl(const typename E::T* q, const typename E::T* kc, const typename E::T* vc, const int* pos, typename E::T* out,
                               int hq, int hkv, int d, int seq, float scale, int tps) {
  __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
  __shared__ float sacc[ATT_WARPS][ATT_MAX_D];
  int h = blockIdx.x, t = blockIdx.y;
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int kvh = h / (hq / hkv);
  int p = pos[t];
  typename E::T* o = out + ((long long)t * hq + h) * d;
  kc += (long long)(t / tps) * seq * hkv * d;
  vc += (long long)(t / tps) * seq * hkv * d;
  if (p < 0 || p >= seq) {
    for (int j = threadIdx.x; j < d; j += blockDim.x) o[j] = E::store(qnan());
    return;
  }
  const typename E::T* qv = q + ((long long)t * hq + h) * d;
  float qr[ATT_PER], acc[ATT_PER];
#pragma unroll
  for (int i = 0; i < ATT_PER; i++) {
    int j = lane + 32 * i;
    qr[i] = j < d ? E::load(qv[j]) * scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = neg_inf(), l = 0.0f;
  for (int r = w; r <= p; r += ATT_WARPS) {
    const typename E::T* kr = kc + ((long long)r * hkv + kvh) * d;
    const typename E::T* vr = vc + ((long long)r * hkv + kvh) * d;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ATT_PER; i++) {
      int j = lane + 32 * i;
      if (j < d) s += qr[i] * E::load(kr[j]);
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    float mn = fmaxf(m, s);
    float corr = expf(m - mn), e = expf(s - mn);
    l = l * corr + e;
#pragma unroll
    for (int i = 0; i < ATT_PER; i++) {
      int j = lane + 32 * i;
      if (j < d) acc[i] = acc[i] * corr + e * E::load(vr[j]);
    }
    m = mn;
  }
  if (lane == 0) {
    sm[w] = m;
    sl[w] = l;
  }
#pragma unroll
  for (int i = 0; i < ATT_PER; i++) {
    int j = lane + 32 * i;
    if (j < d) sacc[w][j] = acc[i];
  }
  __syncthreads();
  float M = neg_inf();
  for (int i = 0; i < ATT_WARPS; i++) M = fmaxf(M, sm[i]);
  float L = 0.0f;
  for (int i = 0; i < ATT_WARPS; i++)
    if (sl[i] > 0.0f) L += sl[i] * expf(sm[i] - M);
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float v = 0.0f;
    for (int i = 0; i < ATT_WARPS; i++)
      if (sl[i] > 0.0f) v += sacc[i][j] * expf(sm[i] - M);
    o[j] = E::store(v / L);
  }
}

// argmax: one block per row; the first index of the largest value (NaN
// never wins; a row without a number gives 0). Each thread reads its
// elements ARGMAX_UNROLL loads at a time, all issued before the first
// compare: one load at a time kept a 128256-wide row (a Llama-3 vocabulary)
// at 178 us on an H200, a thirtieth of a decode step.
#define ARGMAX_UNROLL 16

template <class E>
__device__ void argmax_impl(const typename E::T* x, int* out, long long n) {
  __shared__ float sv[1024];
  __shared__ long long si[1024];
  const typename E::T* xr = x + (long long)blockIdx.x * n;
  float best = neg_inf();
  long long bi = n;  // none yet
  const long long step = blockDim.x;
  long long j = threadIdx.x;
  for (; j + (ARGMAX_UNROLL - 1) * step < n; j += ARGMAX_UNROLL * step) {
    float v[ARGMAX_UNROLL];
#pragma unroll
    for (int u = 0; u < ARGMAX_UNROLL; u++) v[u] = E::load(xr[j + u * step]);
#pragma unroll
    for (int u = 0; u < ARGMAX_UNROLL; u++)
      if (v[u] > best || (bi == n && v[u] == best)) {
        best = v[u];
        bi = j + u * step;
      }
  }
  for (; j < n; j += step) {
    float v = E::load(xr[j]);
    if (v > best || (bi == n && v == best)) {
      best = v;
      bi = j;
    }
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      float ov = sv[threadIdx.x + s];
      long long oi = si[threadIdx.x + s];
      long long mi = si[threadIdx.x];
      if (oi != n && (mi == n || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < mi))) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0] == n ? 0 : (int)si[0];
}

#define MODEL_KERNELS(name, E)                                                                                      \
  extern "C" __global__ void mul_##name(const E::T* x, const E::T* y, E::T* out, Bcast p) { PDL_ENTRY();                           \
    binary_impl<E, MulOp>(x, y, out, p);                                                                            \
  }                                                                                                                 \
  extern "C" __global__ void silu_##name(const E::T* x, E::T* out, long long n) { PDL_ENTRY(); silu_impl<E>(x, out, n); }        \
  extern "C" __global__ void embedding_##name(const int* ids, const E::T* table, E::T* out, long long nids,          \
                                              long long vocab, long long h) { PDL_ENTRY();                                       \
    embedding_impl<E>(ids, table, out, nids, vocab, h);                                                             \
  }                                                                                                                 \
  extern "C" __global__ void rms_norm_##name(const E::T* x, const E::T* w, E::T* out, long long h, float eps) { PDL_ENTRY();      \
    rms_norm_impl<E>(x, w, out, h, eps);                                                                            \
  }                                                                                                                 \
  extern "C" __global__ void layer_norm_##name(const E::T* x, const E::T* w, const E::T* b, E::T* out, long long h, \
                                               float eps) { PDL_ENTRY();                                                         \
    layer_norm_impl<E>(x, w, b, out, h, eps);                                                                       \
  }                                                                                                                 \
  extern "C" __global__ void rope_##name(const E::T* x, const int* pos, E::T* out, long long t, long long heads,     \
                                         long long d, double theta) { PDL_ENTRY();                                               \
    rope_impl<E>(x, pos, out, t, heads, d, theta);                                                                  \
  }                                                                                                                 \
  extern "C" __global__ void rope_table_##name(const E::T* x, const int* pos, E::T* out, long long t, long long heads, \
                                               long long d, RopeFreqs f) { PDL_ENTRY();                                           \
    rope_table_impl<E>(x, pos, out, t, heads, d, f);                                                                \
  }                                                                                                                 \
  extern "C" __global__ void kv_append_##name(const E::T* k, const E::T* v, E::T* kc, E::T* vc, const int* pos,      \
                                              long long t, long long row, long long seq, long long tps) { PDL_ENTRY();           \
    kv_append_impl<E>(k, v, kc, vc, pos, t, row, seq, tps);                                                            \
  }                                                                                                                 \
  extern "C" __global__ void attention_##name(const E::T* q, const E::T* kc, const E::T* vc, const int* pos,         \
                                              E::T* out, int hq, int hkv, int d, int seq, float scale, int tps) { PDL_ENTRY();   \
    attention_impl<E>(q, kc, vc, pos, out, hq, hkv, d, seq, scale, tps);                                               \
  }                                                                                                                 \
  extern "C" __global__ void argmax_##name(const E::T* x, int* out, long long n) { PDL_ENTRY(); argmax_impl<E>(x, out, n); }


MODEL_KERNELS(f32, F32)
MODEL_KERNELS(f16, F16)
MODEL_KERNELS(bf16, BF16)
