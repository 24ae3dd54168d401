// normkit fast forward kernels: LayerNorm / RMSNorm over the last dimension, templated on the input,
// output and parameter (weight/bias) dtypes and on the kind (LN or RMS), in five thread mappings.
// Included by norm.cu, which instantiates every (kind, mapping, dtype triple) as an extern "C" kernel.
// Launch contracts: kernels/README.md (and the comments on each mapping below).
//
// Numerics (PyTorch F.layer_norm / F.rms_norm, biased variance), all in f32:
//   LN : mean = sum(x)/d; var from the values held in registers about a shift k (the row's first element), never
//        as E[x^2]-E[x]^2 of x itself: E[t^2]-E[t]^2 of t = x-k where k lies within 3 std of the mean, else the
//        centred sum of squares (ONEPASS in nk_row_cached); rstd = rsqrt(var+eps); y = (x-mean)*rstd*w + b.
//        (The `rows` tile, nk_fwd_rowstile, takes 16-bit rows without the shift: see there.)
//   RMS: rstd = rsqrt(sum(x^2)/d + eps); y = x*rstd*w. `bias` is ignored, `mean` never written.
// Deterministic: every sum has a fixed order (per-thread in chunk order, then a fixed shuffle tree /
// warp tree / cluster rank order); no atomics. In place (y == x with the same stride) is correct:
// every element of a row is loaded before the row's first reduction completes, and no element is
// stored before it (the `wide` mapping re-reads x[j] and writes y[j] in the same thread).
#ifndef NORMKIT_NORM_FWD_CUH
#define NORMKIT_NORM_FWD_CUH
#include "portable.h"

// Largest `nv` (16-byte chunks per thread) the register-caching mappings accept. The row lives in
// MAXV * 4 32-bit registers per thread (packed in the input dtype), whatever the dtype.
//   rows   : MAXV_ROWS  = 8 -> up to 32 threads * 8 chunks = 1024 f32 / 2048 f16|bf16 elements per row.
//   block  : MAXV_BLOCK = 8 -> up to 1024 threads * 8 chunks = 32768 f32 / 65536 f16|bf16 elements.
//   cluster: MAXV_BLOCK per CTA of up to 512 threads -> C * 16384 f32 / C * 32768 f16|bf16 elements.
// Both launch bounds (block 1024 threads; cluster 512 threads, 2 CTAs per SM) cap a thread at 64 registers:
// the 8-chunk row cache (32), the FULL path's addresses and the rest fit without spilling (16 chunks did not,
// even at 128 registers).
#define NK_MAXV_ROWS 8
#define NK_MAXV_BLOCK 8
// `latency`: one row per block of up to 512 threads, at most 4 chunks per thread, with the weight/bias chunks
// loaded beside x (before the reductions). Its own launch bound (one 512-thread block per SM: 128 registers)
// holds x, weight and bias for 4 chunks without spilling.
#define NK_MAXV_LATENCY 4

// ---------------------------------------------------------------- dtypes
// S: the storage type (raw bits), SIZE: bytes, to_f/from_f: exact widening / round-to-nearest-even.
struct nk_f32 {
  typedef unsigned S;
  enum { SIZE = 4 };
  static NK_INLINE float to_f(unsigned s) { return nk_u2f(s); }
  static NK_INLINE S from_f(float f) { return nk_f2u(f); }
  static NK_INLINE unsigned pack2(float lo, float) { return nk_f2u(lo); }  // unused for 4-byte types
};
struct nk_f16 {
  typedef unsigned short S;
  enum { SIZE = 2 };
  static NK_INLINE float to_f(unsigned s) { return nk_f16_to_f32((unsigned short)s); }
  static NK_INLINE S from_f(float f) { return nk_f32_to_f16(f); }
  static NK_INLINE unsigned pack2(float lo, float hi) { return nk_pack_f16x2(lo, hi); }
};
struct nk_bf16 {
  typedef unsigned short S;
  enum { SIZE = 2 };
  static NK_INLINE float to_f(unsigned s) { return nk_bf16_to_f32((unsigned short)s); }
  static NK_INLINE S from_f(float f) { return nk_f32_to_bf16(f); }
  static NK_INLINE unsigned pack2(float lo, float hi) { return nk_pack_bf16x2(lo, hi); }
};

struct alignas(16) nk_v4 { unsigned w[4]; };
struct alignas(8) nk_v2 { unsigned w[2]; };

NK_INLINE int nk_mini(int a, int b) { return a < b ? a : b; }
NK_INLINE bool nk_aligned(const void* p, unsigned a) {
  return ((unsigned long long)p & (unsigned long long)(a - 1)) == 0;
}

// Element e of N elements of T packed little-endian in 32-bit words.
template <class T>
NK_INLINE float nk_get(const unsigned* w, int e) {
  if (T::SIZE == 4) return T::to_f(w[e]);
  return T::to_f((e & 1) ? (w[e >> 1] >> 16) : (w[e >> 1] & 0xffffu));
}

// Load N elements of T from p into N*SIZE/4 words. Vector loads when `vec` (p aligned to the chunk's
// bytes, capped at 16) and the chunk is full (nvalid >= N); else scalar loads of the first nvalid
// elements, the rest zero bits (+0.0). nvalid <= 0 loads nothing.
template <class T, int N>
NK_INLINE void nk_load_words(const typename T::S* p, bool vec, int nvalid, unsigned* w) {
  constexpr int W = N * T::SIZE / 4;
  if (vec && nvalid >= N) {
    if (W == 2) {
      const nk_v2 v = *(const nk_v2*)p;
      w[0] = v.w[0];
      w[1] = v.w[1];
    } else {
#pragma unroll
      for (int k = 0; k < W; k += 4) {
        const nk_v4 v = *(const nk_v4*)((const unsigned char*)p + 4 * k);
        w[k] = v.w[0];
        w[k + 1] = v.w[1];
        w[k + 2] = v.w[2];
        w[k + 3] = v.w[3];
      }
    }
  } else if (T::SIZE == 4) {
#pragma unroll
    for (int e = 0; e < N; ++e) w[e] = e < nvalid ? (unsigned)p[e] : 0u;
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const unsigned lo = 2 * k < nvalid ? (unsigned)p[2 * k] : 0u;
      const unsigned hi = 2 * k + 1 < nvalid ? (unsigned)p[2 * k + 1] : 0u;
      w[k] = lo | (hi << 16);
    }
  }
}

template <class T, int N>
NK_INLINE void nk_load_f(const typename T::S* p, bool vec, int nvalid, float (&f)[N]) {
  unsigned w[N * T::SIZE / 4];
  nk_load_words<T, N>(p, vec, nvalid, w);
#pragma unroll
  for (int e = 0; e < N; ++e) f[e] = nk_get<T>(w, e);
}

// Store the first nvalid of N floats as T (vector stores when `vec` and the chunk is full).
template <class T, int N>
NK_INLINE void nk_store_f(typename T::S* p, bool vec, int nvalid, const float (&f)[N]) {
  constexpr int W = N * T::SIZE / 4;
  if (vec && nvalid >= N) {
    unsigned w[W];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      if (T::SIZE == 4) w[k] = (unsigned)T::from_f(f[k]);
      else w[k] = T::pack2(f[2 * k], f[2 * k + 1]);
    }
    if (W == 2) {
      nk_v2 v;
      v.w[0] = w[0];
      v.w[1] = w[1];
      *(nk_v2*)p = v;
    } else {
#pragma unroll
      for (int k = 0; k < W; k += 4) {
        nk_v4 v;
        v.w[0] = w[k];
        v.w[1] = w[k + 1];
        v.w[2] = w[k + 2];
        v.w[3] = w[k + 3];
        *(nk_v4*)((unsigned char*)p + 4 * k) = v;
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e)
      if (e < nvalid) p[e] = T::from_f(f[e]);
  }
}

// Number of elements of chunk c (VEC elements from c*VEC) inside [0, d); <= 0 when none.
template <int VEC>
NK_INLINE int nk_chunk_valid(int c, int d) {
  const long long r = (long long)d - (long long)c * VEC;
  return r >= VEC ? VEC : (int)r;
}

// y chunk from x chunk (as floats), optional weight/bias chunk (loaded here), rstd and the mean as
// k + dm (k: the row's shift, see nk_row_cached; dm: the mean of x - k): x - mean = (x - k) - dm keeps
// the digits that rounding k + dm to one float would lose when |mean| >> std.
template <class TW, bool LN, int VEC>
NK_INLINE void nk_apply(float (&f)[VEC], const typename TW::S* w, const typename TW::S* b, bool pvec,
                        int nvalid, float k, float dm, float rs) {
  if (LN) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = ((f[e] - k) - dm) * rs;
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = f[e] * rs;
  }
  if (w) {
    float g[VEC];
    nk_load_f<TW, VEC>(w, pvec, nvalid, g);
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] *= g[e];
  }
  if (LN && b) {
    float g[VEC];
    nk_load_f<TW, VEC>(b, pvec, nvalid, g);
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] += g[e];
  }
}

// The same with the weight/bias chunks already loaded, as words of TW (gw, bw): for callers that issue
// those loads early, in groups.
template <class TW, bool LN, int VEC>
NK_INLINE void nk_apply_words(float (&f)[VEC], bool has_w, const unsigned* gw, bool has_b, const unsigned* bw,
                              float k, float dm, float rs) {
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    float v = LN ? ((f[e] - k) - dm) * rs : f[e] * rs;
    if (has_w) v *= nk_get<TW>(gw, e);
    if (LN && has_b) v += nk_get<TW>(bw, e);
    f[e] = v;
  }
}

// ---------------------------------------------------------------- row reductions
// Dynamic shared memory of the block/cluster/wide mappings (floats; sizes per mapping below).
extern NK_SHARED float nk_fwd_smem[];

// Each returns the row total to every participating thread, bitwise identical in all of them.

// `rows`: xor butterfly over the tpr lanes of a row group (tpr a power of two <= warp size; groups are
// aligned inside the warp, every lane of the warp calls it).
struct nk_red_lanes {
  int tpr;
  NK_INLINE float operator()(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
      if (m < tpr) v += nk_shfl_xor(v, m);  // tpr is uniform: whole warps take the same branch
    return v;
  }
  // Two totals at once (each as operator() would give it).
  NK_INLINE void pair(float& a, float& b) { a = (*this)(a), b = (*this)(b); }
};

// `block` / `wide`: nk_block_sum over two alternating buffers of nwarps floats (2*nwarps*4 bytes).
struct nk_red_block {
  unsigned nwarps;
  unsigned parity;
  NK_INLINE float operator()(float v) {
    const float r = nk_block_sum(v, nk_fwd_smem + parity * nwarps);
    parity ^= 1u;
    return r;
  }
  NK_INLINE void pair(float& a, float& b) { a = (*this)(a), b = (*this)(b); }
};

// nk_cluster_sum's shared memory (two mbarriers, then two halves of slots) and its largest cluster.
#define NK_CLUSTER_SUM_RANKS 16
#define NK_CLUSTER_SUM_BYTES (16 + 2 * NK_CLUSTER_SUM_RANKS * 2 * 4)
#if NK_HAS_CLUSTER
// Cluster totals of N floats (N = 1, 2) without a cluster barrier, for the forward's and the backward's `cluster`
// mappings. Each CTA's thread 0 sends its CTA's values to every CTA of the cluster with st.async, which lands in
// that CTA's slots and completes bytes on its mbarrier; every thread waits on its own CTA's mbarrier, then every
// warp adds the C ranks' values in rank order 0..C-1 (lane r reads rank r): the same bits in every thread of every
// CTA. Why not the cluster barrier: its arrive.release makes each thread wait until its earlier global stores
// (the previous row's output) are performed, once per row. H200, bench/kexp_cluster.ts (2026-11-30): with a
// persistent grid, RMS f32 D = 65536 75.3 -> 82.0% of copy, LN bf16 D = 131072 64.8 (`wide`) -> 69.0.
// Exchange n uses slot half n & 1 and mbarrier n & 1 (phase parity (n >> 1) & 1). A CTA writes half q again two
// exchanges later: it sends exchange n + 2 only once it has every CTA's values of n + 1, which each CTA sends
// after a block barrier that its threads pass only after reading their slots of n.
// Shared memory: NK_CLUSTER_SUM_BYTES at an 8-byte aligned `region`, set up by setup() (every thread, once,
// before any exchange: it ends in a cluster barrier, so that no CTA sends to an uninitialised mbarrier).
// Clusters of C >= 2 CTAs only: st.async is undefined unless the cluster has more than one CTA (PTX ISA). The
// callers check that where it leaves their registers alone (nk_fwd_cluster traps at C = 1; the backward does not).
// At most NK_CLUSTER_SUM_RANKS CTAs per cluster (the portable limit is 8, the non-portable 16).
struct nk_cluster_sum {
  unsigned bars;  // shared address of the two mbarriers
  float* slots;   // [2][NK_CLUSTER_SUM_RANKS][2]: 2 values per rank whatever N is (see operator())
  unsigned csize, crank, n;
  NK_INLINE void setup(void* region) {
    bars = nk_smem_addr(region);
    slots = (float*)((char*)region + 16);
    csize = nk_cluster_size(), crank = nk_cluster_rank(), n = 0;
    if (csize > NK_CLUSTER_SUM_RANKS) nk_trap();
    if (nk_thread_x() == 0) {
      nk_mbar_init(bars);
      nk_mbar_init(bars + 8);
      nk_mbar_init_fence();
    }
    nk_cluster_sync();
  }
  // v: this CTA's totals (the same in every thread); returns the cluster's. Every thread calls it, uniformly, and
  // between two calls every thread of the CTA passes a block barrier after its last read of the previous result
  // (nk_block_sum's, in both callers): the slot reuse above depends on it.
  template <int N>
  NK_INLINE void operator()(float (&v)[N]) {
    static_assert(N == 1 || N == 2, "one or two values");
    const unsigned h = n & 1u, bar = bars + 8 * h;
    // Each half holds 2 values per rank whatever N is: LayerNorm's one-pass statistics exchange 2 values and, for an
    // ill-conditioned row, 1 next (a layout by N would let the two halves overlap past 8 ranks).
    float* half = slots + h * NK_CLUSTER_SUM_RANKS * 2;
    if (nk_thread_x() == 0) {
      nk_mbar_arm(bar, csize * N * 4);
      const unsigned mine = nk_smem_addr(half + crank * N);
      for (unsigned r = 0; r < csize; ++r) {
        if (N == 1) nk_st_async(nk_mapa(mine, r), v[0], nk_mapa(bar, r));
        else nk_st_async(nk_mapa(mine, r), v[0], v[N - 1], nk_mapa(bar, r));
      }
    }
    nk_mbar_wait(bar, (n >> 1) & 1u);
    const unsigned lane = nk_lane();
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float m = lane < csize ? half[lane * N + j] : 0.0f;
      float t = nk_shfl_idx(m, 0);
      for (unsigned r = 1; r < csize; ++r) t += nk_shfl_idx(m, (int)r);
      v[j] = t;
    }
    ++n;
  }
};

// `cluster`: the CTA total (nk_block_sum over two alternating buffers, as nk_red_block), then the cluster's
// (nk_cluster_sum, whose shared memory follows the two buffers).
struct nk_red_cluster {
  unsigned nwarps;
  unsigned parity;
  nk_cluster_sum sum;
  // This CTA's total of v (the buffer alternates, as in nk_red_block).
  NK_INLINE float block(float v) {
    const float r = nk_block_sum(v, nk_fwd_smem + parity * nwarps);
    parity ^= 1u;
    return r;
  }
  NK_INLINE float operator()(float v) {
    float p[1] = {block(v)};
    sum(p);
    return p[0];
  }
  // Two totals in one exchange (each the same bits as operator() gives: the same block sum, the same rank order).
  NK_INLINE void pair(float& a, float& b) {
    float p[2];
    p[0] = block(a);
    p[1] = block(b);
    sum(p);
    a = p[0], b = p[1];
  }
};
#endif

template <int MAXV>
NK_INLINE void nk_row_opaque(nk_v4 (&raw)[MAXV]) {
#pragma unroll
  for (int i = 0; i < MAXV; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) nk_opaque(raw[i].w[k]);
}

// Weight chunks per group (G of nk_row_cached) in the block mapping: 4 for RMSNorm on the vector path where a
// weight chunk is one 16-byte load (TW as wide as TI), else 1. On the H200 (bench/kexp.cu, bench/RESULTS.md)
// grouping cut RMSNorm's small-batch time (graph replay, bf16, 1-64 rows) from 2.4-3.6 to 1.9-2.3 us per op and
// gains 0.3 to 0.7 points of copy bandwidth in `block`. The rows mapping keeps 1: small batches take the
// `latency` mapping now, and in `rows` the groups cost RMSNorm 16-bit D = 128 and 512 2.5 points (kexp v0 98.4 /
// 98.3 against 95.9 / 95.7), and with the L2 prefetch every RMS `rows` case 1-2.6 points. LayerNorm keeps 1:
// with weight and bias for two chunks at a time its 64-register kernels, which hold the masked path too,
// spilled up to 92 bytes and lost 3 to 7 points of copy bandwidth (LN bf16 D=5120 93.3 -> 86.3%). The cluster
// mapping, for rows too long for latency to matter, keeps 1 (grouped, its 16-bit kernels spilled up to 92
// bytes).
template <class TI, class TW, bool LN, bool FULL>
struct nk_param_group {
  enum { G = FULL && !LN && TW::SIZE == TI::SIZE ? 4 : 1 };
};

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
// registers; on the H200 it took a lone LayerNorm row of 4096 bf16 from 3.0 to 2.0 us, bench/RESULTS.md).
// ONEPASS (LN, FULL path): the sums of t = x - k and of t^2 in one pass over the registers and one reduction
// (RED::pair: for a cluster, one exchange instead of two), var = E[t^2] - E[t]^2, kept where |E[t]| <= 3 std in every
// row of the warp (then E[t^2] <= 10 var, which multiplies the sum's rounding error by at most 10: f32 rstd within
// about 1.6e-6 relative, emulated; at 4 std it reached 2.1e-6) and the sum of t^2 is finite; elsewhere the centred
// second pass runs as without ONEPASS (rows whose first element lies far from the rest, and rows past ~1e19 whose
// sums overflow: there the centred pass stays finite or gives rstd 0 as before). dm, the mean, has the same bits either
// way. The decision is the same in every warp and CTA of a row: they all hold the same totals, bit for bit. H200 (bench/kexp.cu v14/v16/v18, bench/RESULTS.md): LN bf16 D=768 92.7 -> 97.5% of copy,
// D=5120 95.1 -> 97.5, a cluster row of 131072 bf16 70.6 -> 76.1; f32 rows within a point; LN 16-bit D=128 (2 lanes
// per row) lost: 83.5 -> 77.
// Weight/bias staged in shared memory (the `block` mapping's FULL LayerNorm kernels, sm_90, rows of up to 1024
// threads x 8 chunks). Production's output loop pays an L2 round trip per chunk for weight and bias after the row's
// statistics; a thread's first NS chunks instead come from shared-memory slots that cp.async filled while its x loads
// were in flight. NS: NK_STAGE_THREAD_BYTES of weight+bias per thread (4 chunks of f32 x, or of 16-bit x with 16-bit
// weights; none for 16-bit x with f32 weights, below); the other chunks' weight/bias load from L2 NK_STAGE_GROUP
// chunks at a time. H200, % of copy (bench/kexp.cu v43/v47, bench/RESULTS.md): LN f32 D=32768 (1024 x 8 chunks)
// 88.8 -> 96.1-96.5, LN bf16 D=65536 84.7-84.9 -> 95.6-95.8 (v47: with nk_row_opaque, as here; without it bf16 spilled
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
// kernels needed scratch (spills; tests/hsaco_abi.test.ts allows none).
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
// ahead. H200 (bench/kexp.cu v7/v9, bench/RESULTS.md): +1 to +4.7 points of copy bandwidth from D = 512 to
// 16384, flat from 1/32 to 1/4 of the rows resident at once, up to 30 points lost from 1/2 on (the lines are
// evicted before their loads come); rows of 256 bytes lost 1 to 6 points (L2 already the bottleneck there), so
// the plan asks for none there. Fetches rows row..row+n-1, clipped to the launch: n > 1 only for back-to-back rows
// (x_stride == d), which are one bulk prefetch. (Kept branch-free: a test of x_stride in here made ptxas
// spill 188 bytes in the `block` RMSNorm kernels that group their weight loads.)
template <class TI>
NK_INLINE void nk_prefetch_ahead(const typename TI::S* X, long long row, int n, int rows, int d, long long x_stride) {
  if (row < rows) nk_prefetch_l2(X + row * x_stride, (long long)d * TI::SIZE * (rows - row < n ? rows - row : n));
}

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
// stay live: 93.0% of copy; one kernel with both loops 95.4-95.5, bench/kexp.cu v31-v36).
// H200, LN bf16 D=128 (2^21 rows): 83.7% of copy for nk_ln_rowstwopass_*, 94.7 for this tile; with the shift 86.0
// (bench/kexp.cu v13/v24, bench/RESULTS.md).
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
#if NK_HAS_CP_ASYNC
// The staged `block` row loop (see nk_stage_params): LayerNorm with weight and bias, FULL, every thread holding
// NK_MAXV_BLOCK whole chunks (nv * tpr * VEC == d). Written apart from nk_row_cached, with its FULL ONEPASS arithmetic in the
// same order: in nk_row_cached's general form, with its masks and per-row pointers,
// ptxas sm_90 spilled 24-28 bytes and the H200 ran LN f32 D=32768 at 86.7% of copy and LN 16-bit D=65536 at 80-81,
// where this form (kexp v47) spills nothing.
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
    nk_v4 raw[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) nk_load_words<TI, VEC>(xr + (long long)(t + i * T) * VEC, true, VEC, raw[i].w);
    // Statistics as nk_row_cached's FULL ONEPASS path (comments there).
    float s = 0.0f, q1 = 0.0f;
#pragma unroll
    for (int i = 0; i < NR; ++i) nk_chunk_sums<TI>(raw[i], k, s, q1);
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
  (void)prefetch;  // no gain measured on clusters (bench/kexp.cu v7)
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

// ---------------------------------------------------------------- mapping `wide`
// One row per block, no register cache: a statistics pass and an output pass each read x (the output pass
// from L2 where the row is still there: with a block per SM, 132 rows are in flight on the H200, 17 MB of its
// 60 MB L2 at 128 KB rows, more than all of it at 512 KB). LayerNorm's statistics come from one
// pass too (nk_chan_chunk): per-thread count, mean and centred sum of squares of x-k, folded in one chunk at a
// time, so it needs no mean pass before a centred one (three passes ran at 62% of copy on the H200 for f32
// D = 32768, two at 80%: bench/kexp.cu wide3) and nothing is E[x^2]-E[x]^2. Each pass goes over the
// row in steps of NK_WIDE_STEP chunks per thread, all loads of a step issued before any is used (as Triton's
// looped reductions run): one 16-byte load in flight per thread was half the bandwidth (bench/kexp.cu wide2).
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

// ---------------------------------------------------------------- mapping `stash` (sm_90)
// Rows of more than 1024 x 8 and up to 1024 x 16 whole chunks (f32 D <= 65536, 16-bit D <= 131072: up to 256 KB), which
// no block holds in registers, in one block per row, one row per SM, without a cluster: thread t of T owns chunks
// t + i * T, the first NK_STASH_NR (i < 8) in registers, the others (nv - 8 <= 8) in its own shared-memory slots, copied
// there by cp.async (no registers; a thread reads back only what it copied itself, so no barrier).
// Launch: grid <= rows; block T = tpr <= 1024, whole warps; nv * T * VEC == d with nv - 8 even (the stashed chunks go
// out in pairs); FULL; dynamic shared memory NK_STAGE_OFFSET_BYTES + (nv - 8) * T * 16 (the block reduction's buffers
// first, as in nk_fwd_block_staged). The cluster of 8 CTAs it replaces waits on the other CTAs' partial sums once per
// row or more. H200 figures: ops/plan.ts (stashGeometry) and bench/RESULTS.md.
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
    nk_v4 raw[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) nk_load_words<TI, VEC>(xr + (long long)(t + i * T) * VEC, true, VEC, raw[i].w);
    // Sums of x - k over the register chunks, then the staged ones (a rolled loop: shared memory needs no
    // registers per chunk, and unrolled the kernels took 28-66 KB of SASS each).
    float s = 0.0f, q1 = 0.0f;
#pragma unroll
    for (int i = 0; i < NR; ++i) nk_chunk_sums<TI>(raw[i], k, s, q1);
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
// norm_cuda.ts, past precompiled/'s budget (tests/precompiled.test.ts), and 16-bit x with f32 weights spilled 156-224
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

#endif  // NORMKIT_NORM_FWD_CUH
