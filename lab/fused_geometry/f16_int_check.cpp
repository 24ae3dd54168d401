// nk_f16_to_f32_int (lab/fused_geometry/f16-pmax.diff) against the host's f16 -> f32 conversion, all 65536 inputs:
//   g++ -O2 -o /tmp/f16_int_check lab/fused_geometry/f16_int_check.cpp && /tmp/f16_int_check
#include <cstdio>
#include <cstring>
#include <cmath>
static float u2f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static unsigned f2u(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static float conv(unsigned h) {
  const unsigned m = (h & 0x7fffu) << 13;
  const float f = (h & 0x7c00u) == 0x7c00u ? u2f(m | 0x7f800000u) : u2f(m) * 0x1p112f;
  return u2f(f2u(f) | ((h & 0x8000u) << 16));
}
int main() {
  int bad = 0, nan = 0;
  for (unsigned h = 0; h < 65536; ++h) {
    unsigned short s = (unsigned short)h; _Float16 x; memcpy(&x, &s, 2);
    const float want = (float)x, got = conv(h);
    if (std::isnan(want)) { nan++; if (!std::isnan(got)) bad++; continue; }
    if (f2u(want) != f2u(got)) { if (bad < 5) printf("h=%04x want %08x got %08x\n", h, f2u(want), f2u(got)); bad++; }
  }
  printf("%d mismatches over 65536 inputs (%d NaN inputs, each a NaN)\n", bad, nan);
  return bad != 0;
}
