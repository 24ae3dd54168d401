// norm_fwd.cuh: mapping `stash` (sm_90).
// Included through norm_fwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FWD_STASH_CUH
#define NORMKIT_FWD_STASH_CUH
#include "fwd_wide.cuh"

// ---------------------------------------------------------------- mapping `stash` (sm_90)
// Rows of more than 1024 x 8 and up to 1024 x 16 whole chunks (f32 D <= 65536, 16-bit D <= 131072: up to 256 KB), which
// no block holds in registers, in one block per row, one row per SM, without a cluster: thread t of T owns chunks
// t + i * T, the first NK_STASH_NR (i < 8) in registers, the others (nv - 8 <= 8) in its own shared-memory slots, copied
// there by cp.async (no registers; a thread reads back only what it copied itself, so no barrier).
// Launch: grid <= rows; block T = tpr <= 1024, whole warps; nv * T * VEC == d with nv - 8 even (the stashed chunks go
// out in pairs); FULL; dynamic shared memory NK_STAGE_OFFSET_BYTES + (nv - 8) * T * 16 (the block reduction's buffers
// first, as in nk_fwd_block_staged). The cluster of 8 CTAs it replaces waits on the other CTAs' partial sums once per
// row or more. H200 figures: ops/plan.ts (stashGeometry) and bench/README.md.
// Statistics as nk_fwd_block_staged (nk_row_cached's FULL ONEPASS arithmetic); weight/bias loaded two chunks at a time.
#define NK_STASH_NR 8
#define NK_STASH_MAXS 8
#if NK_HAS_CP_ASYNC
// Chunks i0 .. i0 + G - 1 of the row (values v): their weight/bias loaded together, then normalized and stored.
template <class TI, class TO, class TW, bool LN, int G>
NK_INLINE void nk_stash_out(const nk_v4* v, int i0, int T, int t, const typename TW::S* Wt, const typename TW::S* Bs,
                            typename TO::S* yr, float k, float dm, float rs) {
  constexpr int VEC = 16 / TI::SIZE, WV = VEC * TW::SIZE / 4;
  unsigned gw[G][WV], bw[G][WV];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const long long off = (long long)(t + (i0 + j) * T) * VEC;
    if (Wt) nk_load_words<TW, VEC>(Wt + off, true, VEC, gw[j]);
    if (LN && Bs) nk_load_words<TW, VEC>(Bs + off, true, VEC, bw[j]);
  }
#pragma unroll
  for (int j = 0; j < G; ++j) {
    float f[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = nk_get<TI>(v[j].w, e);
    nk_apply_words<TW, LN, VEC>(f, Wt != nullptr, gw[j], LN && Bs != nullptr, bw[j], k, dm, rs);
    nk_store_f<TO, VEC>(yr + (long long)(t + (i0 + j) * T) * VEC, true, VEC, f);
  }
}
template <class TI, class TO, class TW, bool LN>
NK_INLINE void nk_fwd_stash_loop(NK_FWD_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE, NR = NK_STASH_NR, NS = NK_STASH_MAXS, G = NK_STAGE_GROUP;
  NK_FWD_TYPED_PTRS;
  const int T = (int)nk_block_dim_x();
  int t = (int)nk_thread_x();
  const int ns = nv - NR;
  const float fd = (float)d;
  nk_red_block red{(unsigned)T / NK_WARP_SIZE, 0u};
  nk_v4* const stage = (nk_v4*)((unsigned char*)nk_fwd_smem + NK_STAGE_OFFSET_BYTES);
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TI::S* xr = X + row * x_stride;
    typename TO::S* yr = Y + row * y_stride;
#pragma unroll
    for (int j = 0; j < NS; ++j)
      if (j < ns) nk_cp_async16(&stage[j * T + t], xr + (long long)(t + (NR + j) * T) * VEC);
    nk_cp_async_commit();
    const float k = LN ? TI::to_f(xr[0]) : 0.0f;
    // Sums of x - k over the register chunks, then the staged ones (a rolled loop: shared memory needs no
    // registers per chunk, and unrolled the kernels took 28-66 KB of SASS each).
    nk_v4 raw[NR];
    float s, q1;
    nk_load_chunk_sums<TI>(xr, t, T, k, raw, s, q1);
    nk_cp_async_wait_all();
#pragma unroll 1
    for (int j = 0; j < ns; ++j) nk_chunk_sums<TI>(stage[j * T + t], k, s, q1);
    float dm = 0.0f, rs;
    if (LN) {
      red.pair(s, q1);
      dm = s / fd;
      const float v1 = q1 / fd - dm * dm;
      const bool centred = nk_any(!(dm * dm <= 9.0f * v1 && q1 <= 3.4028235e38f));
      rs = nk_rsqrt(v1 + eps);
      nk_row_opaque<NR>(raw);
      if (centred) {
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < NR; ++i) q += nk_chunk_centred<TI>(raw[i], k, dm);
#pragma unroll 1
        for (int j = 0; j < ns; ++j) q += nk_chunk_centred<TI>(stage[j * T + t], k, dm);
        rs = nk_rsqrt(red(q) / fd + eps);
      }
    } else {
      rs = nk_rsqrt(red(q1) / fd + eps);
    }
    if (t == 0 && LN && mean) mean[row] = k + dm;
    if (t == 0 && rstd) rstd[row] = rs;
    nk_row_opaque<NR>(raw);
    nk_opaque(t);  // the weight/bias addresses below: not hoisted above the statistics
#pragma unroll
    for (int g = 0; g < NR; g += G) nk_stash_out<TI, TO, TW, LN, G>(raw + g, g, T, t, Wt, Bs, yr, k, dm, rs);
#pragma unroll 1
    for (int g = 0; g < ns; g += G) {
      nk_v4 v[G];
#pragma unroll
      for (int j = 0; j < G; ++j) v[j] = stage[(g + j) * T + t];
      nk_stash_out<TI, TO, TW, LN, G>(v, NR + g, T, t, Wt, Bs, yr, k, dm, rs);
    }
  }
}
#endif
template <class A, class B>
struct nk_same {
  enum { YES = 0 };
};
template <class A>
struct nk_same<A, A> {
  enum { YES = 1 };
};
// Which dtype triples have the stash loop (ops/plan.ts stashBuilt): weights of x's dtype, y in x's dtype or f32. Their
// sm_90 SASS is 12-41 KB per kernel; built for the 18 kernels with weights of x's dtype it took 266 KB more of
// norm_cuda.ts, past precompiled/'s budget (tests/unit/precompiled.test.ts), and 16-bit x with f32 weights spilled 156-224
// bytes. The others trap (the plan sends those rows to a cluster).
template <class TI, class TO, class TW>
struct nk_stash_built {
  enum { YES = nk_same<TW, TI>::YES && (nk_same<TO, TI>::YES || nk_same<TO, nk_f32>::YES) };
};
template <class TI, class TO, class TW, bool LN>
NK_INLINE void nk_fwd_stash(NK_FWD_PARAMS) {
#if NK_HAS_CP_ASYNC
  constexpr int VEC = 16 / TI::SIZE;
  const unsigned T = nk_block_dim_x();
  if ((unsigned)tpr != T || nv <= NK_STASH_NR || nv > NK_STASH_NR + NK_STASH_MAXS || (nv - NK_STASH_NR) % NK_STAGE_GROUP ||
      (long long)nv * tpr * VEC != d ||
      nk_dynamic_smem_bytes() < NK_STAGE_OFFSET_BYTES + (unsigned)(nv - NK_STASH_NR) * T * 16u)
    nk_trap();
  nk_fwd_stash_loop<TI, TO, TW, LN>(NK_FWD_ARGS);
#else
  (void)x, (void)y, (void)weight, (void)bias, (void)mean, (void)rstd, (void)rows, (void)d;
  (void)x_stride, (void)y_stride, (void)eps, (void)tpr, (void)nv, (void)prefetch;
  nk_trap();
#endif
}
// The `stash` kernels (nk_{ln|rms}_stash_*): the stash loop for FULL calls, and `wide`'s masked loop on the same launch
// (tpr = blockDim.x; nv ignored; x read twice) for the others (unaligned rows). Where the loop is not built (the
// triples nk_stash_built leaves out; sm_80 SASS, compute_80 PTX, HIP: the plan takes `stash` on compute capability 9
// only) the kernel traps.
template <class TI, class TO, class TW, bool LN>
NK_INLINE void nk_fwd_stash_entry(NK_FWD_PARAMS) {
#if NK_HAS_CP_ASYNC
  if constexpr (nk_stash_built<TI, TO, TW>::YES) {
    if (nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride))
      nk_fwd_stash<TI, TO, TW, LN>(NK_FWD_ARGS);
    else
      nk_fwd_wide<TI, TO, TW, LN, false>(NK_FWD_ARGS);
    return;
  }
#endif
  (void)x, (void)y, (void)weight, (void)bias, (void)mean, (void)rstd, (void)rows, (void)d;
  (void)x_stride, (void)y_stride, (void)eps, (void)tpr, (void)nv, (void)prefetch;
  nk_trap();
}

#endif  // NORMKIT_FWD_STASH_CUH
