// norm_fwd.cuh: mapping `rows` and its transposed warp tile.
// Included through norm_fwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FWD_ROWS_CUH
#define NORMKIT_FWD_ROWS_CUH
#include "fwd_row_cache.cuh"

// ---------------------------------------------------------------- mapping `rows`
// blockDim.x = 256 (any multiple of the warp size <= 256 works); tpr threads per row (power of two,
// 1..32), blockDim.x/tpr rows per block; thread t of a row owns chunks t, t+tpr, ..., (nv of them,
// nv <= NK_MAXV_ROWS, nv*tpr*VEC >= d). Grid: any; row groups grid-strided. Dynamic smem: 0.
template <class TI, class TO, class TW, bool LN, bool FULL, bool ONEPASS = NK_ONEPASS>
NK_INLINE void nk_fwd_rows(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  nk_check_wave();
  if (tpr < 1 || tpr > 32 || (tpr & (tpr - 1)) || nv < 1 || nv > NK_MAXV_ROWS ||
      (long long)nv * tpr * VEC < d || (nk_block_dim_x() & (unsigned)(tpr - 1)))
    nk_trap();
  if (d <= 0) return;
  NK_FWD_TYPED_PTRS;
  // tpr is a power of two: shifts and masks, not the integer divisions (about 50 instructions per warp, which
  // with a row group per warp and CTA was a few percent of the work: ncu, LN bf16 D=768).
  const int lg = nk_log2_pow2(tpr);
  const int tid = (int)nk_thread_x();
  const int sub = tid >> lg, t = tid & (tpr - 1);
  const long long rpb = (long long)(nk_block_dim_x() >> lg);
  const int nchunks = (d - 1) / VEC + 1;
  nk_red_lanes red{tpr};
  const bool contiguous = x_stride == d;
  for (long long rb = (long long)nk_block_x() * rpb; rb < rows; rb += (long long)nk_grid_dim_x() * rpb) {
    const long long row = rb + sub;
    const bool active = row < rows;
    const bool writer = active && t == 0;
    // Back-to-back rows: the CTA's whole group in one prefetch (thread 0); strided: each row's first lane.
    if (prefetch > 0 && (contiguous ? tid == 0 : t == 0))
      nk_prefetch_ahead<TI>(X, (contiguous ? rb : row) + prefetch, contiguous ? (int)rpb : 1, rows, d, x_stride);
    const float k = (LN && active) ? TI::to_f(X[row * x_stride]) : 0.0f;
    nk_row_cached<TI, TO, TW, LN, NK_MAXV_ROWS, FULL, nk_red_lanes, 1, false, ONEPASS>(
        X + row * x_stride, Y + row * y_stride, Wt, Bs, d, t, tpr, active ? nchunks : 0, nv, (float)d, eps, k, red,
        (writer && LN && mean) ? mean + row : nullptr, (writer && rstd) ? rstd + row : nullptr);
  }
}

// ---------------------------------------------------------------- `rows`, vector-only: a transposed warp tile
// Rows of n = d / VEC chunks with n a power of two <= 32 (16-bit d = 8..256, f32 d = 4..128), FULL path only
// (nk_fwd_full; anything else traps): nk_{ln|rms}_rowstile_*, the `rows` plan's vector-only kernel for calls that
// qualify (ops/plan.ts: tileRows), on 256-thread blocks and its own grid (tileGrid; tpr and nv are unused).
// Each 32-lane group holds NK_TILE_M loads of 32 / n back-to-back rows: lane l reads chunk l % n of row
// i * (32 / n) + l / n, so one warp load covers 512 contiguous bytes of rows that are back to back (the `rows`
// kernel's loads touch 32 / tpr rows in pieces of tpr * 16 bytes), and a lane's weight/bias chunk is the same for
// every row it holds: loaded once per thread, kept packed. Row sums: xor trees over the n lanes of a row, in a fixed
// order (deterministic). LayerNorm: statistics in two passes over the registers (mean, then the centred sum of
// squares). f32 input keeps the shift k (the row's first element, by shuffle, as nk_row_cached); 16-bit input sums x
// itself: the mean's rounding error δ enters var only as δ² and y as δ·rstd, and where a shift would matter
// (|mean| >> std) the values share a few binades, so the f32 sum of at most 128 values of 8 or 11 significand bits is
// exact, as is the division by d, a power of two; spread-out rows have δ small against std. RMSNorm: one sum of
// squares. The divisions by d stay divisions: as products with the exact 1/d (bitwise the same result) ptxas sm_90
// spilled 88-168 bytes at the 48-register bound where `/` (IEEE, a slow-path call per row) spills 0-4.
// STATS: the loop with the per-row mean/rstd stores; the kernels (sm_90 and HIP: nk_fwd_rowstile_entry) compile both
// loops and take this one only where mean or rstd is given: in the loop, the stores' code cost LN bf16 D=128 2 points even with null pointers (dm and rs
// stay live: 93.0% of copy; one kernel with both loops 95.4-95.5, bench/README.md).
// H200, LN bf16 D=128 (2^21 rows): 83.7% of copy for nk_ln_rowstwopass_*, 94.7 for this tile; with the shift 86.0
// (bench/README.md).
#define NK_TILE_M 4
// Each v[i] summed over the n lanes of its row, returned to all of them (xor tree in a fixed order; n a power of two
// <= 32, the same in every lane).
template <int M>
NK_INLINE void nk_tile_sum(float (&v)[M], int n) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1)
    if (m < n)
#pragma unroll
      for (int i = 0; i < M; ++i) v[i] += nk_shfl_xor(v[i], m);
}
template <class TI, class TO, class TW, bool LN, bool STATS>
NK_INLINE void nk_fwd_rowstile(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr int WV = VEC * TW::SIZE / 4;  // 32-bit words of one weight/bias chunk
  constexpr bool SHIFT = LN && TI::SIZE == 4;
  nk_check_wave();
  const int n = d / VEC;
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride) || n < 1 || n > 32 ||
      (n & (n - 1)) || (nk_block_dim_x() & 31u))
    nk_trap();
  NK_FWD_TYPED_PTRS;
  const int lg = nk_log2_pow2(n);
  const int lane = (int)(nk_thread_x() & 31u), c = lane & (n - 1), sub = lane >> lg;
  const int rpi = 32 >> lg;                     // rows per load of a 32-lane group
  const long long rpg = (long long)rpi * NK_TILE_M;  // rows per group and step
  const long long groups = nk_block_dim_x() >> 5, group = nk_thread_x() >> 5;
  unsigned ew[WV] = {}, eb[WV] = {};
  if (Wt) nk_load_words<TW, VEC>(Wt + c * VEC, true, VEC, ew);
  if (Bs) nk_load_words<TW, VEC>(Bs + c * VEC, true, VEC, eb);
  const float fd = (float)d;
  const bool contiguous = x_stride == d;
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
    for (int j = 0; j < WV; ++j) {  // unpacked per use, not held as floats across the rows
      nk_opaque(ew[j]);
      nk_opaque(eb[j]);
    }
    float k[NK_TILE_M], dm[NK_TILE_M], rs[NK_TILE_M];  // k, dm: LayerNorm only
    if (LN) {
#pragma unroll
      for (int i = 0; i < NK_TILE_M; ++i) {
        k[i] = SHIFT ? nk_shfl_idx(nk_get<TI>(raw[i].w, 0), (int)(nk_lane() & ~(unsigned)(n - 1))) : 0.0f;
        float s = nk_get<TI>(raw[i].w, 0) - k[i];
#pragma unroll
        for (int e = 1; e < VEC; ++e) s += nk_get<TI>(raw[i].w, e) - k[i];
        dm[i] = s;
      }
      nk_tile_sum(dm, n);
#pragma unroll
      for (int i = 0; i < NK_TILE_M; ++i) dm[i] /= fd;
      nk_row_opaque<NK_TILE_M>(raw);
    }
#pragma unroll
    for (int i = 0; i < NK_TILE_M; ++i) {
      float q = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float v = LN ? (nk_get<TI>(raw[i].w, e) - k[i]) - dm[i] : nk_get<TI>(raw[i].w, e);
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
        if (STATS && c == 0) {
          if (LN && mean) mean[row] = k[i] + dm[i];
          if (rstd) rstd[row] = rs[i];
        }
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i].w, e);
        nk_apply_words<TW, LN, VEC>(f, Wt != nullptr, ew, Bs != nullptr, eb, k[i], dm[i], rs[i]);
        nk_store_f<TO, VEC>(Y + row * y_stride + c * VEC, true, VEC, f);
      }
    }
  }
}
// The tile's entry: the statistics loop where mean or rstd is given, the store-free one otherwise. sm_80 keeps one
// loop (the STATS one: the stores stay behind their null tests): with both, ptxas sm_80 spilled 52-72 bytes in the LN
// 16-bit tiles with 16-bit weights at their 48-register bound (28-32 with one loop) and 16-20 in RMSNorm's (0-4), and
// there is no A100 here to weigh that against the gain. sm_90 with both: 0-8 bytes (one loop: 0-4).
template <class TI, class TO, class TW, bool LN>
NK_INLINE void nk_fwd_rowstile_entry(NK_FWD_PARAMS) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  nk_fwd_rowstile<TI, TO, TW, LN, true>(NK_FWD_ARGS);
#else
  if (mean != nullptr || rstd != nullptr)
    nk_fwd_rowstile<TI, TO, TW, LN, true>(NK_FWD_ARGS);
  else
    nk_fwd_rowstile<TI, TO, TW, LN, false>(NK_FWD_ARGS);
#endif
}

#endif  // NORMKIT_FWD_ROWS_CUH
