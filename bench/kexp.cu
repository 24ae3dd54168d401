// Forward-kernel experiments (not part of the product): variants of nk_row_cached's output phase and x loads, and
// two other designs for long rows, compiled to one sm_90 cubin by bench/kexp.sh and timed by bench/kexp.ts
// against the production kernels in the same run. Results and conclusions: bench/RESULTS.md ("Kernel
// experiments"). The v-variants are the production row function with one change:
//   v0: as in production (the baseline, compiled here so that both sides share flags);
//   v1: weight/bias chunks prefetched into L1 right after the x loads (prefetch.global.L1);
//   v2: v1, and x loaded with L1::no_allocate so that streaming x does not evict the prefetched lines;
//   v3: the output loop loads weight/bias for 2 chunks, then computes and stores those 2 (taken for RMSNorm);
//   v4: the same with 4 chunks;
//   v5 (cluster only): the cluster barrier's arrive relaxed, one fence in the thread that wrote the slot;
//   v6 (rows, block): weight/bias copied into shared memory once per CTA;
//   v7 (rows, block, cluster), v8 (rows): an L2 prefetch of the row pd rows ahead (v8: with v6; cluster: each
//   CTA its slice); v9 (rows): one prefetch per CTA for its whole row group pd rows ahead (back-to-back rows).
// staged: persistent CTAs streaming rows through shared-memory stages with cp.async; wide2: one CTA per row
// re-reading from L2 with several loads in flight per thread (taken: the `wide` mapping); wide3: wide2 with
// LayerNorm's statistics in one pass (taken into `wide`).
// The production mappings themselves, compiled here (FULL path only: the fatbin's kernels also hold the masked path,
// and ran up to 12 points slower on long rows): v10 / v14 `rows` without / with ONEPASS; v16 / v17 `block` with /
// without; v18 / v19 `cluster` with / without; v12 / v13 a transposed warp tile for rows of <= 32 chunks (bench/RESULTS.md,
// "LayerNorm's statistics in one pass; a transposed tile for short rows"); v20-v27 the tile without the shift, at
// several register budgets and with the corrected two-pass; v28-v30 the production tile (nk_fwd_rowstile) against v24, v31-v33 parts of it left out
// (bench/RESULTS.md, "What torch.compile does at LN bf16 D = 128"), v34-v36 where the tile's statistics stores go;
// v37-v43 LayerNorm's 128 KB rows in a 1024-thread block: weight/bias loads grouped (v37-v39), the row split between
// registers and shared memory at two 512-thread blocks per SM (v40, v41), weight/bias staged in shared memory (v42,
// v43) (bench/RESULTS.md, "LayerNorm's 1024-thread blocks").
// FULL path only (aligned rows, d a multiple of the chunk); anything else traps.
#include "../kernels/norm_fwd.cuh"

__device__ __forceinline__ void kx_prefetch(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

template <class T, int N>
__device__ __forceinline__ void kx_load_noalloc(const typename T::S* p, unsigned* w) {
  static_assert(N * T::SIZE == 16, "16-byte chunks only");
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
}

template <class TI, class TO, class TW, bool LN, int MAXV, int V, class RED>
__device__ __forceinline__ void kx_row(const typename TI::S* xr, typename TO::S* yr, const typename TW::S* w,
                                       const typename TW::S* b, int c_first, int c_step, int c_end, int nv,
                                       float fd, float eps, float k, RED& red, float* mean_p, float* rstd_p,
                                       bool hw, bool hb) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr int WV = VEC * TW::SIZE / 4;  // words of one weight chunk
#define KX_OWN(i) ((i) < nv && c_first + (i) * c_step < c_end)
  nk_v4 raw[MAXV];
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int c = c_first + i * c_step;
    if (V == 2) {
      if (KX_OWN(i)) kx_load_noalloc<TI, VEC>(xr + (long long)c * VEC, raw[i].w);
      else raw[i].w[0] = raw[i].w[1] = raw[i].w[2] = raw[i].w[3] = 0u;
    } else {
      nk_load_words<TI, VEC>(xr + (long long)c * VEC, true, KX_OWN(i) ? VEC : 0, raw[i].w);
    }
  }
  if (V == 1 || V == 2) {
    int cf = c_first;
    nk_opaque(cf);
#pragma unroll
    for (int i = 0; i < MAXV; ++i)
      if (i < nv && cf + i * c_step < c_end) {
        const long long off = (long long)(cf + i * c_step) * VEC;
        if (w) kx_prefetch(w + off);
        if (LN && b) kx_prefetch(b + off);
      }
  }
  float dm = 0.0f, rs;
  if (LN) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      float si = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) si += nk_get<TI>(raw[i].w, e) - k;
      s += KX_OWN(i) ? si : 0.0f;
    }
    dm = red(s) / fd;
    nk_row_opaque<MAXV>(raw);
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      float qi = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
        qi += c * c;
      }
      q += KX_OWN(i) ? qi : 0.0f;
    }
    rs = nk_rsqrt(red(q) / fd + eps);
    if (mean_p) *mean_p = k + dm;
  } else {
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float v = nk_get<TI>(raw[i].w, e);
        q += v * v;
      }
    rs = nk_rsqrt(red(q) / fd + eps);
  }
  if (rstd_p) *rstd_p = rs;
  nk_row_opaque<MAXV>(raw);
  nk_opaque(c_first);
  constexpr int G = V == 3 ? 2 : V == 4 ? 4 : 1;
#pragma unroll
  for (int g = 0; g < MAXV; g += G) {
    unsigned gw[G][WV], bw[G][WV];
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const int i = g + j;
      const long long off = (long long)(c_first + i * c_step) * VEC;
      const int n = KX_OWN(i) ? VEC : 0;
      if (hw) nk_load_words<TW, VEC>(w + off, true, n, gw[j]);
      if (LN && hb) nk_load_words<TW, VEC>(b + off, true, n, bw[j]);
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const int i = g + j;
      if (KX_OWN(i)) {
        const long long off = (long long)(c_first + i * c_step) * VEC;
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          float v = nk_get<TI>(raw[i].w, e);
          v = LN ? ((v - k) - dm) * rs : v * rs;
          if (hw) v *= nk_get<TW>(gw[j], e);
          if (LN && hb) v += nk_get<TW>(bw[j], e);
          f[e] = v;
        }
        nk_store_f<TO, VEC>(yr + off, true, VEC, f);
      }
    }
  }
#undef KX_OWN
}


// v6: the CTA copies weight and bias (whole rows, in their dtype) into its shared memory once, at
// `off_bytes` (after the block reduction's buffers), and every row then reads them from there: no L2 round
// trip per chunk in the output loop, no L2 traffic for the parameters per row, and loads that may move above
// the y stores (shared memory cannot alias them). Shared bytes: off_bytes + (1 + LN) * d * TW::SIZE. The
// pointers handed back are never null (has-weight/has-bias travel as flags), so that the compiler keeps
// them in the shared state space.
__device__ __forceinline__ unsigned kx_params_offset(unsigned nwarps) { return (2u * nwarps * 4u + 15u) & ~15u; }
template <class TW, bool LN>
__device__ __forceinline__ void kx_stage_params(const typename TW::S* w, const typename TW::S* b, int d, unsigned off_bytes,
                                                const typename TW::S*& ws, const typename TW::S*& bs) {
  unsigned char* base = (unsigned char*)nk_fwd_smem + off_bytes;
  const int bytes = d * TW::SIZE;  // FULL: a multiple of 16
  for (int i = (int)nk_thread_x() * 16; i < bytes; i += (int)nk_block_dim_x() * 16) {
    if (w) *(nk_v4*)(base + i) = *(const nk_v4*)((const unsigned char*)w + i);
    if (LN && b) *(nk_v4*)(base + bytes + i) = *(const nk_v4*)((const unsigned char*)b + i);
  }
  nk_barrier();
  ws = (const typename TW::S*)base;
  bs = (const typename TW::S*)(base + bytes);
}

template <class TI, class TO, class TW, bool LN, int V>
__device__ __forceinline__ void kx_rows(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap();
  NK_FWD_TYPED_PTRS;
  const int tid = (int)nk_thread_x();
  const int sub = tid / tpr, t = tid - sub * tpr;
  const long long rpb = (long long)(nk_block_dim_x() / (unsigned)tpr);
  const int nchunks = d / VEC;
  nk_red_lanes red{tpr};
  const typename TW::S *Wp = Wt, *Bp = Bs;
  if (V == 6 || V == 8) kx_stage_params<TW, LN>(Wt, Bs, d, 0u, Wp, Bp);
  const int pd = V >= 7 ? prefetch : 0;
  for (long long rb = (long long)nk_block_x() * rpb; rb < rows; rb += (long long)nk_grid_dim_x() * rpb) {
    const long long row = rb + sub;
    const bool active = row < rows;
    if (V == 9) {  // the CTA's whole row group, one bulk prefetch, when the rows are back to back
      if (pd > 0 && tid == 0 && rb + pd < rows && x_stride == d)
        nk_prefetch_l2(X + (rb + pd) * x_stride, (long long)d * TI::SIZE * (rows - rb - pd < rpb ? rows - rb - pd : rpb));
    } else if (pd > 0 && t == 0 && row + pd < rows) {
      nk_prefetch_l2(X + (row + pd) * x_stride, (long long)d * TI::SIZE);
    }
    const float k = (LN && active) ? TI::to_f(X[row * x_stride]) : 0.0f;
    kx_row<TI, TO, TW, LN, NK_MAXV_ROWS, V >= 7 ? 0 : V>(X + row * x_stride, Y + row * y_stride, Wp, Bp, t, tpr,
                                                         active ? nchunks : 0, nv, (float)d, eps, k, red, nullptr,
                                                         nullptr, Wt != nullptr, Bs != nullptr);
  }
}

template <class TI, class TO, class TW, bool LN, int V>
__device__ __forceinline__ void kx_block(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap();
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  const typename TW::S *Wp = Wt, *Bp = Bs;
  if (V == 6) kx_stage_params<TW, LN>(Wt, Bs, d, kx_params_offset(nk_block_dim_x() / NK_WARP_SIZE), Wp, Bp);
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    if (V == 7 && prefetch > 0 && t == 0 && row + prefetch < rows)
      nk_prefetch_l2(X + (row + prefetch) * x_stride, (long long)d * TI::SIZE);
    const float k = LN ? TI::to_f(X[row * x_stride]) : 0.0f;
    kx_row<TI, TO, TW, LN, NK_MAXV_BLOCK, V == 7 ? 0 : V>(X + row * x_stride, Y + row * y_stride, Wp, Bp, t, tpr, d / VEC, nv,
                                             (float)d, eps, k, red, nullptr, nullptr, Wt != nullptr, Bs != nullptr);
  }
}


// The cluster reduction these experiments were measured with (production's nk_red_cluster until 2026-11-30
// evening, then nk_cluster_sum): each CTA's total published in one of two slots of its shared memory (after
// the 2 * nwarps block-reduction floats), a cluster barrier, then every warp reads the C totals over DSMEM
// (lane r reads rank r) and adds them in rank order.
__device__ __forceinline__ float kx_ld_cluster(const float* p, unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(nk_mapa(nk_smem_addr(p), rank)) : "memory");
  return v;
}
// RELAXED (v5, cluster only): the barrier's arrive is relaxed, and only the thread that wrote the CTA's slot
// fences (so the other threads' outstanding y stores do not hold the barrier up).
template <bool RELAXED>
struct kx_red_cluster_barrier {
  unsigned nwarps;
  unsigned parity;
  unsigned csize;
  __device__ __forceinline__ float operator()(float v) {
    const float p = nk_block_sum(v, nk_fwd_smem + parity * nwarps);
    float* slots = nk_fwd_smem + 2 * nwarps;
    if (nk_thread_x() == 0) {
      slots[parity] = p;
      if (RELAXED) asm volatile("fence.acq_rel.cluster;" ::: "memory");
    }
    if (RELAXED) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    else nk_cluster_sync();
    const unsigned lane = nk_lane();
    const float mine = lane < csize ? kx_ld_cluster(slots + parity, lane) : 0.0f;
    float t = nk_shfl_idx(mine, 0);
    for (unsigned r = 1; r < csize; ++r) t += nk_shfl_idx(mine, (int)r);
    parity ^= 1u;
    return t;
  }
};

template <class TI, class TO, class TW, bool LN, int V>
__device__ __forceinline__ void kx_cluster(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap();
  const unsigned csize = nk_cluster_size(), crank = nk_cluster_rank();
  const int nchunks = d / VEC;
  const int cpc = (int)((nchunks + csize - 1) / csize);
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  typedef kx_red_cluster_barrier<V == 5> RED;
  RED red{nk_block_dim_x() / NK_WARP_SIZE, 0u, csize};
  const long long e0 = (long long)crank * cpc * VEC;
  const int c_end = nk_mini(cpc, nchunks - (int)crank * cpc);
  const typename TW::S* Ws = Wt ? Wt + e0 : Wt;
  const typename TW::S* Bss = Bs ? Bs + e0 : Bs;
  for (long long row = nk_cluster_id_x(); row < rows; row += nk_cluster_count_x()) {
    if (V == 7 && prefetch > 0 && t == 0 && row + prefetch < rows && c_end > 0)  // each CTA its slice
      nk_prefetch_l2(X + (row + prefetch) * x_stride + e0, (long long)c_end * VEC * TI::SIZE);
    const float k = LN ? TI::to_f(X[row * x_stride]) : 0.0f;
    kx_row<TI, TO, TW, LN, NK_MAXV_BLOCK, V == 5 || V == 7 ? 0 : V>(X + row * x_stride + e0, Y + row * y_stride + e0, Ws, Bss, t, tpr,
                                             c_end, nv, (float)d, eps, k, red, nullptr, nullptr, Ws != nullptr,
                                             Bss != nullptr);
  }
  nk_cluster_sync();
}

#define KX(kind, isln, map, bounds, ti, v)                                                                 \
  extern "C" __global__ void bounds kx_##kind##_##map##_##ti##_v##v(NK_FWD_PARAMS) {                        \
    nk_pdl_enter();                                                                                        \
    kx_##map<nk_##ti, nk_##ti, nk_##ti, isln, v>(NK_FWD_ARGS);                                             \
  }
#define KX_V(kind, isln, map, bounds, ti) \
  KX(kind, isln, map, bounds, ti, 0)      \
  KX(kind, isln, map, bounds, ti, 1)      \
  KX(kind, isln, map, bounds, ti, 2)      \
  KX(kind, isln, map, bounds, ti, 3)      \
  KX(kind, isln, map, bounds, ti, 4)
#define KX_MAPS(kind, isln, ti)                                         \
  KX_V(kind, isln, rows, NK_LAUNCH_BOUNDS_MIN(256, 4), ti)              \
  KX_V(kind, isln, block, NK_LAUNCH_BOUNDS_MIN(512, 2), ti)             \
  KX_V(kind, isln, cluster, NK_LAUNCH_BOUNDS_MIN(512, 2), ti)   \
  KX(kind, isln, cluster, NK_LAUNCH_BOUNDS_MIN(512, 2), ti, 5)         \
  KX(kind, isln, rows, NK_LAUNCH_BOUNDS_MIN(256, 4), ti, 6)            \
  KX(kind, isln, block, NK_LAUNCH_BOUNDS_MIN(512, 2), ti, 6)
KX_MAPS(ln, true, f32)
KX_MAPS(rms, false, f32)
KX_MAPS(ln, true, bf16)
KX_MAPS(rms, false, bf16)

// v7: L2 prefetch ahead. Every row's first thread asks L2 (one bulk prefetch, sm_90) for the row `pd` rows
// further on, which a CTA that has not started yet will load: its loads then wait on L2, not HBM, and the
// bytes in flight to HBM no longer depend on how many x chunks the resident warps hold in registers.
// pd is the kernels' `prefetch` argument (0: none). v8: v7 with v6's weight/bias in shared memory (rows). v9: one
// prefetch per CTA for its group of back-to-back rows. They are kx_rows / kx_block / kx_cluster with V = 7, 8, 9.
// Production took v9 for `rows` and v7 for `block` (nk_prefetch_ahead in kernels/norm_fwd.cuh).
#define KX_PF(kind, isln, ti)                                                                                   \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 4) kx_##kind##_rows_##ti##_v7(NK_FWD_PARAMS) {     \
    nk_pdl_enter();                                                                                             \
    kx_rows<nk_##ti, nk_##ti, nk_##ti, isln, 7>(NK_FWD_ARGS);                                                \
  }                                                                                                             \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 4) kx_##kind##_rows_##ti##_v8(NK_FWD_PARAMS) {     \
    nk_pdl_enter();                                                                                             \
    kx_rows<nk_##ti, nk_##ti, nk_##ti, isln, 8>(NK_FWD_ARGS);                                                \
  }                                                                                                             \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(512, 2) kx_##kind##_block_##ti##_v7(NK_FWD_PARAMS) {    \
    nk_pdl_enter();                                                                                             \
    kx_block<nk_##ti, nk_##ti, nk_##ti, isln, 7>(NK_FWD_ARGS);                                               \
  }                                                                                                             \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 4) kx_##kind##_rows_##ti##_v9(NK_FWD_PARAMS) {     \
    nk_pdl_enter();                                                                                             \
    kx_rows<nk_##ti, nk_##ti, nk_##ti, isln, 9>(NK_FWD_ARGS);                                              \
  }                                                                                                             \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(512, 2) kx_##kind##_cluster_##ti##_v7(NK_FWD_PARAMS) {  \
    nk_pdl_enter();                                                                                             \
    kx_cluster<nk_##ti, nk_##ti, nk_##ti, isln, 7>(NK_FWD_ARGS);                                             \
  }
KX_PF(ln, true, f32)
KX_PF(rms, false, f32)
KX_PF(ln, true, bf16)
KX_PF(rms, false, bf16)

// ---------------------------------------------------------------- `staged` (experiment): a persistent CTA (or
// cluster of C CTAs, each owning a slice of the row) streams rows through S shared-memory stages with cp.async:
// the loads of row j+S-1 are in flight while row j is reduced and written. Each thread copies and later reads
// only its own chunks (t + i*T, i < NVS), so stage data needs no barrier; weight/bias chunks never change for a
// thread and are held in registers for the whole kernel. nv = S (stages), tpr = T (blockDim.x).
// Dynamic smem: (2*nwarps + 2 + S) floats, rounded up to 16 bytes, then S * cpc * 16 bytes.
__device__ __forceinline__ unsigned kx_smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void kx_cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(kx_smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void kx_cp4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(kx_smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void kx_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void kx_wait(int pending) {
  switch (pending) {  // wait_group takes an immediate
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
  }
}

template <class TI, class TO, class TW, bool LN, int NVS, class RED>
__device__ __forceinline__ void kx_staged_rows(NK_FWD_PARAMS, unsigned csize, unsigned crank, long long cid,
                                               long long ncl, RED& red) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr int WV = VEC * TW::SIZE / 4;
  NK_FWD_TYPED_PTRS;
  const int S = nv, T = tpr, t = (int)nk_thread_x();
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  const int nchunks = d / VEC;
  const int cpc = (int)((nchunks + csize - 1) / csize);
  const long long e0 = (long long)crank * cpc * VEC;
  const int c_end = nk_mini(cpc, nchunks - (int)crank * cpc);
  unsigned* kslot = (unsigned*)(nk_fwd_smem + 2 * nwarps + 2);
  nk_v4* stage0 = (nk_v4*)(nk_fwd_smem + ((2 * nwarps + 2 + S + 3) & ~3u));
  // weight / bias of this thread's chunks, for every row
  unsigned gw[NVS][WV], bw[NVS][WV];
#pragma unroll
  for (int i = 0; i < NVS; ++i) {
    const int c = t + i * T;
    const int n = c < c_end ? VEC : 0;
    if (Wt) nk_load_words<TW, VEC>(Wt + e0 + (long long)c * VEC, true, n, gw[i]);
    if (LN && Bs) nk_load_words<TW, VEC>(Bs + e0 + (long long)c * VEC, true, n, bw[i]);
  }
  auto issue = [&](long long j, int s) {
    const long long row = cid + j * ncl;
    if (row < rows) {
      const typename TI::S* xr = X + row * x_stride;
      nk_v4* st = stage0 + (long long)s * cpc;
#pragma unroll
      for (int i = 0; i < NVS; ++i) {
        const int c = t + i * T;
        if (c < c_end) kx_cp16(st + c, xr + e0 + (long long)c * VEC);
      }
      if (LN && t == 0) kx_cp4(kslot + s, xr);
    }
    kx_commit();
  };
  for (int s = 0; s < S - 1; ++s) issue(s, s);
  int s = 0;
  for (long long j = 0; cid + j * ncl < rows; ++j) {
    issue(j + S - 1, s == 0 ? S - 1 : s - 1);
    kx_wait(S - 1);
    const long long row = cid + j * ncl;
    // keep weight/bias packed (their unpacked floats would double the registers they take)
#pragma unroll
    for (int i = 0; i < NVS; ++i)
#pragma unroll
      for (int w = 0; w < WV; ++w) {
        nk_opaque(gw[i][w]);
        if (LN) nk_opaque(bw[i][w]);
      }
    float k = 0.0f;
    if (LN) {
      nk_barrier();  // thread 0's copy of the row's first element
      const unsigned kw = kslot[s];
      k = TI::SIZE == 4 ? nk_u2f(kw) : TI::to_f(kw & 0xffffu);
    }
    const nk_v4* st = stage0 + (long long)s * cpc;
    nk_v4 raw[NVS];
#pragma unroll
    for (int i = 0; i < NVS; ++i) {
      const int c = t + i * T;
      if (c < c_end) raw[i] = st[c];
      else raw[i].w[0] = raw[i].w[1] = raw[i].w[2] = raw[i].w[3] = 0u;
    }
    float dm = 0.0f, rs;
    const float fd = (float)d;
    if (LN) {
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < NVS; ++i) {
        float si = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) si += nk_get<TI>(raw[i].w, e) - k;
        sum += t + i * T < c_end ? si : 0.0f;
      }
      dm = red(sum) / fd;
      nk_row_opaque<NVS>(raw);
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < NVS; ++i) {
        float qi = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
          qi += c * c;
        }
        q += t + i * T < c_end ? qi : 0.0f;
      }
      rs = nk_rsqrt(red(q) / fd + eps);
    } else {
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < NVS; ++i)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float v = nk_get<TI>(raw[i].w, e);
          q += v * v;
        }
      rs = nk_rsqrt(red(q) / fd + eps);
    }
    nk_row_opaque<NVS>(raw);
    typename TO::S* yr = Y + row * y_stride + e0;
#pragma unroll
    for (int i = 0; i < NVS; ++i) {
      const int c = t + i * T;
      if (c < c_end) {
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          float v = nk_get<TI>(raw[i].w, e);
          v = LN ? ((v - k) - dm) * rs : v * rs;
          if (Wt) v *= nk_get<TW>(gw[i], e);
          if (LN && Bs) v += nk_get<TW>(bw[i], e);
          f[e] = v;
        }
        nk_store_f<TO, VEC>(yr + (long long)c * VEC, true, VEC, f);
      }
    }
    s = s + 1 == S ? 0 : s + 1;
  }
  kx_wait(0);
}

template <class TI, class TO, class TW, bool LN, int NVS>
__device__ __forceinline__ void kx_staged(NK_FWD_PARAMS) {
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride) || nv < 1 || nv > 4) nk_trap();
  const unsigned csize = nk_cluster_size(), crank = nk_cluster_rank();
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  if (csize > 1) {
    kx_red_cluster_barrier<false> red{nwarps, 0u, csize};
    kx_staged_rows<TI, TO, TW, LN, NVS>(NK_FWD_ARGS, csize, crank, nk_cluster_id_x(), nk_cluster_count_x(), red);
    nk_cluster_sync();
  } else {
    nk_red_block red{nwarps, 0u};
    kx_staged_rows<TI, TO, TW, LN, NVS>(NK_FWD_ARGS, 1u, 0u, nk_block_x(), nk_grid_dim_x(), red);
  }
}

#define KX_ST(kind, isln, ti, nvs, bounds)                                           \
  extern "C" __global__ void bounds kx_##kind##_staged##nvs##_##ti(NK_FWD_PARAMS) { \
    nk_pdl_enter();                                                                  \
    kx_staged<nk_##ti, nk_##ti, nk_##ti, isln, nvs>(NK_FWD_ARGS);                    \
  }
KX_ST(ln, true, f32, 4, NK_LAUNCH_BOUNDS(1024))
KX_ST(rms, false, f32, 4, NK_LAUNCH_BOUNDS(1024))
KX_ST(ln, true, bf16, 4, NK_LAUNCH_BOUNDS(1024))
KX_ST(rms, false, bf16, 4, NK_LAUNCH_BOUNDS(1024))
KX_ST(ln, true, f32, 8, NK_LAUNCH_BOUNDS(512))
KX_ST(rms, false, f32, 8, NK_LAUNCH_BOUNDS(512))
KX_ST(ln, true, bf16, 8, NK_LAUNCH_BOUNDS(512))
KX_ST(rms, false, bf16, 8, NK_LAUNCH_BOUNDS(512))

// ---------------------------------------------------------------- `wide2` (experiment): the `wide` mapping written
// for memory-level parallelism, as Triton's looped reductions run: every pass issues U 16-byte loads per thread
// before using any; x is re-read (from L2 when it still holds the row) by the later passes. FULL path only.
// LN: mean of x-k, centred sum of squares, output (3 passes); RMS: sum of squares, output (2 passes).
// CHAN (LN only): the statistics in one pass instead of two (`wide3`, below).
template <class TI, class TO, class TW, bool LN, int U, bool CHAN = false>
__device__ __forceinline__ void kx_wide2(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap();
  NK_FWD_TYPED_PTRS;
  const int T = (int)nk_block_dim_x(), t = (int)nk_thread_x();
  const int nchunks = d / VEC;
  const float fd = (float)d;
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TI::S* xr = X + row * x_stride;
    typename TO::S* yr = Y + row * y_stride;
    // `prefetch` > 0 (experiment): thread 0 asks L2 for the row that many rows ahead (= gridDim: this CTA's next).
    if (prefetch > 0 && t == 0 && row + prefetch < rows) nk_prefetch_l2(X + (row + prefetch) * x_stride, (long long)d * TI::SIZE);
    const float k = LN ? TI::to_f(xr[0]) : 0.0f;
    float dm = 0.0f, q = 0.0f;
    if (LN && CHAN) {
      float m = 0.0f, m2 = 0.0f;
      int n = 0;  // chunks folded in
      for (int c0 = t; c0 < nchunks; c0 += U * T) {
        nk_v4 r[U];
        nk_wide_step<TI, U, true>(xr, true, c0, T, nchunks, d, r);  // the production `wide` step, vector path
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (c0 + u * T < nchunks) {
            float f[VEC], cs = 0.0f;
#pragma unroll
            for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(r[u].w, e) - k, cs += f[e];
            const float cm = cs * (1.0f / VEC);
            float cq = 0.0f;
#pragma unroll
            for (int e = 0; e < VEC; ++e) cq += (f[e] - cm) * (f[e] - cm);
            ++n;
            const float delta = cm - m, inv = 1.0f / (float)n;  // the new chunk is 1/n of the n chunks
            m += delta * inv;
            m2 += cq + delta * delta * (float)VEC * (float)(n - 1) * inv;
          }
        }
      }
      const float cnt = (float)(n * VEC);
      dm = red(cnt * m) / fd;
      q = m2 + cnt * (m - dm) * (m - dm);
    } else if (LN) {
      float s = 0.0f;
      for (int c0 = t; c0 < nchunks; c0 += U * T) {
        nk_v4 r[U];
        nk_wide_step<TI, U, true>(xr, true, c0, T, nchunks, d, r);  // the production `wide` step, vector path
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < VEC; ++e) s += c0 + u * T < nchunks ? nk_get<TI>(r[u].w, e) - k : 0.0f;
      }
      dm = red(s) / fd;
      for (int c0 = t; c0 < nchunks; c0 += U * T) {
        nk_v4 r[U];
        nk_wide_step<TI, U, true>(xr, true, c0, T, nchunks, d, r);  // the production `wide` step, vector path
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float cc = (nk_get<TI>(r[u].w, e) - k) - dm;
            q += c0 + u * T < nchunks ? cc * cc : 0.0f;
          }
      }
    } else {
      for (int c0 = t; c0 < nchunks; c0 += U * T) {
        nk_v4 r[U];
        nk_wide_step<TI, U, true>(xr, true, c0, T, nchunks, d, r);  // the production `wide` step, vector path
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float v = nk_get<TI>(r[u].w, e);
            q += v * v;
          }
      }
    }
    const float rs = nk_rsqrt(red(q) / fd + eps);
    constexpr int WV = VEC * TW::SIZE / 4;
    for (int c0 = t; c0 < nchunks; c0 += U * T) {
      nk_v4 r[U];
      unsigned g[U][WV], bb[U][WV];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * T, n = c < nchunks ? VEC : 0;
        nk_load_words<TI, VEC>(xr + (long long)c * VEC, true, n, r[u].w);
        if (Wt) nk_load_words<TW, VEC>(Wt + (long long)c * VEC, true, n, g[u]);
        if (LN && Bs) nk_load_words<TW, VEC>(Bs + (long long)c * VEC, true, n, bb[u]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * T;
        if (c < nchunks) {
          float f[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            float v = nk_get<TI>(r[u].w, e);
            v = LN ? ((v - k) - dm) * rs : v * rs;
            if (Wt) v *= nk_get<TW>(g[u], e);
            if (LN && Bs) v += nk_get<TW>(bb[u], e);
            f[e] = v;
          }
          nk_store_f<TO, VEC>(yr + (long long)c * VEC, true, VEC, f);
        }
      }
    }
  }
}
#define KX_W2(kind, isln, ti, u, bounds)                                           \
  extern "C" __global__ void bounds kx_##kind##_wide2u##u##_##ti(NK_FWD_PARAMS) { \
    nk_pdl_enter();                                                                \
    kx_wide2<nk_##ti, nk_##ti, nk_##ti, isln, u>(NK_FWD_ARGS);                     \
  }
KX_W2(ln, true, f32, 2, NK_LAUNCH_BOUNDS(1024))
KX_W2(rms, false, f32, 2, NK_LAUNCH_BOUNDS(1024))
KX_W2(ln, true, bf16, 2, NK_LAUNCH_BOUNDS(1024))
KX_W2(rms, false, bf16, 2, NK_LAUNCH_BOUNDS(1024))
KX_W2(ln, true, f32, 4, NK_LAUNCH_BOUNDS(1024))
KX_W2(rms, false, f32, 4, NK_LAUNCH_BOUNDS(1024))
KX_W2(ln, true, bf16, 4, NK_LAUNCH_BOUNDS(1024))
KX_W2(rms, false, bf16, 4, NK_LAUNCH_BOUNDS(1024))

// `wide3` (experiment): LayerNorm's `wide` in two passes, kx_wide2 with CHAN. The statistics pass keeps
// per-thread (count, mean, M2) of x-k, folding in one chunk at a time with Chan's update (the chunk's own mean
// and centred sum of squares come from registers, so nothing is E[x^2]-E[x]^2); the block then reduces n*mean
// (the row's mean) and M2 + n*(mean-row mean)^2 (the centred sum of squares, by the parallel-axis theorem).
#define KX_W3(ti, u)                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(1024) kx_ln_wide3u##u##_##ti(NK_FWD_PARAMS) { \
    nk_pdl_enter();                                                                         \
    kx_wide2<nk_##ti, nk_##ti, nk_##ti, true, u, true>(NK_FWD_ARGS);                        \
  }
KX_W3(f32, 2)
KX_W3(f32, 4)
KX_W3(bf16, 2)
KX_W3(bf16, 4)

// ---------------------------------------------------------------- small-batch latency (issue 5), block mapping
// One row per block, nv <= P chunks per thread (P = 4), the whole row in registers. M selects what changes:
//   M = 6: weight/bias chunks loaded right after the x loads (before the reductions), two reductions (LN);
//   M = 7: M6 and LN's statistics in one block reduction: per-thread (count, mean, M2) from registers, combined
//          with Chan's pairwise formula (symmetric, so the xor butterfly leaves every lane bitwise equal);
//   M = 8: M6 and LN's two sums about k (sum v, sum v^2) in one nk_block_sum2; the centred second pass only
//          when the row is ill-conditioned for that (dm^2 > 16 var), a uniform branch.
//   M = 9: M7 without the early weight/bias loads (the reduction change alone).
struct kx_chan { float n, m, q; };
__device__ __forceinline__ kx_chan kx_chan_comb(kx_chan a, kx_chan b) {
  const float n = __fadd_rn(a.n, b.n);
  if (n == 0.0f) return a;
  const float inv = __fdiv_rn(1.0f, n);
  const float m = __fmul_rn(__fadd_rn(__fmul_rn(a.n, a.m), __fmul_rn(b.n, b.m)), inv);
  const float dl = __fsub_rn(b.m, a.m);
  const float q = __fadd_rn(__fadd_rn(a.q, b.q), __fmul_rn(__fmul_rn(dl, dl), __fmul_rn(__fmul_rn(a.n, b.n), inv)));
  return kx_chan{n, m, q};
}
__device__ __forceinline__ kx_chan kx_chan_warp(kx_chan c) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) {
    kx_chan o{nk_shfl_xor(c.n, s), nk_shfl_xor(c.m, s), nk_shfl_xor(c.q, s)};
    c = kx_chan_comb(c, o);
  }
  return c;
}

template <class TI, class TO, class TW, bool LN, int P, int M>
__device__ __forceinline__ void kx_lat(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr int WV = VEC * TW::SIZE / 4;
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride) || nv > P) nk_trap();
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE, lane = nk_lane(), wid = nk_thread_x() / NK_WARP_SIZE;
  const int nchunks = d / VEC;
  const float fd = (float)d;
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TI::S* xr = X + row * x_stride;
    typename TO::S* yr = Y + row * y_stride;
    const float k = LN ? TI::to_f(xr[0]) : 0.0f;
#define KX_OWN(i) ((i) < nv && t + (i) * tpr < nchunks)
    nk_v4 raw[P];
    unsigned gw[P][WV], bw[P][WV];
#pragma unroll
    for (int i = 0; i < P; ++i)
      nk_load_words<TI, VEC>(xr + (long long)(t + i * tpr) * VEC, true, KX_OWN(i) ? VEC : 0, raw[i].w);
    if (M != 9) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const long long off = (long long)(t + i * tpr) * VEC;
        if (Wt) nk_load_words<TW, VEC>(Wt + off, true, KX_OWN(i) ? VEC : 0, gw[i]);
        if (LN && Bs) nk_load_words<TW, VEC>(Bs + off, true, KX_OWN(i) ? VEC : 0, bw[i]);
      }
    }
    float dm = 0.0f, rs;
    if (LN && M == 6) {
      nk_red_block red{nwarps, 0u};
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        float si = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) si += nk_get<TI>(raw[i].w, e) - k;
        s += KX_OWN(i) ? si : 0.0f;
      }
      dm = red(s) / fd;
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        float qi = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
          qi += c * c;
        }
        q += KX_OWN(i) ? qi : 0.0f;
      }
      rs = nk_rsqrt(red(q) / fd + eps);
    } else if (LN && (M == 7 || M == 9)) {
      float s = 0.0f, cnt = 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        float si = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) si += nk_get<TI>(raw[i].w, e) - k;
        s += KX_OWN(i) ? si : 0.0f;
        cnt += KX_OWN(i) ? (float)VEC : 0.0f;
      }
      const float lm = cnt > 0.0f ? s / cnt : 0.0f;
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        float qi = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float c = (nk_get<TI>(raw[i].w, e) - k) - lm;
          qi += c * c;
        }
        q += KX_OWN(i) ? qi : 0.0f;
      }
      kx_chan c = kx_chan_warp(kx_chan{cnt, lm, q});
      float* buf = nk_fwd_smem;
      if (lane == 0) buf[wid] = c.n, buf[nwarps + wid] = c.m, buf[2 * nwarps + wid] = c.q;
      nk_barrier();
      kx_chan r = lane < nwarps ? kx_chan{buf[lane], buf[nwarps + lane], buf[2 * nwarps + lane]} : kx_chan{0.0f, 0.0f, 0.0f};
      r = kx_chan_warp(r);
      dm = r.m;
      rs = nk_rsqrt(r.q / fd + eps);
    } else if (LN && M == 8) {
      float s = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        float si = 0.0f, qi = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float v = nk_get<TI>(raw[i].w, e) - k;
          si += v;
          qi += v * v;
        }
        s += KX_OWN(i) ? si : 0.0f;
        s2 += KX_OWN(i) ? qi : 0.0f;
      }
      nk_block_sum2(s, s2, nk_fwd_smem);
      dm = s / fd;
      float var = s2 / fd - dm * dm;
      if (!(dm * dm <= 16.0f * var)) {  // ill-conditioned (or NaN): the centred pass
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < P; ++i) {
          float qi = 0.0f;
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
            qi += c * c;
          }
          q += KX_OWN(i) ? qi : 0.0f;
        }
        var = nk_block_sum(q, nk_fwd_smem + 2 * nwarps) / fd;
      }
      rs = nk_rsqrt(var + eps);
    } else {
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float v = nk_get<TI>(raw[i].w, e);
          q += v * v;
        }
      rs = nk_rsqrt(nk_block_sum(q, nk_fwd_smem) / fd + eps);
    }
    if (M == 9) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const long long off = (long long)(t + i * tpr) * VEC;
        if (Wt) nk_load_words<TW, VEC>(Wt + off, true, KX_OWN(i) ? VEC : 0, gw[i]);
        if (LN && Bs) nk_load_words<TW, VEC>(Bs + off, true, KX_OWN(i) ? VEC : 0, bw[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (KX_OWN(i)) {
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i].w, e);
        nk_apply_words<TW, LN, VEC>(f, Wt != nullptr, gw[i], LN && Bs, bw[i], k, dm, rs);
        nk_store_f<TO, VEC>(yr + (long long)(t + i * tpr) * VEC, true, VEC, f);
      }
    }
#undef KX_OWN
    nk_barrier();  // the reduction buffers are reused by the next row
  }
}
#define KX_LAT(kind, isln, ti, m)                                                                           \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(512) kx_##kind##_lat_##ti##_v##m(NK_FWD_PARAMS) {       \
    nk_pdl_enter();                                                                                          \
    kx_lat<nk_##ti, nk_##ti, nk_##ti, isln, 4, m>(NK_FWD_ARGS);                                              \
  }
KX_LAT(ln, true, f32, 6)
KX_LAT(ln, true, f32, 7)
KX_LAT(ln, true, f32, 8)
KX_LAT(ln, true, f32, 9)
KX_LAT(rms, false, f32, 6)
KX_LAT(ln, true, bf16, 6)
KX_LAT(ln, true, bf16, 7)
KX_LAT(ln, true, bf16, 8)
KX_LAT(ln, true, bf16, 9)
KX_LAT(rms, false, bf16, 6)

// v10 (rows): the `rows` kernel (nk_fwd_rows, FULL path) without ONEPASS, compiled here: the baseline of v14. (v11, LayerNorm's
// shift k shuffled from the row's first lane instead of loaded, ran in results/kexp/2026-11-30-run17*; not kept.)
// The production mapping `map`'s template (FULL path) compiled here as variant v, with the template arguments after
// FULL given (v10, v14, v16-v19).
#define KX_PROD(bounds, kind, isln, ti, map, v, ...)                                          \
  extern "C" __global__ void bounds kx_##kind##_##map##_##ti##_v##v(NK_FWD_PARAMS) {         \
    nk_pdl_enter();                                                                             \
    nk_fwd_##map<nk_##ti, nk_##ti, nk_##ti, isln, true, __VA_ARGS__>(NK_FWD_ARGS);             \
  }
KX_PROD(NK_LAUNCH_BOUNDS_MIN(256, 4), ln, true, f32, rows, 10, false)
KX_PROD(NK_LAUNCH_BOUNDS_MIN(256, 4), ln, true, bf16, rows, 10, false)

// v12 / v13 (rows, FULL, rows of n = d / VEC chunks with n a power of two <= 32; other rows: returns, nothing written):
// a warp tile of M * 32 / n consecutive rows. Load i of a lane reads chunk l % n of row i * (32 / n) + l / n, so each
// warp load is 512 contiguous bytes of back-to-back rows (the `rows` mapping's loads touch 32 / tpr rows per
// instruction in pieces of tpr * 16 bytes), and a lane's weight/bias chunk is the same for every row: loaded once,
// held in registers. The row sums are M shuffle trees over n lanes. v12: M = 8 (3 CTAs of 256 per SM: 80 registers),
// v13: M = 4 (4 CTAs, 64 registers).
template <class TI, class TO, class TW, bool LN, int M, bool SHIFT = true, bool CORR = false>
__device__ __forceinline__ void kx_tile(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr int WV = VEC * TW::SIZE / 4;
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap();
  const int n = d / VEC;
  if (n < 1 || n > 32 || (n & (n - 1))) return;
  NK_FWD_TYPED_PTRS;
  const int lg = nk_log2_pow2(n);
  const int lane = (int)nk_lane(), c = lane & (n - 1), sub = lane >> lg;
  const int rpi = 32 >> lg;
  const long long rpw = (long long)rpi * M;
  const long long wpb = nk_block_dim_x() / 32, warp = nk_thread_x() / 32;
  unsigned ew[WV], eb[WV];
  if (Wt) nk_load_words<TW, VEC>(Wt + c * VEC, true, VEC, ew);
  if (LN && Bs) nk_load_words<TW, VEC>(Bs + c * VEC, true, VEC, eb);
  const float fd = (float)d;
  for (long long base = ((long long)nk_block_x() * wpb + warp) * rpw; base < rows;
       base += (long long)nk_grid_dim_x() * wpb * rpw) {
    if (prefetch > 0 && lane == 0 && x_stride == d && base + prefetch < rows)
      nk_prefetch_l2(X + (base + prefetch) * x_stride,
                     (long long)d * TI::SIZE * (rows - base - prefetch < rpw ? rows - base - prefetch : rpw));
    nk_v4 raw[M];
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const long long row = base + i * rpi + sub;
      nk_load_words<TI, VEC>(X + row * x_stride + c * VEC, true, row < rows ? VEC : 0, raw[i].w);
    }
    float k[M], dm[M], rs[M];
#pragma unroll
    for (int j = 0; j < WV; ++j) nk_opaque(ew[j]), nk_opaque(eb[j]);  // unpacked per use, not held as floats
#pragma unroll
    for (int i = 0; i < M; ++i) {
      k[i] = LN && SHIFT ? nk_shfl_idx(nk_get<TI>(raw[i].w, 0), lane & ~(n - 1)) : 0.0f;
      float s = 0.0f;
      if (LN) {
        s = nk_get<TI>(raw[i].w, 0) - k[i];
#pragma unroll
        for (int e = 1; e < VEC; ++e) s += nk_get<TI>(raw[i].w, e) - k[i];
      }
      dm[i] = s;
    }
    if (LN) {
#pragma unroll
      for (int m = 16; m > 0; m >>= 1)
        if (m < n)
#pragma unroll
          for (int i = 0; i < M; ++i) dm[i] += nk_shfl_xor(dm[i], m);
#pragma unroll
      for (int i = 0; i < M; ++i) dm[i] /= fd;
    }
    nk_row_opaque<M>(raw);
    float cs[M];
#pragma unroll
    for (int i = 0; i < M; ++i) {
      float q = 0.0f, c1 = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float v = LN ? (nk_get<TI>(raw[i].w, e) - k[i]) - dm[i] : nk_get<TI>(raw[i].w, e);
        q += v * v;
        if (CORR) c1 += v;
      }
      rs[i] = q;
      cs[i] = c1;
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
      if (m < n)
#pragma unroll
        for (int i = 0; i < M; ++i) {
          rs[i] += nk_shfl_xor(rs[i], m);
          if (CORR) cs[i] += nk_shfl_xor(cs[i], m);
        }
    if (CORR) {  // the corrected two-pass: dm refined by the mean deviation, the variance less its square
#pragma unroll
      for (int i = 0; i < M; ++i) {
        const float e1 = cs[i] / fd;
        dm[i] += e1;
        rs[i] = fmaxf(rs[i] - cs[i] * e1, 0.0f);
      }
    }
    nk_row_opaque<M>(raw);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      rs[i] = nk_rsqrt(rs[i] / fd + eps);
      const long long row = base + i * rpi + sub;
      if (row < rows) {
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i].w, e);
        nk_apply_words<TW, LN, VEC>(f, Wt != nullptr, ew, LN && Bs, eb, k[i], dm[i], rs[i]);
        nk_store_f<TO, VEC>(Y + row * y_stride + c * VEC, true, VEC, f);
      }
    }
  }
}
#define KX_TILE(kind, isln, ti)                                                                                 \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 3) kx_##kind##_rows_##ti##_v12(NK_FWD_PARAMS) {     \
    nk_pdl_enter();                                                                                             \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, isln, 8>(NK_FWD_ARGS);                                                 \
  }                                                                                                             \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 4) kx_##kind##_rows_##ti##_v13(NK_FWD_PARAMS) {     \
    nk_pdl_enter();                                                                                             \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, isln, 4>(NK_FWD_ARGS);                                                 \
  }
KX_TILE(ln, true, f32)
KX_TILE(ln, true, bf16)
// v20-v24 (rows, LayerNorm): the v12/v13 tile nearer to torch.compile's Triton kernel for LN bf16 D=128 (2 rows per
// thread, 32 registers, 92% occupancy), and without the shift k (plain mean, then the centred sum): v20 M = 2 with k,
// v21 M = 2 without (both 40 registers, 6 CTAs per SM: at 32 they spill), v22 M = 4 without (4 CTAs), v23 M = 1
// without (32 registers, 8 CTAs), v24 M = 4 without at 48 registers (5 CTAs).
#define KX_TILE2(ti)                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 6) kx_ln_rows_##ti##_v20(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 2, true>(NK_FWD_ARGS);                                      \
  }                                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 6) kx_ln_rows_##ti##_v21(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 2, false>(NK_FWD_ARGS);                                     \
  }                                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 4) kx_ln_rows_##ti##_v22(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 4, false>(NK_FWD_ARGS);                                     \
  }                                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 8) kx_ln_rows_##ti##_v23(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 1, false>(NK_FWD_ARGS);                                     \
  }                                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_##ti##_v24(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 4, false>(NK_FWD_ARGS);                                     \
  }                                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_##ti##_v25(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 4, false, true>(NK_FWD_ARGS);                               \
  }                                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 6) kx_ln_rows_##ti##_v26(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 2, false, true>(NK_FWD_ARGS);                               \
  }                                                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 4) kx_ln_rows_##ti##_v27(NK_FWD_PARAMS) {        \
    kx_tile<nk_##ti, nk_##ti, nk_##ti, true, 4, false, true>(NK_FWD_ARGS);                               \
  }
KX_TILE2(f32)
KX_TILE2(bf16)
// v28 / v29 (rows, LayerNorm, 16-bit x): the production tile nk_fwd_rowstile (nk_ln_rowstile_*) compiled here, with and
// without nk_pdl_enter(); v30: v24 with nk_pdl_enter() (where do v24's 94.7 and the op's 93.0 part?).
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v28(NK_FWD_PARAMS) {
  nk_pdl_enter();
  nk_fwd_rowstile<nk_bf16, nk_bf16, nk_bf16, true, true>(NK_FWD_ARGS);
}
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v29(NK_FWD_PARAMS) {
  nk_fwd_rowstile<nk_bf16, nk_bf16, nk_bf16, true, true>(NK_FWD_ARGS);
}
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v30(NK_FWD_PARAMS) {
  nk_pdl_enter();
  kx_tile<nk_bf16, nk_bf16, nk_bf16, true, 4, false>(NK_FWD_ARGS);
}
// v31-v33 (rows, LayerNorm, 16-bit x): a copy of the production tile (nk_fwd_rowstile, LayerNorm, 16-bit x: no
// shift) without its per-row statistics stores (v31), without its entry checks (v32), without both (v33), with the stores after y's behind one uniform test (v34), in place behind it (v35), both loops in one kernel (v36): which part
// of it costs the 1.3-1.6 points between the op (v28) and v24?
template <class TI, class TO, class TW, int STATS, bool CHECK>  // STATS 0: none, 1: as production, 2: after the y stores, 3: a uniform test first
__device__ __forceinline__ void kx_prodtile(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr int WV = VEC * TW::SIZE / 4;
  constexpr bool LN = true;
  const int n = d / VEC;
  if (CHECK) {
    nk_check_wave();
    if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride) || n < 1 || n > 32 ||
        (n & (n - 1)) || (nk_block_dim_x() & 31u))
      nk_trap();
  }
  NK_FWD_TYPED_PTRS;
  const int lg = nk_log2_pow2(n);
  const int lane = (int)(nk_thread_x() & 31u), c = lane & (n - 1), sub = lane >> lg;
  const int rpi = 32 >> lg;
  const long long rpg = (long long)rpi * NK_TILE_M;
  const long long groups = nk_block_dim_x() >> 5, group = nk_thread_x() >> 5;
  unsigned ew[WV] = {}, eb[WV] = {};
  if (Wt) nk_load_words<TW, VEC>(Wt + c * VEC, true, VEC, ew);
  if (Bs) nk_load_words<TW, VEC>(Bs + c * VEC, true, VEC, eb);
  const float fd = (float)d;
  const bool contiguous = x_stride == d, stats = mean != nullptr || rstd != nullptr;
  for (long long base = ((long long)nk_block_x() * groups + group) * rpg; base < rows;
       base += (long long)nk_grid_dim_x() * groups * rpg) {
    if (prefetch > 0 && contiguous && lane == 0) nk_prefetch_ahead<TI>(X, base + prefetch, (int)rpg, rows, d, x_stride);
    nk_v4 raw[NK_TILE_M];
#pragma unroll
    for (int i = 0; i < NK_TILE_M; ++i) {
      const long long row = base + i * rpi + sub;
      nk_load_words<TI, VEC>(X + row * x_stride + c * VEC, true, row < rows ? VEC : 0, raw[i].w);
    }
#pragma unroll
    for (int j = 0; j < WV; ++j) {
      nk_opaque(ew[j]);
      nk_opaque(eb[j]);
    }
    float dm[NK_TILE_M], rs[NK_TILE_M];
#pragma unroll
    for (int i = 0; i < NK_TILE_M; ++i) {
      float s = nk_get<TI>(raw[i].w, 0);
#pragma unroll
      for (int e = 1; e < VEC; ++e) s += nk_get<TI>(raw[i].w, e);
      dm[i] = s;
    }
    nk_tile_sum(dm, n);
#pragma unroll
    for (int i = 0; i < NK_TILE_M; ++i) dm[i] /= fd;
    nk_row_opaque<NK_TILE_M>(raw);
#pragma unroll
    for (int i = 0; i < NK_TILE_M; ++i) {
      float q = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float v = nk_get<TI>(raw[i].w, e) - dm[i];
        q += v * v;
      }
      rs[i] = q;
    }
    nk_tile_sum(rs, n);
    nk_row_opaque<NK_TILE_M>(raw);
#pragma unroll
    for (int i = 0; i < NK_TILE_M; ++i) {
      rs[i] = nk_rsqrt(rs[i] / fd + eps);
      const long long row = base + i * rpi + sub;
      if (row < rows) {
        if (STATS == 1 && c == 0) {
          if (mean) mean[row] = dm[i];
          if (rstd) rstd[row] = rs[i];
        }
        if (STATS == 3 && stats) {
          if (c == 0 && mean) mean[row] = dm[i];
          if (c == 0 && rstd) rstd[row] = rs[i];
        }
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i].w, e);
        nk_apply_words<TW, true, VEC>(f, Wt != nullptr, ew, Bs != nullptr, eb, 0.0f, dm[i], rs[i]);
        nk_store_f<TO, VEC>(Y + row * y_stride + c * VEC, true, VEC, f);
      }
    }
    if (STATS == 2 && stats && c == 0) {
#pragma unroll
      for (int i = 0; i < NK_TILE_M; ++i) {
        const long long row = base + i * rpi + sub;
        if (row < rows) {
          if (mean) mean[row] = dm[i];
          if (rstd) rstd[row] = rs[i];
        }
      }
    }
  }
}
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v31(NK_FWD_PARAMS) {
  nk_pdl_enter();
  kx_prodtile<nk_bf16, nk_bf16, nk_bf16, 0, true>(NK_FWD_ARGS);
}
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v32(NK_FWD_PARAMS) {
  nk_pdl_enter();
  kx_prodtile<nk_bf16, nk_bf16, nk_bf16, 1, false>(NK_FWD_ARGS);
}
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v33(NK_FWD_PARAMS) {
  nk_pdl_enter();
  kx_prodtile<nk_bf16, nk_bf16, nk_bf16, 0, false>(NK_FWD_ARGS);
}
// v34: the statistics stored after the row's y stores, behind one uniform test (mean or rstd given), entry checks kept.
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v34(NK_FWD_PARAMS) {
  nk_pdl_enter();
  kx_prodtile<nk_bf16, nk_bf16, nk_bf16, 2, true>(NK_FWD_ARGS);
}
// v36: one kernel, two copies of the loop: with the statistics (as production) where mean or rstd is given, without
// (v31) otherwise.
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v36(NK_FWD_PARAMS) {
  nk_pdl_enter();
  if (mean != nullptr || rstd != nullptr)
    kx_prodtile<nk_bf16, nk_bf16, nk_bf16, 1, true>(NK_FWD_ARGS);
  else
    kx_prodtile<nk_bf16, nk_bf16, nk_bf16, 0, true>(NK_FWD_ARGS);
}
// v35: the statistics stored where production stores them, behind the uniform test first (then c == 0).
extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(256, 5) kx_ln_rows_bf16_v35(NK_FWD_PARAMS) {
  nk_pdl_enter();
  kx_prodtile<nk_bf16, nk_bf16, nk_bf16, 3, true>(NK_FWD_ARGS);
}
KX_TILE(rms, false, f32)
KX_TILE(rms, false, bf16)

// v14 (rows): the production `rows` kernel with LayerNorm's statistics in one pass where every row of the warp allows
// it (ONEPASS in nk_row_cached; rows of more than 2 lanes).
KX_PROD(NK_LAUNCH_BOUNDS_MIN(256, 4), ln, true, f32, rows, 14, true)
KX_PROD(NK_LAUNCH_BOUNDS_MIN(256, 4), ln, true, bf16, rows, 14, true)

// v16 (block): the `block` kernel with LayerNorm's statistics in one pass (ONEPASS; the row is the block, so every
// thread takes the same branch); v17: without (the baseline, compiled here).
KX_PROD(NK_LAUNCH_BOUNDS(1024), ln, true, f32, block, 16, NK_MAXV_BLOCK, false, true)
KX_PROD(NK_LAUNCH_BOUNDS(1024), ln, true, f32, block, 17, NK_MAXV_BLOCK, false, false)
KX_PROD(NK_LAUNCH_BOUNDS(1024), ln, true, bf16, block, 16, NK_MAXV_BLOCK, false, true)
KX_PROD(NK_LAUNCH_BOUNDS(1024), ln, true, bf16, block, 17, NK_MAXV_BLOCK, false, false)

// v18 / v19 (cluster): the production `cluster` kernel with (v18) and without (v19, the baseline compiled here)
// LayerNorm's statistics in one pass (ONEPASS: both sums in one cluster exchange, a second only for ill-conditioned rows).
KX_PROD(NK_LAUNCH_BOUNDS_MIN(512, 2), ln, true, f32, cluster, 18, true)
KX_PROD(NK_LAUNCH_BOUNDS_MIN(512, 2), ln, true, f32, cluster, 19, false)
KX_PROD(NK_LAUNCH_BOUNDS_MIN(512, 2), ln, true, bf16, cluster, 18, true)
KX_PROD(NK_LAUNCH_BOUNDS_MIN(512, 2), ln, true, bf16, cluster, 19, false)

// v37 / v38 / v39 (block): the production `block` kernel (FULL, ONEPASS) with LayerNorm's weight/bias loaded in groups
// of G = 2 / 4 / 8 chunks in the output loop (nk_row_cached's G; production LayerNorm has G = 1: a chunk's weight/bias
// load waits for the previous chunk's y store, so a row pays NK_MAXV_BLOCK serial L2 round trips, which one 1024-thread
// block per SM (f32 D = 32768, 16-bit D = 65536) cannot hide behind another block; RMSNorm has G = 4 there and runs at
// 95 where LayerNorm runs at 87). Same sums in the same order as production: the same bits.
template <class TI, bool LN, int G>
NK_INLINE void kx_fwd_block_g(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  typedef TI TO;
  typedef TI TW;
  if ((unsigned)tpr != nk_block_dim_x() || nv < 1 || nv > NK_MAXV_BLOCK || (long long)nv * tpr * VEC < d) nk_trap();
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    if (prefetch > 0 && t == 0) nk_prefetch_ahead<TI>(X, row + prefetch, 1, rows, d, x_stride);
    const float k = LN ? TI::to_f(X[row * x_stride]) : 0.0f;
    nk_row_cached<TI, TO, TW, LN, NK_MAXV_BLOCK, true, nk_red_block, G, false, NK_ONEPASS>(
        X + row * x_stride, Y + row * y_stride, Wt, Bs, d, t, tpr, nchunks, nv, (float)d, eps, k, red,
        (t == 0 && LN && mean) ? mean + row : nullptr, (t == 0 && rstd) ? rstd + row : nullptr);
  }
}
#define KX_BLOCK_G(ti, v, g)                                                                     \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(1024) kx_ln_block_##ti##_v##v(NK_FWD_PARAMS) {  \
    nk_pdl_enter();                                                                              \
    kx_fwd_block_g<nk_##ti, true, g>(NK_FWD_ARGS);                                              \
  }
KX_BLOCK_G(f32, 37, 2)
KX_BLOCK_G(f32, 38, 4)
KX_BLOCK_G(f32, 39, 8)
KX_BLOCK_G(bf16, 37, 2)
KX_BLOCK_G(bf16, 38, 4)
KX_BLOCK_G(bf16, 39, 8)

// v40 / v41 (block, rows of 128 KB: 8 < nv <= 16 chunks per thread at 512 threads): LayerNorm's and RMSNorm's row split
// between registers and shared memory so that two 512-thread blocks fit an SM (64 registers; 64 KB of shared memory
// each), where the production kernel runs one 1024-thread block per SM (LN f32 D = 32768 89%, RMS 95%). Thread t owns
// chunks t + i * 512: i < 8 in registers (ld.global), i >= 8 in its own shared-memory slots, copied there by cp.async
// (no registers, no barrier: a thread reads only what it copied). Statistics as production's ONEPASS (the centred pass
// where |mean| > 3 std); weight/bias loaded G chunks at a time (v40: G = 1, as production LayerNorm; v41: G = 2).
// Launch: block 512, tpr 512, nv = D / VEC / 512, dynamic shared memory 256 + 512 * 8 * 16 bytes. Not the production
// reduction tree (512 threads, not 1024): the output differs from production's in the last bits; kexp.ts reports the
// largest relative difference.
NK_INLINE void kx_cp_async16(void* smem, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(nk_smem_addr(smem)), "l"(g) : "memory");
}
template <class TI, bool LN, int G, int NR = 8, int NS = 8>
NK_INLINE void kx_fwd_block_smem(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE, WV = VEC * TI::SIZE / 4;
  typedef TI TO;
  typedef TI TW;
  const int T = (int)nk_block_dim_x();
  if (tpr != T || nv <= NR || nv > NR + NS || (long long)nv * T * VEC != d) nk_trap();
  NK_FWD_TYPED_PTRS;
  int t = (int)nk_thread_x();
  const int ns = nv - NR;
  const float fd = (float)d;
  nk_red_block red{(unsigned)T / NK_WARP_SIZE, 0u};
  nk_v4* stage = (nk_v4*)(nk_fwd_smem + 64);  // after nk_red_block's two buffers of up to 32 floats
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TI::S* xr = X + row * x_stride;
    typename TO::S* yr = Y + row * y_stride;
    if (prefetch > 0 && t == 0) nk_prefetch_ahead<TI>(X, row + prefetch, 1, rows, d, x_stride);
#pragma unroll
    for (int j = 0; j < NS; ++j)
      if (j < ns) kx_cp_async16(&stage[j * T + t], xr + (long long)(t + (NR + j) * T) * VEC);
    asm volatile("cp.async.commit_group;" ::: "memory");
    nk_v4 raw[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) nk_load_words<TI, VEC>(xr + (long long)(t + i * T) * VEC, true, VEC, raw[i].w);
    const float k = LN ? TI::to_f(xr[0]) : 0.0f;
    float s = 0.0f, q = 0.0f;
#pragma unroll
    for (int i = 0; i < NR; ++i)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float te = nk_get<TI>(raw[i].w, e) - k;
        s += te;
        q = nk_fma(te, te, q);
      }
    asm volatile("cp.async.wait_all;" ::: "memory");
#pragma unroll
    for (int j = 0; j < NS; ++j)
      if (j < ns) {
        const nk_v4 v = stage[j * T + t];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float te = nk_get<TI>(v.w, e) - k;
          s += te;
          q = nk_fma(te, te, q);
        }
      }
    float dm = 0.0f, rs;
    if (LN) {
      red.pair(s, q);
      dm = s / fd;
      const float v1 = q / fd - dm * dm;
      rs = nk_rsqrt(v1 + eps);
      if (!(dm * dm <= 9.0f * v1 && q <= 3.4028235e38f)) {  // the same totals in every thread: uniform
        float c2 = 0.0f;
#pragma unroll
        for (int i = 0; i < NR; ++i)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
            c2 += c * c;
          }
#pragma unroll
        for (int j = 0; j < NS; ++j)
          if (j < ns) {
            const nk_v4 v = stage[j * T + t];
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const float c = (nk_get<TI>(v.w, e) - k) - dm;
              c2 += c * c;
            }
          }
        rs = nk_rsqrt(red(c2) / fd + eps);
      }
    } else {
      rs = nk_rsqrt(red(q) / fd + eps);
    }
    if (t == 0 && LN && mean) mean[row] = k + dm;
    if (t == 0 && rstd) rstd[row] = rs;
    nk_opaque(t);
#pragma unroll
    for (int g = 0; g < NR + NS; g += G) {
      unsigned gw[G][WV], bw[G][WV];
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const long long off = (long long)(t + (g + u) * T) * VEC;
        const bool on = g + u < NR + ns;
        if (Wt) nk_load_words<TW, VEC>(Wt + off, true, on ? VEC : 0, gw[u]);
        if (LN && Bs) nk_load_words<TW, VEC>(Bs + off, true, on ? VEC : 0, bw[u]);
      }
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const int i = g + u;
        if (i < NR + ns) {
          const long long off = (long long)(t + i * T) * VEC;
          float f[VEC];
          if (i < NR) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i < NR ? i : 0].w, e);
          } else {
            const nk_v4 v = stage[(i - NR) * T + t];
#pragma unroll
            for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(v.w, e);
          }
          nk_apply_words<TW, LN, VEC>(f, Wt != nullptr, gw[u], LN && Bs != nullptr, bw[u], k, dm, rs);
          nk_store_f<TO, VEC>(yr + off, true, VEC, f);
        }
      }
    }
  }
}
#define KX_BLOCK_SMEM(kind, isln, ti, v, g)                                                          \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(512, 2) kx_##kind##_block_##ti##_v##v(NK_FWD_PARAMS) { \
    nk_pdl_enter();                                                                                    \
    kx_fwd_block_smem<nk_##ti, isln, g>(NK_FWD_ARGS);                                                 \
  }
KX_BLOCK_SMEM(ln, true, f32, 40, 1)
KX_BLOCK_SMEM(ln, true, f32, 41, 2)
KX_BLOCK_SMEM(ln, true, bf16, 40, 1)
KX_BLOCK_SMEM(ln, true, bf16, 41, 2)
KX_BLOCK_SMEM(rms, false, f32, 40, 1)
KX_BLOCK_SMEM(rms, false, f32, 41, 2)
KX_BLOCK_SMEM(rms, false, bf16, 40, 1)
KX_BLOCK_SMEM(rms, false, bf16, 41, 2)

// v51 / v52: v40 / v41 at 1024 threads, one block per SM, for the rows of 256 KB (f32 D = 65536, 16-bit D = 131072)
// that the plan sends to a cluster of 8 CTAs (66-81% of copy): 8 chunks per thread in registers, up to 8 in its own
// shared-memory slots (128 KB), no cluster exchange. RMSNorm in this split at 128 KB rows ran within 1 point of the
// register-only block (v41 94.6 against 95.4). Launch: block 1024, tpr 1024, nv = D / VEC / 1024, grid = rows or a
// persistent grid, dynamic shared memory 256 + 1024 * (nv - 8) * 16 bytes.
// v53 / v54: G = 2 with fewer chunks in registers (6 / 4) and the rest (10 / 12: 160 / 192 KB) in shared memory, so that
// LayerNorm's 16-bit row (v51/v52 spill 144-204 bytes) has registers to spare. Shared memory 256 + 1024 * (nv - NR) * 16.
#define KX_BLOCK_SMEM1024(kind, isln, ti, v, g, nr)                                                   \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(1024) kx_##kind##_cluster_##ti##_v##v(NK_FWD_PARAMS) {   \
    nk_pdl_enter();                                                                                    \
    kx_fwd_block_smem<nk_##ti, isln, g, nr, 16 - nr>(NK_FWD_ARGS);                                    \
  }
KX_BLOCK_SMEM1024(ln, true, f32, 51, 1, 8)
KX_BLOCK_SMEM1024(ln, true, f32, 52, 2, 8)
KX_BLOCK_SMEM1024(ln, true, f32, 53, 2, 6)
KX_BLOCK_SMEM1024(ln, true, f32, 54, 2, 4)
KX_BLOCK_SMEM1024(ln, true, bf16, 51, 1, 8)
KX_BLOCK_SMEM1024(ln, true, bf16, 52, 2, 8)
KX_BLOCK_SMEM1024(ln, true, bf16, 53, 2, 6)
KX_BLOCK_SMEM1024(ln, true, bf16, 54, 2, 4)
KX_BLOCK_SMEM1024(rms, false, f32, 51, 1, 8)
KX_BLOCK_SMEM1024(rms, false, f32, 52, 2, 8)
KX_BLOCK_SMEM1024(rms, false, f32, 53, 2, 6)
KX_BLOCK_SMEM1024(rms, false, f32, 54, 2, 4)
KX_BLOCK_SMEM1024(rms, false, bf16, 51, 1, 8)
KX_BLOCK_SMEM1024(rms, false, bf16, 52, 2, 8)
KX_BLOCK_SMEM1024(rms, false, bf16, 53, 2, 6)
KX_BLOCK_SMEM1024(rms, false, bf16, 54, 2, 4)
// v55: the production code, kernels/norm_fwd.cuh nk_fwd_stash (v52's split with the stashed chunks in rolled loops, the
// statistics as nk_fwd_block_staged), the same launch as v51. (A v56 without two of its nk_opaque calls spilled less,
// 4 against 16 bytes, and never ran: the parameter was dropped from the product.)
#define KX_SPLIT(kind, isln, ti)                                                                      \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(1024) kx_##kind##_cluster_##ti##_v55(NK_FWD_PARAMS) {  \
    nk_pdl_enter();                                                                                   \
    nk_fwd_stash<nk_##ti, nk_##ti, nk_##ti, isln>(NK_FWD_ARGS);                                       \
  }
KX_SPLIT(ln, true, f32)
KX_SPLIT(ln, true, bf16)
KX_SPLIT(rms, false, f32)
KX_SPLIT(rms, false, bf16)

// v42 / v43 (block, 1024 threads, rows of 128 KB): the production geometry, with the weight/bias chunks of a thread's
// first NW chunks copied into its own shared-memory slots by cp.async at the start of each row (before the x loads: no
// registers, the copies overlap the x loads and the reductions); its other chunks' weight/bias loaded from L2 two
// chunks at a time. The output loop then pays 8 - NW L2 round trips in groups of 2 instead of production's 8 (G = 1).
// v42: NW = 6 (192 KB of shared memory), v43: NW = 4 (128 KB). Statistics as v40 (ONEPASS with the centred fallback).
// Launch: the plan's (block 1024, tpr 1024, nv 8), dynamic shared memory 256 + 1024 * NW * 32 bytes.
template <class TI, bool LN, int NW, int G = 2, bool OPQ = false>
NK_INLINE void kx_fwd_block_wsmem(NK_FWD_PARAMS) {
  static_assert((8 - NW) % G == 0, "the tail's groups must tile the chunks left in L2");
  constexpr int VEC = 16 / TI::SIZE, NR = 8, WV = VEC * TI::SIZE / 4;
  typedef TI TO;
  typedef TI TW;
  const int T = (int)nk_block_dim_x();
  if (tpr != T || nv != NR || (long long)nv * T * VEC != d || !weight || (LN && !bias)) nk_trap();
  NK_FWD_TYPED_PTRS;
  int t = (int)nk_thread_x();
  const float fd = (float)d;
  nk_red_block red{(unsigned)T / NK_WARP_SIZE, 0u};
  nk_v4* stage = (nk_v4*)(nk_fwd_smem + 64);  // [NW][2][T]: weight, bias
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TI::S* xr = X + row * x_stride;
    typename TO::S* yr = Y + row * y_stride;
    if (prefetch > 0 && t == 0) nk_prefetch_ahead<TI>(X, row + prefetch, 1, rows, d, x_stride);
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      kx_cp_async16(&stage[(2 * j) * T + t], Wt + (long long)(t + j * T) * VEC);
      if (LN) kx_cp_async16(&stage[(2 * j + 1) * T + t], Bs + (long long)(t + j * T) * VEC);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    nk_v4 raw[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) nk_load_words<TI, VEC>(xr + (long long)(t + i * T) * VEC, true, VEC, raw[i].w);
    const float k = LN ? TI::to_f(xr[0]) : 0.0f;
    float s = 0.0f, q = 0.0f;
#pragma unroll
    for (int i = 0; i < NR; ++i)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float te = nk_get<TI>(raw[i].w, e) - k;
        s += te;
        q = nk_fma(te, te, q);
      }
    float dm = 0.0f, rs;
    if (LN) {
      red.pair(s, q);
      dm = s / fd;
      const float v1 = q / fd - dm * dm;
      rs = nk_rsqrt(v1 + eps);
      if (OPQ) nk_row_opaque<NR>(raw);  // as production: raw stays packed (no 64 unpacked floats held)
      if (!(dm * dm <= 9.0f * v1 && q <= 3.4028235e38f)) {
        float c2 = 0.0f;
#pragma unroll
        for (int i = 0; i < NR; ++i)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
            c2 += c * c;
          }
        rs = nk_rsqrt(red(c2) / fd + eps);
      }
    } else {
      rs = nk_rsqrt(red(q) / fd + eps);
    }
    if (OPQ) nk_row_opaque<NR>(raw);
    if (t == 0 && LN && mean) mean[row] = k + dm;
    if (t == 0 && rstd) rstd[row] = rs;
    nk_opaque(t);
    asm volatile("cp.async.wait_all;" ::: "memory");
#pragma unroll
    for (int i = 0; i < NW; ++i) {
      const nk_v4 gw = stage[(2 * i) * T + t];
      nk_v4 bw;
      if (LN) bw = stage[(2 * i + 1) * T + t];
      float f[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i].w, e);
      nk_apply_words<TW, LN, VEC>(f, true, gw.w, LN, LN ? bw.w : gw.w, k, dm, rs);
      nk_store_f<TO, VEC>(yr + (long long)(t + i * T) * VEC, true, VEC, f);
    }
#pragma unroll
    for (int g = NW; g < NR; g += G) {
      unsigned gw[G][WV], bw[G][WV];
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const long long off = (long long)(t + (g + u) * T) * VEC;
        nk_load_words<TW, VEC>(Wt + off, true, VEC, gw[u]);
        if (LN) nk_load_words<TW, VEC>(Bs + off, true, VEC, bw[u]);
      }
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const long long off = (long long)(t + (g + u) * T) * VEC;
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[g + u].w, e);
        nk_apply_words<TW, LN, VEC>(f, true, gw[u], LN, bw[u], k, dm, rs);
        nk_store_f<TO, VEC>(yr + off, true, VEC, f);
      }
    }
    __syncthreads();  // not needed for the slots (each thread reads only its own); keeps rows in step as production
  }
}
#define KX_BLOCK_WSMEM(kind, isln, ti, v, nw, ...)                                                \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(1024) kx_##kind##_block_##ti##_v##v(NK_FWD_PARAMS) { \
    nk_pdl_enter();                                                                                \
    kx_fwd_block_wsmem<nk_##ti, isln, nw __VA_ARGS__>(NK_FWD_ARGS);                               \
  }
KX_BLOCK_WSMEM(ln, true, f32, 42, 6)
KX_BLOCK_WSMEM(ln, true, f32, 43, 4)
KX_BLOCK_WSMEM(ln, true, bf16, 42, 6)
KX_BLOCK_WSMEM(ln, true, bf16, 43, 4)
KX_BLOCK_WSMEM(rms, false, f32, 42, 6)
KX_BLOCK_WSMEM(rms, false, f32, 43, 4)
KX_BLOCK_WSMEM(rms, false, bf16, 42, 6)
KX_BLOCK_WSMEM(rms, false, bf16, 43, 4)
// v44-v47: the tail one chunk at a time (G = 1: fewer registers; v42/v43's LN bf16 spilled 108-112 bytes), with
// NW = 4 (v44, v46) or 7 (v45, v47: 224 KB of slots + 256 bytes, under the 227 KB an sm_90 CTA may have).
KX_BLOCK_WSMEM(ln, true, f32, 44, 4, , 1)
KX_BLOCK_WSMEM(ln, true, f32, 45, 7, , 1)
KX_BLOCK_WSMEM(ln, true, bf16, 44, 4, , 1)
KX_BLOCK_WSMEM(ln, true, bf16, 45, 7, , 1)
KX_BLOCK_WSMEM(ln, true, f32, 46, 6, , 1)
KX_BLOCK_WSMEM(ln, true, bf16, 46, 6, , 1)
// v47-v49: v43, v44, v45 with production's nk_row_opaque after the statistics (raw stays packed in registers).
KX_BLOCK_WSMEM(ln, true, f32, 47, 4, , 2, true)
KX_BLOCK_WSMEM(ln, true, bf16, 47, 4, , 2, true)
KX_BLOCK_WSMEM(ln, true, f32, 48, 4, , 1, true)
KX_BLOCK_WSMEM(ln, true, bf16, 48, 4, , 1, true)
KX_BLOCK_WSMEM(ln, true, f32, 49, 7, , 1, true)
KX_BLOCK_WSMEM(ln, true, bf16, 49, 7, , 1, true)
// v50: the production `block` kernel for FULL LayerNorm calls (nk_fwd_block_full, kernels/norm_fwd.cuh) with its
// weight/bias staging slots (NK_STAGE_*: 4 chunks of weight and bias per thread in shared memory, the other chunks
// loaded two at a time), launched with 256 + 128 x 1024 bytes: the port of v47 as the fatbin will run it.
#define KX_BLOCK_PROD_STAGED(ti, v)                                                                \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(1024) kx_ln_block_##ti##_v##v(NK_FWD_PARAMS) {        \
    nk_pdl_enter();                                                                                 \
    nk_fwd_block_full<nk_##ti, nk_##ti, nk_##ti, true, true>(NK_FWD_ARGS);                          \
  }
KX_BLOCK_PROD_STAGED(f32, 50)
KX_BLOCK_PROD_STAGED(bf16, 50)
