// The fused forward kernels (nk_fused_{ln|rms}_{ti}_{to}_{tw}, instantiated in fused.cu): an optional residual add
// before the norm, an optional quantization after it, rows addressed as a 2-level strided index, and a second
// weight for the rows i1 >= split (QK-norm). Contract and layout: kernels/README.md, "Fused kernels".
#ifndef NORMKIT_FUSED_CUH
#define NORMKIT_FUSED_CUH
#include "portable.h"
#include "fwd_common.cuh"
#include "fused_quant.cuh"

// Largest `nv` (16-byte chunks of x per thread): the vector path holds the row in registers, 4 words per chunk.
#define NK_FUSED_MAXV 8
// With a residual, the vector path's loads of chunk i wait for chunk i - NK_FUSED_RES_DEPTH (x and residual of
// every chunk in flight at once are 64 registers: the row cache's 32 again).
#ifndef NK_FUSED_RES_DEPTH
#define NK_FUSED_RES_DEPTH 4
#endif
// Quant modes (parameter `quant`).
#define NK_QUANT_NONE 0
#define NK_QUANT_STATIC 1
#define NK_QUANT_DYNAMIC 2

#define NK_FUSED_PARAMS                                                                                              \
  const void *x, const void *residual, void *h, void *y, const void *weight, const void *bias, const void *weight2, \
      float *mean, float *rstd, float *scale, int n0, int n1, int d, long long x_s0, long long x_s1,               \
      long long r_s0, long long r_s1, long long h_s0, long long h_s1, long long y_s0, long long y_s1, float eps,    \
      float scale_value, float scale_ub, int quant, int split, int tpr, int nv
#define NK_FUSED_ARGS                                                                                              \
  x, residual, h, y, weight, bias, weight2, mean, rstd, scale, n0, n1, d, x_s0, x_s1, r_s0, r_s1, h_s0, h_s1, y_s0, \
      y_s1, eps, scale_value, scale_ub, quant, split, tpr, nv

// Largest threads per row (a block per row).
#define NK_FUSED_MAX_THREADS 1024
// The few-chunk kernels (nk_fused_*_nv2 and _nv4): at most 2 or 4 chunks a thread in blocks of at most
// NK_FUSED_FEW_THREADS: the geometries of decode, of short rows that fit one wave and of prefill rows of up to 1024
// chunks (ops/plan_fused.ts).
#define NK_FUSED_FEW_THREADS 256

// A row's sums, in one order per row length. With N a power of two fixed by the row's length alone (the plan's
// tpr * nv, or fewer when a block's whole warps hold more), the 16-byte chunks of the row, chunk c held by thread
// c % tpr as its slot c / tpr, padding chunks +0, are the leaves of the complete binary tree that adds c and c + N/2
// first, then c and c + N/4, and so on: a thread folds its slots (nk_fused_fold8: s and s + nv/2 first), then threads
// t and t + tpr/2 are added, then t and t + tpr/4, ...: across warps (through shared memory), then within the warp
// (lanes xor 16, ..., 1). The subtree of the lower chunks is always the left operand. The tree depends on N alone,
// not on the split into tpr x nv, so the plan may pick the split from the row count and every split gives the same
// bits.

// A thread's slots folded in the tree's order. Each leaf (a slot's partial sum, +0 past the thread's nv chunks) goes
// in as leaf + 0, which turns -0 into +0 and changes nothing else, so that no partial sum is ever -0 and every +0 leaf
// is an exact identity: folding all NK_FUSED_MAXV slots gives the bits of folding the first nv alone (slot s and
// s + nv/2 first, ...), in one constant order. In bit-reversed slot order (nk_fused_slot) the pairs (s, s + 4), then
// (s, s + 2), then (s, s + 1) are neighbours, so the leaves are added as a binary counter carries: the q-th leaf waits
// in l0 when q is even, else joins l0 and goes on to l1, l2 by q's next bits. Registers only, whether q is a constant
// (unrolled) or not (the scalar path's rolled loop).
static_assert(NK_FUSED_MAXV == 8, "nk_fused_fold8 folds 8 slots");
NK_INLINE int nk_fused_slot(int q) { return ((q & 1) << 2) | (q & 2) | ((q >> 2) & 1); }
struct nk_fused_fold8 {
  float l0 = 0.0f, l1 = 0.0f, l2 = 0.0f, sum = 0.0f;
  NK_INLINE void add(int q, float leaf) {
    float v = nk_add_rn(leaf, 0.0f);
    if (!(q & 1)) {
      l0 = v;
      return;
    }
    v = nk_add_rn(l0, v);
    if (!(q & 2)) {
      l1 = v;
      return;
    }
    v = nk_add_rn(l1, v);
    if (!(q & 4)) {
      l2 = v;
      return;
    }
    sum = nk_add_rn(l2, v);
  }
};
// The fold of leaf(s) over the slots s, unrolled (the vector path). Each leaf is made opaque once computed: that keeps
// the compiler computing them one at a time in this order (left free, clang interleaved them and needed 20 more VGPRs,
// spilling on wave 64).
// MAXV: the slots a thread holds (slots past it are +0 leaves).
template <int MAXV, class Leaf>
NK_INLINE float nk_fused_fold(Leaf leaf) {
  nk_fused_fold8 f;
#pragma unroll
  for (int q = 0; q < NK_FUSED_MAXV; ++q) {
    const int sl = nk_fused_slot(q);
    unsigned u = nk_f2u(sl < MAXV ? leaf(sl) : 0.0f);
    nk_opaque(u);
    f.add(q, nk_u2f(u));
  }
  return f.sum;
}

// Row reductions in the order above; max: the same shapes with fmaxf semantics (a NaN never wins; inputs are
// |y| >= 0), any order giving the same result.
// COLS > 0 (the few-chunk kernels: at most COLS warps a row): the sum across warps folds each lane's column in
// registers after one barrier.
template <int COLS = 0>
struct nk_fused_red {
  int tpr;
  unsigned parity;
  float* buf;  // 2 x NK_FUSED_MAX_THREADS floats: consecutive reductions alternate halves
  // N values reduced across the row at once, with one exchange across warps for all of them (N slices of one buffer
  // half when N * tpr <= NK_FUSED_MAX_THREADS, else one after another): the first N - MAXN summed, each in the same
  // tree (the same bits as alone), the last MAXN maxed (|y| >= 0 values: max2, any order gives the same result).
  template <int N, int MAXN = 0>
  NK_INLINE void reduce(float (&v)[N]) {
    auto op = [](int k, float a, float b) { return k < N - MAXN ? nk_add_rn(a, b) : max2(a, b); };
    if (tpr > NK_WARP_SIZE) {
      if constexpr (N > 1) {
        if (N * tpr > NK_FUSED_MAX_THREADS) {
#pragma unroll
          for (int k = 0; k < N; ++k) {
            float one[1] = {v[k]};
            if (k < N - MAXN) reduce(one);
            else reduce<1, 1>(one);
            v[k] = one[0];
          }
          return;
        }
      }
      float* b = buf + parity * NK_FUSED_MAX_THREADS;
      parity ^= 1u;
      float* bk[N];  // sum k's slice
#pragma unroll
      for (int k = 0; k < N; ++k) bk[k] = b + k * tpr;
      const unsigned t = nk_thread_x();
#pragma unroll
      for (int k = 0; k < N; ++k) bk[k][t] = v[k];
      nk_barrier();
      if constexpr (COLS > 0) {
        // Every lane reads its column (lane l of each warp) and adds warp w and w + h for h = nw/2, ..., 1: the
        // additions, and their operands' order, of the loop below.
        const unsigned lane = nk_lane(), nw = (unsigned)tpr / NK_WARP_SIZE;
        float c[N][COLS];
#pragma unroll
        for (int w = 0; w < COLS; ++w) {
#pragma unroll
          for (int k = 0; k < N; ++k) c[k][w] = (unsigned)w < nw ? bk[k][w * NK_WARP_SIZE + lane] : 0.0f;
        }
#pragma unroll
        for (int h = COLS / 2; h >= 1; h >>= 1) {
          if ((unsigned)h < nw) {
#pragma unroll
            for (int w = 0; w < h; ++w) {
#pragma unroll
              for (int k = 0; k < N; ++k) c[k][w] = op(k, c[k][w], c[k][w + h]);
            }
          }
        }
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = c[k][0];
      } else {
        // Threads t and t + h added in place for h = tpr/2, ..., NK_WARP_SIZE (warp w and w + nw/2 first), a barrier
        // after each level; then every warp reads warp 0's lanes.
        for (unsigned h = (unsigned)tpr / 2; h >= NK_WARP_SIZE; h >>= 1) {
          if (t < h) {
#pragma unroll
            for (int k = 0; k < N; ++k) bk[k][t] = op(k, bk[k][t], bk[k][t + h]);
          }
          nk_barrier();
        }
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = bk[k][nk_lane()];
      }
    }
    // The lower lane's sum first in every lane (a + b = b + a except for which NaN comes out, which may differ off
    // NVIDIA: every lane and every split must give the same bits).
    const unsigned lane = nk_lane();
#pragma unroll
    for (int m = NK_WARP_SIZE / 2; m > 0; m >>= 1) {
      if (m < tpr) {
        float o[N];
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = nk_shfl_xor(v[k], m);
        const bool hi = (lane & (unsigned)m) != 0;
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = hi ? op(k, o[k], v[k]) : op(k, v[k], o[k]);
      }
    }
  }
  NK_INLINE float sum(float v) {
    float a[1] = {v};
    reduce(a);
    return a[0];
  }
  // Two sums with one exchange across warps (LayerNorm's sum and sum of squares).
  NK_INLINE void pair(float& a, float& b) {
    float v[2] = {a, b};
    reduce(v);
    a = v[0];
    b = v[1];
  }
  static NK_INLINE float max2(float a, float b) { return b > a ? b : a; }
  static NK_INLINE float warp_max(float v, int width) {
#pragma unroll
    for (int m = NK_WARP_SIZE / 2; m > 0; m >>= 1)
      if (m < width) v = max2(v, nk_shfl_xor(v, m));
    return v;
  }
  NK_INLINE float max(float v) {
    if (tpr <= NK_WARP_SIZE) return warp_max(v, tpr);
    float* b = buf + parity * NK_FUSED_MAX_THREADS;
    parity ^= 1u;
    v = warp_max(v, NK_WARP_SIZE);
    if (nk_lane() == 0) b[nk_thread_x() / NK_WARP_SIZE] = v;
    nk_barrier();
    const unsigned lane = nk_lane();
    return warp_max(lane < nk_block_dim_x() / NK_WARP_SIZE ? b[lane] : 0.0f, NK_WARP_SIZE);
  }
};

// nk_opaque for a 64-bit value (a pointer).
#if defined(__HIP__)
NK_INLINE void nk_opaque64(unsigned long long& v) { asm volatile("" : "+v"(v)); }
#else
NK_INLINE void nk_opaque64(unsigned long long& v) { asm volatile("" : "+l"(v)); }
#endif

// c "depends" on v: addresses computed from c wait for v, so that neither the compiler nor ptxas issues those loads
// earlier (the residual's: NK_FUSED_RES_DEPTH).
#if defined(__HIP__)
NK_INLINE void nk_after(int& c, float v) { asm volatile("" : "+v"(c) : "v"(v)); }
#else
NK_INLINE void nk_after(int& c, float v) { asm volatile("" : "+r"(c) : "f"(v)); }
#endif

// One 16-byte store (p 16-byte aligned). CUDA: the vector store intrinsic, as a 16-byte struct store came out of nvcc
// as four 4-byte stores in these kernels (a warp's store then writes a quarter of each 16 bytes it covers).
#if defined(__CUDACC__) && !defined(__HIP__)
NK_INLINE void nk_store_v4(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
  __stwb((uint4*)p, make_uint4(a, b, c, d));
}
#else
NK_INLINE void nk_store_v4(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
  nk_v4 v;
  v.w[0] = a, v.w[1] = b, v.w[2] = c, v.w[3] = d;
  *(nk_v4*)p = v;
}
#endif

// Store N elements of T (1, 2 or 4 bytes) held as packed words (nk_load_words' layout): when `vec` and the chunk is
// full, one store per 16 bytes (or one of the chunk's 4 or 8 bytes), else the first nvalid elements one by one.
template <class T, int N>
NK_INLINE void nk_store_words(typename T::S* p, bool vec, int nvalid, const unsigned* w) {
  constexpr int W = N * T::SIZE / 4;
  static_assert(W == 1 || W == 2 || W % 4 == 0, "a chunk of 4, 8 or 16n bytes");
  if (vec && nvalid >= N) {
    if (W == 1) {
      *(unsigned*)p = w[0];
    } else if (W == 2) {
      nk_v2 v;
      v.w[0] = w[0], v.w[1] = w[1];
      *(nk_v2*)p = v;
    } else {
#pragma unroll
      for (int k = 0; k < W; k += 4) nk_store_v4((unsigned char*)p + 4 * k, w[k], w[k + 1], w[k + 2], w[k + 3]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (e < nvalid) {
        if (T::SIZE == 4) p[e] = (typename T::S)w[e];
        else if (T::SIZE == 2) p[e] = (typename T::S)((e & 1) ? (w[e >> 1] >> 16) : (w[e >> 1] & 0xffffu));
        else p[e] = (typename T::S)(w[e >> 2] >> (8 * (e & 3)));
      }
    }
  }
}

// Whether T is nk_bf16 (nk_add2's instruction).
template <class T>
struct nk_is_bf16 {
  enum { V = 0 };
};
template <>
struct nk_is_bf16<nk_bf16> {
  enum { V = 1 };
};
// Two 16-bit sums (words of two elements), each rounded once to nearest even. The f32 sum of two 16-bit values rounded
// to 8 or 11 significant bits is the correctly rounded sum (24 >= 2 * 11 + 2), which CUDA computes in one instruction
// for both: add.rn.bf16x2 (sm_90; fma.rn.bf16x2 with 1 on sm_80), add.rn.f16x2. Elsewhere the f32 sums, rounded.
template <class TI>
NK_INLINE unsigned nk_add2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  unsigned d;
  if constexpr (nk_is_bf16<TI>::V) {
#if __CUDA_ARCH__ >= 900
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3f803f80u), "r"(b));
#endif
  } else {
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  }
  return d;
#else
  return TI::pack2(nk_add_rn(nk_get<TI>(&a, 0), nk_get<TI>(&b, 0)), nk_add_rn(nk_get<TI>(&a, 1), nk_get<TI>(&b, 1)));
#endif
}

// h = round_TI(f32 x + f32 r) for one chunk of words, in place in xw.
template <class TI, int N>
NK_INLINE void nk_residual_add(unsigned* xw, const unsigned* rw) {
  if (TI::SIZE == 4) {
#pragma unroll
    for (int e = 0; e < N; ++e) xw[e] = nk_f2u(nk_add_rn(nk_u2f(xw[e]), nk_u2f(rw[e])));
  } else {
#pragma unroll
    for (int k = 0; k < N / 2; ++k) xw[k] = nk_add2<TI>(xw[k], rw[k]);
  }
}

// f32 a * b, one rounding, never contracted into an fma with a later add (HIP: as nk_add_rn).
#if defined(__CUDACC__) && !defined(__HIP__)
NK_INLINE float nk_mul_rn(float a, float b) { return __fmul_rn(a, b); }
#else
NK_INLINE float nk_mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
#endif

// RMSNorm's y is (h * w) * rs. The product p = h * w (h * 1 without a weight) does not depend on the row's statistics,
// and rounding is monotonic, so with rs >= 0 max |y| = max |p| * rs exactly: a dynamic scale's amax comes from the
// first pass, reduced with the sum of squares (nk_rms_amax), and y is computed once.
NK_INLINE float nk_rms_prod(float h, bool has_w, float w) { return nk_mul_rn(h, has_w ? w : 1.0f); }
// The largest |y| of a row that is not NaN, from pm (the largest |p|, NaN never taken) and rs: pm * rs, or 0 where that
// is NaN (rs NaN: every y is NaN; rs 0 with pm infinite, or rs infinite with pm 0: every y is 0 or NaN).
NK_INLINE float nk_rms_amax(float pm, float rs) {
  const float a = nk_mul_rn(pm, rs);
  return a == a ? a : 0.0f;
}

// y in f32 for one chunk: LN ((h - k) - dm) * rs * w + b, RMS (h * w) * rs, with w, b the chunk's weight/bias words
// (has_w / has_b: given). LN: one formula for every case, fma(t, w, b) with w = 1 and b = -0 standing in for an absent
// weight and bias: t * 1 + b and t * w + (-0) are exactly t + b and t * w (zero signs included), so it gives the
// bits of the separate forms, and the compiler keeps one code path (four, selected per element, spilled 1.6 KB in LN
// with f32 weights). Explicit operations, no contraction left to the compiler: LayerNorm's dynamic path computes y
// twice per element and needs the same bits both times.
template <class TI, class TW, bool LN, int PE>
NK_INLINE void nk_fused_y(const unsigned* hw, int p, bool has_w, const unsigned* gw, bool has_b, const unsigned* bw,
                          float k, float dm, float rs, float (&f)[PE]) {
#pragma unroll
  for (int e = 0; e < PE; ++e) {
    const float v = nk_get<TI>(hw, p + e), w = has_w ? nk_get<TW>(gw, e) : 1.0f;
    if constexpr (LN) {
      const float t = nk_add_rn(nk_add_rn(v, -k), -dm) * rs;
      f[e] = nk_fma(t, w, has_b ? nk_get<TW>(bw, e) : -0.0f);
    } else {
      f[e] = nk_mul_rn(nk_rms_prod(v, has_w, w), rs);
    }
  }
}

// The largest |h * w| of PE elements (RMSNorm's dynamic scale, nk_rms_prod) folded into pm: elements past nvalid and
// NaN products never taken.
template <class TI, class TW, int PE>
NK_INLINE void nk_rms_pmax(const unsigned* hw, int p, int nvalid, bool has_w, const unsigned* gw, float& pm) {
#pragma unroll
  for (int e = 0; e < PE; ++e) {
    const float a = nk_absf(nk_rms_prod(nk_get<TI>(hw, p + e), has_w, has_w ? nk_get<TW>(gw, e) : 1.0f));
    if (p + e < nvalid) pm = nk_fused_red<>::max2(pm, a);
  }
}

// PE elements of y as TO's packed words (PE * TO::SIZE / 4 of them, nk_load_words' layout): a float dtype rounded to
// nearest even, or PE bytes of a quantized dtype from y / s: f32 division, or with FAST the same quotients from qt.
template <class TO, int PE, bool FAST = false>
NK_INLINE void nk_fused_pack(const float (&f)[PE], float s, unsigned* w, const nk_quot* qt = nullptr) {
  static_assert(PE % 4 == 0, "whole words of bytes");
  if constexpr (nk_is_quant<TO>::V && FAST) {
    // The products y * r, and the corrected quotients only for a piece with one near a rounding boundary
    // (nk_quot::near_boundary): the bytes of the quotients either way. The NaN bytes are set only for a piece with a NaN.
    float q[PE];
    bool near = false, nan = false;
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      q[e] = qt->product(f[e]);
      near |= nk_quot::near_boundary<TO>(q[e]);
    }
    if (near) {
#pragma unroll
      for (int e = 0; e < PE; ++e) q[e] = (*qt)(f[e]);
    }
#pragma unroll
    for (int e = 0; e < PE; ++e) nan |= q[e] != q[e];
#pragma unroll
    for (int k = 0; k < PE / 4; ++k)
      w[k] = nk_quant2<TO, true>(q[4 * k], q[4 * k + 1]) | (nk_quant2<TO, true>(q[4 * k + 2], q[4 * k + 3]) << 16);
    if (nan) {
#pragma unroll
      for (int k = 0; k < PE / 4; ++k)
        w[k] = nk_quant2<TO>(q[4 * k], q[4 * k + 1]) | (nk_quant2<TO>(q[4 * k + 2], q[4 * k + 3]) << 16);
    }
  } else if constexpr (nk_is_quant<TO>::V) {
#pragma unroll
    for (int k = 0; k < PE / 4; ++k)
      w[k] = nk_quant2<TO>(f[4 * k] / s, f[4 * k + 1] / s) | (nk_quant2<TO>(f[4 * k + 2] / s, f[4 * k + 3] / s) << 16);
  } else if constexpr (TO::SIZE == 4) {
#pragma unroll
    for (int k = 0; k < PE; ++k) w[k] = (unsigned)TO::from_f(f[k]);
  } else {
#pragma unroll
    for (int k = 0; k < PE / 2; ++k) w[k] = TO::pack2(f[2 * k], f[2 * k + 1]);
  }
}

// Store PE elements of y (a piece of a chunk, the scalar path): vector stores when `vec` and the piece is whole. A
// float dtype goes through nk_store_f, whose element-wise stores round with from_f (as the CPU reference).
template <class TO, int PE>
NK_INLINE void nk_fused_store(typename TO::S* p, bool vec, int nvalid, float (&f)[PE], float s) {
  if constexpr (nk_is_quant<TO>::V) {
    unsigned w[PE / 4];
    nk_fused_pack<TO, PE>(f, s, w);
    nk_store_words<TO, PE>(p, vec, nvalid, w);
  } else {
    nk_store_f<TO, PE>(p, vec, nvalid, f);
  }
}

// Whether a tensor in use is aligned for chunk access: the base to `a` bytes and each row stride of an extent
// above 1 to a multiple of it (a null tensor: yes).
NK_INLINE bool nk_fused_aligned(const void* p, long long s0, int n0, long long s1, int n1, int size, int a) {
  return !p || (nk_aligned(p, (unsigned)a) && (n0 <= 1 || (s0 * size) % a == 0) && (n1 <= 1 || (s1 * size) % a == 0));
}

// The per-chunk statistics, one definition for both paths (the same operations in the same order: the same bits),
// each a leaf of nk_fused_red's tree. LN: the chunk's sum of h - k; its centred sum of squares; RMS: the squares fma'd
// into q (+0 for a fresh chunk) in element order.
template <class TI, int VEC>
NK_INLINE float nk_chunk_shifted_sum(const unsigned* w, int nvalid, float k) {
  float si = nk_get<TI>(w, 0) - k;
#pragma unroll
  for (int e = 1; e < VEC; ++e)
    if (e < nvalid) si += nk_get<TI>(w, e) - k;
  return si;
}
template <class TI, int VEC>
NK_INLINE float nk_chunk_centred_sq(const unsigned* w, int nvalid, float k, float dm) {
  const float c0 = (nk_get<TI>(w, 0) - k) - dm;
  float qi = nk_mul_rn(c0, c0);
#pragma unroll
  for (int e = 1; e < VEC; ++e) {
    const float c = (nk_get<TI>(w, e) - k) - dm;
    if (e < nvalid) qi = nk_fma(c, c, qi);
  }
  return qi;
}
template <class TI, int VEC>
NK_INLINE void nk_chunk_sq(const unsigned* w, int nvalid, float& q) {
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float v = nk_get<TI>(w, e);
    if (e < nvalid) q = nk_fma(v, v, q);
  }
}
// LN's shift k: the row's first element of h, computed as nk_residual_add computes it.
template <class TI>
NK_INLINE float nk_fused_shift(const typename TI::S* xr, const typename TI::S* rr) {
  unsigned kw[1] = {(unsigned)xr[0]};
  if (rr) {
    const unsigned rk[1] = {(unsigned)rr[0]};
    const float hk = nk_add_rn(nk_get<TI>(kw, 0), nk_get<TI>(rk, 0));
    kw[0] = TI::SIZE == 4 ? nk_f2u(hk) : TI::pack2(hk, 0.0f);
  }
  return nk_get<TI>(kw, 0);
}
// LayerNorm's statistics from the row's sums about the shift k: s of h - k and q1 of (h - k)^2. dm = s / d and
// rs = 1 / sqrt(q1 / d - dm^2 + eps), unless the row is ill-conditioned for that difference (dm^2 > 9 times the
// variance: more than a digit of q1 / d cancels) or q1 is not finite (overflow, NaN); then the caller takes the centred
// sum of (h - k - dm)^2 for rs. Rounded operations only (no contraction): the same bits in every few-chunk kernel, on
// both paths. The NK_FUSED_MAXV kernels keep two passes (the one-pass sums spilled up to 200 bytes a thread under their
// 64 registers), so a row's LayerNorm bits depend on the kernel family: the plan runs every split of a row length on
// one family (ops/plan_fused.ts, fusedKernelFor).
NK_INLINE bool nk_ln_stats(float s, float q1, float fd, float eps, float& dm, float& rs) {
  dm = s / fd;
  const float m2 = nk_mul_rn(dm, dm), v1 = nk_add_rn(q1 / fd, -m2);
  rs = nk_rsqrt(v1 + eps);
  return !(m2 <= nk_mul_rn(9.0f, v1) && q1 <= 3.4028235e38f);
}

// The dynamic scale from the row's amax.
template <class TO>
NK_INLINE float nk_dynamic_scale(float am, float ub) {
  constexpr float floor_s = 1.0f / (TO::QMAX * 512.0f);
  float s = am / TO::QMAX;
  s = floor_s > s ? floor_s : s;
  return ub < s ? ub : s;
}

// body(i, p, nvalid) for each piece of PE elements (p = 0, PE, ...) of the thread's chunks i < MAXV that holds data
// (nvalid = nval(i) > p), unrolled.
template <int MAXV, int VEC, int PE, class NVal, class Body>
NK_INLINE void nk_for_pieces(NVal nval, Body body) {
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int nvalid = nval(i);
#pragma unroll
    for (int p = 0; p < VEC; p += PE) {
      if (nvalid > p) body(i, p, nvalid);
    }
  }
}

// The vector path's row loop (every chunk whole, every tensor aligned; nk_fused picks it once per launch): the row's
// chunks cached in registers (raw), the loops over them unrolled.
//
// MAXV: the chunks a thread holds at most. With fewer than NK_FUSED_MAXV (NEAR: the few-chunk kernels, a row spread
// over many threads) the chunks' weights and bias are loaded with x and residual, in one round trip, LayerNorm's dynamic
// scale's y is kept in registers at 2 chunks a thread (at 4 the output loop computes it again), LayerNorm's statistics take one pass (nk_ln_stats) and a
// quantized y / s no division (nk_quot). RMSNorm's dynamic scale comes from the first pass in every kernel
// (nk_rms_prod).
template <class TI, class TO, class TW, bool LN, int MAXV>
NK_INLINE void nk_fused_rows_vec(NK_FUSED_PARAMS, float* red_buf) {
  constexpr bool VP = true;
  constexpr int VEC = 16 / TI::SIZE;
  constexpr bool NEAR = MAXV < NK_FUSED_MAXV;
  // The output loops take a chunk in pieces of PE elements whose weights are 16 bytes (PW words): 16-bit x with f32
  // weights in two halves, so that a chunk's weight and bias need 8 registers, not 16. y is packed piece by piece into
  // YW words and stored once per chunk: a warp's store then covers whole 32-byte sectors (a store per piece wrote half
  // of each sector twice, doubling the L2's store requests).
  constexpr int PE = 4, PW = PE * TW::SIZE / 4;
  constexpr int YW = VEC * TO::SIZE / 4;
  constexpr bool Q = nk_is_quant<TO>::V;
  typedef typename TI::S SI;
  typedef typename TO::S SO;
  typedef typename TW::S SW;
  const SI* X = (const SI*)x;
  const SI* R = (const SI*)residual;
  SI* H = (SI*)h;
  SO* Y = (SO*)y;
  const SW* B = LN ? (const SW*)bias : nullptr;
  const int t = (int)nk_thread_x();
  const int rpb = tpr <= NK_WARP_SIZE ? (int)nk_block_dim_x() / tpr : 1;  // rows per block
  const int lr = tpr <= NK_WARP_SIZE ? (t & (tpr - 1)) : t;               // this thread's place in its row
  const int g = tpr <= NK_WARP_SIZE ? t / tpr : 0;
  const int nchunks = (d - 1) / VEC + 1;
  const float fd = (float)d;
  // RMSNorm's dynamic amax from the first pass (nk_rms_prod) in the few-chunk kernels. The 8-chunk kernel takes max |y|
  // in a pass over y as LayerNorm does, the same value: there the first pass's weight loads spill (f16 x: 448 bytes).
  const bool rms_dynamic = NEAR && !LN && Q && quant == NK_QUANT_DYNAMIC;
  nk_fused_red<NEAR ? NK_FUSED_FEW_THREADS / NK_WARP_SIZE : 0> red{tpr, 0u, red_buf};
  // Valid elements of this thread's i-th chunk of row r (<= 0: none).
#define NK_NVAL(i) \
  ((active && (i) < nv && lr + (i) * tpr < nchunks) ? VEC : 0)
  // Whole blocks step together (the reductions need every lane): a group past the last row computes nothing.
  // (i0, i1) of row r, stepped along with r: the 64-bit divisions (calls) happen once, before the loop.
  const long long rows = (long long)n0 * n1;
  const long long step = (long long)nk_grid_dim_x() * rpb;
  const long long n1d = n1 > 0 ? n1 : 1;  // n1 = 0: nothing to launch (below)
  const long long step0 = step / n1d;
  const int step1 = (int)(step - step0 * n1);
  long long i0 = ((long long)nk_block_x() * rpb + g) / n1d;
  int i1 = (int)((long long)nk_block_x() * rpb + g - i0 * n1d);
  // Global memory from here on: before it, the launch checks and the divisions above overlap the previous kernel
  // of a programmatic dependent launch. Every kernel waits, even one with nothing to do, so that the kernel after it
  // never overtakes the one before.
  nk_pdl_enter();
  if (d == 0 || rows == 0) return;
  const float s_static = quant == NK_QUANT_STATIC ? (scale ? *scale : scale_value) : 1.0f;
  for (long long base = (long long)nk_block_x() * rpb; base < rows; base += step) {
    const long long r = base + g;
    const bool active = r < rows;
    const SI* xr = X + i0 * x_s0 + i1 * x_s1;
    const SI* rr = R + i0 * r_s0 + i1 * r_s1;
    // x and residual chunks all loaded before the first store of h (which may alias residual: the compiler keeps
    // later loads behind it), h = x + residual in place in raw.
    nk_v4 raw[MAXV];
    int cl = lr;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int nvalid = NK_NVAL(i);
      if (R && i >= NK_FUSED_RES_DEPTH) nk_after(cl, nk_u2f(raw[i - NK_FUSED_RES_DEPTH].w[0]));
      const long long off = (long long)(cl + i * tpr) * VEC;
      nk_load_words<TI, VEC>(xr + off, VP, nvalid, raw[i].w);
      if (R) {
        unsigned rw[4];
        nk_load_words<TI, VEC>(rr + off, VP, nvalid, rw);
        nk_residual_add<TI, VEC>(raw[i].w, rw);
      }
    }
    // NEAR: the chunks' weights and bias, loaded now with x and residual (one round trip), where they take at most 16
    // registers (not LayerNorm's f32 weight and bias on 16-bit x: 32).
    constexpr bool PRE = NEAR && MAXV * (VEC / PE) * PW * (LN ? 2 : 1) <= 16;
    unsigned gwn[PRE ? MAXV : 1][VEC / PE][PW], bwn[PRE && LN ? MAXV : 1][VEC / PE][PW];
    if constexpr (PRE) {
      const SW* Wn = (const SW*)(i1 < split ? weight : weight2);
#pragma unroll
      for (int i = 0; i < MAXV; ++i) {
        const int nvalid = NK_NVAL(i);
#pragma unroll
        for (int p = 0; p < VEC; p += PE) {
          const long long off = (long long)(lr + i * tpr) * VEC + p;
          if (nvalid > p && Wn) nk_load_words<TW, PE>(Wn + off, VP, nvalid - p, gwn[i][p / PE]);
          if constexpr (LN) {
            if (nvalid > p && B) nk_load_words<TW, PE>(B + off, VP, nvalid - p, bwn[i][p / PE]);
          }
        }
      }
    }
    // The row's first element (LN's shift k), as the thread holding it computes it: every thread reads it itself.
    const float k = (LN && active) ? nk_fused_shift<TI>(xr, R ? rr : nullptr) : 0.0f;

    // Statistics, each chunk's partial sum in element order, then the tree (nk_fused_red). LN: about the shift k; in
    // the few-chunk kernels the sums of h - k and of (h - k)^2 reduced together (nk_ln_stats) and the centred sum of
    // squares only for an ill-conditioned row, in the others the centred sum of squares in a second pass over the
    // registers. RMS: the sum of squares.
    float dm = 0.0f, rs, am_rms = 0.0f;
    if (LN) {
      float s = nk_fused_fold<MAXV>([&](int i) {
        const int nvalid = NK_NVAL(i);
        const float si = nk_chunk_shifted_sum<TI, VEC>(raw[i].w, nvalid, k);
        return nvalid > 0 ? si : 0.0f;
      });
      bool centred = true;
      if constexpr (NEAR) {
        float q1 = nk_fused_fold<MAXV>([&](int i) {
          const int nvalid = NK_NVAL(i);
          const float qi = nk_chunk_centred_sq<TI, VEC>(raw[i].w, nvalid, k, 0.0f);
          return nvalid > 0 ? qi : 0.0f;
        });
        red.pair(s, q1);
        centred = nk_ln_stats(s, q1, fd, eps, dm, rs);
      } else {
        dm = red.sum(s) / fd;
      }
      if (!NEAR || nk_any(centred)) {  // a warp of sub-warp rows: every lane shuffles, each row keeps its statistics
        nk_row_opaque<MAXV>(raw);
        const float q = nk_fused_fold<MAXV>([&](int i) {
          const int nvalid = NK_NVAL(i);
          const float qi = nk_chunk_centred_sq<TI, VEC>(raw[i].w, nvalid, k, dm);
          return nvalid > 0 ? qi : 0.0f;
        });
        const float qs = red.sum(q);
        if (centred) rs = nk_rsqrt(qs / fd + eps);
      }
    } else {
      const float q = nk_fused_fold<MAXV>([&](int i) {
        float qi = 0.0f;
        nk_chunk_sq<TI, VEC>(raw[i].w, NK_NVAL(i), qi);
        return qi;
      });
      if (rms_dynamic) {
        // The dynamic scale's max |h * w| (nk_rms_prod), reduced with the sum of squares: the preloaded weights, else
        // loaded here (and again by the output loop).
        const SW* Wp = (const SW*)(i1 < split ? weight : weight2);
        float pm = 0.0f;
        nk_for_pieces<MAXV, VEC, PE>([&](int i) { return NK_NVAL(i); }, [&](int i, int p, int nvalid) {
          unsigned gw[PW];
          if constexpr (PRE) {
#pragma unroll
            for (int k = 0; k < PW; ++k) gw[k] = gwn[i][p / PE][k];
          } else if (Wp) {
            nk_load_words<TW, PE>(Wp + (long long)(lr + i * tpr) * VEC + p, VP, nvalid - p, gw);
          }
          nk_rms_pmax<TI, TW, PE>(raw[i].w, p, nvalid, Wp != nullptr, gw, pm);
        });
        float qm[2] = {q, pm};
        red.template reduce<2, 1>(qm);
        rs = nk_rsqrt(qm[0] / fd + eps);
        am_rms = nk_rms_amax(qm[1], rs);
      } else {
        rs = nk_rsqrt(red.sum(q) / fd + eps);
      }
    }
    // h is stored only now: every thread of the row has read k (from x[0] and residual[0], which h may replace) before
    // the reductions above, which the thread storing h[0] cannot pass before them (a barrier, or a shuffle fed by them).
    if (H) {
      SI* hr = H + i0 * h_s0 + i1 * h_s1;
#pragma unroll
      for (int i = 0; i < MAXV; ++i) {
        const int nvalid = NK_NVAL(i);
        if (nvalid > 0) nk_store_words<TI, VEC>(hr + (long long)(lr + i * tpr) * VEC, VP, nvalid, raw[i].w);
      }
    }
    if (active && lr == 0) {
      if (LN && mean) mean[r] = k + dm;
      if (rstd) rstd[r] = rs;
    }
    nk_row_opaque<MAXV>(raw);

    // The per-chunk weight/bias addresses: not hoisted above the statistics, nor out of the row loop (PRE, the few-chunk
    // kernels' preloaded weights, does not use them).
    unsigned long long wsel = (unsigned long long)(i1 < split ? weight : weight2);
    int c0 = lr;
    nk_opaque(c0);
    nk_opaque64(wsel);
    const SW* W = (const SW*)wsel;  // (reassigned after the dynamic scale's loop)
    const bool has_w = W != nullptr, has_b = LN && B != nullptr;
    // A piece's weight and bias words: the preloaded ones, else loaded here.
    auto weights = [&](int i, int p, long long off, int nvalid, unsigned* gw, unsigned* bw) {
      if constexpr (PRE) {
#pragma unroll
        for (int k = 0; k < PW; ++k) {
          gw[k] = gwn[i][p / PE][k];
          if constexpr (LN) bw[k] = bwn[i][p / PE][k];
        }
      } else {
        if (has_w) nk_load_words<TW, PE>(W + off, VP, nvalid - p, gw);
        if (has_b) nk_load_words<TW, PE>(B + off, VP, nvalid - p, bw);
      }
    };
    // LayerNorm, NEAR, with a dynamic scale, at most 2 chunks a thread: y as the scale's loop computes it, for the output
    // loop (at 4 the output loop computes y again, as the 8-chunk kernels do).
    constexpr bool KEEP = NEAR && MAXV <= 2;
    float yk[KEEP && Q && LN ? MAXV * VEC : 1];
    bool y_kept = false;
    float s = s_static;
    if constexpr (Q && !LN) {
      if (rms_dynamic) {
        s = nk_dynamic_scale<TO>(am_rms, scale_ub);
        if (active && lr == 0) scale[r] = s;
      }
    }
    if constexpr (Q && (LN || !NEAR)) {
      if (quant == NK_QUANT_DYNAMIC) {
        // Dynamic scale (LayerNorm; RMSNorm in the 8-chunk kernel): amax of |y| over the row (NaN ignored); y is
        // computed again below with the same operations (NEAR: kept in yk instead).
        float am = 0.0f;
        nk_for_pieces<MAXV, VEC, PE>([&](int i) { return NK_NVAL(i); }, [&](int i, int p, int nvalid) {
          const long long off = (long long)(c0 + i * tpr) * VEC + p;
          unsigned gw[PW], bw[PW];
          weights(i, p, off, nvalid, gw, bw);
          float f[PE];
          nk_fused_y<TI, TW, LN, PE>(raw[i].w, p, has_w, gw, has_b, bw, k, dm, rs, f);
#pragma unroll
          for (int e = 0; e < PE; ++e) {
            if (p + e < nvalid) am = nk_fused_red<>::max2(am, nk_absf(f[e]));
            if constexpr (KEEP) yk[i * VEC + p + e] = f[e];
          }
        });
        am = red.max(am);
        s = nk_dynamic_scale<TO>(am, scale_ub);
        if constexpr (!KEEP) {
          // The output loop below loads the weights and computes y again: kept from reusing this loop's values (64
          // floats per thread at nv = 8) by making the row and the addresses opaque in between.
          nk_row_opaque<MAXV>(raw);
          nk_opaque(c0);
          nk_opaque64(wsel);
          W = (const SW*)wsel;
        }
        if (active && lr == 0) scale[r] = s;
        y_kept = KEEP;
      }
    }
    SO* yr = Y + i0 * y_s0 + i1 * y_s1;
    // The quotients y / s of a quantized y without a division; LayerNorm on f32 x keeps the division, which spills
    // less there (its weights, bias and x take the registers nk_quot's corrections need).
    constexpr bool QUOT = NEAR && Q && !(LN && TI::SIZE == 4);
    nk_quot qt;  // read only with QUOT
    if constexpr (QUOT) qt = nk_quot(s);
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int nvalid = NK_NVAL(i);  // VEC or 0: d is a multiple of VEC here
      if (nvalid > 0) {
        unsigned yw[YW];
#pragma unroll
        for (int p = 0; p < VEC; p += PE) {
          const long long off = (long long)(c0 + i * tpr) * VEC + p;
          float f[PE];
          if (KEEP && Q && LN && y_kept) {
#pragma unroll
            for (int e = 0; e < PE; ++e) f[e] = yk[KEEP && LN ? i * VEC + p + e : 0];
          } else {
            unsigned gw[PW], bw[PW];
            weights(i, p, off, nvalid, gw, bw);
            nk_fused_y<TI, TW, LN, PE>(raw[i].w, p, has_w, gw, has_b, bw, k, dm, rs, f);
          }
          nk_fused_pack<TO, PE, QUOT>(f, s, yw + p * TO::SIZE / 4, &qt);
        }
        nk_store_words<TO, VEC>(yr + (long long)(c0 + i * tpr) * VEC, VP, nvalid, yw);
      }
    }
    i0 += step0, i1 += step1;
    if (i1 >= n1) i0 += 1, i1 -= n1;
  }
#undef NK_NVAL
}

// The scalar path's row loop (d not a multiple of the chunk, or a tensor not aligned for it): the same chunk-to-thread
// assignment and the same arithmetic in the same order as nk_fused_rows_vec, with nothing cached: each pass loads the
// thread's chunks element by element again (h from h when it is written, so that an h written over the residual is
// read back rather than recomputed), in loops that are not unrolled. A fallback: small code, few registers.
template <class TI, class TO, class TW, bool LN, bool ONEPASS>
NK_INLINE void nk_fused_rows_scalar(NK_FUSED_PARAMS, float* red_buf) {
  constexpr int VEC = 16 / TI::SIZE, PE = 4, PW = PE * TW::SIZE / 4;
  constexpr bool Q = nk_is_quant<TO>::V;
  typedef typename TI::S SI;
  typedef typename TO::S SO;
  typedef typename TW::S SW;
  const SI* X = (const SI*)x;
  const SI* R = (const SI*)residual;
  SI* H = (SI*)h;
  SO* Y = (SO*)y;
  const SW* B = LN ? (const SW*)bias : nullptr;
  const int t = (int)nk_thread_x();
  const int rpb = tpr <= NK_WARP_SIZE ? (int)nk_block_dim_x() / tpr : 1;
  const int lr = tpr <= NK_WARP_SIZE ? (t & (tpr - 1)) : t;
  const int g = tpr <= NK_WARP_SIZE ? t / tpr : 0;
  const int nchunks = (d - 1) / VEC + 1;
  const float fd = (float)d;
  const bool rms_dynamic = !LN && Q && quant == NK_QUANT_DYNAMIC;  // amax from the first pass (nk_rms_prod)
  nk_fused_red<> red{tpr, 0u, red_buf};
  const long long rows = (long long)n0 * n1;
  const long long step = (long long)nk_grid_dim_x() * rpb;
  const long long n1d = n1 > 0 ? n1 : 1;  // n1 = 0: nothing to launch (below)
  const long long step0 = step / n1d;
  const int step1 = (int)(step - step0 * n1);
  long long i0 = ((long long)nk_block_x() * rpb + g) / n1d;
  int i1 = (int)((long long)nk_block_x() * rpb + g - i0 * n1d);
  // Valid elements of chunk c (<= 0: none, also past the thread's nv chunks and for a group past the last row).
#define NK_NVALC(i, c) ((active && (i) < nv && (c) < nchunks) ? nk_mini(VEC, d - (c) * VEC) : 0)
  // Global memory from here on: before it, the launch checks and the divisions above overlap the previous kernel
  // of a programmatic dependent launch. Every kernel waits, even one with nothing to do, so that the kernel after it
  // never overtakes the one before.
  nk_pdl_enter();
  if (d == 0 || rows == 0) return;
  const float s_static = quant == NK_QUANT_STATIC ? (scale ? *scale : scale_value) : 1.0f;
  for (long long base = (long long)nk_block_x() * rpb; base < rows; base += step) {
    const long long r = base + g;
    const bool active = r < rows;
    const SI* xr = X + i0 * x_s0 + i1 * x_s1;
    const SI* rr = R + i0 * r_s0 + i1 * r_s1;
    SI* hr = H + i0 * h_s0 + i1 * h_s1;
    const SI* src = H ? (const SI*)hr : xr;  // h after the first pass
    const float k = (LN && active) ? nk_fused_shift<TI>(xr, R ? rr : nullptr) : 0.0f;
    // The first pass stores h, which may replace x[0] or residual[0]: every thread reads k before any store. (The loop
    // over rows is block-uniform, so the barrier is reached by every thread.)
    if (LN && H) nk_barrier();
    const SW* W = (const SW*)(i1 < split ? weight : weight2);
    const bool has_w = W != nullptr, has_b = LN && B != nullptr;
    // Each chunk's partial sums (LN: of h - k, and of (h - k)^2 with ONEPASS; RMS: of squares), folded as they come
    // (slots in nk_fused_slot's order).
    nk_fused_fold8 acc, acc2;
    float pm = 0.0f;  // rms_dynamic: max |h * w|
#pragma unroll 1
    for (int q = 0; q < NK_FUSED_MAXV; ++q) {
      const int i = nk_fused_slot(q), c = lr + i * tpr, nvalid = NK_NVALC(i, c);
      float part = 0.0f, part2 = 0.0f;
      if (nvalid > 0) {
        unsigned w[4];
        nk_load_words<TI, VEC>(xr + (long long)c * VEC, false, nvalid, w);
        if (R) {
          unsigned rw[4];
          nk_load_words<TI, VEC>(rr + (long long)c * VEC, false, nvalid, rw);
          nk_residual_add<TI, VEC>(w, rw);
        }
        if (H) nk_store_words<TI, VEC>(hr + (long long)c * VEC, false, nvalid, w);
        if (LN) {
          part = nk_chunk_shifted_sum<TI, VEC>(w, nvalid, k);
          if (ONEPASS) part2 = nk_chunk_centred_sq<TI, VEC>(w, nvalid, k, 0.0f);
        } else {
          nk_chunk_sq<TI, VEC>(w, nvalid, part);
          if (rms_dynamic) {
#pragma unroll
            for (int p = 0; p < VEC; p += PE) {
              if (nvalid > p) {
                unsigned gw[PW];
                if (has_w) nk_load_words<TW, PE>(W + (long long)c * VEC + p, false, nvalid - p, gw);
                nk_rms_pmax<TI, TW, PE>(w, p, nvalid, has_w, gw, pm);
              }
            }
          }
        }
      }
      acc.add(q, part);
      if (LN && ONEPASS) acc2.add(q, part2);
    }
    float dm = 0.0f, rs, am_rms = 0.0f;
    if (LN) {
      bool centred = true;
      if constexpr (ONEPASS) {
        float s = acc.sum, q1 = acc2.sum;
        red.pair(s, q1);
        centred = nk_ln_stats(s, q1, fd, eps, dm, rs);
      } else {
        dm = red.sum(acc.sum) / fd;
      }
      if (!ONEPASS || nk_any(centred)) {
        nk_fused_fold8 sq;
#pragma unroll 1
        for (int q = 0; q < NK_FUSED_MAXV; ++q) {
          const int i = nk_fused_slot(q), c = lr + i * tpr, nvalid = NK_NVALC(i, c);
          float part = 0.0f;
          if (nvalid > 0) {
            unsigned w[4];
            nk_load_words<TI, VEC>(src + (long long)c * VEC, false, nvalid, w);
            part = nk_chunk_centred_sq<TI, VEC>(w, nvalid, k, dm);
          }
          sq.add(q, part);
        }
        const float qs = red.sum(sq.sum);
        if (centred) rs = nk_rsqrt(qs / fd + eps);
      }
    } else if (rms_dynamic) {
      float qm[2] = {acc.sum, pm};
      red.reduce<2, 1>(qm);
      rs = nk_rsqrt(qm[0] / fd + eps);
      am_rms = nk_rms_amax(qm[1], rs);
    } else {
      rs = nk_rsqrt(red.sum(acc.sum) / fd + eps);
    }
    if (active && lr == 0) {
      if (LN && mean) mean[r] = k + dm;
      if (rstd) rstd[r] = rs;
    }
    SO* yr = Y + i0 * y_s0 + i1 * y_s1;
    float s = s_static;
    if constexpr (Q && !LN) {
      if (rms_dynamic) {
        s = nk_dynamic_scale<TO>(am_rms, scale_ub);
        if (active && lr == 0) scale[r] = s;
      }
    }
    // Pass `out` 0: LayerNorm's dynamic scale's amax (quantized y only); 1: y.
#pragma unroll 1
    for (int out = LN && Q && quant == NK_QUANT_DYNAMIC ? 0 : 1; out < 2; ++out) {
      float am = 0.0f;
#pragma unroll 1
      for (int i = 0; i < NK_FUSED_MAXV; ++i) {
        const int c = lr + i * tpr, nvalid = NK_NVALC(i, c);
        if (nvalid <= 0) continue;
        unsigned hw[4];
        nk_load_words<TI, VEC>(src + (long long)c * VEC, false, nvalid, hw);
#pragma unroll
        for (int p = 0; p < VEC; p += PE) {
          if (nvalid > p) {
            const long long off = (long long)c * VEC + p;
            unsigned gw[PW], bw[PW];
            if (has_w) nk_load_words<TW, PE>(W + off, false, nvalid - p, gw);
            if (has_b) nk_load_words<TW, PE>(B + off, false, nvalid - p, bw);
            float f[PE];
            nk_fused_y<TI, TW, LN, PE>(hw, p, has_w, gw, has_b, bw, k, dm, rs, f);
            if (out == 0) {
#pragma unroll
              for (int e = 0; e < PE; ++e)
                if (p + e < nvalid) am = nk_fused_red<>::max2(am, nk_absf(f[e]));
            } else {
              nk_fused_store<TO, PE>(yr + off, false, nvalid - p, f, s);
            }
          }
        }
      }
      if constexpr (Q) {
        if (out == 0) {
          s = nk_dynamic_scale<TO>(red.max(am), scale_ub);
          if (active && lr == 0) scale[r] = s;
        }
      }
    }
    i0 += step0, i1 += step1;
    if (i1 >= n1) i0 += 1, i1 -= n1;
  }
#undef NK_NVALC
}

// Checks the launch contract (a violation traps), then runs the vector path when d is a multiple of the chunk and
// every tensor in use is aligned for it (x, residual, h, weights, bias: 16 bytes; y: its chunk, 16 bytes or VEC
// bytes of a quantized dtype), else the scalar path. MAXV and MAXT: the most chunks a thread and threads a block this
// kernel takes (NK_FUSED_MAXV and NK_FUSED_MAX_THREADS, or the few-chunk kernels' 2 or 4 and NK_FUSED_FEW_THREADS).
template <class TI, class TO, class TW, bool LN, int MAXV, int MAXT>
NK_INLINE void nk_fused(NK_FUSED_PARAMS) {
  constexpr int VEC = 16 / TI::SIZE;
  constexpr bool Q = nk_is_quant<TO>::V;
  constexpr int YA = Q ? VEC : 16;
  static_assert(MAXV <= NK_FUSED_MAXV && MAXT <= NK_FUSED_MAX_THREADS, "within the scalar path's and buffers' sizes");
  nk_check_wave();
  const unsigned bdim = nk_block_dim_x();
  bool bad = nv < 1 || nv > MAXV || tpr < 1 || d < 0 || n0 < 0 || n1 < 0 || (long long)nv * tpr * VEC < d;
  // tpr and nv powers of two (nk_fused_red's tree); past a warp, a block per row of at most MAXT.
  bad = bad || (tpr & (tpr - 1)) != 0 || (nv & (nv - 1)) != 0;
  if (tpr <= NK_WARP_SIZE) bad = bad || bdim % NK_WARP_SIZE != 0;
  else bad = bad || (unsigned)tpr != bdim || bdim > MAXT || bdim > NK_WARP_SIZE * NK_WARP_SIZE;
  if constexpr (MAXT < NK_FUSED_MAX_THREADS) bad = bad || bdim > MAXT;
  bad = bad || (Q ? (quant != NK_QUANT_STATIC && quant != NK_QUANT_DYNAMIC) : quant != NK_QUANT_NONE);
  bad = bad || (residual && !h) || (Q && quant == NK_QUANT_DYNAMIC && !scale);
  if (bad) nk_trap();
  const bool vp = d % VEC == 0 && nk_fused_aligned(x, x_s0, n0, x_s1, n1, TI::SIZE, 16) &&
                  nk_fused_aligned(residual, r_s0, n0, r_s1, n1, TI::SIZE, 16) &&
                  nk_fused_aligned(h, h_s0, n0, h_s1, n1, TI::SIZE, 16) &&
                  nk_fused_aligned(y, y_s0, n0, y_s1, n1, TO::SIZE, YA) && nk_aligned(weight, 16) &&
                  nk_aligned(weight2, 16) && (!LN || nk_aligned(bias, 16));
  // The reductions' shared memory, one buffer for whichever path runs (nk_fused_red).
  NK_SHARED float red_buf[2 * NK_FUSED_MAX_THREADS];
  if (vp) nk_fused_rows_vec<TI, TO, TW, LN, MAXV>(NK_FUSED_ARGS, red_buf);
  else nk_fused_rows_scalar<TI, TO, TW, LN, (MAXV < NK_FUSED_MAXV)>(NK_FUSED_ARGS, red_buf);
}

#endif  // NORMKIT_FUSED_CUH
