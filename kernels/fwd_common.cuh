// norm_fwd.cuh: dtypes, chunk loads and stores, row reductions, the cluster exchange.
// Included through norm_fwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FWD_COMMON_CUH
#define NORMKIT_FWD_COMMON_CUH
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
// Dynamic shared memory of the block/cluster/wide mappings (floats; sizes in each mapping's file).
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
// (the previous row's output) are performed, once per row. H200, bench/README.md: with a
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
// weight chunk is one 16-byte load (TW as wide as TI), else 1. On the H200 (bench/README.md)
// grouping cut RMSNorm's small-batch time (graph replay, bf16, 1-64 rows) from 2.4-3.6 to 1.9-2.3 us per op and
// gains 0.3 to 0.7 points of copy bandwidth in `block`. The rows mapping keeps 1: small batches take the
// `latency` mapping now, and in `rows` the groups cost RMSNorm 16-bit D = 128 and 512 2.5 points (98.4 /
// 98.3 against 95.9 / 95.7), and with the L2 prefetch every RMS `rows` case 1-2.6 points. LayerNorm keeps 1:
// with weight and bias for two chunks at a time its 64-register kernels, which hold the masked path too,
// spilled up to 92 bytes and lost 3 to 7 points of copy bandwidth (LN bf16 D=5120 93.3 -> 86.3%). The cluster
// mapping, for rows too long for latency to matter, keeps 1 (grouped, its 16-bit kernels spilled up to 92
// bytes).
template <class TI, class TW, bool LN, bool FULL>
struct nk_param_group {
  enum { G = FULL && !LN && TW::SIZE == TI::SIZE ? 4 : 1 };
};

#endif  // NORMKIT_FWD_COMMON_CUH
