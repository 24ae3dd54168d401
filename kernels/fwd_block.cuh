// norm_fwd.cuh: mappings `block` and `latency`.
// Included through norm_fwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FWD_BLOCK_CUH
#define NORMKIT_FWD_BLOCK_CUH
#include "fwd_rows.cuh"

// ---------------------------------------------------------------- mapping `block`
// One row per block; blockDim.x = tpr (multiple of the warp size, <= 1024); thread t owns chunks t,
// t+tpr, ... (nv <= NK_MAXV_BLOCK, nv*tpr*VEC >= d). Grid: any; rows grid-strided.
// Dynamic smem: 2 * (blockDim.x/32) * 4 bytes.
template <class TI, class TO, class TW, bool LN, bool FULL, int MAXV = NK_MAXV_BLOCK, bool EARLY = false,
          bool ONEPASS = NK_ONEPASS>
NK_INLINE void nk_fwd_block(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  nk_check_wave();
  if ((unsigned)tpr != nk_block_dim_x() || nv < 1 || nv > MAXV || (long long)nv * tpr * VEC < d)
    nk_trap();
  if (d <= 0) return;
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    if (prefetch > 0 && t == 0) nk_prefetch_ahead<TI>(X, row + prefetch, 1, rows, d, x_stride);
    const float k = LN ? TI::to_f(X[row * x_stride]) : 0.0f;
    nk_row_cached<TI, TO, TW, LN, MAXV, FULL, nk_red_block, EARLY ? 1 : nk_param_group<TI, TW, LN, FULL>::G, EARLY,
                  ONEPASS>(
        X + row * x_stride, Y + row * y_stride, Wt, Bs, d, t, tpr, nchunks, nv, (float)d, eps, k, red,
        (t == 0 && LN && mean) ? mean + row : nullptr, (t == 0 && rstd) ? rstd + row : nullptr);
  }
}

// One chunk's sums of x - k and (x - k)^2, in nk_row_cached's FULL ONEPASS order.
template <class TI>
NK_INLINE void nk_chunk_sums(const nk_v4& v, float k, float& s, float& q) {
  constexpr int VEC = 16 / TI::SIZE;
  const float t0 = nk_get<TI>(v.w, 0) - k;
  float si = t0, qi = t0 * t0;
#pragma unroll
  for (int e = 1; e < VEC; ++e) {
    const float te = nk_get<TI>(v.w, e) - k;
    si += te;
    qi = nk_fma(te, te, qi);
  }
  s += si;
  q += qi;
}
// One chunk's centred sum of squares, in nk_row_cached's order.
template <class TI>
NK_INLINE float nk_chunk_centred(const nk_v4& v, float k, float dm) {
  constexpr int VEC = 16 / TI::SIZE;
  const float c0 = (nk_get<TI>(v.w, 0) - k) - dm;
  float qi = c0 * c0;
#pragma unroll
  for (int e = 1; e < VEC; ++e) {
    const float c = (nk_get<TI>(v.w, e) - k) - dm;
    qi += c * c;
  }
  return qi;
}
// The one-pass statistics' first step of the staged `block` and `stash` loops: this thread's NR whole chunks of
// the row (chunks t + i * T, T threads) loaded into raw, and their sums of x - k and (x - k)^2 (nk_chunk_sums)
// set into s and q.
template <class TI, int NR>
NK_INLINE void nk_load_chunk_sums(const typename TI::S* xr, int t, int T, float k, nk_v4 (&raw)[NR], float& s,
                                  float& q) {
  constexpr int VEC = 16 / TI::SIZE;
#pragma unroll
  for (int i = 0; i < NR; ++i) nk_load_words<TI, VEC>(xr + (long long)(t + i * T) * VEC, true, VEC, raw[i].w);
  s = 0.0f, q = 0.0f;
#pragma unroll
  for (int i = 0; i < NR; ++i) nk_chunk_sums<TI>(raw[i], k, s, q);
}
#if NK_HAS_CP_ASYNC
// The staged `block` row loop (see nk_stage_params): LayerNorm with weight and bias, FULL, every thread holding
// NK_MAXV_BLOCK whole chunks (nv * tpr * VEC == d). Written apart from nk_row_cached, with its FULL ONEPASS arithmetic in the
// same order: in nk_row_cached's general form, with its masks and per-row pointers,
// ptxas sm_90 spilled 24-28 bytes and the H200 ran LN f32 D=32768 at 86.7% of copy and LN 16-bit D=65536 at 80-81,
// where this form spills nothing.
template <class TI, class TO, class TW>
NK_INLINE void nk_fwd_block_staged(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE, NR = NK_MAXV_BLOCK, NS = nk_stage<TI, TW>::NS, G = NK_STAGE_GROUP;
  constexpr int WV = VEC * TW::SIZE / 4;
  static_assert(NS > 0 && NS % G == 0 && (NR - NS) % G == 0, "staged chunks and groups must tile the row cache");
  constexpr bool LN = true;  // (NK_FWD_TYPED_PTRS)
  NK_FWD_TYPED_PTRS;
  const int T = (int)nk_block_dim_x();
  int t = (int)nk_thread_x();
  const float fd = (float)d;
  nk_red_block red{(unsigned)T / NK_WARP_SIZE, 0u};
  nk_v4* const stage = (nk_v4*)((unsigned char*)nk_fwd_smem + NK_STAGE_OFFSET_BYTES);
  // Weight/bias do not depend on the row: staged once, for every row this block takes (each thread its own slots).
  nk_stage_params<TI, TW, true, NS>(stage, Wt, Bs, t, T, NR * T);
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TI::S* xr = X + row * x_stride;
    typename TO::S* yr = Y + row * y_stride;
    if (prefetch > 0 && t == 0) nk_prefetch_ahead<TI>(X, row + prefetch, 1, rows, d, x_stride);
    const float k = TI::to_f(xr[0]);
    // Statistics as nk_row_cached's FULL ONEPASS path (comments there).
    nk_v4 raw[NR];
    float s, q1;
    nk_load_chunk_sums<TI>(xr, t, T, k, raw, s, q1);
    red.pair(s, q1);
    const float dm = s / fd, v1 = q1 / fd - dm * dm;
    const bool centred = nk_any(!(dm * dm <= 9.0f * v1 && q1 <= 3.4028235e38f));
    float rs = nk_rsqrt(v1 + eps);
    nk_row_opaque<NR>(raw);
    if (centred) {
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < NR; ++i) q += nk_chunk_centred<TI>(raw[i], k, dm);
      rs = nk_rsqrt(red(q) / fd + eps);
    }
    if (t == 0 && mean) mean[row] = k + dm;
    if (t == 0 && rstd) rstd[row] = rs;
    nk_row_opaque<NR>(raw);
    nk_opaque(t);  // the weight/bias addresses below: not hoisted above the statistics
    nk_cp_async_wait_all();  // this thread's staged chunks have landed (a no-op after the first row)
#pragma unroll
    for (int g = 0; g < NR; g += G) {
      unsigned gw[G][WV], bw[G][WV];
#pragma unroll
      for (int j = 0; j < G; ++j) {
        if (g + j < NS) {
          nk_staged_words(stage, 2 * (g + j), T, t, gw[j]);
          nk_staged_words(stage, 2 * (g + j) + 1, T, t, bw[j]);
        } else {
          const long long off = (long long)(t + (g + j) * T) * VEC;
          nk_load_words<TW, VEC>(Wt + off, true, VEC, gw[j]);
          nk_load_words<TW, VEC>(Bs + off, true, VEC, bw[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < G; ++j) {
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[g + j].w, e);
        nk_apply_words<TW, true, VEC>(f, true, gw[j], true, bw[j], k, dm, rs);
        nk_store_f<TO, VEC>(yr + (long long)(t + (g + j) * T) * VEC, true, VEC, f);
      }
    }
  }
}
#endif

// LayerNorm's `block` kernel for FULL calls (nk_ln_blockfull_*). On sm_90, where the launch's dynamic shared memory
// holds the slots (NK_STAGE_OFFSET_BYTES + NK_STAGE_THREAD_BYTES per thread: the plan gives them to blocks of more
// than 512 threads, ops/plan.ts stagesParams) and the call fits nk_fwd_block_staged, that loop; else the plain one.
template <class TI, class TO, class TW, bool LN, bool FULL>
NK_INLINE void nk_fwd_block_full(NK_FWD_PARAMS) {
#if NK_HAS_CP_ASYNC
  if constexpr (LN && FULL && NK_ONEPASS && nk_stage<TI, TW>::NS > 0) {
    if (nk_dynamic_smem_bytes() >= NK_STAGE_OFFSET_BYTES + NK_STAGE_THREAD_BYTES * nk_block_dim_x() &&
        weight != nullptr && bias != nullptr && nv == NK_MAXV_BLOCK && (long long)nv * tpr * (16 / TI::SIZE) == d &&
        (unsigned)tpr == nk_block_dim_x()) {
      nk_fwd_block_staged<TI, TO, TW>(NK_FWD_ARGS);
      return;
    }
  }
#endif
  nk_fwd_block<TI, TO, TW, LN, FULL>(NK_FWD_ARGS);
}

// ---------------------------------------------------------------- mapping `latency`
// The `block` mapping for launches whose time is latency, not bandwidth (a few rows: decoding): the same
// contract with nv <= NK_MAXV_LATENCY, and every weight/bias chunk loaded beside the x chunks (EARLY in
// nk_row_cached). Launch bound 512 threads, one block per SM (its registers), so the plan takes it only while
// rows are few enough that one block per SM does not limit bandwidth.
template <class TI, class TO, class TW, bool LN, bool FULL>
NK_INLINE void nk_fwd_latency(NK_FWD_PARAMS) {
  nk_fwd_block<TI, TO, TW, LN, FULL, NK_MAXV_LATENCY, true>(NK_FWD_ARGS);
}

#endif  // NORMKIT_FWD_BLOCK_CUH
