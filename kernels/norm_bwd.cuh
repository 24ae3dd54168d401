// normkit backward kernels: dx, and per-block partial sums of dweight / dbias, for LayerNorm and
// RMSNorm over the last dimension; then one small kernel that adds the partials up.
// Included by norm.cu, which instantiates them as extern "C" kernels (names in kernels/README.md).
//
// Maths (f32), with xhat = (x - mean) * rstd (LN) or x * rstd (RMS), g = dy * w (w = 1 without weight):
//   LN : dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   RMS: dx = rstd * (g - xhat * mean(g * xhat))
//   dweight[j] = sum over rows of dy[j] * xhat[j];  dbias[j] = sum over rows of dy[j]   (LN only)
// mean / rstd are the forward's statistics (f32, one per row).
//
// Parameter gradients without atomics: the grid is persistent (about as many blocks as fit on the GPU
// at once), and a thread always owns the same columns of the rows it visits, so it adds its rows'
// dy * xhat into its own slots (shared memory, or this block's row of `part` for `wide`). At the end a
// block adds its row groups' slots in group order and writes one row of `part` ([grid][nacc][d] f32,
// nacc = 2 for LN, 1 for RMS); nk_bwd_finalize then adds the rows of `part` in a fixed order. Every sum
// has a fixed order: the results are bitwise identical run to run.
// (An element-major slot layout, meant to avoid the 2-way bank conflicts of float4 updates of 8-element
// chunks, measured slower on the H200: 8x the shared-memory instructions, and conflicts across row
// groups; LN bf16 D=128 fell from 68% to 31% of copy. The slots stay chunk-major.)
#ifndef NORMKIT_NORM_BWD_CUH
#define NORMKIT_NORM_BWD_CUH
#include "norm_fwd.cuh"

// Registers the `cached` mapping may spend per thread on its cache: per chunk, the raw x and dy words and
// the chunk's parameter sums (VEC floats for dweight, VEC more for LN's dbias unless they live in shared
// memory: nk_bwd_smem_dbias). NK_BWD_REG_BUDGET / that
// cost, at most NK_MAXV_BWD, is the number of chunks a thread caches (nk_bwd_maxv; ops/plan_bwd.ts mirrors
// it). With 128 registers (launch bound 512 threads, 1 block) the budget leaves room for addresses and
// the masked path's spill-free code on sm_90.
#define NK_MAXV_BWD 6
#ifndef NK_BWD_REG_BUDGET
#define NK_BWD_REG_BUDGET 72
#endif

// flags: bit 0 (NK_BWD_PREFETCH): `cached` / `cluster` with one row per block ask L2 for the next row (the
// plan decides; measured faster for some shapes, slower for others); ignored by the other mappings.
#define NK_BWD_PARAMS                                                                                  \
  const void *dy, const void *x, const void *weight, const float *mean, const float *rstd, void *dx,   \
      float *part, int rows, int d, long long dy_stride, long long x_stride, long long dx_stride, int tpr, \
      int nv, int flags
#define NK_BWD_ARGS dy, x, weight, mean, rstd, dx, part, rows, d, dy_stride, x_stride, dx_stride, tpr, nv, flags
#define NK_BWD_PREFETCH 1
// flags bits 4..7 (NK_BWD_STAGES_SHIFT): `cached` with one row per block, and `cluster`, FULL path, 16-byte chunks of
// both x and dy, sm_90: that many rows (1..NK_BWD_MAX_STAGES) of the CTA's slice copied ahead into shared memory by
// bulk copies (nk_bwd_cached's TM); 0: loaded into registers by each thread. The plan sets it (ops/plan_bwd.ts).
#define NK_BWD_STAGES_SHIFT 4
#define NK_BWD_MAX_STAGES 4

struct alignas(16) nk_f4 { float v[4]; };

// A chunk is VEC elements: 16 bytes of the wider of x and dy (4 elements if either is f32, else 8).
template <class TX, class TD>
struct nk_bwd_geom {
  enum { VEC = 16 / (TX::SIZE > TD::SIZE ? TX::SIZE : TD::SIZE) };
  enum { XW = VEC * TX::SIZE / 4, DW = VEC * TD::SIZE / 4 };
};
// Where `cached` / `cluster` keep LayerNorm's dbias sums: in shared memory for 8-element chunks (16-bit x and
// dy), in registers otherwise. In registers they held 16-bit LN to 3 chunks per thread (RMS: 4); moving them
// out (2026-11-30, H200) gained 8-25 points of copy for LN 16-bit at D = 128-1024, 8192 and 16384-131072
// (the longer rows fit fewer CTAs), lost ~5 at D = 2048 and 12288, and lost 2-8 for f32 LN (4-element chunks:
// twice the shared-memory accesses per element), which keeps them in registers.
// ST: the bulk-staged kernels (nk_bwd_cached's TM) keep them in shared memory for f32 LayerNorm too: 6 chunks per
// thread instead of 4, so a cluster's CTAs need not be 512 threads (H200, LN f32 D=65536: 8 x 512 threads x 4 chunks
// 75.8% of copy, 8 x 416 x 5 90.3-90.6; in one geometry they cost 0-7 points: bench/RESULTS.md, stop 31).
template <class TX, class TD, bool LN, bool ST = false>
struct nk_bwd_smem_dbias {
  enum { V = LN && (nk_bwd_geom<TX, TD>::VEC == 8 || ST) };
};
// Chunks one thread of `cached` holds in registers (see NK_BWD_REG_BUDGET).
template <class TX, class TD, bool LN, bool ST = false>
struct nk_bwd_maxv {
  enum {
    PER = nk_bwd_geom<TX, TD>::XW + nk_bwd_geom<TX, TD>::DW +
          nk_bwd_geom<TX, TD>::VEC * (LN && !nk_bwd_smem_dbias<TX, TD, LN, ST>::V ? 2 : 1)
  };
  enum { V = NK_BWD_REG_BUDGET / PER < NK_MAXV_BWD ? NK_BWD_REG_BUDGET / PER : NK_MAXV_BWD };
};
// Alignment of one chunk of T (its bytes, at most 16): the vector width of its loads and stores.
template <class T, int VEC>
struct nk_chunk_align {
  enum { A = VEC * T::SIZE < 16 ? VEC * T::SIZE : 16 };
};

// FULL path: chunk c of a chunk-aligned row (VEC elements of T, VEC * T::SIZE bytes: 16 or 8), addressed as an
// array of chunks with a 32-bit index: one IMAD.WIDE per address (a 64-bit element offset, then a scaled add of
// the base pointer, took three, and a reload of the base pointer). (Stores of dx the same way kept the dx row
// pointer live through pass 2: 24-32 bytes of spills in f32-weight kernels.)
template <class T, int VEC>
NK_INLINE void nk_load_chunk(const typename T::S* base, int c, unsigned* w) {
  if (VEC * T::SIZE == 16) {
    const nk_v4 v = ((const nk_v4*)base)[c];
    w[0] = v.w[0], w[1] = v.w[1], w[2] = v.w[2], w[3] = v.w[3];
  } else {
    const nk_v2 v = ((const nk_v2*)base)[c];
    w[0] = v.w[0], w[1] = v.w[1];
  }
}

// Whether every row can take the mask-free vector path: d a multiple of the chunk, every pointer and
// row start aligned to its chunk.
template <class TX, class TD, class TW>
NK_INLINE bool nk_bwd_full(const void* dy, const void* x, const void* w, const void* dx, int d, long long dys,
                           long long xs, long long dxs) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC;
  constexpr unsigned AX = nk_chunk_align<TX, VEC>::A, AD = nk_chunk_align<TD, VEC>::A,
                     AW = nk_chunk_align<TW, VEC>::A;
  return d % VEC == 0 && nk_aligned(x, AX) && nk_aligned(dx, AX) && nk_aligned(dy, AD) && nk_aligned(w, AW) &&
         (xs * TX::SIZE) % AX == 0 && (dxs * TX::SIZE) % AX == 0 && (dys * TD::SIZE) % AD == 0;
}

// nk_bwd_dx's loop, with its row constants ar = a * rs (0 for RMS) and c = (b * rs) * rs formed by the caller.
template <bool LN, int VEC>
NK_INLINE void nk_bwd_dx_rc(const float (&xf)[VEC], const float (&df)[VEC], const float (&wf)[VEC], bool has_w,
                            float mu, float rs, float ar, float c, float (&o)[VEC]) {
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float xm = LN ? xf[e] - mu : xf[e];
    const float g = has_w ? df[e] * wf[e] : df[e];
    o[e] = nk_fma(-xm, c, nk_fma(g, rs, -ar));
  }
}

// dx of one chunk from its x, dy and weights (has_w false: w = 1), the row's stats and its sums a, b.
template <bool LN, int VEC>
NK_INLINE void nk_bwd_dx(const float (&xf)[VEC], const float (&df)[VEC], const float (&wf)[VEC], bool has_w,
                         float mu, float rs, float a, float b, float (&o)[VEC]) {
  // rs * (g - a - xh * b), xh = (x - mu) * rs, as two FMAs: g * rs - a * rs, then - (x - mu) * (b * rs * rs)
  // (a = 0 and mu = 0 for RMS): xh is never formed, one multiply per element fewer. x - mu comes first, not
  // x * c - mu * c: |mu| >> std would cancel. c = b / (var + eps) overflows where |b| > ~3.4e38 * (var + eps)
  // (forming xh first stayed finite up to ~3.4e38 * sqrt(var + eps)): with eps >= 1e-12, only for |b| > 1e26.
  const float ar = LN ? a * rs : 0.0f, c = (b * rs) * rs;
  nk_bwd_dx_rc<LN, VEC>(xf, df, wf, has_w, mu, rs, ar, c, o);
}

// dx for one chunk, and the chunk's contributions to the parameter sums (acc: this thread's slots for
// the chunk's columns, dweight's at acc[0..], dbias's at acc[d..]; null when no parameter gradient).
template <class TX, class TD, class TW, bool LN, int VEC>
NK_INLINE void nk_bwd_chunk(const float (&xf)[VEC], const float (&df)[VEC], const typename TW::S* w, bool pvec,
                            int nvalid, float mu, float rs, float a, float b, typename TX::S* dxp, bool dxvec,
                            float* acc, int d, bool accvec) {
  float wf[VEC];
  if (w) nk_load_f<TW, VEC>(w, pvec, nvalid, wf);
  float o[VEC], gx[VEC];
  nk_bwd_dx<LN, VEC>(xf, df, wf, w != nullptr, mu, rs, a, b, o);
#pragma unroll
  for (int e = 0; e < VEC; ++e) gx[e] = df[e] * (LN ? (xf[e] - mu) * rs : xf[e] * rs);
  nk_store_f<TX, VEC>(dxp, dxvec, nvalid, o);
  if (!acc) return;
  if (accvec && nvalid >= VEC) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      nk_f4 s = *(nk_f4*)(acc + k);
#pragma unroll
      for (int e = 0; e < 4; ++e) s.v[e] += gx[k + e];
      *(nk_f4*)(acc + k) = s;
      if (LN) {
        nk_f4 t = *(nk_f4*)(acc + d + k);
#pragma unroll
        for (int e = 0; e < 4; ++e) t.v[e] += df[k + e];
        *(nk_f4*)(acc + d + k) = t;
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if (e < nvalid) {
        acc[e] += gx[e];
        if (LN) acc[d + e] += df[e];
      }
  }
}

// Whether a kernel has a weight: known at compile time (NK_W_YES / NK_W_NO: no null test, no select per
// element) or tested at run time (NK_W_ANY: the pointer may be null).
#define NK_W_ANY 0
#define NK_W_YES 1
#define NK_W_NO 2
#define NK_HAS_W(WK, w) ((WK) == NK_W_YES || ((WK) == NK_W_ANY && (w) != nullptr))

// Row sums for dx: sg = sum(g) (LN), sgx = sum(g * xhat), over one chunk.
template <class TW, bool LN, int VEC, int WK = NK_W_ANY>
NK_INLINE void nk_bwd_sums(const float (&xf)[VEC], const float (&df)[VEC], const typename TW::S* w, bool pvec,
                           int nvalid, float mu, float rs, float& sg, float& sgx) {
  float wf[VEC];
  const bool hw = NK_HAS_W(WK, w);
  if (hw) nk_load_f<TW, VEC>(w, pvec, nvalid, wf);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float xh = LN ? (xf[e] - mu) * rs : xf[e] * rs;
    const float g = hw ? df[e] * wf[e] : df[e];
    sg += e < nvalid ? g : 0.0f;  // elements past the row's end are not part of it
    sgx += e < nvalid ? g * xh : 0.0f;
  }
}

// Pass 1 of `cached` over one chunk: nk_bwd_sums, plus the chunk's parameter sums (accw += dy * xhat, and
// for LN accb += dy when RB, the dbias sums in registers), which need no row sum. Elements past the row's end
// were loaded as +0 (dy = 0 adds nothing; their slots are never written out).
template <class TW, bool LN, int VEC, int WK, bool RB>
NK_INLINE void nk_bwd_pass1(const float (&xf)[VEC], const float (&df)[VEC], const typename TW::S* w, bool pvec,
                            int nvalid, float mu, float rs, float& sg, float& sgx, float (&accw)[VEC],
                            float (&accb)[VEC]) {
  nk_bwd_sums<TW, LN, VEC, WK>(xf, df, w, pvec, nvalid, mu, rs, sg, sgx);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    accw[e] += df[e] * (LN ? (xf[e] - mu) * rs : xf[e] * rs);
    if (RB) accb[e] += df[e];
  }
}

// LayerNorm's dbias sums of `cached` / `cluster` in shared memory (nk_bwd_smem_dbias): accb[e] += dy[e] in
// this thread's own slots (no other thread touches them until the end). VEC4 (the FULL path: d, hence every
// slot row, a multiple of 8 floats, and the slots 16-byte aligned): 16-byte accesses; else the first nvalid
// elements.
template <int VEC, bool VEC4>
NK_INLINE void nk_bwd_add_dy(float* accb, const float (&df)[VEC], int nvalid) {
  if (VEC4) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      nk_f4 s = *(nk_f4*)(accb + k);
#pragma unroll
      for (int e = 0; e < 4; ++e) s.v[e] += df[k + e];
      *(nk_f4*)(accb + k) = s;
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if (e < nvalid) accb[e] += df[e];
  }
}

#define NK_BWD_TYPED_PTRS                                    \
  const typename TD::S* DY = (const typename TD::S*)dy;     \
  const typename TX::S* X = (const typename TX::S*)x;       \
  const typename TW::S* W = (const typename TW::S*)weight;  \
  typename TX::S* DX = (typename TX::S*)dx

// ---------------------------------------------------------------- mappings `cached` and `cluster`
// cached: blockDim.x = R * tpr: R row groups of tpr threads. tpr is a power of two <= 32 (groups inside a
// warp, xor-shuffle reductions; blockDim.x a multiple of the warp size) or tpr = blockDim.x (one row per
// block, block reductions). Thread t of a group owns chunks t, t + tpr, ... (nv <= nk_bwd_maxv of them,
// nv * tpr * VEC >= d) and caches their x and dy in registers. Grid: persistent, rows strided by
// gridDim.x * R.
// cluster (CL, Hopper): a row is split over the C CTAs of a thread-block cluster, as in the forward's
// `cluster`: CTA rank r owns chunks [r * cpc, (r + 1) * cpc), cpc = ceil(chunks / C), and thread t of it
// chunks r * cpc + t + i * tpr (tpr = blockDim.x, nv * tpr >= cpc); the row sums go over DSMEM
// (nk_cluster_sum). Grid: persistent, a multiple of C; rows strided by the number of clusters.
// Parameter sums: a thread owns the same columns in every row it visits, so it keeps their sums in
// registers across rows, except LN's dbias sums with 16-bit x and dy (and in the staged kernels, TM, with f32 too),
// which live in its own shared-memory slots (nk_bwd_smem_dbias, nk_bwd_add_dy; no barrier: no other thread touches
// them). At the end each group
// stores its register sums in its slots and the block adds the groups in group order into its row of `part`
// (R = 1: straight to `part`; CL: the cluster's row of `part`, each CTA its own columns).
// Both row sums (LN) are reduced together: one barrier (CL: and one cluster exchange) per row, not two.
// Dynamic shared memory (floats): 4 * (blockDim.x / warp) for the block reductions (two values, two
// alternating buffers); CL: then NK_CLUSTER_SUM_BYTES for the cluster exchange; then, when `part` is not
// null, R * nacc * d slots when R > 1 ([group][dweight d | dbias d]; with shared-memory dbias sums the dbias
// halves are the accumulators), else, with shared-memory dbias sums, the CTA's cpc * VEC of them
// (ops/plan_bwd.ts, cachedShared).
// With one row per block (or cluster) and NK_BWD_PREFETCH in `flags`, thread 0 asks L2 for the block's next
// row while it waits for this one (nk_prefetch_l2, sm_90): the next row's loads then wait on L2, not HBM,
// with no registers spent.
// (Until 2026-12 the sums were read-modified-written in shared memory for every row: 2 floats per
// element for LN, which held 16-bit LN at 62-74% of copy.)
// WK: whether there is a weight, fixed at compile time for the FULL path (the kernel picks the instantiation
// by the pointer; H200 profile of the runtime test, LN bf16 D=4096: of 38 instructions per element, a null
// test, two selects and a select per element per chunk were the weight's), NK_W_ANY for the masked one.
// TM (bulk-staged rows; flags' stage count S >= 1, see NK_BWD_STAGES_SHIFT): thread 0 copies the CTA's slice of x and
// dy of the next S rows into S shared-memory stages with one bulk copy each (nk_bulk_g2s), and its weight slice once;
// threads read their chunks from there. A stage is refilled for the row S ahead as soon as the block reduction's
// barrier shows every thread has read it, so the next rows' loads run while this row reduces, exchanges and
// stores dx: with registers only one row per CTA was in flight (clusters: 53-82% of copy). The arithmetic and its
// order are the register path's: dx is bitwise the same. Layout after the dbias slots: S + 1 mbarriers (rounded up
// to 16 bytes), the weight slice (cpc * VEC of TW, rounded up to 16 bytes), then S stages of [x slice | dy slice]
// (cpc * VEC elements each); ops/plan_bwd.ts (stagedShared) sizes it, bwdStages picks S (H200: 2 where it gains).
// (2026-11-30's staging, per-thread cp.async of each thread's own chunks, 2c7e3bb, lost up to 40 points; this copies
// whole slices with one instruction and reads the weights from shared memory too.)
// (Reading the weights from global memory instead, without the slice, lets 4 LN 16-bit staged CTAs of 128 threads share
// an SM instead of 3 (57,712 bytes each with it, 1 KB reserved per CTA): H200 2026-12-04, it lost 3-18 points of copy.)
template <class TX, class TD>
struct nk_bwd_tma_ok {
  enum { V = NK_HAS_CLUSTER && nk_bwd_geom<TX, TD>::XW == 4 && nk_bwd_geom<TX, TD>::DW == 4 };
};
template <class TX, class TD, class TW, bool LN, bool FULL, bool CL, int WK = NK_W_ANY, bool TM = false>
NK_INLINE void nk_bwd_cached(NK_BWD_PARAMS) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC, XW = nk_bwd_geom<TX, TD>::XW, DW = nk_bwd_geom<TX, TD>::DW;
  constexpr bool TMA = TM && FULL && nk_bwd_tma_ok<TX, TD>::V;
  constexpr int NACC = LN ? 2 : 1, MAXV = nk_bwd_maxv<TX, TD, LN, TMA>::V, WWORDS = VEC * TW::SIZE / 4;
  // TM copies the weight slice, cloc chunks, with one bulk copy: its size must be a multiple of 16 bytes (x's and dy's
  // chunks are 16 bytes by nk_bwd_tma_ok). A triple added to NK_BWD_STAGED_DTYPES with narrower weights fails here.
  static_assert(!TMA || (VEC * TW::SIZE) % 16 == 0, "staged kernels need weight chunks of a multiple of 16 bytes");
  nk_check_wave();
#if NK_HAS_CLUSTER
  const unsigned csize = CL ? nk_cluster_size() : 1u, crank = CL ? nk_cluster_rank() : 0u;
#else
  if (CL) nk_trap();  // no clusters here (sm_80 SASS, compute_80 PTX, HIP)
  const unsigned csize = 1u, crank = 0u;
#endif
  const int bd = (int)nk_block_dim_x();
  const bool lanes = tpr <= 32 && !CL;
  const int nchunks = d > 0 ? (d - 1) / VEC + 1 : 0;
  const int cpc = (int)((nchunks + csize - 1) / csize);  // chunks per CTA (all of them without clusters)
  if (tpr < 1 || nv < 1 || nv > MAXV || (long long)nv * tpr < cpc || bd % tpr || csize > 32 ||
      (lanes ? (tpr & (tpr - 1)) != 0 || bd % NK_WARP_SIZE != 0 : tpr != bd))
    nk_trap();
  if (d <= 0) return;
  NK_BWD_TYPED_PTRS;
  const int tid = (int)nk_thread_x();
  const int grp = tid / tpr, t0 = tid - grp * tpr, R = bd / tpr;
  const unsigned nwarps = (unsigned)bd / NK_WARP_SIZE;
  // This CTA's slice of every row: elements [e0, e0 + cpc * VEC), of which dloc exist (all without CL).
  const long long e0 = (long long)crank * cpc * VEC;
  const int cloc = nk_mini(cpc, nchunks - (int)crank * cpc);
  const int dloc = cloc > 0 ? (int)(d - e0) : 0;
  const bool hw = NK_HAS_W(WK, W);
  const typename TW::S* Wl = hw ? W + e0 : nullptr;
  const float rd = 1.0f / (float)d;  // row means as products: no division per row
  const bool prefetch = (flags & NK_BWD_PREFETCH) && !lanes && !TMA;
#define NK_NVAL(i) \
  (((i) < nv && t + (i) * tpr < c_end) ? (FULL ? VEC : nk_chunk_valid<VEC>(t + (i) * tpr, dloc)) : 0)
  constexpr bool SB = nk_bwd_smem_dbias<TX, TD, LN, TMA>::V, RB = LN && !SB;  // dbias sums: shared memory / registers
  float accw[MAXV][VEC], accr[RB ? MAXV : 1][VEC];
#pragma unroll
  for (int i = 0; i < MAXV; ++i)
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      accw[i][e] = 0.0f;
      if (RB) accr[i][e] = 0.0f;
    }
  // Shared-memory dbias sums (see above): this group's dbias slots, or the CTA's; zeroed by their owners.
  float* const slots = nk_fwd_smem + 4 * nwarps + (CL ? NK_CLUSTER_SUM_BYTES / 4 : 0);
  float* const accb = (SB && part) ? (R > 1 ? slots + (long long)grp * NACC * d + d : slots) : nullptr;
  if (accb) {
    const int t = t0, c_end = cloc;
#pragma unroll
    for (int i = 0; i < MAXV; ++i)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (e < NK_NVAL(i)) accb[(t + i * tpr) * VEC + e] = 0.0f;
  }
  // TM: the stages (see above). A CTA without columns (cloc <= 0) copies and waits for nothing.
  const int stages = TMA ? (flags >> NK_BWD_STAGES_SHIFT) & 15 : 1;
  const int sliceE = cpc * VEC;
  unsigned char* const tarea = (unsigned char*)(slots + (SB && part ? sliceE : 0));
  const unsigned tbar = TMA ? nk_smem_addr(tarea) : 0u;  // stage s's mbarrier at tbar + 8 s, the weights' after them
  const typename TW::S* const sw = (const typename TW::S*)(tarea + ((8 * (stages + 1) + 15) & ~15));
  unsigned char* const sstage = (unsigned char*)sw + ((sliceE * TW::SIZE + 15) & ~15);
  const int stageBytes = sliceE * (TX::SIZE + TD::SIZE);
  const bool tmaOn = TMA && cloc > 0;
  auto stageIn = [&](long long r, int s) {  // thread 0: row r's slice into stage s
    const unsigned bar = tbar + 8 * s, bx = cloc * VEC * TX::SIZE, bdy = cloc * VEC * TD::SIZE;
    unsigned char* const st = sstage + s * stageBytes;
    nk_mbar_arm(bar, bx + bdy);
    nk_bulk_g2s(nk_smem_addr(st), X + r * x_stride + e0, bx, bar);
    nk_bulk_g2s(nk_smem_addr(st + sliceE * TX::SIZE), DY + r * dy_stride + e0, bdy, bar);
  };
  if (TMA) {
    if (stages < 1 || stages > NK_BWD_MAX_STAGES || lanes || R != 1 || (tbar & 15u)) nk_trap();
    if (tid == 0) {
      for (int s = 0; s <= stages; ++s) nk_mbar_init(tbar + 8 * s);
      nk_mbar_init_fence();
      nk_fence_async_smem();
    }
    nk_barrier();
  }
  nk_red_lanes redl{tpr};
  unsigned parity = 0;
#if NK_HAS_CLUSTER
  nk_cluster_sum clsum;
  if (CL) clsum.setup(nk_fwd_smem + 4 * nwarps);
#endif
  // The row's sums sg (LN) and sgx, totalled over the row group, the block or the cluster.
  auto reduce2 = [&](float& p, float& q) {
    if (lanes) {  // nk_red_lanes on both sums at once: one uniform test per level, the same order per sum
#pragma unroll
      for (int m = 16; m > 0; m >>= 1)
        if (m < tpr) {
          if (LN) p += nk_shfl_xor(p, m);
          q += nk_shfl_xor(q, m);
        }
      return;
    }
    float* buf = nk_fwd_smem + parity * 2 * nwarps;
    if (LN) nk_block_sum2(p, q, buf);
    else q = nk_block_sum(q, buf);
#if NK_HAS_CLUSTER
    if (CL) {  // then the cluster's totals, in rank order (nk_cluster_sum: no cluster barrier)
      if (LN) {
        float v[2] = {p, q};
        clsum(v);
        p = v[0], q = v[1];
      } else {
        float v[1] = {q};
        clsum(v);
        q = v[0];
      }
    }
#endif
    parity ^= 1u;
  };
  const bool pvec = FULL || nk_aligned(Wl, nk_chunk_align<TW, VEC>::A);
#if NK_HAS_CLUSTER
  const long long first = CL ? (long long)nk_cluster_id_x() : (long long)nk_block_x() * R;
  const long long rstep = CL ? (long long)nk_cluster_count_x() : (long long)nk_grid_dim_x() * R;
#else
  const long long first = (long long)nk_block_x() * R, rstep = (long long)nk_grid_dim_x() * R;
#endif
  const unsigned wbar = tbar + 8 * stages;
  if (tmaOn && tid == 0) {
    if (hw) {
      nk_mbar_arm(wbar, cloc * VEC * TW::SIZE);
      nk_bulk_g2s(nk_smem_addr(sw), Wl, cloc * VEC * TW::SIZE, wbar);
    }
    for (int s = 0; s < stages && first + s * rstep < rows; ++s) stageIn(first + s * rstep, s);
  }
  if (tmaOn && hw)
    while (!nk_mbar_ready(wbar, 0u)) {
    }
  // The weights the loop reads: the staged copy (TM) or global memory.
  const typename TW::S* const Wr = TMA ? sw : Wl;
  // TM: the next row's statistics, loaded a row ahead (a row's first use of them came right after its wait).
  float mu_n = 0.0f, rs_n = 0.0f;
  if (TMA && first < rows) mu_n = LN ? mean[first] : 0.0f, rs_n = rstd[first];
  int kth = 0;  // TM: rows this CTA has begun
  for (long long rb = first; rb < rows; rb += rstep) {
    // Per-chunk weight addresses do not depend on the row: keep the compiler from hoisting them all out
    // of the loop (two registers each, live throughout; they spilled).
    int t = t0;
    nk_opaque(t);
    const long long row = rb + grp;
    const bool active = row < rows;
    const int c_end = active ? cloc : 0;
    const typename TX::S* xr = X + row * x_stride + e0;
    const typename TD::S* dyr = DY + row * dy_stride + e0;
    typename TX::S* dxr = DX + row * dx_stride + e0;
    const bool xvec = FULL || nk_aligned(xr, nk_chunk_align<TX, VEC>::A);
    const bool dvec = FULL || nk_aligned(dyr, nk_chunk_align<TD, VEC>::A);
    unsigned xw[MAXV][XW], dw[MAXV][DW];
    const int stg = TMA ? kth % stages : 0;
    float mu_t = 0.0f, rs_t = 0.0f;
    if (TMA) {
      mu_t = mu_n, rs_t = rs_n;
      if (rb + rstep < rows) mu_n = LN ? mean[rb + rstep] : 0.0f, rs_n = rstd[rb + rstep];
    }
    if (tmaOn) {
      while (!nk_mbar_ready(tbar + 8 * stg, (unsigned)(kth / stages) & 1u)) {
      }
      const unsigned char* const st = sstage + stg * stageBytes;
#pragma unroll
      for (int i = 0; i < MAXV; ++i)
        if (NK_NVAL(i) > 0) {
          nk_load_chunk<TX, VEC>((const typename TX::S*)st, t + i * tpr, xw[i]);
          nk_load_chunk<TD, VEC>((const typename TD::S*)(st + sliceE * TX::SIZE), t + i * tpr, dw[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < MAXV && !TMA; ++i) {
      const long long off = (long long)(t + i * tpr) * VEC;
      // FULL: a chunk is whole or absent, and an absent one is never read: no zero fill.
      if (FULL && !CL) {  // (with CL it made mixed-dtype `cluster` kernels spill 4-16 bytes)
        if (NK_NVAL(i) > 0) {
          nk_load_chunk<TX, VEC>(xr, t + i * tpr, xw[i]);
          nk_load_chunk<TD, VEC>(dyr, t + i * tpr, dw[i]);
        }
      } else if (!FULL || NK_NVAL(i) > 0) {
        nk_load_words<TX, VEC>(xr + off, xvec, FULL ? VEC : NK_NVAL(i), xw[i]);
        nk_load_words<TD, VEC>(dyr + off, dvec, FULL ? VEC : NK_NVAL(i), dw[i]);
      }
    }
    if (prefetch && t == 0 && row + rstep < rows && cloc > 0) {
      nk_prefetch_l2(xr + rstep * x_stride, (long long)dloc * TX::SIZE);
      nk_prefetch_l2(dyr + rstep * dy_stride, (long long)dloc * TD::SIZE);
    }
    const float mu = TMA ? mu_t : (LN && active) ? mean[row] : 0.0f;
    const float rs = TMA ? rs_t : active ? rstd[row] : 0.0f;
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int nvalid = NK_NVAL(i);
      if (nvalid > 0) {
        float xf[VEC], df[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) xf[e] = nk_get<TX>(xw[i], e), df[e] = nk_get<TD>(dw[i], e);
        nk_bwd_pass1<TW, LN, VEC, WK, RB>(xf, df, hw ? Wr + (long long)(t + i * tpr) * VEC : nullptr, pvec, nvalid, mu,
                                          rs, sg, sgx, accw[i], accr[RB ? i : 0]);
        if (accb) nk_bwd_add_dy<VEC, FULL>(accb + (t + i * tpr) * VEC, df, nvalid);
      }
    }
    reduce2(sg, sgx);
    // TM: every thread of the CTA passed the reduction's barrier after reading this stage: refill it, S rows ahead.
    if (tmaOn && tid == 0 && rb + stages * rstep < rows) {
      nk_fence_async_smem();
      stageIn(rb + stages * rstep, stg);
    }
    ++kth;
    const float a = LN ? sg * rd : 0.0f;
    const float b = sgx * rd;
    // FULL: nk_bwd_dx's row constants once per row, not once per chunk (the same operations). Not with LN's dbias
    // sums in shared memory (16-bit LN; staged f32 LN) nor with CL: two more live registers made those spill 4-36 bytes.
    constexpr bool RC = FULL && !SB && !CL;
    const float ar = LN ? a * rs : 0.0f, c = (b * rs) * rs;
    const bool dxvec = FULL || nk_aligned(dxr, nk_chunk_align<TX, VEC>::A);
    // Pass 2: dx. Chunk i + 1's weights are loaded before chunk i's dx is stored: the compiler cannot
    // move a load above a store that may alias it, so one load per chunk would wait in series. Not for
    // f32 weights with 16-bit x (8 more live registers: those kernels spilled up to 56 bytes).
    constexpr bool AHEAD = WWORDS <= 4;
    unsigned wnext[WWORDS];
    if (AHEAD && hw) nk_load_words<TW, VEC>(Wr + (long long)t * VEC, pvec, NK_NVAL(0), wnext);
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      unsigned wcur[WWORDS];
      if (AHEAD) {
#pragma unroll
        for (int k = 0; k < WWORDS; ++k) wcur[k] = wnext[k];
        if (hw && i + 1 < MAXV)
          nk_load_words<TW, VEC>(Wr + (long long)(t + (i + 1) * tpr) * VEC, pvec, NK_NVAL(i + 1), wnext);
      }
      const int nvalid = NK_NVAL(i);
      if (nvalid > 0) {
        if (!AHEAD && hw) nk_load_words<TW, VEC>(Wr + (long long)(t + i * tpr) * VEC, pvec, nvalid, wcur);
        float xf[VEC], df[VEC], wf[VEC], o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          xf[e] = nk_get<TX>(xw[i], e), df[e] = nk_get<TD>(dw[i], e), wf[e] = hw ? nk_get<TW>(wcur, e) : 1.0f;
        if (RC) nk_bwd_dx_rc<LN, VEC>(xf, df, wf, hw, mu, rs, ar, c, o);
        else nk_bwd_dx<LN, VEC>(xf, df, wf, hw, mu, rs, a, b, o);
        nk_store_f<TX, VEC>(dxr + (long long)(t + i * tpr) * VEC, dxvec, nvalid, o);
      }
    }
  }
#if NK_HAS_CLUSTER
  // No CTA may exit (its shared memory gone) while another can still send to it.
  if (CL) nk_cluster_sync();
#endif
  if (!part) return;
  // This block's (CL: this cluster's) row of `part`: one group writes it directly; several store their
  // sums in their slots and the block adds them in group order.
#if NK_HAS_CLUSTER
  const long long prow = CL ? (long long)nk_cluster_id_x() : (long long)nk_block_x();
#else
  const long long prow = nk_block_x();
#endif
  float* out = part + prow * NACC * d;
  // R > 1: this group's slots (with shared-memory dbias sums, their dbias half already holds them).
  float* mine = R == 1 ? out + e0 : slots + (long long)grp * NACC * d;
  {
    const int t = t0, c_end = cloc;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int nvalid = NK_NVAL(i);
      const long long col = (long long)(t + i * tpr) * VEC;
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (e < nvalid) {
          mine[col + e] = accw[i][e];
          if (RB) mine[d + col + e] = accr[i][e];
          else if (SB && R == 1) mine[d + col + e] = accb[col + e];  // this thread's own slots: no barrier
        }
    }
  }
#undef NK_NVAL
  if (R == 1) return;
  nk_barrier();
  for (int j = tid; j < NACC * d; j += bd) {
    float s = 0.0f;
    for (int g = 0; g < R; ++g) s += slots[(long long)g * NACC * d + j];
    out[j] = s;
  }
}

// The FULL path of `cached` / `cluster` as a call (NK_NOINLINE; HIP inlines it), with a register allocation of its
// own: the kernels hold it twice (with and without a weight) beside the masked path, which stays inlined. Inlined side
// by side they shared one allocation (ptxas -v, sm_90: LN f16 x/dy with f32 weights spilled 68 bytes, 16-bit LN
// clusters 12-24, RMS bf16 clusters 4); as calls the FULL paths spill nothing.
template <class TX, class TD, class TW, bool LN, bool CL, int WK>
NK_NOINLINE void nk_bwd_cached_full(NK_BWD_PARAMS) {
  nk_bwd_cached<TX, TD, TW, LN, true, CL, WK>(NK_BWD_ARGS);
}
// The bulk-staged FULL path (TM), a call of its own for the same reason, in kernels of their own
// (nk_{ln|rms}_bwd_{cached|cluster}staged_*): as a third call in the register path's kernels its registers made
// their masked path spill (ptxas sm_90, RMS f32 `cluster`: 12 -> 60 bytes).
template <class TX, class TD, class TW, bool LN, bool CL, int WK>
NK_NOINLINE void nk_bwd_cached_staged(NK_BWD_PARAMS) {
  nk_bwd_cached<TX, TD, TW, LN, true, CL, WK, true>(NK_BWD_ARGS);
}

// ---------------------------------------------------------------- mapping `wide`
// Rows too long for the register cache: one row per block (blockDim.x = tpr, a multiple of the warp
// size), thread t handles chunks t, t + tpr, ...; a sums pass and a dx pass each read x and dy (the
// second mostly from L2). Each thread owns its columns' parameter sums: in shared memory when nv = 1
// (copied to this block's row of `part` at the end), else straight in that row of `part` (nv = 0; a
// read-modify-write in L2 per row). Grid: persistent, rows strided by gridDim.x.
// Dynamic smem: 2 * warps floats rounded up to 4, then nacc * d floats when nv = 1.
template <class TX, class TD, class TW, bool LN>
NK_INLINE void nk_bwd_wide(NK_BWD_PARAMS) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC;
  constexpr int NACC = LN ? 2 : 1;
  (void)flags;
  nk_check_wave();
  if ((unsigned)tpr != nk_block_dim_x() || tpr % NK_WARP_SIZE || nv < 0 || nv > 1) nk_trap();
  if (d <= 0) return;
  NK_BWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  const float fd = (float)d;
  float* const prow = part ? part + (long long)nk_block_x() * NACC * d : nullptr;
  float* acc = (part && nv) ? nk_fwd_smem + ((2 * (nk_block_dim_x() / NK_WARP_SIZE) + 3) & ~3u) : prow;
  if (acc)
    for (int j = t * VEC; j < d; j += tpr * VEC)
      for (int e = 0; e < VEC && j + e < d; ++e) {
        acc[j + e] = 0.0f;
        if (LN) acc[d + j + e] = 0.0f;
      }
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  const bool pvec = nk_aligned(W, nk_chunk_align<TW, VEC>::A);
  const bool accvec = d % 4 == 0;  // acc rows then start 16-byte aligned (part and the slots are)
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TX::S* xr = X + row * x_stride;
    const typename TD::S* dyr = DY + row * dy_stride;
    typename TX::S* dxr = DX + row * dx_stride;
    const bool xvec = nk_aligned(xr, nk_chunk_align<TX, VEC>::A);
    const bool dvec = nk_aligned(dyr, nk_chunk_align<TD, VEC>::A);
    const bool dxvec = nk_aligned(dxr, nk_chunk_align<TX, VEC>::A);
    const float mu = LN ? mean[row] : 0.0f, rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll 4
    for (int c = t; c < nchunks; c += tpr) {
      const long long off = (long long)c * VEC;
      const int nvalid = nk_chunk_valid<VEC>(c, d);
      float xf[VEC], df[VEC];
      nk_load_f<TX, VEC>(xr + off, xvec, nvalid, xf);
      nk_load_f<TD, VEC>(dyr + off, dvec, nvalid, df);
      nk_bwd_sums<TW, LN, VEC>(xf, df, W ? W + off : W, pvec, nvalid, mu, rs, sg, sgx);
    }
    const float a = LN ? red(sg) / fd : 0.0f;
    const float b = red(sgx) / fd;
#pragma unroll 4
    for (int c = t; c < nchunks; c += tpr) {
      const long long off = (long long)c * VEC;
      const int nvalid = nk_chunk_valid<VEC>(c, d);
      float xf[VEC], df[VEC];
      nk_load_f<TX, VEC>(xr + off, xvec, nvalid, xf);
      nk_load_f<TD, VEC>(dyr + off, dvec, nvalid, df);
      nk_bwd_chunk<TX, TD, TW, LN, VEC>(xf, df, W ? W + off : W, pvec, nvalid, mu, rs, a, b, dxr + off, dxvec,
                                        acc ? acc + off : acc, d, accvec);
    }
  }
  if (part && nv)  // this thread's own columns: no barrier needed
    for (int j = t * VEC; j < d; j += tpr * VEC)
      for (int e = 0; e < VEC && j + e < d; ++e) {
        prow[j + e] = acc[j + e];
        if (LN) prow[d + j + e] = acc[d + j + e];
      }
}

// ---------------------------------------------------------------- mappings `rowsum` + `tile`
// Rows whose parameter sums fit neither in registers nor in shared memory (LN D >= ~29K, RMS D >= ~58K):
// a read-modify-write of a global row of sums per row would move more bytes than the rows themselves.
// Instead two kernels: `rowsum` writes each row's a = mean(g) and b = mean(g * xhat) (reads x and dy once),
// then `tile` gives each block a tile of columns for a strided set of rows: dx needs only a and b, and each
// thread keeps its 16 columns' sums in registers across the rows (no reductions, no barriers). 5 row-sized
// transfers instead of 3, against about 10 for the global read-modify-write.
//
// Workspace layout (`part`): rowsums [2 * rows] floats (rounded up to 4), then the column partials
// [G][nacc][d] (G = row groups of `tile`), which nk_bwd_finalize adds up (nparts = G).
//
// rowsum: one row per block (blockDim.x = tpr, a multiple of the warp size), rows grid-strided.
// Dynamic smem: 2 * warps floats. dx, nv unused.
template <class TX, class TD, class TW, bool LN>
NK_INLINE void nk_bwd_rowsum(NK_BWD_PARAMS) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC;
  (void)dx, (void)dx_stride, (void)nv, (void)flags;
  nk_check_wave();
  if ((unsigned)tpr != nk_block_dim_x() || tpr % NK_WARP_SIZE || !part) nk_trap();
  if (d <= 0) return;
  NK_BWD_TYPED_PTRS;
  (void)DX;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  const float fd = (float)d;
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  const bool pvec = nk_aligned(W, nk_chunk_align<TW, VEC>::A);
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TX::S* xr = X + row * x_stride;
    const typename TD::S* dyr = DY + row * dy_stride;
    const bool xvec = nk_aligned(xr, nk_chunk_align<TX, VEC>::A);
    const bool dvec = nk_aligned(dyr, nk_chunk_align<TD, VEC>::A);
    const float mu = LN ? mean[row] : 0.0f, rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll 4
    for (int c = t; c < nchunks; c += tpr) {
      const long long off = (long long)c * VEC;
      const int nvalid = nk_chunk_valid<VEC>(c, d);
      float xf[VEC], df[VEC];
      nk_load_f<TX, VEC>(xr + off, xvec, nvalid, xf);
      nk_load_f<TD, VEC>(dyr + off, dvec, nvalid, df);
      nk_bwd_sums<TW, LN, VEC>(xf, df, W ? W + off : W, pvec, nvalid, mu, rs, sg, sgx);
    }
    const float a = LN ? red(sg) / fd : 0.0f;
    const float b = red(sgx) / fd;
    if (t == 0) {
      part[2 * row] = a;
      part[2 * row + 1] = b;
    }
  }
}

// tile: blockDim.x = tpr (a multiple of the warp size); a tile is tpr * NT chunks (NT = 16 / VEC: 16
// columns per thread); gridDim.x = ntiles * G, block = (g, tile) with tile = blockIdx % ntiles; rows g,
// g + G, ... Dynamic smem: 0. nv unused.
template <class TX, class TD, class TW, bool LN>
NK_INLINE void nk_bwd_tile(NK_BWD_PARAMS) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC;
  constexpr int NT = 16 / VEC;
  constexpr int NACC = LN ? 2 : 1;
  (void)nv, (void)flags;
  if ((unsigned)tpr != nk_block_dim_x() || !part) nk_trap();
  if (d <= 0) return;
  NK_BWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  const int tile_chunks = tpr * NT;
  const int ntiles = (nchunks - 1) / tile_chunks + 1;
  const int tile = (int)(nk_block_x() % (unsigned)ntiles);
  const long long g = nk_block_x() / (unsigned)ntiles, G = nk_grid_dim_x() / (unsigned)ntiles;
  if (g >= G) return;  // a partial last group (the launcher sizes the grid as ntiles * G)
  const float* rowsums = part;
  float* cols = part + ((2 * (long long)rows + 3) & ~3ll) + g * NACC * d;
  const int c0 = tile * tile_chunks + t;  // this thread's chunks: c0 + i * tpr, i < NT
  const bool pvec = nk_aligned(W, nk_chunk_align<TW, VEC>::A);
  float accw[NT * VEC], accb[NT * VEC];
#pragma unroll
  for (int k = 0; k < NT * VEC; ++k) accw[k] = 0.0f, accb[k] = 0.0f;
  for (long long row = g; row < rows; row += G) {
    const typename TX::S* xr = X + row * x_stride;
    const typename TD::S* dyr = DY + row * dy_stride;
    typename TX::S* dxr = DX + row * dx_stride;
    const bool xvec = nk_aligned(xr, nk_chunk_align<TX, VEC>::A);
    const bool dvec = nk_aligned(dyr, nk_chunk_align<TD, VEC>::A);
    const bool dxvec = nk_aligned(dxr, nk_chunk_align<TX, VEC>::A);
    const float mu = LN ? mean[row] : 0.0f, rs = rstd[row];
    const float a = rowsums[2 * row], b = rowsums[2 * row + 1];
    float xf[NT][VEC], df[NT][VEC];
#pragma unroll
    for (int i = 0; i < NT; ++i) {  // every load of the row first: NT chunks of x and dy in flight
      const int c = c0 + i * tpr;
      const int nvalid = c < nchunks ? nk_chunk_valid<VEC>(c, d) : 0;
      nk_load_f<TX, VEC>(xr + (long long)c * VEC, xvec, nvalid, xf[i]);
      nk_load_f<TD, VEC>(dyr + (long long)c * VEC, dvec, nvalid, df[i]);
    }
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int c = c0 + i * tpr;
      const int nvalid = c < nchunks ? nk_chunk_valid<VEC>(c, d) : 0;
      if (nvalid <= 0) continue;
      const long long off = (long long)c * VEC;
      float wf[VEC], o[VEC];
      if (W) nk_load_f<TW, VEC>(W + off, pvec, nvalid, wf);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float xh = LN ? (xf[i][e] - mu) * rs : xf[i][e] * rs;
        const float gg = W ? df[i][e] * wf[e] : df[i][e];
        o[e] = rs * (LN ? (gg - a) - xh * b : gg - xh * b);
        accw[i * VEC + e] += e < nvalid ? df[i][e] * xh : 0.0f;
        if (LN) accb[i * VEC + e] += e < nvalid ? df[i][e] : 0.0f;
      }
      nk_store_f<TX, VEC>(dxr + off, dxvec, nvalid, o);
    }
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const int c = c0 + i * tpr;
    const int nvalid = c < nchunks ? nk_chunk_valid<VEC>(c, d) : 0;
    for (int e = 0; e < nvalid; ++e) {
      cols[(long long)c * VEC + e] = accw[i * VEC + e];
      if (LN) cols[d + (long long)c * VEC + e] = accb[i * VEC + e];
    }
  }
}

// ---------------------------------------------------------------- finalize
// out[j] (j < nacc * d; dweight for j < d, dbias after) = the sum over p < nparts of part[p][j], plus the
// old value when `accumulate` (gradient accumulation). A null dweight or dbias is skipped.
// blockDim.x = 512: 32 columns x 16 slices; slice q adds p = q, q + 16, ... in order, then the 16 slice
// sums are added in slice order (fixed, so deterministic; 16x the loads in flight of one thread per column).
// Grid: ceil(nacc * d / 32).
#define NK_FIN_SLICES 16
template <class TO>
NK_INLINE void nk_bwd_finalize(const float* part, int nparts, int d, int nacc, void* dweight, void* dbias,
                               int accumulate) {
  NK_SHARED float sums[NK_FIN_SLICES][33];
  if (nk_block_dim_x() != 32 * NK_FIN_SLICES) nk_trap();
  const long long n = (long long)nacc * d;
  const int tx = (int)(nk_thread_x() & 31u), q = (int)(nk_thread_x() >> 5);
  const long long j = (long long)nk_block_x() * 32 + tx;
  float s = 0.0f;
  if (j < n)
#pragma unroll 4
    for (int p = q; p < nparts; p += NK_FIN_SLICES) s += part[(long long)p * n + j];
  sums[q][tx] = s;
  nk_barrier();
  if (q != 0 || j >= n) return;
  typename TO::S* o = (typename TO::S*)(j < d ? dweight : dbias);
  if (!o) return;
  float t = 0.0f;
  for (int k = 0; k < NK_FIN_SLICES; ++k) t += sums[k][tx];
  const long long at = j < d ? j : j - d;
  if (accumulate) t = TO::to_f(o[at]) + t;
  o[at] = TO::from_f(t);
}

#endif  // NORMKIT_NORM_BWD_CUH
