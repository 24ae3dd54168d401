// norm_bwd.cuh: register budget, launch parameters, per-chunk dx and parameter sums.
// Included through norm_bwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_BWD_COMMON_CUH
#define NORMKIT_BWD_COMMON_CUH
#include "norm_fwd.cuh"

// Registers the `cached` mapping may spend per thread on its cache: per chunk, the raw x and dy words and
// the chunk's parameter sums (VEC floats for dweight, VEC more for LN's dbias unless they live in shared
// memory: nk_bwd_smem_dbias). NK_BWD_REG_BUDGET / that
// cost, at most NK_MAXV_BWD, is the number of chunks a thread caches (nk_bwd_maxv; ops/plan_bwd.ts mirrors
// it). With 128 registers (launch bound 512 threads, 1 block) the budget leaves room for addresses and
// the masked path's spill-free code on sm_90.
#define NK_MAXV_BWD 6
#ifndef NK_BWD_REG_BUDGET
#define NK_BWD_REG_BUDGET 72
#endif

// flags: bit 0 (NK_BWD_PREFETCH): `cached` / `cluster` with one row per block ask L2 for the next row (the
// plan decides; measured faster for some shapes, slower for others); ignored by the other mappings.
#define NK_BWD_PARAMS                                                                                  \
  const void *dy, const void *x, const void *weight, const float *mean, const float *rstd, void *dx,   \
      float *part, int rows, int d, long long dy_stride, long long x_stride, long long dx_stride, int tpr, \
      int nv, int flags
#define NK_BWD_ARGS dy, x, weight, mean, rstd, dx, part, rows, d, dy_stride, x_stride, dx_stride, tpr, nv, flags
#define NK_BWD_PREFETCH 1
// flags bits 4..7 (NK_BWD_STAGES_SHIFT): `cached` with one row per block, and `cluster`, FULL path, 16-byte chunks of
// both x and dy, sm_90: that many rows (1..NK_BWD_MAX_STAGES) of the CTA's slice copied ahead into shared memory by
// bulk copies (nk_bwd_cached's TM); 0: loaded into registers by each thread. The plan sets it (ops/plan_bwd.ts).
#define NK_BWD_STAGES_SHIFT 4
#define NK_BWD_MAX_STAGES 4

struct alignas(16) nk_f4 { float v[4]; };

// A chunk is VEC elements: 16 bytes of the wider of x and dy (4 elements if either is f32, else 8).
template <class TX, class TD>
struct nk_bwd_geom {
  enum { VEC = 16 / (TX::SIZE > TD::SIZE ? TX::SIZE : TD::SIZE) };
  enum { XW = VEC * TX::SIZE / 4, DW = VEC * TD::SIZE / 4 };
};
// Where `cached` / `cluster` keep LayerNorm's dbias sums: in shared memory for 8-element chunks (16-bit x and
// dy), in registers otherwise. In registers they held 16-bit LN to 3 chunks per thread (RMS: 4); moving them
// out gained (H200) 8-25 points of copy for LN 16-bit at D = 128-1024, 8192 and 16384-131072
// (the longer rows fit fewer CTAs), lost ~5 at D = 2048 and 12288, and lost 2-8 for f32 LN (4-element chunks:
// twice the shared-memory accesses per element), which keeps them in registers.
// ST: the bulk-staged kernels (nk_bwd_cached's TM) keep them in shared memory for f32 LayerNorm too: 6 chunks per
// thread instead of 4, so a cluster's CTAs need not be 512 threads (H200, LN f32 D=65536: 8 x 512 threads x 4 chunks
// 75.8% of copy, 8 x 416 x 5 90.3-90.6; in one geometry they cost 0-7 points: bench/README.md).
template <class TX, class TD, bool LN, bool ST = false>
struct nk_bwd_smem_dbias {
  enum { V = LN && (nk_bwd_geom<TX, TD>::VEC == 8 || ST) };
};
// Chunks one thread of `cached` holds in registers (see NK_BWD_REG_BUDGET).
template <class TX, class TD, bool LN, bool ST = false>
struct nk_bwd_maxv {
  enum {
    PER = nk_bwd_geom<TX, TD>::XW + nk_bwd_geom<TX, TD>::DW +
          nk_bwd_geom<TX, TD>::VEC * (LN && !nk_bwd_smem_dbias<TX, TD, LN, ST>::V ? 2 : 1)
  };
  enum { V = NK_BWD_REG_BUDGET / PER < NK_MAXV_BWD ? NK_BWD_REG_BUDGET / PER : NK_MAXV_BWD };
};
// Alignment of one chunk of T (its bytes, at most 16): the vector width of its loads and stores.
template <class T, int VEC>
struct nk_chunk_align {
  enum { A = VEC * T::SIZE < 16 ? VEC * T::SIZE : 16 };
};

// FULL path: chunk c of a chunk-aligned row (VEC elements of T, VEC * T::SIZE bytes: 16 or 8), addressed as an
// array of chunks with a 32-bit index: one IMAD.WIDE per address (a 64-bit element offset, then a scaled add of
// the base pointer, took three, and a reload of the base pointer). (Stores of dx the same way kept the dx row
// pointer live through pass 2: 24-32 bytes of spills in f32-weight kernels.)
template <class T, int VEC>
NK_INLINE void nk_load_chunk(const typename T::S* base, int c, unsigned* w) {
  if (VEC * T::SIZE == 16) {
    const nk_v4 v = ((const nk_v4*)base)[c];
    w[0] = v.w[0], w[1] = v.w[1], w[2] = v.w[2], w[3] = v.w[3];
  } else {
    const nk_v2 v = ((const nk_v2*)base)[c];
    w[0] = v.w[0], w[1] = v.w[1];
  }
}

// Whether every row can take the mask-free vector path: d a multiple of the chunk, every pointer and
// row start aligned to its chunk.
template <class TX, class TD, class TW>
NK_INLINE bool nk_bwd_full(const void* dy, const void* x, const void* w, const void* dx, int d, long long dys,
                           long long xs, long long dxs) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC;
  constexpr unsigned AX = nk_chunk_align<TX, VEC>::A, AD = nk_chunk_align<TD, VEC>::A,
                     AW = nk_chunk_align<TW, VEC>::A;
  return d % VEC == 0 && nk_aligned(x, AX) && nk_aligned(dx, AX) && nk_aligned(dy, AD) && nk_aligned(w, AW) &&
         (xs * TX::SIZE) % AX == 0 && (dxs * TX::SIZE) % AX == 0 && (dys * TD::SIZE) % AD == 0;
}

// nk_bwd_dx's loop, with its row constants ar = a * rs (0 for RMS) and c = (b * rs) * rs formed by the caller.
template <bool LN, int VEC>
NK_INLINE void nk_bwd_dx_rc(const float (&xf)[VEC], const float (&df)[VEC], const float (&wf)[VEC], bool has_w,
                            float mu, float rs, float ar, float c, float (&o)[VEC]) {
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float xm = LN ? xf[e] - mu : xf[e];
    const float g = has_w ? df[e] * wf[e] : df[e];
    o[e] = nk_fma(-xm, c, nk_fma(g, rs, -ar));
  }
}

// dx of one chunk from its x, dy and weights (has_w false: w = 1), the row's stats and its sums a, b.
template <bool LN, int VEC>
NK_INLINE void nk_bwd_dx(const float (&xf)[VEC], const float (&df)[VEC], const float (&wf)[VEC], bool has_w,
                         float mu, float rs, float a, float b, float (&o)[VEC]) {
  // rs * (g - a - xh * b), xh = (x - mu) * rs, as two FMAs: g * rs - a * rs, then - (x - mu) * (b * rs * rs)
  // (a = 0 and mu = 0 for RMS): xh is never formed, one multiply per element fewer. x - mu comes first, not
  // x * c - mu * c: |mu| >> std would cancel. c = b / (var + eps) overflows where |b| > ~3.4e38 * (var + eps)
  // (forming xh first stayed finite up to ~3.4e38 * sqrt(var + eps)): with eps >= 1e-12, only for |b| > 1e26.
  const float ar = LN ? a * rs : 0.0f, c = (b * rs) * rs;
  nk_bwd_dx_rc<LN, VEC>(xf, df, wf, has_w, mu, rs, ar, c, o);
}

// dx for one chunk, and the chunk's contributions to the parameter sums (acc: this thread's slots for
// the chunk's columns, dweight's at acc[0..], dbias's at acc[d..]; null when no parameter gradient).
template <class TX, class TD, class TW, bool LN, int VEC>
NK_INLINE void nk_bwd_chunk(const float (&xf)[VEC], const float (&df)[VEC], const typename TW::S* w, bool pvec,
                            int nvalid, float mu, float rs, float a, float b, typename TX::S* dxp, bool dxvec,
                            float* acc, int d, bool accvec) {
  float wf[VEC];
  if (w) nk_load_f<TW, VEC>(w, pvec, nvalid, wf);
  float o[VEC], gx[VEC];
  nk_bwd_dx<LN, VEC>(xf, df, wf, w != nullptr, mu, rs, a, b, o);
#pragma unroll
  for (int e = 0; e < VEC; ++e) gx[e] = df[e] * (LN ? (xf[e] - mu) * rs : xf[e] * rs);
  nk_store_f<TX, VEC>(dxp, dxvec, nvalid, o);
  if (!acc) return;
  if (accvec && nvalid >= VEC) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      nk_f4 s = *(nk_f4*)(acc + k);
#pragma unroll
      for (int e = 0; e < 4; ++e) s.v[e] += gx[k + e];
      *(nk_f4*)(acc + k) = s;
      if (LN) {
        nk_f4 t = *(nk_f4*)(acc + d + k);
#pragma unroll
        for (int e = 0; e < 4; ++e) t.v[e] += df[k + e];
        *(nk_f4*)(acc + d + k) = t;
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if (e < nvalid) {
        acc[e] += gx[e];
        if (LN) acc[d + e] += df[e];
      }
  }
}

// Whether a kernel has a weight: known at compile time (NK_W_YES / NK_W_NO: no null test, no select per
// element) or tested at run time (NK_W_ANY: the pointer may be null).
#define NK_W_ANY 0
#define NK_W_YES 1
#define NK_W_NO 2
#define NK_HAS_W(WK, w) ((WK) == NK_W_YES || ((WK) == NK_W_ANY && (w) != nullptr))

// Row sums for dx: sg = sum(g) (LN), sgx = sum(g * xhat), over one chunk.
template <class TW, bool LN, int VEC, int WK = NK_W_ANY>
NK_INLINE void nk_bwd_sums(const float (&xf)[VEC], const float (&df)[VEC], const typename TW::S* w, bool pvec,
                           int nvalid, float mu, float rs, float& sg, float& sgx) {
  float wf[VEC];
  const bool hw = NK_HAS_W(WK, w);
  if (hw) nk_load_f<TW, VEC>(w, pvec, nvalid, wf);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float xh = LN ? (xf[e] - mu) * rs : xf[e] * rs;
    const float g = hw ? df[e] * wf[e] : df[e];
    sg += e < nvalid ? g : 0.0f;  // elements past the row's end are not part of it
    sgx += e < nvalid ? g * xh : 0.0f;
  }
}

// Pass 1 of `cached` over one chunk: nk_bwd_sums, plus the chunk's parameter sums (accw += dy * xhat, and
// for LN accb += dy when RB, the dbias sums in registers), which need no row sum. Elements past the row's end
// were loaded as +0 (dy = 0 adds nothing; their slots are never written out).
template <class TW, bool LN, int VEC, int WK, bool RB>
NK_INLINE void nk_bwd_pass1(const float (&xf)[VEC], const float (&df)[VEC], const typename TW::S* w, bool pvec,
                            int nvalid, float mu, float rs, float& sg, float& sgx, float (&accw)[VEC],
                            float (&accb)[VEC]) {
  nk_bwd_sums<TW, LN, VEC, WK>(xf, df, w, pvec, nvalid, mu, rs, sg, sgx);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    accw[e] += df[e] * (LN ? (xf[e] - mu) * rs : xf[e] * rs);
    if (RB) accb[e] += df[e];
  }
}

// LayerNorm's dbias sums of `cached` / `cluster` in shared memory (nk_bwd_smem_dbias): accb[e] += dy[e] in
// this thread's own slots (no other thread touches them until the end). VEC4 (the FULL path: d, hence every
// slot row, a multiple of 8 floats, and the slots 16-byte aligned): 16-byte accesses; else the first nvalid
// elements.
template <int VEC, bool VEC4>
NK_INLINE void nk_bwd_add_dy(float* accb, const float (&df)[VEC], int nvalid) {
  if (VEC4) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      nk_f4 s = *(nk_f4*)(accb + k);
#pragma unroll
      for (int e = 0; e < 4; ++e) s.v[e] += df[k + e];
      *(nk_f4*)(accb + k) = s;
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if (e < nvalid) accb[e] += df[e];
  }
}

#define NK_BWD_TYPED_PTRS                                    \
  const typename TD::S* DY = (const typename TD::S*)dy;     \
  const typename TX::S* X = (const typename TX::S*)x;       \
  const typename TW::S* W = (const typename TW::S*)weight;  \
  typename TX::S* DX = (typename TX::S*)dx

// The locals of one row (`row`) in the row loops of `wide` and `tile`: its x, dy and dx, whether each may take
// whole-chunk accesses, and the forward's statistics (mu = 0 for RMS). A macro, as NK_BWD_TYPED_PTRS: written as
// a helper returning them in a struct, nvcc moved the mean/rstd address conversions into the row loop (other PTX).
#define NK_BWD_ROW_LOCALS                                         \
  const typename TX::S* xr = X + row * x_stride;                  \
  const typename TD::S* dyr = DY + row * dy_stride;               \
  typename TX::S* dxr = DX + row * dx_stride;                     \
  const bool xvec = nk_aligned(xr, nk_chunk_align<TX, VEC>::A);   \
  const bool dvec = nk_aligned(dyr, nk_chunk_align<TD, VEC>::A);  \
  const bool dxvec = nk_aligned(dxr, nk_chunk_align<TX, VEC>::A); \
  const float mu = LN ? mean[row] : 0.0f, rs = rstd[row]

// One strided pass of `wide` and `rowsum` over a row: for this thread's chunks c = t, t + tpr, ... (of nchunks;
// VEC elements, d in the row), off (the chunk's first column), nvalid, and x and dy of the chunk as floats in xf
// and df (+0 past the row's end), then the statement given. A macro, not a helper taking the statement as a
// lambda or a helper holding the loop: written either way, nvcc compiled the kernels to other PTX.
#define NK_BWD_ROW_PASS(...)                                   \
  _Pragma("unroll 4") for (int c = t; c < nchunks; c += tpr) { \
    const long long off = (long long)c * VEC;                  \
    const int nvalid = nk_chunk_valid<VEC>(c, d);              \
    float xf[VEC], df[VEC];                                    \
    nk_load_f<TX, VEC>(xr + off, xvec, nvalid, xf);            \
    nk_load_f<TD, VEC>(dyr + off, dvec, nvalid, df);           \
    __VA_ARGS__;                                               \
  }

#endif  // NORMKIT_BWD_COMMON_CUH
