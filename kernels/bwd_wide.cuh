// norm_bwd.cuh: mapping `wide`.
// Included through norm_bwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_BWD_WIDE_CUH
#define NORMKIT_BWD_WIDE_CUH
#include "bwd_cached.cuh"

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
    NK_BWD_ROW_LOCALS;
    float sg = 0.0f, sgx = 0.0f;
    NK_BWD_ROW_PASS(nk_bwd_sums<TW, LN, VEC>(xf, df, W ? W + off : W, pvec, nvalid, mu, rs, sg, sgx));
    const float a = LN ? red(sg) / fd : 0.0f;
    const float b = red(sgx) / fd;
    NK_BWD_ROW_PASS(nk_bwd_chunk<TX, TD, TW, LN, VEC>(xf, df, W ? W + off : W, pvec, nvalid, mu, rs, a, b, dxr + off,
                                                      dxvec, acc ? acc + off : acc, d, accvec));
  }
  if (part && nv)  // this thread's own columns: no barrier needed
    for (int j = t * VEC; j < d; j += tpr * VEC)
      for (int e = 0; e < VEC && j + e < d; ++e) {
        prow[j + e] = acc[j + e];
        if (LN) prow[d + j + e] = acc[d + j + e];
      }
}

#endif  // NORMKIT_BWD_WIDE_CUH
