// chorus IPC all-reduce kernels, compiled at run time by NVRTC (no headers,
// no CUDA toolkit at build time). One-shot: every rank reads every rank's
// input and reduces locally. Two-shot: rank r reduces slice r, publishes
// it in its scratch, and every rank gathers the slices.
//
// Synchronization: each thread block b of rank r meets block b of every
// peer at a barrier: it stores a flag into slot [b][r] of each peer's
// barrier array with release semantics (system scope, so prior writes are
// visible over NVLink) and spins with acquire loads on its own slots
// [b][q]. Flags come from a per-block counter kept in the rank's own
// memory (the kernel arguments never change between calls, so the kernels
// can be captured in a CUDA graph). Start, middle (two-shot) and end
// barriers use separate arrays; the end barrier makes inputs and scratch
// reusable by the very next call. A barrier that waits longer than
// `timeout` cycles gives up with code 1, instead of hanging the GPU
// forever when a peer never comes; when the host sets the abort word (a
// peer process was lost) it gives up with code 2 within a few hundred
// polls. The code is stored in the sticky device word ctl[1], so later
// barriers give up at once, and reported to the host through *err.
//
// A waiting loop reads device memory only. It once also read the abort
// and error words from mapped host memory every 256 polls: such a load
// crosses PCIe to the host's memory, the polling thread cannot look at
// its flag again until it returns, and how long that takes is up to the
// host (PCIe, NUMA, the CPU package's power state), so a barrier that
// waited a little too long could wait for a slow host read (docs/ipc.md,
// "Stalls"). The host now sets the device-resident abort word with a
// copy-engine transfer, and the kernels only store to host memory
// (posted writes, which do not wait), on the failure path.
//
// All ranks reduce in rank order 0..n-1 and accumulate in float, so every
// rank gets bit-identical results.
//
// Calls checked on the GPU: a start-barrier slot is 64 bits, the flag in
// the low half and the call's digest (a hash of what the rank is about to
// do: strategy, dtype, op, count, input allocation and offset; the host
// computes it, allreduce.go) in the high half, stored in one access. A
// block that finds a peer's flag with a different digest gives up with
// code 3 before it reads any peer memory, so ranks that skip the host's
// descriptor exchange still never reduce mismatched inputs silently. The
// one-shot and two-shot kernels end with a barrier, so a peer's slot holds
// exactly this call's flag when the wait passes; push one-shot has no end
// barrier (a peer may already be one call ahead) and its calls are checked
// on the host (digest 0: not compared).

// Programmatic dependent launch (gpu/cudasrc/pdl.cuh, prepended by the
// Go side; the host launches so only where every rank is alone on its
// GPU, allreduce.go usePDL): a kernel may start while the kernel before
// it on the stream ends, so it lets the next kernel be launched (only
// then: entry) and then waits before it reads any buffer or meets its
// peers.

#define MAX_RANKS 8
#define MAX_BLOCKS 512

struct Peers {
  const void* data[MAX_RANKS];  // each rank's input
  u64* bar_in[MAX_RANKS];       // start barrier slots, [MAX_BLOCKS][MAX_RANKS] u64: digest << 32 | flag
  u32* bar_mid[MAX_RANKS];      // middle barrier (two-shot)
  u32* bar_out[MAX_RANKS];      // end barrier
  void* scratch[MAX_RANKS];     // two-shot: each rank's reduced slice
};

struct Args {
  Peers p;
  void* out;       // this rank's output (local)
  u32* counters;   // this rank's per-block flag counters [MAX_BLOCKS]
  u32* err;        // this rank's error report, mapped host memory, store-only (1 timeout, 2 aborted)
  u64 n;           // elements
  long long timeout;
  int rank;
  int nranks;
  const void* in;  // push one-shot: this rank's input (any device memory)
  u64 slot;        // push one-shot: bytes per (parity, source) slot
  u32* ctl;        // device memory: [0] abort (the host copies 1 in), [1] sticky give-up code
  u32 digest;      // this call's digest for the start barrier (0: not compared)
  u32 flags;       // FLAG_EARLY | FLAG_ONE_GPU (allreduce.go, kargs.flags)
};

__device__ __forceinline__ u64 umin(u64 a, u64 b) { return a < b ? a : b; }

// FLAG_EARLY: let the next kernel launch at entry (every rank alone on
// its GPU). FLAG_ONE_GPU: every rank runs on this GPU (ranks sharing it
// under MPS): the words of the barriers that publish data are GPU-scope
// accesses, since every rank's multiprocessors meet in this GPU's L2 and
// a system-scope release buys nothing there (barrier, below).
#define FLAG_EARLY 1u
#define FLAG_ONE_GPU 2u

// entry is PDL_ENTRY where every rank is alone on its GPU (FLAG_EARLY).
// Where ranks share a GPU the next kernel is not let launch before this
// one ends: its blocks, placed at once, would wait for this kernel while
// holding multiprocessors that a peer's blocks, which this kernel waits
// for, may need (under MPS the decoder's product after the all-reduce
// took them, and the all-reduce gave up after its timeout).
__device__ __forceinline__ void entry(const Args& a) {
  if (a.flags & FLAG_EARLY) PDL_LAUNCH();
  PDL_WAIT();
}

// Slot accesses by width (u32 flags, u64 start slots); the primitives
// are gpu/cudasrc/memorder.cuh's, prepended by the Go side.
// gpu: every rank on this GPU (FLAG_ONE_GPU), GPU scope; else system scope.
template <bool ACQUIRE, typename W> __device__ __forceinline__ W ld_slot(const W* p, bool gpu) {
  if constexpr (sizeof(W) == 8) {
    if (gpu) return ACQUIRE ? ld_acquire_gpu_u64(p) : ld_relaxed_gpu_u64(p);
    return ACQUIRE ? ld_acquire_sys_u64(p) : ld_relaxed_sys_u64(p);
  } else {
    if (gpu) return ACQUIRE ? ld_acquire_gpu_u32(p) : ld_relaxed_gpu_u32(p);
    return ACQUIRE ? ld_acquire_sys_u32(p) : ld_relaxed_sys_u32(p);
  }
}
template <bool RELEASE, typename W> __device__ __forceinline__ void st_slot(W* p, W v, bool gpu) {
  if constexpr (sizeof(W) == 8) {
    if (gpu) {
      if (RELEASE) st_release_gpu_u64(p, v); else st_relaxed_gpu_u64(p, v);
    } else {
      if (RELEASE) st_release_sys_u64(p, v); else st_relaxed_sys_u64(p, v);
    }
  } else {
    if (gpu) {
      if (RELEASE) st_release_gpu_u32(p, v); else st_relaxed_gpu_u32(p, v);
    } else {
      if (RELEASE) st_release_sys_u32(p, v); else st_relaxed_sys_u32(p, v);
    }
  }
}

// give_up records why a barrier stopped waiting (1 timeout, 2 aborted, 3
// the peers' calls differ) in the sticky device word, so later barriers
// stop at once, and in the mapped host word the host checks. The err word
// is mapped host memory: a plain store (posted, it does not wait for
// PCIe); the host reads it after synchronizing.
__device__ __forceinline__ void give_up(const Args& a, u32 code) {
  st_relaxed_sys_u32(a.ctl + 1, code);
  *(volatile u32*)a.err = code;
}

// barrier<PUBLISH>: PUBLISH when this kernel wrote data that peers read
// after the barrier (push slots, two-shot scratch): the flag is a
// release and the wait an acquire, so those writes are visible first.
// Otherwise the barrier only says "I have arrived" (the inputs peers read
// were written by earlier work on the stream, complete at the kernel
// boundary) or "I have finished reading your memory" (the loads have
// returned: their values were consumed before __syncthreads), and
// relaxed system-scope accesses suffice. A publishing barrier's words
// are system-scope accesses, or GPU-scope ones where every rank is on
// this GPU (FLAG_ONE_GPU). A system-scope release
// costs about 0.9 us per barrier even with no remote peer
// (docs/benchmarks.md).
// W is the slot: u32 (the flag) or u64 (the start barrier: digest << 32 |
// flag). It returns true on every thread of the block when every peer
// arrived with this call's digest, false when the block gave up.
template <bool PUBLISH, typename W>
__device__ __forceinline__ bool barrier(const Args& a, W* const* bars, u32 flag, W word) {
  __syncthreads();
  int t = threadIdx.x;
  int failed = 0;
  if (t < a.nranks) {
    W* theirs = bars[t] + blockIdx.x * MAX_RANKS + a.rank;
    // GPU scope only where it saves a release: a kernel whose barriers
    // are all relaxed keeps the code it had (a run-time choice there made
    // the 4-rank one-shot kernel 1.30x slower at 32 MB under MPS).
    const bool gpu = PUBLISH && (a.flags & FLAG_ONE_GPU) != 0u;
    st_slot<PUBLISH>(theirs, word, gpu);
    const W* mine = bars[a.rank] + blockIdx.x * MAX_RANKS + t;
    long long start = clock64();
    u32 spins = 0;
    W v;
    // ">=" (wrap-safe), not "==": without an end barrier (push one-shot)
    // a fast peer may already have stored the next call's flag here
    // before this rank looked; that flag implies this one.
    while ((int)((u32)(v = ld_slot<PUBLISH>(mine, gpu)) - flag) < 0) {
      // Every 256 polls (never on the fast path): give up when the host
      // aborted (a peer was lost), when an earlier barrier already gave
      // up, or after the timeout. Only device memory is read here.
      if ((++spins & 255) == 0) {
        u32 code = ld_relaxed_sys_u32(a.ctl + 1);
        if (code == 0 && ld_relaxed_sys_u32(a.ctl) != 0) code = 2u;
        if (code == 0 && clock64() - start > a.timeout) code = 1u;
        if (code != 0) {
          give_up(a, code);
          failed = 1;
          break;
        }
      }
    }
    if (sizeof(W) == 8 && !failed && a.digest != 0 && (u32)v == flag && (u32)((u64)v >> 32) != a.digest) {
      give_up(a, 3u);
      failed = 1;
    }
  }
  return __syncthreads_or(failed) == 0;
}

__device__ __forceinline__ u64 start_word(const Args& a, u32 flag) { return ((u64)a.digest << 32) | flag; }

// Element types: 0 float32, 1 float16, 2 bfloat16. A 16-byte vector holds
// EPV elements.
template <int DT> struct Elem;
template <> struct Elem<0> { enum { EPV = 4 }; };
template <> struct Elem<1> { enum { EPV = 8 }; };
template <> struct Elem<2> { enum { EPV = 8 }; };

// h2f, f2h, b2f, f2b: gpu/cudasrc/half.cuh, prepended by the Go side.

template <int DT> __device__ __forceinline__ float elem_to_f(u32 w, int half) {
  if (DT == 0) return __uint_as_float(w);
  u16 h = half ? (u16)(w >> 16) : (u16)(w & 0xffff);
  return DT == 1 ? h2f(h) : b2f(h);
}

template <int DT> __device__ __forceinline__ void unpack(const uint4& v, float* f) {
  u32 w[4] = {v.x, v.y, v.z, v.w};
  if (DT == 0) {
#pragma unroll
    for (int i = 0; i < 4; i++) f[i] = __uint_as_float(w[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      f[2 * i] = elem_to_f<DT>(w[i], 0);
      f[2 * i + 1] = elem_to_f<DT>(w[i], 1);
    }
  }
}

template <int DT> __device__ __forceinline__ u16 f_to_16(float f) { return DT == 1 ? f2h(f) : f2b(f); }

template <int DT> __device__ __forceinline__ uint4 pack(const float* f) {
  u32 w[4];
  if (DT == 0) {
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = __float_as_uint(f[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = (u32)f_to_16<DT>(f[2 * i]) | ((u32)f_to_16<DT>(f[2 * i + 1]) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Reduction ops: 0 sum, 1 min, 2 max.
template <int OP> __device__ __forceinline__ float combine(float a, float b) {
  if (OP == 0) return a + b;
  if (OP == 1) return fminf(a, b);
  return fmaxf(a, b);
}

// reduce_vec reduces vector i over every rank, in rank order.
template <int DT, int OP> __device__ __forceinline__ uint4 reduce_vec(const Args& a, u64 i) {
  const int E = Elem<DT>::EPV;
  uint4 v[MAX_RANKS];
#pragma unroll
  for (int q = 0; q < MAX_RANKS; q++)
    if (q < a.nranks) v[q] = ((const uint4*)a.p.data[q])[i];
  float acc[E], f[E];
  unpack<DT>(v[0], acc);
#pragma unroll
  for (int q = 1; q < MAX_RANKS; q++) {
    if (q < a.nranks) {
      unpack<DT>(v[q], f);
#pragma unroll
      for (int k = 0; k < E; k++) acc[k] = combine<OP>(acc[k], f[k]);
    }
  }
  return pack<DT>(acc);
}

// Scalar access to element j (the tail that does not fill a vector).
template <int DT> __device__ __forceinline__ float load_elem(const void* p, u64 j) {
  if (DT == 0) return ((const float*)p)[j];
  u16 h = ((const u16*)p)[j];
  return DT == 1 ? h2f(h) : b2f(h);
}
template <int DT> __device__ __forceinline__ void store_elem(void* p, u64 j, float f) {
  if (DT == 0)
    ((float*)p)[j] = f;
  else
    ((u16*)p)[j] = f_to_16<DT>(f);
}

// tail: block 0 reduces the elements after the last whole vector.
template <int DT, int OP> __device__ __forceinline__ void tail(const Args& a, u64 nvec) {
  const int E = Elem<DT>::EPV;
  if (blockIdx.x != 0) return;
  for (u64 j = nvec * E + threadIdx.x; j < a.n; j += blockDim.x) {
    float acc = load_elem<DT>(a.p.data[0], j);
    for (int q = 1; q < a.nranks; q++) acc = combine<OP>(acc, load_elem<DT>(a.p.data[q], j));
    store_elem<DT>(a.out, j, acc);
  }
}

__device__ __forceinline__ u32 next_flag(const Args& a) {
  __shared__ u32 flag;
  if (threadIdx.x == 0) flag = a.counters[blockIdx.x] + 1;
  __syncthreads();
  return flag;
}

__device__ __forceinline__ void save_flag(const Args& a, u32 flag) {
  if (threadIdx.x == 0) a.counters[blockIdx.x] = flag;
}

template <int DT, int OP> __device__ void oneshot(const Args& a) {
  entry(a);
  const u64 nvec = a.n / Elem<DT>::EPV;
  u32 flag = next_flag(a);
  if (barrier<false>(a, a.p.bar_in, flag, start_word(a, flag))) {
    uint4* out = (uint4*)a.out;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += (u64)gridDim.x * blockDim.x)
      out[i] = reduce_vec<DT, OP>(a, i);
    tail<DT, OP>(a, nvec);
  }
  barrier<false>(a, a.p.bar_out, flag, flag);
  save_flag(a, flag);
}

template <int DT, int OP> __device__ void twoshot(const Args& a) {
  entry(a);
  const u64 nvec = a.n / Elem<DT>::EPV;
  const u64 per = (nvec + a.nranks - 1) / a.nranks;
  u32 flag = next_flag(a);
  // A block that gave up at the start reads no peer memory; its later
  // barriers give up at once (the sticky word).
  const bool go = barrier<false>(a, a.p.bar_in, flag, start_word(a, flag));
  uint4* out = (uint4*)a.out;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (go) {
    u64 lo = per * a.rank, hi = umin(nvec, lo + per);
    uint4* mine = (uint4*)a.p.scratch[a.rank];
    for (u64 i = lo + first; i < hi; i += stride) {
      uint4 v = reduce_vec<DT, OP>(a, i);
      out[i] = v;
      mine[i - lo] = v;
    }
  }
  // The tail is reduced now but stored after the middle barrier, when no
  // peer reads this rank's input any more (two-shot may run in place).
  const u64 tj = nvec * Elem<DT>::EPV + threadIdx.x;
  const bool has_tail = go && blockIdx.x == 0 && tj < a.n;
  float tv = 0.f;
  if (has_tail) {
    tv = load_elem<DT>(a.p.data[0], tj);
    for (int q = 1; q < a.nranks; q++) tv = combine<OP>(tv, load_elem<DT>(a.p.data[q], tj));
  }
  const bool go2 = barrier<true>(a, a.p.bar_mid, flag, flag) && go;
  if (has_tail) store_elem<DT>(a.out, tj, tv);
  for (int k = 1; go2 && k < a.nranks; k++) {
    int q = (a.rank + k) % a.nranks;  // stagger the peers each rank reads
    u64 lo = per * q, hi = umin(nvec, lo + per);
    const uint4* theirs = (const uint4*)a.p.scratch[q];
    for (u64 i = lo + first; i < hi; i += stride) out[i] = theirs[i - lo];
  }
  barrier<false>(a, a.p.bar_out, flag, flag);
  save_flag(a, flag);
}

// Push one-shot for small inputs: every rank stores its input into slot
// [parity][rank] of every rank's workspace (data[q]), then signals; each
// rank waits for all signals and reduces its own slots from local memory.
// Slots alternate by call parity, so no end barrier is needed: a peer can
// only start writing parity p again after this rank has started the next
// call, that is, after this call's kernel has finished reading.
template <int DT> __device__ __forceinline__ char* slot_of(const Args& a, int q, int p, int src) {
  return (char*)a.p.data[q] + ((u64)p * a.nranks + src) * a.slot;
}

template <int DT, int OP> __device__ void push(const Args& a) {
  entry(a);
  const int E = Elem<DT>::EPV;
  const u64 nvec = a.n / E;
  u32 flag = next_flag(a);
  const int par = flag & 1;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const uint4* in = (const uint4*)a.in;
  for (u64 i = first; i < nvec; i += stride) {
    uint4 v = in[i];
#pragma unroll
    for (int q = 0; q < MAX_RANKS; q++)
      if (q < a.nranks) ((uint4*)slot_of<DT>(a, q, par, a.rank))[i] = v;
  }
  if (blockIdx.x == 0) {
    for (u64 j = nvec * E + threadIdx.x; j < a.n; j += blockDim.x) {
      float f = load_elem<DT>(a.in, j);
      for (int q = 0; q < a.nranks; q++) store_elem<DT>(slot_of<DT>(a, q, par, a.rank), j, f);
    }
  }
  barrier<true>(a, a.p.bar_in, flag, (u64)flag);  // digest 0: push calls are checked on the host
  uint4* out = (uint4*)a.out;
  for (u64 i = first; i < nvec; i += stride) {
    float acc[E], f[E];
    unpack<DT>(((const uint4*)slot_of<DT>(a, a.rank, par, 0))[i], acc);
#pragma unroll
    for (int q = 1; q < MAX_RANKS; q++) {
      if (q < a.nranks) {
        unpack<DT>(((const uint4*)slot_of<DT>(a, a.rank, par, q))[i], f);
#pragma unroll
        for (int k = 0; k < E; k++) acc[k] = combine<OP>(acc[k], f[k]);
      }
    }
    out[i] = pack<DT>(acc);
  }
  if (blockIdx.x == 0) {
    for (u64 j = nvec * E + threadIdx.x; j < a.n; j += blockDim.x) {
      float acc = load_elem<DT>(slot_of<DT>(a, a.rank, par, 0), j);
      for (int q = 1; q < a.nranks; q++) acc = combine<OP>(acc, load_elem<DT>(slot_of<DT>(a, a.rank, par, q), j));
      store_elem<DT>(a.out, j, acc);
    }
  }
  save_flag(a, flag);
}

#define KERNELS(NAME, DT, OP)                                                          \
  extern "C" __global__ void __launch_bounds__(1024) oneshot_##NAME(const Args a) { oneshot<DT, OP>(a); } \
  extern "C" __global__ void __launch_bounds__(1024) twoshot_##NAME(const Args a) { twoshot<DT, OP>(a); } \
  extern "C" __global__ void __launch_bounds__(1024) push_##NAME(const Args a) { push<DT, OP>(a); }

KERNELS(f32_sum, 0, 0)
KERNELS(f32_min, 0, 1)
KERNELS(f32_max, 0, 2)
KERNELS(f16_sum, 1, 0)
KERNELS(f16_min, 1, 1)
KERNELS(f16_max, 1, 2)
KERNELS(bf16_sum, 2, 0)
KERNELS(bf16_min, 2, 1)
KERNELS(bf16_max, 2, 2)
