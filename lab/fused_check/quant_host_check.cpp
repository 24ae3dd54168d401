// Host check of the portable fp8/int8 conversions (kernels/fused_quant.cuh, `soft`) against NVIDIA's reference
// (cuda_fp8.h, __nv_cvt_float_to_fp8 with __NV_SATFINITE) and nearbyint, over every f32 bit pattern. No GPU needed.
// NaN inputs are checked against the fused kernels' own rule (the NaN byte with the input's sign): cuda_fp8.h's
// host path returns one canonical positive NaN instead (0x7F for both formats).
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include -I../../kernels quant_host_check.cpp -o quant_host_check
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda_fp8.h>

// The few portable.h helpers fused_quant.cuh uses, for the host (portable.h itself is device-only).
#define NORMKIT_PORTABLE_H
#define NK_INLINE inline
inline float nk_u2f(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned nk_f2u(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
#include "fused_quant.cuh"

int main() {
  unsigned long long bad[3] = {0, 0, 0};
  for (unsigned long long i = 0; i <= 0xffffffffull; ++i) {
    const unsigned u = (unsigned)i;
    const float v = nk_u2f(u);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const unsigned sign = (u >> 24) & 0x80u;
    const unsigned e4 = nan ? (0x7fu | sign) : __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    const unsigned e5 = nan ? (0x7eu | sign) : __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
    float c = nan ? 0.0f : std::fmin(std::fmax(v, -128.0f), 127.0f);
    const unsigned i8 = (unsigned)(int)std::nearbyint(c) & 0xffu;
    const unsigned got[3] = {nk_fp8e4m3::soft(v), nk_fp8e5m2::soft(v), nk_int8::soft(v)};
    const unsigned want[3] = {e4, e5, i8};
    for (int k = 0; k < 3; ++k)
      if (got[k] != want[k] && bad[k]++ < 5)
        std::printf("%s: 0x%08x (%g): got 0x%02x want 0x%02x\n", k == 0 ? "e4m3" : k == 1 ? "e5m2" : "int8", u, v, got[k], want[k]);
  }
  std::printf("mismatches over 2^32 inputs: e4m3 %llu, e5m2 %llu, int8 %llu\n", bad[0], bad[1], bad[2]);
  return bad[0] || bad[1] || bad[2];
}
