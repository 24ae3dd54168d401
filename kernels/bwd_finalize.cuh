// norm_bwd.cuh: finalize: the parameter gradients from the partial sums.
// Included through norm_bwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_BWD_FINALIZE_CUH
#define NORMKIT_BWD_FINALIZE_CUH
#include "bwd_rowsum_tile.cuh"

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

#endif  // NORMKIT_BWD_FINALIZE_CUH
