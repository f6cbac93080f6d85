// chorus VM tensor-core skinny products: out[M, N] = x[M, K] · w[N, K]ᵀ
// for M up to TC_MAX_M rows of x (a decode step of several sequences),
// float16 and bfloat16 with float32 accumulation (mma.sync m16n8k16).
// Compiled after kernels_gemv.cu (V4, ld_stream, ld_cached).
//
// Memory-bound like the CUDA-core kernels: every byte of w is read once
// (through shared memory, below); the products run on the tensor cores,
// so a piece of w costs one load whatever M is (the CUDA-core kernel pays
// M loads of x and 8·M multiply-adds per piece and stops being
// memory-bound at 8 rows).
//
// A block is TC_WARPS warps; warp i owns rows tile·TC_ROWS + 16i ..
// +15 of w (the mma's A operand, 16 rows) and all MT = 8·NT rows of x
// (B, NT tiles of 8 tokens). Lane (g = lane/4, q = lane%4) takes the
// 16-byte piece q of each 32-element chunk of k of rows g and g+8 of w
// (from the warp's ring) and of token g of every x tile (from L1 up to 8
// rows, from the block's ring of x from 16). The mma reads A and B registers in a
// fixed (row, k) layout; since a dot product does not care about the
// order of k, the piece's 8 elements stand for k columns {2q, 2q+1,
// 2q+8, 2q+9} of one mma (its first two registers) and the same of a
// second (its last two), in A and B alike.
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
// TC_TAIL is how many splits' partial sums a thread of a tile's last
// block loads at once.
#define TC_TAIL 8

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

// tc_mma adds one 32-element chunk of k to a C fragment d: the lane's
// 16-byte pieces of rows g (wa) and g + 8 (wb) of w and of token g of one
// token tile of x (xv) are the A and B registers of two mma (the piece's
// first and last 8 bytes, see the top of the file).
template <class E>
__device__ __forceinline__ void tc_mma(float* d, const V4& wa, const V4& wb, const V4& xv) {
  Mma<E>::run(d, wa.x, wb.x, wa.y, wb.y, xv.x, xv.y);
  Mma<E>::run(d, wa.z, wb.z, wa.w, wb.w, xv.z, xv.w);
}

__device__ __forceinline__ V4 v4_zero() {
  V4 v;
  v.x = v.y = v.z = v.w = 0u;
  return v;
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

// The weights stream through shared memory: each warp copies its 16 rows
// of w into a ring of TC_STAGES buffers of its own with cp.async (16
// bytes a lane, cached in L2 only), TC_STAGES - 1 stages in flight while
// it multiplies the oldest; a stage is TC_AU chunks of k of every row of
// each weight (256 bytes of a row: 4 KiB a warp, 8 KiB for the gated
// pair), and one copy instruction moves the whole runs of two rows. The
// first stages are copied before PDL_WAIT only with pre, the host's
// promise that no kernel of the stream since the call's first one writes
// the weights (else a weight operand may be the kernel before's output;
// copying them before the wait took batch 8 to 5.066 ms against 5.154,
// same run). On an H200 (same run, Llama-3-8B, graph-replayed, context
// 128) the ring took batch 4 from 5.052 to 4.913 ms and batch 8 from
// 5.201 to 5.108 against the kernel that loaded 4 chunks a lane into
// registers; 2 KiB stages (5 deep) gave 4.969 and 5.118. The gated pair
// once took 128 bytes of a row of each weight a stage (4 KiB a warp, 48
// KiB a block like the others); 256 bytes (96 KiB of dynamic shared
// memory a block, two blocks a multiprocessor) took batch 2 from
// 4.701-4.733 to 4.466-4.492 ms and batch 8 from 5.018-5.033 to
// 4.749-4.758 (both builds twice in one call). Dynamic shared memory:
// TC_WARPS x TC_STAGES x TC_STAGE_V4 pieces a block, then from 16 rows
// the block's ring of x (tc.go, tcSmem).
#define TC_STAGES 3
#define TC_AU(NW) 4
// tc_stage_v4 is one stage of one warp in 16-byte pieces.
#define TC_STAGE_V4(NW) ((NW) * 16 * TC_AU(NW) * 4)

// From two token tiles up (16 and 32 rows of x) the block's warps, which
// all multiply the same chunks of k, share x: each stage copies the
// pieces of x it needs into a block ring beside the warps' rings
// (tc_issue_x), and the warps step through the stages together (a block
// barrier a stage). Every warp loading x for itself from L1, one stage
// ahead into registers, read x's bytes again for every 16 rows of w (at
// 32 rows twice the bytes of w itself a stage) and held 128 registers of
// x at 32 rows. Alone on an H200 (Llama-3-8B's weights, 32 rows, same
// run): q 23.8 -> 18.6 us, down 55.5 -> 44.7, the gated pair 90.1 ->
// 74.9, the LM head 324.5 -> 281.0; 16 rows: q 16.9 -> 15.8, the pair
// 64.9 -> 62.6, but down 37.4 -> 40.7. In a step, batch 16 took 0.92-0.94x
// the time at context 128 (tc.go, tcMaxRows). tc_au is the chunks of k a
// stage (the gated pair at 32 rows takes half, 128 bytes a row of each
// weight, so that three blocks of 60 KiB fit a multiprocessor).
template <int NW, int NT>
__device__ __forceinline__ constexpr int tc_au() {
  return NW == 2 && NT == 4 ? TC_AU(NW) / 2 : TC_AU(NW);
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool ok) {
  unsigned d;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// tc_swz is where piece pc (0 .. 4U-1) of row r sits in a stage: odd
// rows swap the halves of each 128 bytes, so the 8 lanes of one phase of
// a 16-byte shared load (rows g and g+1, pieces 4u .. 4u+3) hit 8
// different bank groups.
template <int PR>
__device__ __forceinline__ int tc_swz(int r, int pc) {
  return PR >= 8 ? pc ^ ((r & 1) << 2) : pc;
}

// tc_issue copies stage st (chunks c0 + st·U ..) of the warp's 16 rows
// of NW weights into buffer st % TC_STAGES of sm; rows past N and
// pieces past the split or k are zero-filled.
template <int NW, int U>
__device__ __forceinline__ void tc_issue(V4* sm, const V4* const* w, int N, int k8, long long rowBase, int c0, int c1, int st) {
  constexpr int PR = 4 * U;  // pieces a row a stage
  const int lane = threadIdx.x & 31;
  V4* buf = sm + (st % TC_STAGES) * (NW * 16 * PR);
#pragma unroll
  for (int j = 0; j < NW; j++)
#pragma unroll
    for (int t = 0; t < 16 * PR / 32; t++) {
      const int p = t * 32 + lane, r = p / PR, pc = p % PR;
      const int chunk = c0 + st * U + pc / 4, piece = chunk * 4 + (pc & 3);
      const long long row = rowBase + r;
      const bool ok = row < N && chunk < c1 && piece < k8;
      cp_async16(buf + (j * 16 + r) * PR + tc_swz<PR>(r, pc), ok ? w[j] + row * k8 + piece : w[j], ok);
    }
}

// tc_issue_x copies the pieces of x that stage st multiplies (MT tokens,
// PR = 4U pieces of each) into buffer st % TC_STAGES of the block's x
// ring xs, every thread of the block a share; tokens past M and pieces
// past the split or k are zero-filled. Odd tokens swap the halves of
// each 128 bytes (tc_swz), so a warp's 16-byte loads of tokens g of one
// tile take one wavefront a phase.
template <int U, int MT>
__device__ __forceinline__ void tc_issue_x(V4* xs, const V4* x, int M, int k8, int c0, int c1, int st) {
  constexpr int PR = 4 * U, NP = MT * PR;
  V4* buf = xs + (st % TC_STAGES) * NP;
#pragma unroll
  for (int i = 0; i < NP / (TC_WARPS * 32); i++) {
    const int p = i * TC_WARPS * 32 + threadIdx.x, tok = p / PR, pc = p % PR;
    const int chunk = c0 + st * U + pc / 4, piece = chunk * 4 + (pc & 3);
    const bool ok = tok < M && chunk < c1 && piece < k8;
    cp_async16(buf + tok * PR + tc_swz<PR>(tok, pc), ok ? x + (long long)tok * k8 + piece : x, ok);
  }
}

// tc_load_x loads into xv the pieces of x that stage st multiplies
// (lane: token g of every tile, piece q of each chunk; zero past the
// split, k or M).
template <int NT, int U>
__device__ __forceinline__ void tc_load_x(V4 (&xv)[NT][U], const V4* x, int M, int k8, int c0, int c1, int st) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int piece = (c0 + st * U + u) * 4 + q;
    const bool in = c0 + st * U + u < c1 && piece < k8;
#pragma unroll
    for (int t = 0; t < NT; t++) {
      const int tok = t * 8 + g;
      xv[t][u] = in && tok < M ? ld_cached(x + (long long)tok * k8 + piece) : v4_zero();
    }
  }
}

// tc_rows accumulates acc[j][t][0..3] (weight j, token tile t; the mma's
// C fragment: rows r0 = g and r1 = g + 8 of the warp's 16, tokens
// 8t + 2q and 8t + 2q + 1) over chunks [c0, c1) of k, through the
// shared-memory ring sm (this warp's TC_STAGES stages): the first
// TC_STAGES - 1 stages are issued (tc_first: one commit group each, empty
// past the split; already, with issued), then each step issues one more
// and multiplies the oldest. Up to 8 rows (XS false) the pieces of x a
// stage needs are loaded from L1 one stage ahead into registers, so the
// products of a stage never wait for x; from 16 (XS) they are copied
// with the weights into the block's ring xs and read from there.
template <int NW, int U>
__device__ __forceinline__ void tc_first(V4* sm, const V4* const* w, int N, int k8, long long rowBase, int c0, int c1) {
  const int nst = (c1 - c0 + U - 1) / U;
#pragma unroll
  for (int st = 0; st < TC_STAGES - 1; st++) {
    if (st < nst) tc_issue<NW, U>(sm, w, N, k8, rowBase, c0, c1, st);
    cp_async_commit();
  }
}

template <class E, int NT, int NW, bool XS>
__device__ __forceinline__ void tc_rows(V4* sm, V4* xs, const V4* const* w, const V4* x, int M, int N, int k8, long long rowBase, int c0,
                                        int c1, float acc[NW][NT][4], bool issued) {
  constexpr int U = tc_au<NW, NT>(), PR = 4 * U;
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int nst = (c1 - c0 + U - 1) / U;
  if (!issued) tc_first<NW, U>(sm, w, N, k8, rowBase, c0, c1);
  if (XS) {
    // x is the kernel before's output: its first stages go after the PDL
    // wait, a commit group each, behind the weights' first stages. At
    // every step the groups after stage st are the next TC_STAGES - 2
    // stages; the barrier makes every thread's copies of x visible and
    // says every warp is done with the buffer the next copy overwrites.
#pragma unroll
    for (int st = 0; st < TC_STAGES - 1; st++) {
      if (st < nst) tc_issue_x<U, NT * 8>(xs, x, M, k8, c0, c1, st);
      cp_async_commit();
    }
    for (int st = 0; st < nst; st++) {
      cp_async_wait<TC_STAGES - 2>();
      __syncthreads();
      if (st + TC_STAGES - 1 < nst) {
        tc_issue<NW, U>(sm, w, N, k8, rowBase, c0, c1, st + TC_STAGES - 1);
        tc_issue_x<U, NT * 8>(xs, x, M, k8, c0, c1, st + TC_STAGES - 1);
      }
      cp_async_commit();
      const V4* buf = sm + (st % TC_STAGES) * (NW * 16 * PR);
      const V4* xb = xs + (st % TC_STAGES) * (NT * 8 * PR);
#pragma unroll
      for (int u = 0; u < U; u++) {
        V4 xv[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) xv[t] = xb[(t * 8 + g) * PR + tc_swz<PR>(g, 4 * u + q)];
#pragma unroll
        for (int j = 0; j < NW; j++) {
          const V4 wa = buf[(j * 16 + g) * PR + tc_swz<PR>(g, 4 * u + q)];
          const V4 wb = buf[(j * 16 + g + 8) * PR + tc_swz<PR>(g + 8, 4 * u + q)];
#pragma unroll
          for (int t = 0; t < NT; t++) tc_mma<E>(acc[j][t], wa, wb, xv[t]);
        }
      }
    }
    cp_async_wait<0>();
    return;
  }
  V4 xv[NT][U], xn[NT][U];
  tc_load_x<NT, U>(xv, x, M, k8, c0, c1, 0);
  for (int st = 0; st < nst; st++) {
    if (st + TC_STAGES - 1 < nst) tc_issue<NW, U>(sm, w, N, k8, rowBase, c0, c1, st + TC_STAGES - 1);
    cp_async_commit();
    tc_load_x<NT, U>(xn, x, M, k8, c0, c1, st + 1);
    cp_async_wait<TC_STAGES - 1>();
    __syncwarp();
    const V4* buf = sm + (st % TC_STAGES) * (NW * 16 * PR);
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int j = 0; j < NW; j++) {
        const V4 wa = buf[(j * 16 + g) * PR + tc_swz<PR>(g, 4 * u + q)];
        const V4 wb = buf[(j * 16 + g + 8) * PR + tc_swz<PR>(g + 8, 4 * u + q)];
#pragma unroll
        for (int t = 0; t < NT; t++) tc_mma<E>(acc[j][t], wa, wb, xv[t][u]);
      }
    __syncwarp();
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int t = 0; t < NT; t++) xv[t][u] = xn[t][u];
  }
  cp_async_wait<0>();
}

// tc_store_frags writes a warp's C fragments acc (rows rowBase ..
// +15 of out's N, tokens of NT tiles of 8), those inside [M, N).
template <class E, int NT, int NW>
__device__ __forceinline__ void tc_store_frags(u16* out, const float (&acc)[NW][NT][4], int M, int N, long long rowBase) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
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
}

// tc_tile computes rows tile·TC_ROWS .. +TC_ROWS-1 of one product (NW
// weights of N rows; out [M, N]) over this block's split of k (gtile
// numbers the tile among all the launch's tiles for part and counters).
template <class E, int NT, int NW>
__device__ void tc_tile(const u16* x, const u16* const* wp, u16* out, int M, int N, int K, int cps, int tile, int gtile, float* part,
                        int* counters, int pre) {
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
  // Dynamic shared memory (tc.go, tcSmem): the warps' rings, then from
  // two token tiles up the block's ring of x.
  constexpr int U = tc_au<NW, NT>(), WV4 = NW * 16 * 4 * U;
  extern __shared__ V4 tc_ring[];
  V4* sm = tc_ring + wid * TC_STAGES * WV4;
  V4* xring = tc_ring + TC_WARPS * TC_STAGES * WV4;
  if (pre) tc_first<NW, U>(sm, w, N, k8, rowBase, c0, c1);
  PDL_ENTRY();
  tc_rows<E, NT, NW, (NT >= 2)>(sm, xring, w, (const V4*)x, M, N, k8, rowBase, c0, c1, acc, pre != 0);
  if (splits == 1) {
    tc_store_frags<E, NT, NW>(out, acc, M, N, rowBase);
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
  int& last = *(int*)tc_ring;  // every warp is done with its ring
  if (threadIdx.x == 0) {
    last = atomicAdd(&counters[gtile], 1) == splits - 1;
    if (last) counters[gtile] = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The tile's sums: a thread takes 4 rows of one token (16 bytes of
  // every split's partials), issues TC_TAIL splits' loads at once and
  // adds them in split order (the same sum at every run and as before).
  const float* all = part + (long long)gtile * splits * NW * MT * TC_ROWS;
  const long long xs = (long long)NW * MT * TC_ROWS;
  constexpr int R4 = TC_ROWS / 4;
  for (int e = threadIdx.x; e < M * R4; e += blockDim.x) {
    const int m = e / R4, r = e % R4 * 4;
    const long long n = (long long)tile * TC_ROWS + r;
    if (n >= N) continue;
    F4 v[NW];
#pragma unroll
    for (int j = 0; j < NW; j++) v[j].x = v[j].y = v[j].z = v[j].w = 0.0f;
    for (int x0 = 0; x0 < splits; x0 += TC_TAIL) {
      F4 p[NW][TC_TAIL];
#pragma unroll
      for (int j = 0; j < NW; j++)
#pragma unroll
        for (int u = 0; u < TC_TAIL; u++)
          if (x0 + u < splits) p[j][u] = ld_cg4(all + (x0 + u) * xs + (j * MT + m) * TC_ROWS + r);
#pragma unroll
      for (int j = 0; j < NW; j++)
#pragma unroll
        for (int u = 0; u < TC_TAIL; u++)
          if (x0 + u < splits) {
            v[j].x += p[j][u].x;
            v[j].y += p[j][u].y;
            v[j].z += p[j][u].z;
            v[j].w += p[j][u].w;
          }
    }
#pragma unroll
    for (int c = 0; c < 4; c++) {
      if (n + c >= N) break;
      float o[NW];
#pragma unroll
      for (int j = 0; j < NW; j++) o[j] = c == 0 ? v[j].x : c == 1 ? v[j].y : c == 2 ? v[j].z : v[j].w;
      tc_store<E, NW>(out, (long long)m * N + n + c, o);
    }
  }
}

// tc_tile_wk computes rows tile·16 .. +15 of one product (one weight of
// N rows; out [M, N]) with the block's TC_WARPS warps splitting k: warp
// i multiplies chunks [i·cpw, (i+1)·cpw) through its own ring, writes
// its sums into that ring once done, and warp 0 adds the warps' sums in
// warp order. No partial sums leave the block, so there is no split-K
// tail (tc_tile's last block reading every split's sums back from L2).
template <class E, int NT>
__device__ void tc_tile_wk(const u16* x, const u16* wp, u16* out, int M, int N, int K, int tile, int pre) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const int k8 = K >> 3, nch = (k8 + 3) >> 2, cpw = (nch + TC_WARPS - 1) / TC_WARPS;
  const int c0 = min(nch, wid * cpw), c1 = min(nch, c0 + cpw);
  const V4* w[1] = {(const V4*)wp};
  float acc[1][NT][4];
#pragma unroll
  for (int t = 0; t < NT; t++)
#pragma unroll
    for (int i = 0; i < 4; i++) acc[0][t][i] = 0.0f;
  const long long rowBase = (long long)tile * 16;
  extern __shared__ V4 tc_ring[];  // TC_WARPS * TC_STAGES * TC_STAGE_V4(1), dynamic
  V4* sm = tc_ring + wid * TC_STAGES * TC_STAGE_V4(1);
  if (pre) tc_first<1, TC_AU(1)>(sm, w, N, k8, rowBase, c0, c1);
  PDL_ENTRY();
  tc_rows<E, NT, 1, false>(sm, nullptr, w, (const V4*)x, M, N, k8, rowBase, c0, c1, acc, pre != 0);
  // Each warp's ring is its own and drained (cp_async_wait<0>): its sums
  // go there, lane-major so that the stores and loads are conflict-free.
  float* red = (float*)sm;
#pragma unroll
  for (int t = 0; t < NT; t++)
#pragma unroll
    for (int i = 0; i < 4; i++) red[(t * 4 + i) * 32 + lane] = acc[0][t][i];
  __syncthreads();
  if (wid != 0) return;
  constexpr int RS = TC_STAGES * TC_STAGE_V4(1) * 4;  // floats between two warps' rings
#pragma unroll
  for (int t = 0; t < NT; t++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const float* r0 = (const float*)tc_ring + (t * 4 + i) * 32 + lane;
#pragma unroll
      for (int j = 1; j < TC_WARPS; j++) acc[0][t][i] += r0[j * RS];
    }
  tc_store_frags<E, NT, 1>(out, acc, M, N, rowBase);
}

#define TC_KERNELS(name, E, MT)                                                                                         \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                           \
      tc_nt_##name##_m##MT(const u16* x, const u16* w, u16* out, int M, int N, int K, int cps, float* part,               \
                           int* counters, int pre) {                                                                   \
    const u16* ws[1] = {w};                                                                                            \
    tc_tile<E, MT / 8, 1>(x, ws, out, M, N, K, cps, blockIdx.x, blockIdx.x, part, counters, pre);                            \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                           \
      tc_nt3_##name##_m##MT(const u16* x, const u16* w0, const u16* w1, const u16* w2, u16* o0, u16* o1, u16* o2,       \
                            int n0, int n1, int n2, int M, int K, int cps, float* part, int* counters, int pre) {                \
    /* One call site: three inlined copies of the tile took 166 registers   \
       at 32 rows against tc_nt's 64. */                                      \
    const int b0 = (n0 + TC_ROWS - 1) / TC_ROWS, b1 = (n1 + TC_ROWS - 1) / TC_ROWS;                                     \
    const int b = blockIdx.x;                                                                                          \
    const u16* ws[1] = {b < b0 ? w0 : b < b0 + b1 ? w1 : w2};                                                         \
    u16* o = b < b0 ? o0 : b < b0 + b1 ? o1 : o2;                                                                      \
    const int n = b < b0 ? n0 : b < b0 + b1 ? n1 : n2, tile = b < b0 ? b : b < b0 + b1 ? b - b0 : b - b0 - b1;        \
    tc_tile<E, MT / 8, 1>(x, ws, o, M, n, K, cps, tile, b, part, counters, pre);                                      \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                           \
      tc_nt3w_##name##_m##MT(const u16* x, const u16* w0, const u16* w1, const u16* w2, u16* o0, u16* o1, u16* o2,      \
                             int n0, int n1, int n2, int M, int K, int pre) {                                          \
    const int b0 = (n0 + 15) / 16, b1 = (n1 + 15) / 16;                                                               \
    const int b = blockIdx.x;                                                                                          \
    if (b < b0)                                                                                                        \
      tc_tile_wk<E, MT / 8>(x, w0, o0, M, n0, K, b, pre);                                                              \
    else if (b < b0 + b1)                                                                                              \
      tc_tile_wk<E, MT / 8>(x, w1, o1, M, n1, K, b - b0, pre);                                                         \
    else                                                                                                               \
      tc_tile_wk<E, MT / 8>(x, w2, o2, M, n2, K, b - b0 - b1, pre);                                                    \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                           \
      tc_gated_##name##_m##MT(const u16* x, const u16* wg, const u16* wu, u16* out, int M, int N, int K, int cps,      \
                              float* part, int* counters, int pre) {                                                   \
    const u16* ws[2] = {wg, wu};                                                                                       \
    tc_tile<E, MT / 8, 2>(x, ws, out, M, N, K, cps, blockIdx.x, blockIdx.x, part, counters, pre);                            \
  }

#define TC_ALL_M(name, E) \
  TC_KERNELS(name, E, 8)  \
  TC_KERNELS(name, E, 16) \
  TC_KERNELS(name, E, 32)

TC_ALL_M(f16, F16)
TC_ALL_M(bf16, BF16)
