// fused.cuh: the 1-byte output dtypes of the fused kernels and their conversions from f32.
// Included through fused.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_FUSED_QUANT_CUH
#define NORMKIT_FUSED_QUANT_CUH
#include "portable.h"

// f32 a + b, one IEEE rounding, never contracted or reassociated (the rounding tricks below rely on it). HIP: clang
// contracts by default (-ffp-contract=fast-honor-pragmas: a product feeding this add would become one fma), so the
// add is marked uncontractable, as __fadd_rn is for nvcc.
#if defined(__CUDACC__) && !defined(__HIP__)
NK_INLINE float nk_add_rn(float a, float b) { return __fadd_rn(a, b); }
#else
NK_INLINE float nk_add_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
#endif
NK_INLINE float nk_absf(float v) { return nk_u2f(nk_f2u(v) & 0x7fffffffu); }

// fp8 (OCP E4M3 / E5M2) from f32: round to nearest even, SATFINITE (|v| past the largest finite value, Inf
// included, becomes +-max), NaN becomes the format's NaN byte with the input's sign (E4M3 0x7F/0xFF, E5M2
// 0x7E/0xFE), zero and underflow keep the sign. MB: mantissa bits, BIAS: exponent bias, MAXB: the largest
// finite byte, NANB: the NaN byte. Written with integer and exact f32 operations only: the same bytes on every
// target, and the same as the sm_89+ cvt below (whose NaN output nk_fp8_fix_nan overrides).
template <int MB, int BIAS, unsigned MAXB, unsigned NANB>
struct nk_fp8_format {
  typedef unsigned char S;
  enum { SIZE = 1, NAN_BYTE = NANB };
  // The largest finite value as f32 bits: exponent field MAXB >> MB, mantissa MAXB's low MB bits.
  static constexpr unsigned MAX_BITS = ((((MAXB >> MB) + 127u - BIAS) << 23) | ((MAXB & ((1u << MB) - 1u)) << (23 - MB)));
  static NK_INLINE unsigned soft(float v) {
    const unsigned u = nk_f2u(v), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    unsigned r;
    if (a > 0x7f800000u) {
      r = NANB;
    } else if (a > MAX_BITS) {
      r = MAXB;  // beyond the largest finite value, Inf included (the bit patterns order like the values)
    } else if (a >= (128u - BIAS) << 23) {
      // Normal in the target: drop 23 - MB mantissa bits rounding to nearest even (a carry steps the exponent),
      // then rebias. a <= MAX_BITS cannot round past the largest finite value.
      constexpr unsigned SH = 23 - MB;
      const unsigned rr = a + ((1u << (SH - 1)) - 1u) + ((a >> SH) & 1u);
      r = (rr >> SH) - ((127u - BIAS) << MB);
    } else {
      // Subnormal in the target: units of 2^(1 - BIAS - MB). a * 2^(BIAS - 1 + MB) < 2^MB is exact; adding 2^23 rounds
      // it to an integer (nearest even), which the low bits then hold. 2^MB is the smallest normal's byte.
      const float m = nk_u2f(a) * nk_u2f((unsigned)(127 + BIAS - 1 + MB) << 23);
      r = nk_f2u(nk_add_rn(m, 8388608.0f)) - 0x4b000000u;
    }
    return r | sign;
  }
};
// HW: which sm_89+ cvt converts it (nk_quant2). GRID: nk_quot::near_boundary.
struct nk_fp8e4m3 : nk_fp8_format<3, 7, 0x7eu, 0x7fu> {
  enum { HW = 1, GRID = 1 << 19 };
  static constexpr float QMAX = 448.0f;
};
struct nk_fp8e5m2 : nk_fp8_format<2, 15, 0x7bu, 0x7eu> {
  enum { HW = 2, GRID = 1 << 19 };
  static constexpr float QMAX = 57344.0f;
};

// int8: round half to even, clamp to [-128, 127], NaN -> 0. Adding 1.5 * 2^23 to a value in [-128, 127] rounds
// it to an integer (nearest even) held in the low bits.
struct nk_int8 {
  typedef unsigned char S;
  enum { SIZE = 1, HW = 3, GRID = 1 << 16 };
  static constexpr float QMAX = 127.0f;
  static NK_INLINE unsigned soft(float v) {
    if (!(v == v)) return 0u;
    v = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
    return (nk_f2u(nk_add_rn(v, 12582912.0f)) - 0x4b400000u) & 0xffu;
  }
};

// q = y / s for a row's (or a launch's) scale s, as the f32 division rounds it, without a division per element:
// r = 1 / s (rounded to nearest), q0 = y * r, then two corrections by the remainder y - s * q. The first leaves q
// within an ulp of y / s, so its remainder is exact and the second rounds correctly (Markstein's theorem). That needs
// s in [2^-60, 2^121] (no remainder underflows where |y / s| >= 2^-42, smaller quotients converting to a zero byte
// either way, with y's sign, and 1 / s is normal): a scale outside is brought in by c = 2^100 or 2^-100, y with it
// (y * c, exact except where it overflows, y / s then past every format's range, or underflows, y / s then far
// below it). Where |q0| >= 2^100 (y / s past every format's range, y infinite or NaN) q0 itself, which converts as
// y / s does. s = +Inf: q0 (y * 0, or NaN), as y / Inf.
struct nk_quot {
  float s, r, c, big;
  nk_quot() = default;
  NK_INLINE explicit nk_quot(float scale) {
    c = scale < 0x1p-60f ? 0x1p100f : (scale > 0x1p121f && scale <= 3.4028235e38f ? 0x1p-100f : 1.0f);
    s = scale * c;
    r = 1.0f / s;
    big = r != 0.0f ? 0x1p100f : 0.0f;
  }
  NK_INLINE float operator()(float y0) const {
    const float y = y0 * c;
    const float q0 = nk_fma(y, r, -0.0f);  // y * r, one rounding, -0 kept
    const float q1 = nk_fma(nk_fma(-s, q0, y), r, q0);
    const float q2 = nk_fma(nk_fma(-s, q1, y), r, q1);
    const float qs = nk_u2f((nk_f2u(q2) & 0x7fffffffu) | (nk_f2u(y) & 0x80000000u));  // y = -0 gives -0
    return nk_absf(q0) < big ? qs : q0;
  }
  // q0 = y * r alone: within 2.5 units in the last place of y / s (r and the product, each rounded to nearest), so
  // within 6 bit patterns of the quotient operator() returns (units halve below a power of two). Every value at which
  // T's conversion changes its byte lies on a multiple of T::GRID bit patterns (the f32 pattern of a fp8 midpoint has
  // its low 19 bits zero; an int8 half-integer below 128 its low 16), so where q0 lies more than 8 patterns from every
  // multiple, q0 and operator()'s quotient convert to the same byte.
  NK_INLINE float product(float y0) const { return nk_fma(y0 * c, r, -0.0f); }
  template <class T>
  static NK_INLINE bool near_boundary(float q0) {
    return ((nk_f2u(q0) + 8u) & (T::GRID - 1u)) < 16u;
  }
};

// Whether T is one of the 1-byte quantized dtypes (the float dtypes have SIZE 2 or 4).
template <class T>
struct nk_is_quant {
  enum { V = T::SIZE == 1 };
};

// Two values to two bytes (lo in bits 0..7), as `soft` converts them: the hardware conversion where the target has it
// (sm_89+: cvt.rn.satfinite.e4m3x2/e5m2x2.f32 round to nearest even and saturate as `soft` does, with the NaN bytes
// set as `soft` sets them: nk_fp8_nan, the sign kept; every CUDA target: cvt.rni.s8.f32 rounds to nearest even, clamps
// to [-128, 127] and takes NaN to 0, as nk_int8::soft), `soft` elsewhere. RAW (fp8 on sm_89+): the hardware's NaN
// byte, whatever the sign, for a caller that has checked for NaN (nk_fused_pack).
NK_INLINE unsigned nk_fp8_nan(unsigned b, float v, unsigned nanb) {
  const unsigned u = nk_f2u(v);
  return (u & 0x7fffffffu) > 0x7f800000u ? (nanb | ((u >> 24) & 0x80u)) : b;
}
template <class T, bool RAW = false>
NK_INLINE unsigned nk_quant2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && !defined(__HIP__)
  if constexpr (T::HW == 3) {
    int a, b;
    asm("cvt.rni.s8.f32 %0, %1;" : "=r"(a) : "f"(lo));
    asm("cvt.rni.s8.f32 %0, %1;" : "=r"(b) : "f"(hi));
    return ((unsigned)a & 0xffu) | (((unsigned)b & 0xffu) << 8);
  }
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && !defined(__HIP__)
  if constexpr (T::HW == 1 || T::HW == 2) {
    unsigned short p;
    if constexpr (T::HW == 1) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(p) : "f"(hi), "f"(lo));
    else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(p) : "f"(hi), "f"(lo));
    if constexpr (RAW) return p;
    return nk_fp8_nan(p & 0xffu, lo, T::NAN_BYTE) | (nk_fp8_nan((unsigned)p >> 8, hi, T::NAN_BYTE) << 8);
  }
#endif
  return T::soft(lo) | (T::soft(hi) << 8);
}

#endif  // NORMKIT_FUSED_QUANT_CUH
