// chorus GPU executor runtime (package algo/gpuexec): the helpers every
// generated plan kernel calls. Compiled by NVRTC without headers: the
// generator prepends the #defines RANK, NRANKS, DT, OP, LL, NTHREADS,
// NSEMS, SEM_INIT, PORT, GROUPED, START, END_RELEASE, ZERO_EARLY, MONO,
// PACKETS, PEER_GPU and gpu/cudasrc's half.cuh (u16, h2f,
// f2h, b2f, f2b).
//
// Block groups: each plan thread block runs on a.group CUDA blocks
// (blockIdx.x / group is the plan block, blockIdx.x % group the lane).
// Data ops stride over the group's threads; a signal is one add per lane
// on the lane's counter, a wait polls every lane's counter; nop and
// semaphores meet the group's blocks first. Plans with port channels run
// with a group of 1 (the proxy counts signals itself).
//
// Memory ordering (docs/gpu-executor.md): signal = one peer-scope
// release add on the peer's inbound counter after __syncthreads; wait =
// peer-scope acquire loads of the own inbound counter, then
// __syncthreads; the relaxed forms use relaxed peer-scope accesses and
// no fence. Peer scope is system scope, or GPU scope where every rank
// runs on this GPU (PEER_GPU). LL packets carry their flag in the same 8-byte word as their
// data (16-byte accesses move two packets at once: LL16), so a reader
// that sees the flag sees the data.

typedef long long i64;

#define MAX_RANKS 8
// MAX_GROUP is layout.go's MaxGroup: lanes of a channel slot's counters.
#define MAX_GROUP 128

// Args mirrors gpuexec.args (all 8-byte fields, no padding).
struct Args {
  u64 buf[MAX_RANKS][3];    // rank q's input, output, scratch as addressed from this GPU
  u64 inbound[MAX_RANKS];   // rank q's inbound signal counters (u64 per channel slot)
  u64 bar_start[MAX_RANKS]; // rank q's start-barrier slots (u32 per rank)
  u64 bar_end[MAX_RANKS];   // rank q's end-barrier slots
  u64 chunk;                // chunk bytes C of this call
  u64 align;                // buffer alignment A
  u64 scratch_half;         // bytes of one scratch half (double scratch), else 0
  u64 tickets;              // this rank's wait tickets (u64 per channel)
  u64 ctl;                  // this rank's control words (u32): [1] arrivals, [2] gave up, [3] abort,
                            // [6] scrub done (reset by the call after), [7] scrubs done
  u64 tbbar;                // intra-rank barriers: u32 count, u32 generation per id
  u64 sems;                 // semaphores (int)
  u64 abort;                // device u32 (control word 3): non-zero when the host aborts (a copy-engine write)
  u64 err;                  // mapped host error record (u32): code, rank, tb, op, body
  i64 timeout;              // wait timeout in GPU clock cycles
  u64 fifo;                 // port channels: mapped host FIFO, 8 u64 per entry
  u64 fifo_head;            // device u64: the last sequence number reserved
  u64 fifo_tail;            // mapped host u64: entries the proxy consumed
  u64 fifo_done;            // mapped host u64: the last flush entry completed
  u64 fifo_size;            // entries in the FIFO
  u64 group;                // CUDA blocks per plan thread block (the same on every rank)
  u64 gbar;                 // per plan block: u32 count, u32 generation of its group barrier
  u64 nslots;               // channel slots (counters of slot s, lane l at slot_at(a, s, l))
  u64 scratch_bytes;        // this rank's scratch buffer (both halves), zeroed at the flag's wrap (scrub)
  u64 epochs;               // the last call's flag, per block (u64, MAX_GROUP lanes a plan block: epochs_of)
};

__device__ __forceinline__ u32 lane(const Args& a) { return blockIdx.x % (u32)a.group; }

// slot_at is where the inbound word of channel slot s, lane l lies.
// Counters zeroed every call pack the lanes of this call's group. MONO
// plans (SignalSynced) never zero their words, so a lane keeps its place
// whatever the group of a call; each word has one writer (the lane's
// block of the one thread block that signals on the channel), which
// stores (call << 16 | k) at its k-th signal of a call, and a wait for
// the j-th signal of call c polls until the word is at least (c << 16 |
// j): the words only grow, a peer already a call ahead satisfies it
// (its signals of this call came first), and no count has to be carried
// from call to call. The call number of MONO plans is 64 bits (flag_t;
// epochs_of), so it does not wrap.
__device__ __forceinline__ u64 slot_at(const Args& a, u64 s, u64 l) { return MONO ? s * MAX_GROUP + l : s * a.group + l; }
#if MONO
typedef u64 flag_t;
#else
typedef u32 flag_t;
#endif
// epochs holds the last call's flag once per (plan thread block, lane),
// MAX_GROUP lanes a plan block (u64 words; MONO plans use all 64 bits,
// the others the low 32), so that no block reads a word another block of
// the call writes and no block has to wait at the end to bump a shared
// one: with one word, the last block to arrive stored the flag, and every
// block paid an acq_rel atomic round trip to L2 before it could exit (2
// ranks sharing an H200 under MPS, graph-replayed, 1 KB, device tensors,
// same call: the one-shot plan 4.9 us a call with it, 4.1 without;
// docs/gpu-executor.md). A
// block takes its word plus one as the call's flag and stores it back at
// once (call_flag); the lane-0 block of each plan block also stores it in
// the words of the lanes this call's group leaves out, so after each call
// every word of the rank holds the same flag, whatever the group of the
// next one. Every rank makes the same calls, so the flags agree across
// ranks.
__device__ __forceinline__ volatile u64* epochs_of(const Args& a) {
  return (volatile u64*)a.epochs + (u64)(blockIdx.x / (u32)a.group) * MAX_GROUP;
}
__device__ __forceinline__ u64 gtid(const Args& a) { return (u64)lane(a) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 gthreads(const Args& a) { return a.group * blockDim.x; }

// ---- memory-model primitives (PTX; the system- and GPU-scope loads
// and stores: gpu/cudasrc/memorder.cuh) ----

__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void fence_sc_sys() { asm volatile("fence.sc.sys;" ::: "memory"); }

__device__ __forceinline__ u64 atom_add_acq_rel_gpu_u64(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}
__device__ __forceinline__ u32 atom_add_acq_rel_gpu_u32(u32* p, u32 v) {
  u32 old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ u64 atom_add_relaxed_gpu_u64(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}
__device__ __forceinline__ u32 atom_cas_relaxed_gpu_u32(u32* p, u32 cmp, u32 v) {
  u32 old;
  asm volatile("atom.relaxed.gpu.global.cas.b32 %0, [%1], %2, %3;" : "=r"(old) : "l"(p), "r"(cmp), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ int ld_acquire_gpu_s32(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int atom_cas_acq_rel_gpu_s32(int* p, int cmp, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.cas.b32 %0, [%1], %2, %3;" : "=r"(old) : "l"(p), "r"(cmp), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void red_release_gpu_s32(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Peer scope: the words and fences ranks meet by (signals, waits, the
// start and end barriers). Peers are other GPUs (over NVLink or PCIe)
// unless every rank of the plan runs on this one (ranks sharing it under
// MPS): then the executor defines PEER_GPU 1 and GPU scope orders what
// they see, since every rank's multiprocessors meet in this GPU's L2. A
// system-scope release waits for the block's writes to be visible to
// the whole system, which on one GPU buys nothing (docs/gpu-executor.md,
// "Ranks on one GPU: GPU-scope signals"). Never with port channels: the
// proxy is a host thread and its copies a copy engine.
#if PEER_GPU
#define PEER_SCOPE "gpu"
#else
#define PEER_SCOPE "sys"
#endif
// The loads and stores are memorder.cuh's of the peer scope (PEER_GPU is
// a constant: each picks one at compile time).
__device__ __forceinline__ void st_release_peer_u64(u64* p, u64 v) { PEER_GPU ? st_release_gpu_u64(p, v) : st_release_sys_u64(p, v); }
__device__ __forceinline__ void st_relaxed_peer_u64(u64* p, u64 v) { PEER_GPU ? st_relaxed_gpu_u64(p, v) : st_relaxed_sys_u64(p, v); }
__device__ __forceinline__ u64 ld_acquire_peer_u64(const u64* p) { return PEER_GPU ? ld_acquire_gpu_u64(p) : ld_acquire_sys_u64(p); }
__device__ __forceinline__ u64 ld_relaxed_peer_u64(const u64* p) { return PEER_GPU ? ld_relaxed_gpu_u64(p) : ld_relaxed_sys_u64(p); }
__device__ __forceinline__ void st_relaxed_peer_u32(u32* p, u32 v) { PEER_GPU ? st_relaxed_gpu_u32(p, v) : st_relaxed_sys_u32(p, v); }
__device__ __forceinline__ u32 ld_acquire_peer_u32(const u32* p) { return PEER_GPU ? ld_acquire_gpu_u32(p) : ld_acquire_sys_u32(p); }
__device__ __forceinline__ u32 ld_relaxed_peer_u32(const u32* p) { return PEER_GPU ? ld_relaxed_gpu_u32(p) : ld_relaxed_sys_u32(p); }
__device__ __forceinline__ void fence_sc_peer() { asm volatile("fence.sc." PEER_SCOPE ";" ::: "memory"); }
__device__ __forceinline__ void fence_acq_rel_peer() { asm volatile("fence.acq_rel." PEER_SCOPE ";" ::: "memory"); }
__device__ __forceinline__ void red_release_peer_u64(u64* p, u64 v) {
  asm volatile("red.release." PEER_SCOPE ".global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void red_relaxed_peer_u64(u64* p, u64 v) {
  asm volatile("red.relaxed." PEER_SCOPE ".global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// LL packets: 8 bytes = data u32 + flag u32; two of them = LL16.
__device__ __forceinline__ void st_pkt16(char* p, u32 d0, u32 d1, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(flag), "r"(d1), "r"(flag) : "memory");
}
__device__ __forceinline__ void st_pkt8(char* p, u32 d, u32 flag) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(d), "r"(flag) : "memory");
}
__device__ __forceinline__ void ld_pkt16(const char* p, u32* d0, u32* f0, u32* d1, u32* f1) {
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(*d0), "=r"(*f0), "=r"(*d1), "=r"(*f1) : "l"(p) : "memory");
}
__device__ __forceinline__ void ld_pkt8(const char* p, u32* d, u32* f) {
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(*d), "=r"(*f) : "l"(p) : "memory");
}

// ---- failure: timeouts and aborts ----

__device__ __forceinline__ bool gave_up(const Args& a) { return *(volatile u32*)((u32*)a.ctl + 2) != 0; }

// fail records the first wait of this rank that gave up (code 1 timeout,
// 2 aborted) in the mapped host error record; later waits give up at
// their first check (keep_waiting).
__device__ __noinline__ void fail(u64 ctl, u64 err, u32 code, int tb, int op, int body) {
  if (atom_cas_relaxed_gpu_u32((u32*)ctl + 2, 0u, code) == 0u) {
    volatile u32* e = (volatile u32*)err;
    e[1] = (u32)RANK;
    e[2] = (u32)tb;
    e[3] = (u32)op;
    e[4] = (u32)body;
    fence_sc_sys();
    e[0] = code;
  }
}

struct Waiter {
  i64 start;
  u32 spins;
  i64 limit;
};

__device__ __forceinline__ Waiter waiter(const Args& a, int scale) {
  Waiter w;
  w.start = clock64();
  w.spins = 0;
  w.limit = a.timeout * scale;
  return w;
}

// keep_waiting is called once per poll; every 256 polls (never on the
// fast path) it checks the abort word, an earlier failure and the clock.
// All three are device-local: a load from mapped host memory here would
// hold the poll for a host round trip whose length the host decides
// (ccl/ipc's kernels stalled so, docs/ipc.md "Stalls"). Only port
// channels read host memory (the proxy's FIFO tail and done words).
__device__ __forceinline__ bool keep_waiting(const Args& a, Waiter& w, int tb, int op, int body) {
  if ((++w.spins & 255u) != 0u) return true;
  if (gave_up(a)) return false;
  if (*(volatile u32*)a.abort != 0u) {
    fail(a.ctl, a.err, 2u, tb, op, body);
    return false;
  }
  if (clock64() - w.start > w.limit) {
    fail(a.ctl, a.err, 1u, tb, op, body);
    return false;
  }
  return true;
}

// ---- byte ranges ----

struct Rg {
  u64 off, n;
};

__device__ __forceinline__ u64 unit_start(u64 units, u64 i, u64 parts) {
  u64 q = units / parts, r = units % parts;
  return i * q + (i < r ? i : r);
}

// rg: chunks [idx, idx+size), cut to thread-block-group part `part` of
// `parts` (whole alignment units), then to pipeline iteration `it` of
// `unit` bytes (unit 0: no pipeline). As plan.Layout and the CPU executor.
__device__ __forceinline__ Rg rg(const Args& a, u64 idx, u64 size, u64 part, u64 parts, u64 it, u64 unit) {
  Rg r;
  r.off = idx * a.chunk;
  r.n = size * a.chunk;
  if (parts > 1) {
    u64 units = r.n / a.align;
    u64 s = unit_start(units, part, parts), e = unit_start(units, part + 1, parts);
    r.off += s * a.align;
    r.n = (e - s) * a.align;
  }
  if (unit != 0) {
    u64 lo = it * unit;
    if (lo >= r.n) {
      r.n = 0;
    } else {
      r.off += lo;
      r.n = (r.n - lo < unit) ? r.n - lo : unit;
    }
  }
  return r;
}

// at: the address of data byte `off` of buffer b (0 input, 1 output, 2
// scratch) of rank q. In LL plans scratch chunk c occupies bytes
// [2cC, 2(c+1)C): plain data the first half, packets all of it. Double
// scratch alternates halves by call parity.
__device__ __forceinline__ char* at(const Args& a, flag_t flag, int q, int b, u64 off) {
  char* base = (char*)a.buf[q][b];
  if (b == 2) {
    if (LL) off *= 2;
    base += (u64)(flag & 1u) * a.scratch_half;
  }
  return base + off;
}

// ---- element types: DT 0 float32, 1 float16, 2 bfloat16; OP 0 sum, 1 min, 2 max ----

#define ES (DT == 0 ? 4 : 2)

__device__ __forceinline__ float combine(float x, float y) {
  if (OP == 0) return x + y;
  if (OP == 1) return fminf(x, y);
  return fmaxf(x, y);
}
__device__ __forceinline__ float h_to_f(u16 h) { return DT == 1 ? h2f(h) : b2f(h); }
__device__ __forceinline__ u16 f_to_h(float f) { return DT == 1 ? f2h(f) : f2b(f); }

// A u32 word holds 1 (float32) or 2 (16-bit) elements.
__device__ __forceinline__ void word_to_f(u32 w, float* f) {
  if (DT == 0) {
    f[0] = __uint_as_float(w);
  } else {
    f[0] = h_to_f((u16)(w & 0xffffu));
    f[1] = h_to_f((u16)(w >> 16));
  }
}
__device__ __forceinline__ u32 f_to_word(const float* f) {
  if (DT == 0) return __float_as_uint(f[0]);
  return (u32)f_to_h(f[0]) | ((u32)f_to_h(f[1]) << 16);
}

// red_words reduces K words (in order) elementwise, accumulating in float.
template <int K>
__device__ __forceinline__ u32 red_words(const u32* w) {
  float acc[2], f[2];
  word_to_f(w[0], acc);
#pragma unroll
  for (int k = 1; k < K; k++) {
    word_to_f(w[k], f);
    acc[0] = combine(acc[0], f[0]);
    acc[1] = combine(acc[1], f[1]);
  }
  return f_to_word(acc);
}

__device__ __forceinline__ float load_elem(const char* p) {
  if (DT == 0) return *(const float*)p;
  return h_to_f(*(const u16*)p);
}
__device__ __forceinline__ void store_elem(char* p, float f) {
  if (DT == 0)
    *(float*)p = f;
  else
    *(u16*)p = f_to_h(f);
}

// ---- data movement (every thread of the block calls these) ----

// Moves are 16-byte vectors, UNROLL in flight per thread before any
// store (a remote read's latency is paid once per UNROLL vectors).
#define UNROLL 4

__device__ __forceinline__ void copy_bytes(const Args& a, char* d, const char* s, u64 n) {
  if (d == s || n == 0) return;
  const u64 t = gtid(a), T = gthreads(a);
  u64 done = 0;
  if ((((u64)d | (u64)s) & 15u) == 0u) {
    const u64 nv = n >> 4;
    u64 i = t;
    for (; i + (UNROLL - 1) * T < nv; i += UNROLL * T) {
      uint4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; u++) v[u] = ((const uint4*)s)[i + u * T];
#pragma unroll
      for (int u = 0; u < UNROLL; u++) ((uint4*)d)[i + u * T] = v[u];
    }
    for (; i < nv; i += T) ((uint4*)d)[i] = ((const uint4*)s)[i];
    done = nv << 4;
  } else if ((((u64)d | (u64)s) & 3u) == 0u) {
    const u64 nw = n >> 2;
    for (u64 i = t; i < nw; i += T) ((u32*)d)[i] = ((const u32*)s)[i];
    done = nw << 2;
  }
  for (u64 i = done + t; i < n; i += T) d[i] = s[i];
}

// reduce_plain: dst[0..D) = reduce(src[0..K)) over n bytes (re, rre, res,
// rres). Vectors of 16 bytes when every address allows, else u32 words,
// else single elements.
template <int K, int D>
__device__ __forceinline__ uint4 red_vec(const uint4* v) {
  u32 w[K];
  uint4 r;
#pragma unroll
  for (int k = 0; k < K; k++) w[k] = v[k].x;
  r.x = red_words<K>(w);
#pragma unroll
  for (int k = 0; k < K; k++) w[k] = v[k].y;
  r.y = red_words<K>(w);
#pragma unroll
  for (int k = 0; k < K; k++) w[k] = v[k].z;
  r.z = red_words<K>(w);
#pragma unroll
  for (int k = 0; k < K; k++) w[k] = v[k].w;
  r.w = red_words<K>(w);
  return r;
}

template <int K, int D>
__device__ __forceinline__ void reduce_plain(const Args& a, char* const* dst, const char* const* src, u64 n) {
  const u64 t = gtid(a), T = gthreads(a);
  u64 all = n;
#pragma unroll
  for (int k = 0; k < K; k++) all |= (u64)src[k];
#pragma unroll
  for (int d = 0; d < D; d++) all |= (u64)dst[d];
  u64 done = 0;
  if ((all & 15u) == 0u) {
    const u64 nv = n >> 4;
    // Below 4 sources two vectors per thread in flight (K loads each)
    // before the stores; from 4 one, as ccl/ipc's one-shot kernel. Four
    // ranks sharing an H200 under MPS, the one-shot plan graph-replayed
    // on IPC tensors (2026-11-29, same call): at 256 MB one vector took
    // 1438-1493 us against 1640-1664 for two (kernel 1439), at 32 MB
    // 109.5 against 88.5 (kernel 116.6); on 4 x H200 the same within 2%;
    // 2 ranks keep two (one: 6% slower at 32 MB under MPS, the same on
    // 2 x H200).
    u64 i = t;
    for (; K < 4 && i + T < nv; i += 2 * T) {
      uint4 v0[K], v1[K];
#pragma unroll
      for (int k = 0; k < K; k++) {
        v0[k] = ((const uint4*)src[k])[i];
        v1[k] = ((const uint4*)src[k])[i + T];
      }
      const uint4 r0 = red_vec<K, D>(v0), r1 = red_vec<K, D>(v1);
#pragma unroll
      for (int d = 0; d < D; d++) {
        ((uint4*)dst[d])[i] = r0;
        ((uint4*)dst[d])[i + T] = r1;
      }
    }
    for (; i < nv; i += T) {
      uint4 v[K];
#pragma unroll
      for (int k = 0; k < K; k++) v[k] = ((const uint4*)src[k])[i];
      const uint4 r = red_vec<K, D>(v);
#pragma unroll
      for (int d = 0; d < D; d++) ((uint4*)dst[d])[i] = r;
    }
    done = nv << 4;
  } else if ((all & 3u) == 0u) {
    const u64 nw = n >> 2;
    for (u64 i = t; i < nw; i += T) {
      u32 w[K];
#pragma unroll
      for (int k = 0; k < K; k++) w[k] = ((const u32*)src[k])[i];
      u32 r = red_words<K>(w);
#pragma unroll
      for (int d = 0; d < D; d++) ((u32*)dst[d])[i] = r;
    }
    done = nw << 2;
  }
  for (u64 i = done + t * ES; i < n; i += T * ES) {
    float acc = load_elem(src[0] + i);
#pragma unroll
    for (int k = 1; k < K; k++) acc = combine(acc, load_elem(src[k] + i));
#pragma unroll
    for (int d = 0; d < D; d++) store_elem(dst[d] + i, acc);
  }
}

// write_packets: n data bytes at s become packets at pk (cpkt, ppkt).
__device__ __forceinline__ void write_packets(const Args& a, char* pk, const char* s, u64 n, u32 flag) {
  const u64 t = gtid(a), T = gthreads(a);
  if ((((u64)pk & 15u) | ((u64)s & 7u) | (n & 7u)) == 0u) {
    for (u64 i = t; i < (n >> 3); i += T) {
      uint2 v = ((const uint2*)s)[i];
      st_pkt16(pk + 16 * i, v.x, v.y, flag);
    }
  } else {
    for (u64 i = t; i < (n >> 2); i += T) st_pkt8(pk + 8 * i, ((const u32*)s)[i], flag);
  }
}

// get_pkt16/get_pkt8 wait for this call's flag in a packet; false: gave up.
__device__ __forceinline__ bool get_pkt16(const Args& a, const char* p, u32 flag, u32* d0, u32* d1, int tb, int op, int body) {
  u32 f0, f1;
  ld_pkt16(p, d0, &f0, d1, &f1);
  if (f0 == flag && f1 == flag) return true;
  Waiter w = waiter(a, 1);
  do {
    if (!keep_waiting(a, w, tb, op, body)) return false;
    ld_pkt16(p, d0, &f0, d1, &f1);
  } while (f0 != flag || f1 != flag);
  return true;
}
__device__ __forceinline__ bool get_pkt8(const Args& a, const char* p, u32 flag, u32* d, int tb, int op, int body) {
  u32 f;
  ld_pkt8(p, d, &f);
  if (f == flag) return true;
  Waiter w = waiter(a, 1);
  do {
    if (!keep_waiting(a, w, tb, op, body)) return false;
    ld_pkt8(p, d, &f);
  } while (f != flag);
  return true;
}

// read_packets: packets at pk (waiting for their flags) become n data
// bytes at d (upkt).
__device__ __forceinline__ void read_packets(const Args& a, char* d, const char* pk, u64 n, u32 flag, int tb, int op, int body) {
  const u64 t = gtid(a), T = gthreads(a);
  if ((((u64)pk & 15u) | ((u64)d & 7u) | (n & 7u)) == 0u) {
    for (u64 i = t; i < (n >> 3); i += T) {
      uint2 v;
      if (!get_pkt16(a, pk + 16 * i, flag, &v.x, &v.y, tb, op, body)) return;
      ((uint2*)d)[i] = v;
    }
  } else {
    for (u64 i = t; i < (n >> 2); i += T) {
      u32 v;
      if (!get_pkt8(a, pk + 8 * i, flag, &v, tb, op, body)) return;
      ((u32*)d)[i] = v;
    }
  }
}

// forward_packets: packets of n data bytes at s (waited for) are stored
// unchanged at pk (rppkt).
__device__ __forceinline__ void forward_packets(const Args& a, char* pk, const char* s, u64 n, u32 flag, int tb, int op, int body) {
  const u64 t = gtid(a), T = gthreads(a);
  if ((((u64)pk | (u64)s) & 15u) == 0u && (n & 7u) == 0u) {
    for (u64 i = t; i < (n >> 3); i += T) {
      u32 d0, d1;
      if (!get_pkt16(a, s + 16 * i, flag, &d0, &d1, tb, op, body)) return;
      st_pkt16(pk + 16 * i, d0, d1, flag);
    }
  } else {
    for (u64 i = t; i < (n >> 2); i += T) {
      u32 d;
      if (!get_pkt8(a, s + 8 * i, flag, &d, tb, op, body)) return;
      st_pkt8(pk + 8 * i, d, flag);
    }
  }
}

// forward_packets_to: packets of n data bytes at s (waited for once)
// stored unchanged at every pk[d] (rppkt with several destinations).
template <int D>
__device__ __forceinline__ void forward_packets_to(const Args& a, char* const* pk, const char* s, u64 n, u32 flag, int tb, int op, int body) {
  const u64 t = gtid(a), T = gthreads(a);
  u64 al = (u64)s;
#pragma unroll
  for (int d = 0; d < D; d++) al |= (u64)pk[d];
  if ((al & 15u) == 0u && (n & 7u) == 0u) {
    for (u64 i = t; i < (n >> 3); i += T) {
      u32 d0, d1;
      if (!get_pkt16(a, s + 16 * i, flag, &d0, &d1, tb, op, body)) return;
#pragma unroll
      for (int d = 0; d < D; d++) st_pkt16(pk[d] + 16 * i, d0, d1, flag);
    }
  } else {
    for (u64 i = t; i < (n >> 2); i += T) {
      u32 v;
      if (!get_pkt8(a, s + 8 * i, flag, &v, tb, op, body)) return;
#pragma unroll
      for (int d = 0; d < D; d++) st_pkt8(pk[d] + 8 * i, v, flag);
    }
  }
}

// wait_packets: waits until every packet of n data bytes at s carries
// this call's flag (rppkt over a port channel: the copy engine then
// moves the packets as they are, flags included, to pk). The packet size
// follows s and pk as forward_packets's does.
__device__ __forceinline__ void wait_packets(const Args& a, const char* pk, const char* s, u64 n, u32 flag, int tb, int op, int body) {
  const u64 t = gtid(a), T = gthreads(a);
  if ((((u64)pk | (u64)s) & 15u) == 0u && (n & 7u) == 0u) {
    for (u64 i = t; i < (n >> 3); i += T) {
      u32 d0, d1;
      if (!get_pkt16(a, s + 16 * i, flag, &d0, &d1, tb, op, body)) return;
    }
  } else {
    for (u64 i = t; i < (n >> 2); i += T) {
      u32 d;
      if (!get_pkt8(a, s + 8 * i, flag, &d, tb, op, body)) return;
    }
  }
}

// reduce_packets: src[0] plain, src[1..K) packets; the result goes to
// dst[0..D), as packets where bit d of PK is set (repkt, respkt, recpkt,
// recspkt). LL16 when every address allows, else LL8.
template <int K, int D, int PK>
__device__ __forceinline__ void reduce_packets(const Args& a, char* const* dst, const char* const* src, u64 n, u32 flag, int tb, int op, int body) {
  const u64 t = gtid(a), T = gthreads(a);
  u64 al = n | (u64)src[0];
#pragma unroll
  for (int k = 1; k < K; k++) al |= (u64)src[k] >> 1;  // packet offsets are twice the data offsets
#pragma unroll
  for (int d = 0; d < D; d++) al |= ((PK >> d) & 1) ? ((u64)dst[d] >> 1) : (u64)dst[d];
  if ((al & 7u) == 0u) {
    for (u64 i = t; i < (n >> 3); i += T) {
      u32 w0[K], w1[K];
      uint2 v = ((const uint2*)src[0])[i];
      w0[0] = v.x;
      w1[0] = v.y;
#pragma unroll
      for (int k = 1; k < K; k++)
        if (!get_pkt16(a, src[k] + 16 * i, flag, &w0[k], &w1[k], tb, op, body)) return;
      u32 r0 = red_words<K>(w0), r1 = red_words<K>(w1);
#pragma unroll
      for (int d = 0; d < D; d++) {
        if ((PK >> d) & 1)
          st_pkt16(dst[d] + 16 * i, r0, r1, flag);
        else
          ((uint2*)dst[d])[i] = make_uint2(r0, r1);
      }
    }
  } else {
    for (u64 i = t; i < (n >> 2); i += T) {
      u32 w[K];
      w[0] = ((const u32*)src[0])[i];
#pragma unroll
      for (int k = 1; k < K; k++)
        if (!get_pkt8(a, src[k] + 8 * i, flag, &w[k], tb, op, body)) return;
      u32 r = red_words<K>(w);
#pragma unroll
      for (int d = 0; d < D; d++) {
        if ((PK >> d) & 1)
          st_pkt8(dst[d] + 8 * i, r, flag);
        else
          ((u32*)dst[d])[i] = r;
      }
    }
  }
}

// ---- synchronization (every thread of the block calls these) ----

// signal_mem: for each channel i, one add on rank peer[i]'s inbound
// counter slot[i] (MONO: a store of (call << 16 | seq[i]), slot_at): a
// peer-scope release (after __syncthreads, so it covers the whole
// block's earlier writes), or relaxed.
// The generated code passes its channel arrays by reference (arr_t):
// their length N is known, so loops over them unroll and index them with
// constants.
template <class T, int N>
using arr_t = T[N];

template <int N>
__device__ __forceinline__ void signal_mem(const Args& a, const arr_t<int, N>& peer, const arr_t<int, N>& slot, const arr_t<u32, N>& seq, int n,
                                           bool relaxed, flag_t flag) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= n) return;
  // Thread t signals channel t. Its entries are picked with constant
  // indices (an index that depends on the thread would put the arrays in
  // local memory), then one store serves every channel: a body per
  // channel would run the warp's peer-scope releases one after another
  // (4 ranks under MPS, the put two-shot: 17.3 us at 1 KB graph-replayed
  // against 11.2 with the shared body).
  int pe = 0, sl = 0;
  u32 sq = 0;
#pragma unroll
  for (int i = 0; i < N; i++)
    if (i == t) {
      pe = peer[i];
      sl = slot[i];
      sq = seq[i];
    }
  u64* p = (u64*)a.inbound[pe] + slot_at(a, (u64)sl, lane(a));
#if MONO
  const u64 v = ((u64)flag << 16) | sq;
  if (relaxed)
    st_relaxed_peer_u64(p, v);
  else
    st_release_peer_u64(p, v);
#else
  (void)sq;
  if (relaxed)
    red_relaxed_peer_u64(p, 1ull);
  else
    red_release_peer_u64(p, 1ull);
#endif
}

// wait_chan: for each channel i, take this rank's next wait number on
// the channel (ticket[i]) and wait until inbound counter slot[i] of every
// lane reached it: acquire loads (or relaxed), then __syncthreads.
// GROUPED plans (every directed channel signalled by one thread block and
// waited on by one, no port channels; the generator decides) count
// tickets in the block's registers (tk) and zero the counters at the end
// of every call (MONO: wait for (call << 16 | ticket) instead), so the group size
// may change from call to call; the others take tickets from device
// memory with a group of 1.
template <int N>
__device__ __forceinline__ void wait_chan(const Args& a, const arr_t<int, N>& slot, const arr_t<int, N>& ticket, int n, bool relaxed, u64* tk,
                                         flag_t flag, int tb, int op, int body) {
  const int G = (int)a.group;
  // No check of the give-up word before the poll (a round trip every
  // wait): the poll checks it every 256 reads (keep_waiting).
  for (int j = threadIdx.x; j < n * G; j += blockDim.x) {
    const int c = j / G, l = j % G;
    // Channel c's slot and ticket picked with constant indices (an index
    // that depends on the thread would put slot, ticket and tk in local
    // memory, every thread's copy).
    int sc = 0, tc = 0;
    u64 base = 0;
#pragma unroll
    for (int i = 0; i < N; i++)
      if (i == c) {
        sc = slot[i];
        tc = ticket[i];
        if (GROUPED) base = tk[ticket[i]];
      }
    u64 target;
    if (GROUPED)
      target = base + 1ull;
    else
      target = atom_add_relaxed_gpu_u64((u64*)a.tickets + tc, 1ull) + 1ull;
    const u64* p = (const u64*)a.inbound[RANK] + slot_at(a, (u64)sc, (u64)l);
    if (MONO) target |= (u64)flag << 16;
    Waiter w = waiter(a, 1);
    while ((relaxed ? ld_relaxed_peer_u64(p) : ld_acquire_peer_u64(p)) < target)
      if (!keep_waiting(a, w, tb, op, body)) break;
  }
  if (GROUPED)
#pragma unroll
    for (int i = 0; i < N; i++)
      if (i < n) tk[ticket[i]]++;
  __syncthreads();
}

// bar_meet: thread 0 of a block arrives at barrier word b (one u64: the
// arrivals in the low 32 bits, the generation in the high 32) of total
// arrivals and waits until the generation moves. One atomic both arrives
// and reads the generation; the last arriver resets the count and bumps
// the generation with one release store. Against a separate load of the
// generation and a check of the give-up word before it, each barrier
// waits on one round trip to L2 instead of three (docs/gpu-executor.md,
// "Inside the kernel"). A block of a rank that gave up still arrives (the
// executor is spent: its counts need not stay right) and stops polling at
// its next check of the give-up word.
__device__ __forceinline__ void bar_meet(const Args& a, u64* b, u32 total, int tb, int op, int body) {
  const u64 old = atom_add_acq_rel_gpu_u64(b, 1ull);
  const u32 gen = (u32)(old >> 32);
  if ((u32)old == total - 1u) {
    st_release_gpu_u64(b, (u64)(gen + 1u) << 32);
  } else {
    Waiter w = waiter(a, 2);
    while ((u32)(ld_acquire_gpu_u64(b) >> 32) == gen)
      if (!keep_waiting(a, w, tb, op, body)) break;
  }
}

// group_sync: the a.group blocks of plan block tb meet (their earlier
// writes are visible to each other after it); __syncthreads alone for a
// group of 1.
__device__ __forceinline__ void group_sync(const Args& a, int tb, int op, int body) {
  __syncthreads();
  if (a.group > 1 && threadIdx.x == 0) bar_meet(a, (u64*)a.gbar + tb, (u32)a.group, tb, op, body);
  __syncthreads();
}

// tb_barrier: the `count` blocks of this rank that use barrier `id` meet
// (twice the timeout: a block held up by another block's wait for a
// peer must not give up first; the error names the first cause).
__device__ __forceinline__ void tb_barrier(const Args& a, int id, u32 count, int tb, int op, int body) {
  __syncthreads();
  if (threadIdx.x == 0) bar_meet(a, (u64*)a.tbbar + id, count * (u32)a.group, tb, op, body);
  __syncthreads();
}

// Semaphores: lane 0 of the group releases after the group met, and
// acquires before it meets the others.
__device__ __forceinline__ void sem_release(const Args& a, const int* ids, int n, int tb, int op, int body) {
  group_sync(a, tb, op, body);
  if (lane(a) == 0)
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) red_release_gpu_s32((int*)a.sems + ids[i], 1);
}

__device__ __forceinline__ void sem_acquire(const Args& a, const int* ids, int n, int tb, int op, int body) {
  __syncthreads();
  if (lane(a) == 0 && threadIdx.x == 0) {
    for (int i = 0; i < n && !gave_up(a); i++) {
      int* s = (int*)a.sems + ids[i];
      Waiter w = waiter(a, 2);  // intra-rank: as tb_barrier
      for (;;) {
        int v = ld_acquire_gpu_s32(s);
        if (v > 0 && atom_cas_acq_rel_gpu_s32(s, v, v - 1) == v) break;
        if (!keep_waiting(a, w, tb, op, body)) break;
      }
    }
  }
  group_sync(a, tb, op, body);
}

// ---- port channels: the host proxy's FIFO (docs/gpu-executor.md) ----
// Entry (8 u64 in mapped host memory): [0] seq<<8 | kind, [1] src,
// [2] dst, [3] bytes, [4] signal counter address. The header is written
// last, after a system fence, so the proxy that sees it sees the entry.

#define FIFO_PUT 1
#define FIFO_SIGNAL 2
#define FIFO_FLUSH 3

__device__ __forceinline__ u64 fifo_push(const Args& a, u64 kind, u64 src, u64 dst, u64 bytes, u64 sig, int tb, int op, int body) {
  const u64 seq = atom_add_relaxed_gpu_u64((u64*)a.fifo_head, 1ull) + 1ull;
  volatile u64* tail = (volatile u64*)a.fifo_tail;
  Waiter w = waiter(a, 1);
  while (seq > *tail + a.fifo_size)
    if (!keep_waiting(a, w, tb, op, body)) return 0;
  volatile u64* e = (volatile u64*)a.fifo + ((seq - 1ull) % a.fifo_size) * 8ull;
  e[1] = src;
  e[2] = dst;
  e[3] = bytes;
  e[4] = sig;
  fence_sc_sys();
  e[0] = (seq << 8) | kind;
  return seq;
}

// port_put: the proxy copies n bytes from s to d (copy engine).
__device__ __forceinline__ void port_put(const Args& a, char* d, const char* s, u64 n, int tb, int op, int body) {
  __syncthreads();
  if (threadIdx.x == 0 && n != 0 && !gave_up(a)) {
    fence_sc_sys();  // the block's writes to s reach memory before the copy engine reads
    fifo_push(a, FIFO_PUT, (u64)s, (u64)d, n, 0ull, tb, op, body);
  }
}

// port_signal: the proxy increments rank peer[i]'s inbound counter
// slot[i] after every copy it was given before.
__device__ __forceinline__ void port_signal(const Args& a, const int* peer, const int* slot, int n, int tb, int op, int body) {
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_sc_sys();
    for (int i = 0; i < n && !gave_up(a); i++)
      fifo_push(a, FIFO_SIGNAL, 0ull, 0ull, 0ull, (u64)((u64*)a.inbound[peer[i]] + slot[i]), tb, op, body);
  }
}

// port_flush: waits until the proxy completed every entry before it.
__device__ __forceinline__ void port_flush(const Args& a, int tb, int op, int body) {
  __syncthreads();
  if (threadIdx.x == 0 && !gave_up(a)) {
    const u64 seq = fifo_push(a, FIFO_FLUSH, 0ull, 0ull, 0ull, 0ull, tb, op, body);
    if (seq != 0ull) {
      volatile u64* done = (volatile u64*)a.fifo_done;
      Waiter w = waiter(a, 1);
      while (*done < seq)
        if (!keep_waiting(a, w, tb, op, body)) break;
      fence_acq_rel_sys();
    }
  }
  __syncthreads();
}

// reset_semaphores: every semaphore back to its init_value (the
// generator defines NSEMS and SEM_INIT).
__device__ __forceinline__ void reset_semaphores(const Args& a) {
#if NSEMS > 0
  const int init[NSEMS] = SEM_INIT;
  for (int i = 0; i < NSEMS; i++) ((volatile int*)a.sems)[i] = init[i];
#endif
}

// ---- call start and end (cross-rank barriers; docs/gpu-executor.md) ----

// ---- call start and end (docs/gpu-executor.md, "Call boundaries") ----
// The generator defines START (1: a start barrier), END_RELEASE (1: the
// end barrier publishes the rank's writes), ZERO_EARLY (1: grouped
// signal counters are zeroed before the end barrier's word, else after
// it), END_WAIT (0: no words between ranks at the end, FlagSynced and
// SignalSynced plans) and MONO (1: inbound words never zeroed, signals
// store (call << 16 | k), SignalSynced plans), per gpuexec.CallSync.

// start_barrier: no block touches a peer's memory before every peer has
// started this call (so it finished the previous one, copies included).
// Block 0 stores the word, every block polls, both relaxed: as ccl/ipc's
// start barrier, it only says "I have arrived"; what peers read after it
// was written by earlier work on their streams, complete at the kernel
// boundary. Plans whose own handshakes or packet flags do this (START 0)
// have none.
__device__ __forceinline__ void start_barrier(const Args& a, flag_t flag) {
#if START
  const int t = threadIdx.x;
  if (NRANKS > 1 && t < NRANKS && t != RANK) {
    if (blockIdx.x == 0) st_relaxed_peer_u32((u32*)a.bar_start[t] + RANK, flag);
    const u32* mine = (const u32*)a.bar_start[RANK] + t;
    if ((int)(ld_relaxed_peer_u32(mine) - flag) < 0) {
      Waiter w = waiter(a, 2);
      while ((int)(ld_relaxed_peer_u32(mine) - flag) < 0)
        if (!keep_waiting(a, w, blockIdx.x, -1, 0)) break;
    }
  }
  __syncthreads();
#endif
}

// zero_inbound: the last block zeroes the rank's inbound signal counters
// of this call's group (GROUPED plans count tickets from 0 every call).
__device__ __forceinline__ void zero_inbound(const Args& a) {
  u64* in = (u64*)a.inbound[RANK];
  for (u64 i = threadIdx.x; i < a.nslots * a.group; i += blockDim.x) in[i] = 0ull;
  __syncthreads();
}

// END_COUNT: the call's blocks count their arrivals at the end, so that
// the last one resets the semaphores, zeroes the inbound counters or
// meets the peers; plans that need none of it skip the count.
#define END_COUNT (NSEMS > 0 || END_WAIT || (GROUPED && (ZERO_EARLY || START)))

// end_barrier: the last block of this rank to finish tells every peer
// and waits for every peer's word, so when the kernel ends no peer
// touches this rank's memory any more and (END_RELEASE) every peer write
// to it is visible. It resets the semaphores. (The call's flag is not
// counted here: call_flag.)
// Ordering: each block's arrival is a GPU-scope acq_rel add, so one
// peer-scope fence in the last block before its stores orders every
// block's writes before them (release is cumulative over what happens
// before it); no block needs a peer-scope fence of its own. Packet
// plans (END_RELEASE 0) store and poll relaxed: what peers stored was
// consumed by flag, so the word only says "I am done".
// Grouped plans zero their counters when no signal of the call can still
// arrive: after the peers' words (their signals precede them), or, where
// every signal is waited for in the call (ZERO_EARLY), before this rank's
// word; either way before any peer can signal again.
__device__ __forceinline__ void end_barrier(const Args& a, flag_t flag) {
#if !END_COUNT
  return;  // no semaphore to reset, no counter to zero, no peer to meet
#endif
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    u32* ctl = (u32*)a.ctl;
    last = atom_add_acq_rel_gpu_u32(ctl + 1, 1u) == gridDim.x - 1u;
    if (last) {
      st_relaxed_gpu_u32(ctl + 1, 0u);
      reset_semaphores(a);
    }
  }
#if GROUPED && ZERO_EARLY
  __syncthreads();
  if (last) zero_inbound(a);
#endif
  if (END_WAIT && NRANKS > 1 && threadIdx.x == 0 && last) {
#if END_RELEASE
    fence_acq_rel_peer();
#endif
    for (int q = 0; q < NRANKS; q++)
      if (q != RANK) st_relaxed_peer_u32((u32*)a.bar_end[q] + RANK, flag);
    for (int q = 0; q < NRANKS; q++) {
      if (q == RANK) continue;
      const u32* mine = (const u32*)a.bar_end[RANK] + q;
      if ((int)((END_RELEASE ? ld_acquire_peer_u32(mine) : ld_relaxed_peer_u32(mine)) - flag) >= 0) continue;
      Waiter w = waiter(a, 2);
      while ((int)((END_RELEASE ? ld_acquire_peer_u32(mine) : ld_relaxed_peer_u32(mine)) - flag) < 0)
        if (!keep_waiting(a, w, blockIdx.x, -2, 0)) break;
    }
  }
#if GROUPED && START
  __syncthreads();
  if (last) zero_inbound(a);
#endif
}

// call_flag is this call's flag: the last call's plus one (epochs_of;
// 32-bit flags go from 0xFFFFFFFF to 2: never 0, the flag of
// never-written packets, and never 1 there, which would give two calls
// in a row the same half of a double scratch); *gave is whether an
// earlier call gave up, *wrapped whether the 32-bit flag wrapped (this
// call must scrub). Thread 0 issues both loads together: one round trip.
// The call after a scrub resets its go-ahead word (control word 6; no
// block of that call reads it).
__device__ __forceinline__ flag_t call_flag(const Args& a, bool* gave, bool* wrapped) {
  __shared__ flag_t s_flag;
  __shared__ u32 s_gave, s_wrapped;
  volatile u64* e = epochs_of(a);
  if (threadIdx.x == 0) {
    const u64 w = e[lane(a)];
    const u32 g = *(volatile u32*)((u32*)a.ctl + 2);
#if MONO
    const u64 f = w + 1ull;
    s_wrapped = 0u;
#else
    const u32 f0 = (u32)w + 1u;
    const u32 f = f0 == 0u ? 2u : f0;
    s_wrapped = f0 == 0u;
#if PACKETS
    if (f == 3u && blockIdx.x == 0) st_relaxed_gpu_u32((u32*)a.ctl + 6, 0u);
#endif
#endif
    e[lane(a)] = f;
    s_flag = f;
    s_gave = g;
  }
  __syncthreads();
  if (lane(a) == 0)
    for (u64 l = a.group + threadIdx.x; l < MAX_GROUP; l += blockDim.x) e[l] = s_flag;
  *gave = s_gave != 0u;
  *wrapped = s_wrapped != 0u;
  return s_flag;
}

#if PACKETS  // never MONO: SignalSynced plans have no packets
// ---- the flag's wrap (plans with packets) ----
// A packet is current when its flag is the call's, and flags repeat after
// the wrap (2^32-2 calls): a packet written a cycle ago where no call
// wrote since (a large call, then only smaller ones) would pass for one
// of the call with its flag. So the call after the wrap zeroes every
// rank's scratch, both halves, before any rank writes a packet of it:
// block 0 of each rank meets every peer (each has finished the call
// before, so none still writes or reads a packet of it), zeroes its own
// scratch, meets them again (no peer writes a packet into it before it is
// zero), then lets its other blocks go (control word 6, reset at the
// call's end); control word 7 counts the rank's scrubs, the same on every
// rank, so the meetings' words (start-barrier slots 8 + q) only grow. It
// happens once in 2^32-2 calls (about 2.5 days at 20,000 calls a second)
// and costs a few milliseconds.

// scrub_meet: thread 0 stores v to every peer's slot of this rank and
// waits until every peer's slot here is at least v; false if it gave up.
__device__ __forceinline__ bool scrub_meet(const Args& a, u32 v) {
  fence_sc_peer();  // this rank's writes (the call before, the zeroing) first
  for (int q = 0; q < NRANKS; q++)
    if (q != RANK) st_relaxed_peer_u32((u32*)a.bar_start[q] + 8 + RANK, v);
  for (int q = 0; q < NRANKS; q++) {
    if (q == RANK) continue;
    const u32* mine = (const u32*)a.bar_start[RANK] + 8 + q;
    Waiter w = waiter(a, 2);
    while ((int)(ld_relaxed_peer_u32(mine) - v) < 0)
      if (!keep_waiting(a, w, blockIdx.x, -3, 0)) return false;
  }
  fence_acq_rel_peer();
  return true;
}

__device__ __forceinline__ void scrub(const Args& a) {
  u32* ctl = (u32*)a.ctl;
  if (blockIdx.x == 0) {
    __shared__ u32 s_ok, s_n;
    if (threadIdx.x == 0) {
      s_n = *(volatile u32*)(ctl + 7);
      s_ok = NRANKS == 1 || scrub_meet(a, 2u * s_n + 1u);
    }
    __syncthreads();
    if (s_ok) {
      uint4* p = (uint4*)a.buf[RANK][2];
      uint4 z;
      z.x = z.y = z.z = z.w = 0u;
      for (u64 i = threadIdx.x; i < a.scratch_bytes / 16; i += blockDim.x) p[i] = z;
      char* c = (char*)a.buf[RANK][2];
      for (u64 i = a.scratch_bytes / 16 * 16 + threadIdx.x; i < a.scratch_bytes; i += blockDim.x) c[i] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (s_ok && NRANKS > 1) scrub_meet(a, 2u * s_n + 2u);
      *(volatile u32*)(ctl + 7) = s_n + 1u;
      st_release_gpu_u32(ctl + 6, 1u);
    }
  } else if (threadIdx.x == 0) {
    Waiter w = waiter(a, 4);
    while (ld_acquire_gpu_u32(ctl + 6) == 0u)
      if (!keep_waiting(a, w, blockIdx.x, -3, 0)) break;
  }
  __syncthreads();
}
#endif
