// chorus VM kernels: elementwise add with numpy broadcasting and GELU
// (tanh approximation), for float32, float16 and bfloat16, computing in
// float. Compiled at run time by NVRTC (no headers: half conversions are
// PTX cvt instructions), one module per worker. The decoder ops are in
// kernels_model.cu (compiled after this file, as a second module).

// h2f, f2h, b2f, f2b: gpu/cudasrc/half.cuh, prepended by the Go side.
// PDL_WAIT, PDL_LAUNCH, PDL_ENTRY: gpu/cudasrc/pdl.cuh, prepended too.
// Every VM kernel executes PDL_WAIT before it reads or writes any buffer
// but fixed weights (pdl.go).

struct F32 {
  typedef float T;
  static __device__ __forceinline__ float load(T v) { return v; }
  static __device__ __forceinline__ T store(float f) { return f; }
};
struct F16 {
  typedef u16 T;
  static __device__ __forceinline__ float load(T v) { return h2f(v); }
  static __device__ __forceinline__ T store(float f) { return f2h(f); }
};
struct BF16 {
  typedef u16 T;
  static __device__ __forceinline__ float load(T v) { return b2f(v); }
  static __device__ __forceinline__ T store(float f) { return f2b(f); }
};

// F4 is four float32 partial sums; ld_cg4 and ld_cg load what other
// blocks of the launch wrote from L2 (the split-K tails of kernels_tc.cu,
// dec_merge of kernels_prefill.cu), after the reading block's fence:
// volatile, so that they stay after it.
struct __align__(16) F4 {
  float x, y, z, w;
};

__device__ __forceinline__ F4 ld_cg4(const float* p) {
  F4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ float ld_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// NORM_REGS is how many elements of its row a thread of rms_norm
// (kernels_model.cu) and add_rms_norm (kernels_fused.cu) keeps in
// registers: a row of up to NORM_REGS x blockDim.x elements (8192 at 256
// threads) is read with every load issued before the first is used, and
// never read twice. A loop that stores between its loads, or reads the
// row again after the sum, waits for memory at every element: it made a
// 4096-wide add_rms_norm 12.6 us and rms_norm 11.5 us on an H200, more
// than a decode layer's 33 MB output projection (14.7 us).
#define NORM_REGS 32

#define MAX_RANK 8

// Broadcast: out has `rank` dims of `shape`; x and y advance by sx and sy
// elements per step of each dim (0 where broadcast). The host merges dims,
// so equal shapes arrive as rank 1 and a bias as rank 2.
struct Bcast {
  long long n;
  int rank;
  int pad;
  long long shape[MAX_RANK];
  long long sx[MAX_RANK];
  long long sy[MAX_RANK];
};

template <class E>
__device__ void add_impl(const typename E::T* x, const typename E::T* y, typename E::T* out, const Bcast& p) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
    long long ix = 0, iy = 0, r = i;
    for (int d = p.rank - 1; d >= 0; d--) {
      long long c = r % p.shape[d];
      r /= p.shape[d];
      ix += c * p.sx[d];
      iy += c * p.sy[d];
    }
    out[i] = E::store(E::load(x[ix]) + E::load(y[iy]));
  }
}

template <class E>
__device__ void gelu_impl(const typename E::T* x, typename E::T* out, long long n) {
  const float c = 0.7978845608028654f;  // sqrt(2/pi)
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = E::load(x[i]);
    out[i] = E::store(0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v))));
  }
}

#define KERNELS(name, E)                                                                  \
  extern "C" __global__ void add_##name(const E::T* x, const E::T* y, E::T* out, Bcast p) { PDL_ENTRY(); \
    add_impl<E>(x, y, out, p);                                                            \
  }                                                                                       \
  extern "C" __global__ void gelu_##name(const E::T* x, E::T* out, long long n) { PDL_ENTRY();         \
    gelu_impl<E>(x, out, n);                                                              \
  }

KERNELS(f32, F32)
KERNELS(f16, F16)
KERNELS(bf16, BF16)

