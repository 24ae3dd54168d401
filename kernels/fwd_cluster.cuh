// norm_fwd.cuh: mapping `cluster` (sm_90+).
// Included through norm_fwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FWD_CLUSTER_CUH
#define NORMKIT_FWD_CLUSTER_CUH
#include "fwd_block.cuh"

// ---------------------------------------------------------------- mapping `cluster` (sm_90+)
// A row per cluster of C CTAs (C = %cluster_nctarank, set at launch: cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = (C,1,1); grid.x a multiple of C; C <= 8 portable, up to 16
// with CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED; a launch without the attribute is C = 1).
// CTA rank r owns chunks [r*cpc, (r+1)*cpc) of the row, cpc = ceil(ceil(d/VEC)/C); thread t of the
// CTA owns chunks r*cpc + t + i*tpr (i < nv <= NK_MAXV_BLOCK, nv*tpr >= cpc). blockDim.x = tpr.
// Rows: cluster id, strided by the number of clusters (the op launches as many clusters as are resident at once,
// at most one per row). Dynamic smem: 2*(blockDim.x/32)*4 + NK_CLUSTER_SUM_BYTES bytes.
// Elsewhere (sm_80 SASS, compute_80 PTX, HIP) the kernel traps.
template <class TI, class TO, class TW, bool LN, bool FULL, bool ONEPASS = NK_ONEPASS>
NK_INLINE void nk_fwd_cluster(NK_FWD_PARAMS) {
#if NK_HAS_CLUSTER
  constexpr int VEC = 16 / TI::SIZE;
  const unsigned csize = nk_cluster_size(), crank = nk_cluster_rank();
  const int nchunks = d > 0 ? (d - 1) / VEC + 1 : 0;
  const int cpc = (int)((nchunks + csize - 1) / csize);
  if ((unsigned)tpr != nk_block_dim_x() || nv < 1 || nv > NK_MAXV_BLOCK || (long long)nv * tpr < cpc ||
      csize < 2 || csize > NK_CLUSTER_SUM_RANKS)
    nk_trap();
  if (d <= 0) return;
  NK_FWD_TYPED_PTRS;
  (void)prefetch;  // no gain measured on clusters (bench/README.md)
  const int t = (int)nk_thread_x();
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  nk_red_cluster red{nwarps, 0u, {}};
  red.sum.setup(nk_fwd_smem + 2 * nwarps);
  // This CTA's slice: elements [e0, e0 + cpc*VEC) of the row, of which d - e0 exist.
  const long long e0 = (long long)crank * cpc * VEC;
  const int c_end = nk_mini(cpc, nchunks - (int)crank * cpc);
  const int dpart = c_end > 0 ? (int)(d - e0) : 0;
  const bool writer = crank == 0 && t == 0;
  const typename TW::S* Ws = Wt ? Wt + e0 : Wt;
  const typename TW::S* Bss = Bs ? Bs + e0 : Bs;
  for (long long row = nk_cluster_id_x(); row < rows; row += nk_cluster_count_x()) {
    const float k = LN ? TI::to_f(X[row * x_stride]) : 0.0f;  // the row's first element, in every CTA
    nk_row_cached<TI, TO, TW, LN, NK_MAXV_BLOCK, FULL, nk_red_cluster, 1, false, ONEPASS>(
        X + row * x_stride + e0, Y + row * y_stride + e0, Ws, Bss, dpart, t, tpr, c_end, nv, (float)d, eps, k, red,
        (writer && LN && mean) ? mean + row : nullptr, (writer && rstd) ? rstd + row : nullptr);
  }
  // No CTA may exit (its shared memory gone) while another can still send to it.
  nk_cluster_sync();
#else
  (void)x, (void)y, (void)weight, (void)bias, (void)mean, (void)rstd, (void)rows, (void)d;
  (void)x_stride, (void)y_stride, (void)eps, (void)tpr, (void)nv, (void)prefetch;
  nk_trap();
#endif
}

// LayerNorm's `cluster` kernel for FULL calls (nk_ln_clusterfull_*).
template <class TI, class TO, class TW, bool LN, bool FULL>
NK_INLINE void nk_fwd_cluster_full(NK_FWD_PARAMS) {
  nk_fwd_cluster<TI, TO, TW, LN, FULL>(NK_FWD_ARGS);
}

#endif  // NORMKIT_FWD_CLUSTER_CUH
