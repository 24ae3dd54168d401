// normkit diagnostics kernels (check mode): the number of non-finite values and the abs-max
// of the finite values of a row-strided tensor, computed on the device in two deterministic passes:
//
//   nk_diag_partial_<t>: grid of G blocks × NK_DIAG_THREADS; block b writes counts[b] and maxes[b] for the
//                        elements b*256+tid, b*256+tid + G*256, ... of the flattened rows × d tensor;
//   nk_diag_final:       grid of S blocks × NK_DIAG_THREADS; block s reduces counts/maxes[s*n .. s*n+n)
//                        into out_count[s], out_max[s] (S segments reduced in one launch: input and output).
//
// No atomics: counts are integers and max is exact, so any order gives the same bits, and the block tree
// below fixes the order anyway. Non-finite is tested on the widened f32 (f16/bf16 Inf and NaN stay Inf and
// NaN when widened). Included by norm.cu, which instantiates the kernels as extern "C".
#ifndef NORMKIT_DIAG_CUH
#define NORMKIT_DIAG_CUH
#include "portable.h"
#include "norm_fwd.cuh"  // nk_f32 / nk_f16 / nk_bf16

// The block size both kernels must be launched with (the shared tree below assumes it).
#define NK_DIAG_THREADS 256

// Shared-memory tree over the block: afterwards every thread holds the block's count and max.
// One barrier per level; each level only reads slots that no thread writes in that level.
NK_INLINE void nk_diag_block_reduce(unsigned long long& cnt, float& mx, unsigned long long* s_cnt, float* s_max) {
  const unsigned t = nk_thread_x();
  s_cnt[t] = cnt;
  s_max[t] = mx;
  nk_barrier();
  for (unsigned h = NK_DIAG_THREADS / 2; h > 0; h >>= 1) {
    if (t < h) {
      s_cnt[t] += s_cnt[t + h];
      const float o = s_max[t + h];
      if (o > s_max[t]) s_max[t] = o;
    }
    nk_barrier();
  }
  cnt = s_cnt[0];
  mx = s_max[0];
}

template <class T>
NK_INLINE void nk_diag_partial(const typename T::S* NK_RESTRICT x, long long rows, int d, long long stride,
                               unsigned long long* NK_RESTRICT counts, float* NK_RESTRICT maxes) {
  NK_SHARED unsigned long long s_cnt[NK_DIAG_THREADS];
  NK_SHARED float s_max[NK_DIAG_THREADS];
  if (nk_block_dim_x() != NK_DIAG_THREADS) nk_trap();  // launch contract
  const long long n = rows * (long long)d;
  const long long step = (long long)nk_grid_dim_x() * NK_DIAG_THREADS;
  unsigned long long cnt = 0;
  float mx = 0.0f;
  for (long long i = (long long)nk_block_x() * NK_DIAG_THREADS + nk_thread_x(); i < n; i += step) {
    const long long r = i / d;
    const float v = T::to_f(x[r * stride + (i - r * d)]);
    const unsigned u = nk_f2u(v) & 0x7fffffffu;  // |v| as bits
    if (u >= 0x7f800000u) {
      cnt++;
    } else {
      const float a = nk_u2f(u);
      if (a > mx) mx = a;
    }
  }
  nk_diag_block_reduce(cnt, mx, s_cnt, s_max);
  if (nk_thread_x() == 0) {
    counts[nk_block_x()] = cnt;
    maxes[nk_block_x()] = mx;
  }
}

NK_INLINE void nk_diag_final_impl(const unsigned long long* NK_RESTRICT counts, const float* NK_RESTRICT maxes, int n,
                                  unsigned long long* NK_RESTRICT out_count, float* NK_RESTRICT out_max) {
  NK_SHARED unsigned long long s_cnt[NK_DIAG_THREADS];
  NK_SHARED float s_max[NK_DIAG_THREADS];
  if (nk_block_dim_x() != NK_DIAG_THREADS) nk_trap();
  const long long base = (long long)nk_block_x() * n;
  unsigned long long cnt = 0;
  float mx = 0.0f;
  for (int i = (int)nk_thread_x(); i < n; i += NK_DIAG_THREADS) {
    cnt += counts[base + i];
    const float m = maxes[base + i];
    if (m > mx) mx = m;
  }
  nk_diag_block_reduce(cnt, mx, s_cnt, s_max);
  if (nk_thread_x() == 0) {
    out_count[nk_block_x()] = cnt;
    out_max[nk_block_x()] = mx;
  }
}

#endif  // NORMKIT_DIAG_CUH
