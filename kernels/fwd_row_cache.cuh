// norm_fwd.cuh: one row cached in registers (nk_row_cached), shared by `rows`, `block`, `cluster`, `latency`.
// Included through norm_fwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FWD_ROW_CACHE_CUH
#define NORMKIT_FWD_ROW_CACHE_CUH
#include "fwd_common.cuh"

// ---------------------------------------------------------------- one row, cached in registers
// xr, yr, w, b point at element 0 of this thread group's part of the row (the whole row, or a
// cluster CTA's slice), which has d elements. This thread owns chunks c_first + i*c_step of the part
// for i < nv (<= MAXV) that are < c_end; every thread of the row calls this (also with nothing to
// own: c_end <= c_first), so that reductions line up. fd: the full row length, as float.
// mean_p / rstd_p: where to write the row's statistics (null in all but one thread of the row).
// FULL: every chunk this thread owns is whole and x, y, w, b are 16-byte aligned (checked by the caller
// once per launch): no per-element masks, vector access only.
// G: weight/bias chunks loaded per group in the output loop. A load may not move above a store the compiler
// cannot prove disjoint, so with G = 1 each chunk's weight/bias load waits for the previous chunk's y store
// and the row pays MAXV serial L2 round trips; G chunks per group cut them to MAXV / G (see nk_param_group).
// EARLY: all MAXV weight/bias chunks are loaded right after the x chunks, so that their round trip overlaps
// the x loads and the reductions instead of following them (the `latency` mapping: 2 * MAXV more chunks of
// registers; on the H200 it took a lone LayerNorm row of 4096 bf16 from 3.0 to 2.0 us, bench/README.md).
// ONEPASS (LN, FULL path): the sums of t = x - k and of t^2 in one pass over the registers and one reduction
// (RED::pair: for a cluster, one exchange instead of two), var = E[t^2] - E[t]^2, kept where |E[t]| <= 3 std in every
// row of the warp (then E[t^2] <= 10 var, which multiplies the sum's rounding error by at most 10: f32 rstd within
// about 1.6e-6 relative, emulated; at 4 std it reached 2.1e-6) and the sum of t^2 is finite; elsewhere the centred
// second pass runs as without ONEPASS (rows whose first element lies far from the rest, and rows past ~1e19 whose
// sums overflow: there the centred pass stays finite or gives rstd 0 as before). dm, the mean, has the same bits either
// way. The decision is the same in every warp and CTA of a row: they all hold the same totals, bit for bit. H200 (bench/README.md): LN bf16 D=768 92.7 -> 97.5% of copy,
// D=5120 95.1 -> 97.5, a cluster row of 131072 bf16 70.6 -> 76.1; f32 rows within a point; LN 16-bit D=128 (2 lanes
// per row) lost: 83.5 -> 77.
// Weight/bias staged in shared memory (the `block` mapping's FULL LayerNorm kernels, sm_90, rows of up to 1024
// threads x 8 chunks). Unstaged, the output loop pays an L2 round trip per chunk for weight and bias after the row's
// statistics; a thread's first NS chunks instead come from shared-memory slots that cp.async filled while its x loads
// were in flight. NS: NK_STAGE_THREAD_BYTES of weight+bias per thread (4 chunks of f32 x, or of 16-bit x with 16-bit
// weights; none for 16-bit x with f32 weights, below); the other chunks' weight/bias load from L2 NK_STAGE_GROUP
// chunks at a time. H200, % of copy (bench/README.md): LN f32 D=32768 (1024 x 8 chunks)
// 88.8 -> 96.1-96.5, LN bf16 D=65536 84.7-84.9 -> 95.6-95.8 (with nk_row_opaque, as here; without it bf16 spilled
// and ran at 67). The other chunks one at a time (G = 1): 92.1-92.8 and 89.9-90.2; 6 chunks staged: 94.6 (f32).
// Slots after the block reduction's buffers (<= 2 x 32 floats): nk_v4 planes, plane 2 * i + wb holding the 16 bytes
// of chunk i's weight (wb 0) or bias (wb 1) for every thread: a thread reads and writes only its own 16 bytes of each
// plane (no bank conflicts, no barrier).
#define NK_STAGE_OFFSET_BYTES 256
#define NK_STAGE_THREAD_BYTES 128
#define NK_STAGE_GROUP 2
template <class TI, class TW>
struct nk_stage {
  // Weights as wide as x (a chunk's weight is 16 bytes). 16-bit x with f32 weights (32 bytes): none (with 2 chunks
  // staged ptxas sm_90 spilled 24 bytes there, and it is not measured).
  enum { NS = TW::SIZE == TI::SIZE ? NK_STAGE_THREAD_BYTES / (2 * 16) : 0 };
};
NK_INLINE void nk_staged_words(const nk_v4* stage, int plane, int nthreads, int t, unsigned* words) {
  const nk_v4 v = stage[plane * nthreads + t];
#pragma unroll
  for (int j = 0; j < 4; ++j) words[j] = v.w[j];
}
#if NK_HAS_CP_ASYNC
// Issues the copies of thread t's first NS chunks (t + i * nthreads < nchunks) of weight and bias (each when given).
template <class TI, class TW, bool LN, int NS>
NK_INLINE void nk_stage_params(nk_v4* stage, const typename TW::S* w, const typename TW::S* b, int t, int nthreads,
                               int nchunks) {
  constexpr int VEC = 16 / TI::SIZE;
  static_assert(VEC * TW::SIZE == 16, "a chunk's weight is one 16-byte piece");
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    const int c = t + i * nthreads;
    if (c < nchunks) {
      if (w) nk_cp_async16(&stage[(2 * i) * nthreads + t], w + (long long)c * VEC);
      if (LN && b) nk_cp_async16(&stage[(2 * i + 1) * nthreads + t], b + (long long)c * VEC);
    }
  }
  nk_cp_async_commit();
}
#endif

// NK_ONEPASS: the mappings' default. Off on AMD: not measured there, and with it gfx90a/gfx942's 1024-thread LN `block`
// kernels needed scratch (spills; tests/hip/hsaco_abi.test.ts allows none).
#if defined(__HIP__)
#define NK_ONEPASS false
#else
#define NK_ONEPASS true
#endif
template <class TI, class TO, class TW, bool LN, int MAXV, bool FULL, class RED, int G = 1, bool EARLY = false,
          bool ONEPASS = false>
NK_INLINE void nk_row_cached(const typename TI::S* xr, typename TO::S* yr, const typename TW::S* w,
                             const typename TW::S* b, int d, int c_first, int c_step, int c_end,
                             int nv, float fd, float eps, float k, RED& red, float* mean_p, float* rstd_p) {
  constexpr int VEC = 16 / TI::SIZE;
  const bool xvec = FULL || nk_aligned(xr, 16);
  // Valid elements of this thread's i-th chunk (recomputed where needed: cheaper than registers).
#define NK_NVAL(i)                                                                  \
  (((i) < nv && c_first + (i) * c_step < c_end) ? (FULL ? VEC : nk_chunk_valid<VEC>(c_first + (i) * c_step, d)) \
                                                : 0)
  nk_v4 raw[MAXV];
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int c = c_first + i * c_step;
    nk_load_words<TI, VEC>(xr + (long long)c * VEC, xvec, NK_NVAL(i), raw[i].w);
  }
  const bool pvec = FULL || (nk_aligned(w, 16) && (!LN || nk_aligned(b, 16)));
  constexpr int WV = VEC * TW::SIZE / 4;  // 32-bit words of one weight/bias chunk
  constexpr int NE = EARLY ? MAXV : 1;     // chunks of weight/bias held from here to the output loop
  unsigned ew[NE][WV], eb[NE][WV];
  if (EARLY) {
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const long long off = (long long)(c_first + i * c_step) * VEC;
      if (w) nk_load_words<TW, VEC>(w + off, pvec, NK_NVAL(i), ew[i]);  // nvalid <= 0: nothing loaded
      if (LN && b) nk_load_words<TW, VEC>(b + off, pvec, NK_NVAL(i), eb[i]);
    }
  }

  // LN statistics are taken about k, the row's first element (the caller passes it to every thread):
  // the sum of x - k is accurate to the spread of the row, not to its magnitude, so a row with mean
  // 1e4 and std 1e-2 keeps its digits in f32 (a plain sum of x would lose them). dm = mean(x - k) and, with ONEPASS,
  // the sum of (x - k)^2 in the same pass; else (or for an ill-conditioned row) the centred sum of ((x - k) - dm)^2.
  float dm = 0.0f, rs;
  if (LN) {
    float s = 0.0f, q1 = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int nvalid = NK_NVAL(i);
      if (FULL) {
        const float t0 = nk_get<TI>(raw[i].w, 0) - k;
        float si = t0;  // not 0 + ...: the compiler cannot fold 0.0f + v (-0.0)
        float qi = t0 * t0;
#pragma unroll
        for (int e = 1; e < VEC; ++e) {
          const float te = nk_get<TI>(raw[i].w, e) - k;
          si += te;
          if (ONEPASS) qi = nk_fma(te, te, qi);
        }
        s += nvalid ? si : 0.0f;
        if (ONEPASS) q1 += nvalid ? qi : 0.0f;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s += e < nvalid ? nk_get<TI>(raw[i].w, e) - k : 0.0f;  // not padding
      }
    }
    bool centred = true;
    if constexpr (ONEPASS && FULL) {  // (constexpr: RED needs pair() only then)
      red.pair(s, q1);
      dm = s / fd;
      const float v1 = q1 / fd - dm * dm;
      // Also where the sum of t^2 overflowed (|x - x[0]| past ~1e19 while the row's spread may still be finite, which
      // the centred pass keeps) or is NaN: the comparison's `!` sends every non-finite row to the centred pass.
      centred = nk_any(!(dm * dm <= 9.0f * v1 && q1 <= 3.4028235e38f));
      rs = nk_rsqrt(v1 + eps);
    } else {
      dm = red(s) / fd;
    }
    nk_row_opaque<MAXV>(raw);
    if (centred) {
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int nvalid = NK_NVAL(i);
      if (FULL) {
        const float c0 = (nk_get<TI>(raw[i].w, 0) - k) - dm;
        float qi = c0 * c0;
#pragma unroll
        for (int e = 1; e < VEC; ++e) {
          const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
          qi += c * c;
        }
        q += nvalid ? qi : 0.0f;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float c = (nk_get<TI>(raw[i].w, e) - k) - dm;
          q += e < nvalid ? c * c : 0.0f;  // padding must not add (0-mean)^2
        }
      }
    }
    rs = nk_rsqrt(red(q) / fd + eps);
    }
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

  const bool yvec = FULL || nk_aligned(yr, (VEC * TO::SIZE) < 16 ? (VEC * TO::SIZE) : 16);
  // Per-chunk weight/bias addresses do not depend on the row: stop the compiler from hoisting all of
  // them out of the row loop (2 registers each, live for the whole kernel).
  nk_opaque(c_first);
  static_assert(MAXV % G == 0, "weight/bias groups must tile the row cache");
  if (EARLY) {
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int nvalid = NK_NVAL(i);
      if (nvalid > 0) {
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i].w, e);
        nk_apply_words<TW, LN, VEC>(f, w != nullptr, ew[i], LN && b, eb[i], k, dm, rs);
        nk_store_f<TO, VEC>(yr + (long long)(c_first + i * c_step) * VEC, yvec, nvalid, f);
      }
    }
  } else if (G == 1) {
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int nvalid = NK_NVAL(i);
      if (nvalid > 0) {
        const long long off = (long long)(c_first + i * c_step) * VEC;
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[i].w, e);
        nk_apply<TW, LN, VEC>(f, w ? w + off : w, (LN && b) ? b + off : b, pvec, nvalid, k, dm, rs);
        nk_store_f<TO, VEC>(yr + off, yvec, nvalid, f);
      }
    }
  } else {
#pragma unroll
    for (int g = 0; g < MAXV; g += G) {
      unsigned gw[G][WV], bw[G][WV];
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const long long off = (long long)(c_first + (g + j) * c_step) * VEC;
        const int nvalid = NK_NVAL(g + j);  // <= 0: nothing loaded
        if (w) nk_load_words<TW, VEC>(w + off, pvec, nvalid, gw[j]);
        if (LN && b) nk_load_words<TW, VEC>(b + off, pvec, nvalid, bw[j]);
      }
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const int nvalid = NK_NVAL(g + j);
        if (nvalid > 0) {
          const long long off = (long long)(c_first + (g + j) * c_step) * VEC;
          float f[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(raw[g + j].w, e);
          nk_apply_words<TW, LN, VEC>(f, w != nullptr, gw[j], LN && b, bw[j], k, dm, rs);
          nk_store_f<TO, VEC>(yr + off, yvec, nvalid, f);
        }
      }
    }
  }
#undef NK_NVAL
}

// prefetch: rows ahead to ask L2 for (`rows` and `block`; 0: none; the other mappings ignore it), see
// nk_prefetch_ahead.
#define NK_FWD_PARAMS                                                                              \
  const void *x, void *y, const void *weight, const void *bias, float *mean, float *rstd, int rows, \
      int d, long long x_stride, long long y_stride, float eps, int tpr, int nv, int prefetch
#define NK_FWD_ARGS x, y, weight, bias, mean, rstd, rows, d, x_stride, y_stride, eps, tpr, nv, prefetch

// Whether every row qualifies for the FULL path of nk_row_cached: d a multiple of the chunk, x/y/w/b
// and every row start aligned to the chunk's bytes (16, or 8 for the 8-byte chunks of f32 -> 16-bit y).
template <class TI, class TO, class TW, bool LN>
NK_INLINE bool nk_fwd_full(const void* x, const void* y, const void* weight, const void* bias, int d,
                           long long x_stride, long long y_stride) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr unsigned YA = (VEC * TO::SIZE) < 16 ? (VEC * TO::SIZE) : 16;
  return d % VEC == 0 && nk_aligned(x, 16) && (x_stride * TI::SIZE) % 16 == 0 && nk_aligned(y, YA) &&
         (y_stride * TO::SIZE) % YA == 0 && nk_aligned(weight, 16) && (!LN || nk_aligned(bias, 16));
}

#define NK_FWD_TYPED_PTRS                                      \
  const typename TI::S* X = (const typename TI::S*)x;          \
  typename TO::S* Y = (typename TO::S*)y;                      \
  const typename TW::S* Wt = (const typename TW::S*)weight;    \
  const typename TW::S* Bs = LN ? (const typename TW::S*)bias : nullptr

// L2 prefetch ahead (`rows` and `block`; sm_90 code, elsewhere nk_prefetch_l2 is a no-op): the first thread of a
// row (or of a CTA's group of back-to-back rows) asks L2 for the rows `prefetch` rows further on, which a CTA
// that has not started yet will load. That CTA's loads then wait on L2 instead of HBM, and the bytes in flight
// to HBM no longer depend on how many x chunks the resident warps hold in registers (bulk prefetch: no
// registers, nothing to wait for). The plan sets the distance (ops/plan.ts, prefetchRows): about 2 MiB of x
// ahead. H200 (bench/README.md): +1 to +4.7 points of copy bandwidth from D = 512 to
// 16384, flat from 1/32 to 1/4 of the rows resident at once, up to 30 points lost from 1/2 on (the lines are
// evicted before their loads come); rows of 256 bytes lost 1 to 6 points (L2 already the bottleneck there), so
// the plan asks for none there. Fetches rows row..row+n-1, clipped to the launch: n > 1 only for back-to-back rows
// (x_stride == d), which are one bulk prefetch. (Kept branch-free: a test of x_stride in here made ptxas
// spill 188 bytes in the `block` RMSNorm kernels that group their weight loads.)
template <class TI>
NK_INLINE void nk_prefetch_ahead(const typename TI::S* X, long long row, int n, int rows, int d, long long x_stride) {
  if (row < rows) nk_prefetch_l2(X + row * x_stride, (long long)d * TI::SIZE * (rows - row < n ? rows - row : n));
}

#endif  // NORMKIT_FWD_ROW_CACHE_CUH
