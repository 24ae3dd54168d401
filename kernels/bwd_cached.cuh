// norm_bwd.cuh: mappings `cached` and `cluster` (register cache; bulk-staged variant).
// Included through norm_bwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_BWD_CACHED_CUH
#define NORMKIT_BWD_CACHED_CUH
#include "bwd_common.cuh"

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
// (Read-modify-writing the sums in shared memory for every row, 2 floats per element for LN, held 16-bit LN
// at 62-74% of copy.)
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
// (Staging by per-thread cp.async of each thread's own chunks lost up to 40 points; this copies
// whole slices with one instruction and reads the weights from shared memory too.)
// (Reading the weights from global memory instead, without the slice, lets 4 LN 16-bit staged CTAs of 128 threads share
// an SM instead of 3 (57,712 bytes each with it, 1 KB reserved per CTA): H200: it lost 3-18 points of copy.)
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

#endif  // NORMKIT_BWD_CACHED_CUH
