// norm_fwd.cuh: mapping `wide`.
// Included through norm_fwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FWD_WIDE_CUH
#define NORMKIT_FWD_WIDE_CUH
#include "fwd_cluster.cuh"

// ---------------------------------------------------------------- mapping `wide`
// One row per block, no register cache: a statistics pass and an output pass each read x (the output pass
// from L2 where the row is still there: with a block per SM, 132 rows are in flight on the H200, 17 MB of its
// 60 MB L2 at 128 KB rows, more than all of it at 512 KB). LayerNorm's statistics come from one
// pass too (nk_chan_chunk): per-thread count, mean and centred sum of squares of x-k, folded in one chunk at a
// time, so it needs no mean pass before a centred one (three passes ran at 62% of copy on the H200 for f32
// D = 32768, two at 80%: bench/README.md) and nothing is E[x^2]-E[x]^2. Each pass goes over the
// row in steps of NK_WIDE_STEP chunks per thread, all loads of a step issued before any is used (as Triton's
// looped reductions run): one 16-byte load in flight per thread was half the bandwidth (bench/README.md).
// Steps of NK_WIDE_STEP / 2 on the masked path and where a weight chunk is two 16-byte loads (16-bit x,
// f32 weights): their registers would spill. FULL as in nk_row_cached (aligned rows, d a multiple of the
// chunk: no masks). Any d. blockDim.x = tpr (multiple of the warp size, <= 1024); thread t handles chunks
// t, t+tpr, ...; nv unused. Grid: any; rows grid-strided (the plan launches one block per SM). Dynamic
// smem: 2 * (blockDim.x/32) * 4 bytes.
// Registers (1024 threads: 64 each). Inlined, the kernel's FULL and masked instantiations shared one
// allocation and spilled 8-40 bytes (ptxas -v, sm_90); kept as calls (NK_NOINLINE) each has its own and
// none spills. The loops stride by blockDim.x, a special register re-read where needed, not by the equal tpr
// argument, which stays live in a register (the vector path alone: bf16 24 -> 8 bytes spilled).
#define NK_WIDE_STEP 4
// Elements of chunk c inside the row (<= 0 past it).
template <int VEC, bool FULL>
NK_INLINE int nk_wide_valid(int c, int nchunks, int d) {
  return FULL ? (c < nchunks ? VEC : 0) : nk_chunk_valid<VEC>(c, d);
}
// One step: chunks c0 + u*tpr (u < U) of the row into r, all loads issued before any is used (elements
// past d and chunks past the row are zero bits: a chunk with no valid element loads nothing).
template <class TI, int U, bool FULL>
NK_INLINE void nk_wide_step(const typename TI::S* xr, bool xvec, int c0, int tpr, int nchunks, int d, nk_v4 (&r)[U]) {
  constexpr int VEC = 16 / TI::SIZE;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = c0 + u * tpr;
    nk_load_words<TI, VEC>(xr + (long long)c * VEC, xvec, nk_wide_valid<VEC, FULL>(c, nchunks, d), r[u].w);
  }
}
// Folds a chunk (nvalid > 0 elements of x-k) into a thread's count n, mean m and centred sum of squares m2:
// the chunk's own mean and sum of squares about it from registers, then Chan's update for two groups.
template <class TI, int VEC>
NK_INLINE void nk_chan_chunk(const unsigned* w, int nvalid, float k, float& n, float& m, float& m2) {
  float f[VEC], cs = 0.0f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) f[e] = e < nvalid ? nk_get<TI>(w, e) - k : 0.0f, cs += f[e];
  const float nb = (float)nvalid, cm = cs / nb;
  float cq = 0.0f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float c = f[e] - cm;
    cq += e < nvalid ? c * c : 0.0f;
  }
  const float na = n;
  n += nb;
  const float delta = cm - m, frac = nb / n;
  m += delta * frac;
  m2 += cq + delta * delta * na * frac;
}
template <class TI, class TO, class TW, bool LN, bool FULL>
NK_NOINLINE void nk_fwd_wide(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE, U = FULL && TW::SIZE == TI::SIZE ? NK_WIDE_STEP : NK_WIDE_STEP / 2;
  constexpr int WV = VEC * TW::SIZE / 4;  // 32-bit words of one weight/bias chunk
  (void)nv, (void)prefetch;
  nk_check_wave();
  if ((unsigned)tpr != nk_block_dim_x()) nk_trap();
  if (d <= 0) return;
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  const float fd = (float)d;
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  const bool pvec = FULL || (nk_aligned(Wt, 16) && (!LN || nk_aligned(Bs, 16)));
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TI::S* xr = X + row * x_stride;
    typename TO::S* yr = Y + row * y_stride;
    const bool xvec = FULL || nk_aligned(xr, 16);
    const bool yvec = FULL || nk_aligned(yr, (VEC * TO::SIZE) < 16 ? (VEC * TO::SIZE) : 16);
    float dm = 0.0f, q = 0.0f;
    const float k = LN ? TI::to_f(xr[0]) : 0.0f;  // shift, as in nk_row_cached
    if (LN) {
      float n = 0.0f, m = 0.0f, m2 = 0.0f;
      for (int c0 = t; c0 < nchunks; c0 += U * (int)nk_block_dim_x()) {
        nk_v4 r[U];
        nk_wide_step<TI, U, FULL>(xr, xvec, c0, (int)nk_block_dim_x(), nchunks, d, r);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int nvalid = nk_wide_valid<VEC, FULL>(c0 + u * (int)nk_block_dim_x(), nchunks, d);
          if (nvalid > 0) nk_chan_chunk<TI, VEC>(r[u].w, nvalid, k, n, m, m2);
        }
      }
      // The row's mean of x-k, then each thread's sum of squares about it (parallel-axis theorem).
      dm = red(n * m) / fd;
      q = m2 + n * (m - dm) * (m - dm);
    } else {
      for (int c0 = t; c0 < nchunks; c0 += U * (int)nk_block_dim_x()) {
        nk_v4 r[U];
        nk_wide_step<TI, U, FULL>(xr, xvec, c0, (int)nk_block_dim_x(), nchunks, d, r);
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float v = nk_get<TI>(r[u].w, e);  // padding is +0.0: adds nothing
            q += v * v;
          }
      }
    }
    const float rs = nk_rsqrt(red(q) / fd + eps);
    if (t == 0) {
      if (LN && mean) mean[row] = k + dm;
      if (rstd) rstd[row] = rs;
    }
    // Output: a step's x, weight and bias chunks loaded, then its y chunks stored. In place (y == x) is
    // correct: every thread reads only the chunks it writes, and reads each before writing it.
    for (int c0 = t; c0 < nchunks; c0 += U * (int)nk_block_dim_x()) {
      nk_v4 r[U];
      unsigned gw[U][WV], bw[U][WV];
      nk_wide_step<TI, U, FULL>(xr, xvec, c0, (int)nk_block_dim_x(), nchunks, d, r);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * (int)nk_block_dim_x();
        const int nvalid = nk_wide_valid<VEC, FULL>(c, nchunks, d);
        if (Wt) nk_load_words<TW, VEC>(Wt + (long long)c * VEC, pvec, nvalid, gw[u]);
        if (LN && Bs) nk_load_words<TW, VEC>(Bs + (long long)c * VEC, pvec, nvalid, bw[u]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * (int)nk_block_dim_x();
        const int nvalid = nk_wide_valid<VEC, FULL>(c, nchunks, d);
        if (nvalid > 0) {
          float f[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(r[u].w, e);
          nk_apply_words<TW, LN, VEC>(f, Wt != nullptr, gw[u], LN && Bs, bw[u], k, dm, rs);
          nk_store_f<TO, VEC>(yr + (long long)c * VEC, yvec, nvalid, f);
        }
      }
    }
    // Buffer reuse across rows: nk_red_block alternates its two buffers (see nk_block_sum).
  }
}

#endif  // NORMKIT_FWD_WIDE_CUH
