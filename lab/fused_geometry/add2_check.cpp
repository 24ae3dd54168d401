// Host check behind hadd2.diff: for every pair of 16-bit values (bf16 and f16, 2^32 pairs each, NaN inputs aside), the
// f32 sum rounded to the dtype (what the kernels compute) equals the correctly rounded sum (what add.rn.bf16x2 /
// add.rn.f16x2 compute), from the sum in double rounded to nearest even once.
//   g++ -O2 -std=c++17 -ffp-contract=off -pthread lab/fused_geometry/add2_check.cpp -o /tmp/add2_check && /tmp/add2_check
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

static float u2f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
// The kernels' f32 -> bf16 / f16 rounding (kernels/portable.h: nk_f32_to_bf16; f16 via the compiler's _Float16,
// as the host build of portable.h does).
static uint16_t bf16_rne(float f) {
  const uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float bf16_f(uint16_t h) { return u2f((uint32_t)h << 16); }
static uint16_t f16_rne(float f) { _Float16 h = (_Float16)f; uint16_t r; std::memcpy(&r, &h, 2); return r; }
static float f16_f(uint16_t h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
// d rounded once to nearest even with `mant` fraction bits, exponent >= emin, largest finite `maxv`, as bits of the
// float that holds it (exact): the correctly rounded value in the 16-bit format.
static double round_to(double d, int mant, int emin, double maxv) {
  if (d == 0 || std::isinf(d)) return d;
  int e;
  std::frexp(d, &e);  // |d| in [2^(e-1), 2^e)
  e = e - 1 < emin ? emin : e - 1;
  const double ulp = std::ldexp(1.0, e - mant);
  const double r = std::nearbyint(d / ulp) * ulp;
  const double lim = maxv + std::ldexp(1.0, (int)std::floor(std::log2(maxv)) - mant - 1);  // halfway past max
  if (std::fabs(d) >= lim) return d > 0 ? INFINITY : -INFINITY;
  return r;
}
template <bool BF>
static void run(uint32_t lo, uint32_t hi, uint64_t* bad, uint64_t* checked) {
  for (uint32_t a = lo; a < hi; ++a) {
    const float fa = BF ? bf16_f((uint16_t)a) : f16_f((uint16_t)a);
    if (std::isnan(fa)) continue;
    for (uint32_t b = 0; b < 65536; ++b) {
      const float fb = BF ? bf16_f((uint16_t)b) : f16_f((uint16_t)b);
      if (std::isnan(fb)) continue;
      const uint16_t got = BF ? bf16_rne(fa + fb) : f16_rne(fa + fb);
      const double want = BF ? round_to((double)fa + (double)fb, 7, -126, 0x1.fep127)
                             : round_to((double)fa + (double)fb, 10, -14, 65504.0);
      const float gf = BF ? bf16_f(got) : f16_f(got);
      ++*checked;
      // NaN (Inf - Inf) on both sides counts as equal; zeros compare with their sign.
      const bool same = (std::isnan(want) && std::isnan(gf)) ||
                        ((double)gf == want && std::signbit(gf) == std::signbit(want));
      if (!same && (*bad)++ < 5)
        std::printf("%s: %a + %a: f32 path %a, correctly rounded %a\n", BF ? "bf16" : "f16", fa, fb, gf, want);
    }
  }
}
int main() {
  const unsigned nt = std::thread::hardware_concurrency() ? std::thread::hardware_concurrency() : 2;
  int fails = 0;
  for (int bf = 1; bf >= 0; --bf) {
    std::vector<uint64_t> bad(nt), checked(nt);
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t) {
      const uint32_t lo = 65536u * t / nt, hi = 65536u * (t + 1) / nt;
      ts.emplace_back([&, t, lo, hi] { bf ? run<true>(lo, hi, &bad[t], &checked[t]) : run<false>(lo, hi, &bad[t], &checked[t]); });
    }
    uint64_t b = 0, c = 0;
    for (unsigned t = 0; t < nt; ++t) ts[t].join(), b += bad[t], c += checked[t];
    std::printf("%s: %llu pairs, %llu differ from the correctly rounded sum\n", bf ? "bf16" : "f16",
                (unsigned long long)c, (unsigned long long)b);
    fails += b != 0;
  }
  return fails;
}
