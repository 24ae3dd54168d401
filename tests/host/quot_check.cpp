// Host check of nk_quot (kernels/fused_quant.cuh): the quotient y / s without a division per element
// must give the bytes of the f32 division in every format (fp8e4m3, fp8e5m2, int8, through the kernels' own portable
// conversions), and the quotient itself bit for bit where nk_quot corrects it and the scale needs no bringing in
// (2^-42 <= |y / s| < 2^99, s in [2^-60, 2^121]; outside, every format's byte is the same for any nearby value), for
// every scale the op accepts (positive: subnormal to +Inf). The few-chunk kernels' fast path (nk_fused_pack: the
// product y * r, corrected only where nk_quot::near_boundary says so) must give the same bytes. Inputs: structured edge
// cases (zeros, subnormals, infinities, NaN, the ends of the range nk_quot takes as it is, significands of all ones and
// all zeros at binade edges) crossed with each other, pairs whose y / s lies within 20 bit patterns of a format's
// rounding boundaries (the fast path's margin is 8), then random pairs over the whole range of y and of s.
//   bash tests/host/quot_check.sh [random pairs, default 2e9]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define NORMKIT_PORTABLE_H
#define NK_INLINE inline
inline float nk_u2f(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned nk_f2u(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float nk_fma(float a, float b, float c) { return std::fmaf(a, b, c); }
#include "fused_quant.cuh"

static unsigned long long checked = 0, bad_bytes = 0, bad_q = 0, bad_fast = 0;

// The byte nk_fused_pack's fast path gives for y: the product, or nk_quot's quotient near a rounding boundary of T.
template <class T>
static unsigned fast_byte(const nk_quot& qt, float y) {
  const float p = qt.product(y);
  return T::soft(nk_quot::near_boundary<T>(p) ? qt(y) : p);
}

static void check(float y, float s) {
  const nk_quot qt(s);
  volatile float vs = s;  // a real division, not one the compiler rewrites
  const float want = y / vs, got = qt(y);
  ++checked;
  const unsigned wb[3] = {nk_fp8e4m3::soft(want), nk_fp8e5m2::soft(want), nk_int8::soft(want)};
  const unsigned gb[3] = {nk_fp8e4m3::soft(got), nk_fp8e5m2::soft(got), nk_int8::soft(got)};
  for (int k = 0; k < 3; ++k) {
    if (wb[k] != gb[k] && bad_bytes++ < 10)
      std::printf("byte %d: y=%a s=%a: y/s=%a (0x%02x) nk_quot=%a (0x%02x)\n", k, y, s, want, wb[k], got, gb[k]);
  }
  const unsigned fb[3] = {fast_byte<nk_fp8e4m3>(qt, y), fast_byte<nk_fp8e5m2>(qt, y), fast_byte<nk_int8>(qt, y)};
  for (int k = 0; k < 3; ++k) {
    if (wb[k] != fb[k] && bad_fast++ < 10)
      std::printf("fast byte %d: y=%a s=%a: y/s=%a (0x%02x) fast path 0x%02x\n", k, y, s, want, wb[k], fb[k]);
  }
  const bool telling = std::fabs(want) >= 0x1p-42f && std::fabs(want) < 0x1p99f && s >= 0x1p-60f && s <= 0x1p121f;
  if (telling && nk_f2u(want) != nk_f2u(got) && bad_q++ < 10)
    std::printf("quotient: y=%a s=%a: y/s=%a nk_quot=%a\n", y, s, want, got);
}

int main(int argc, char** argv) {
  const double n = argc > 1 ? std::atof(argv[1]) : 2e9;
  // Edge values of y and s.
  std::vector<float> ys, ss;
  for (unsigned e = 0; e < 255; ++e) {
    for (unsigned m : {0u, 1u, 2u, 0x400000u, 0x7ffffeu, 0x7fffffu}) {
      const float v = nk_u2f((e << 23) | m);
      ys.push_back(v), ys.push_back(-v);
      if (v > 0) ss.push_back(v);
    }
  }
  for (float v : {INFINITY, -INFINITY, NAN, -NAN, 448.0f, 57344.0f, 127.0f, 0.5f, 1.5f}) ys.push_back(v);
  for (float v : {0x1p-60f, 0x1p121f, INFINITY, 1.0f / (448.0f * 512.0f), 1.0f / (57344.0f * 512.0f),
                  1.0f / (127.0f * 512.0f)}) ss.push_back(v);
  for (float s : ss)
    for (float y : ys) check(y, s);
  const unsigned long long edges = checked;
  // Pairs near the formats' rounding boundaries: y / s within 20 bit patterns of a multiple of 2^16 patterns (every
  // fp8 midpoint and int8 half-integer is one), n / 4 of them.
  std::mt19937_64 g(12345);
  for (double i = 0; i < n / 4; ++i) {
    const uint64_t a = g();
    const float s = nk_u2f(((unsigned)(1 + (a % 253)) << 23) | (unsigned)((a >> 8) & 0x7fffff));
    const unsigned qb = (((unsigned)(97 + ((a >> 31) % 60)) << 23) | ((unsigned)(a >> 40) & 0x7f0000u)) |
                        (unsigned)((a >> 47) & 1) << 31;
    const float y = nk_u2f(qb) * s;
    if (!std::isfinite(y)) continue;
    check(nk_u2f(nk_f2u(y) + (unsigned)((int)((a >> 48) % 41) - 20)), s);
  }
  const unsigned long long near = checked - edges;
  // Random pairs: y any bit pattern (a quarter of them with a small exponent), s any positive finite f32.
  for (double i = 0; i < n; ++i) {
    const uint64_t a = g();
    unsigned yb = (unsigned)a;
    if (((a >> 32) & 3) == 0) yb = (yb & 0x807fffffu) | ((unsigned)((a >> 34) % 40) << 23);
    const float s = nk_u2f(((unsigned)((a >> 40) % 255) << 23) | (unsigned)((a >> 41) & 0x7fffff));
    if (!(s > 0)) continue;
    check(nk_u2f(yb), s);
  }
  std::printf(
      "nk_quot against y / s: %llu edge pairs, %llu near boundaries, %llu random: %llu byte mismatches, %llu quotient "
      "mismatches, %llu fast-path byte mismatches\n",
      edges, near, checked - edges - near, bad_bytes, bad_q, bad_fast);
  return bad_bytes || bad_q || bad_fast;
}
