// GPU self-test of the fused kernels as shipped: loads precompiled/fused_sm{80|90}.fatbin and
// fused_quant_sm{80|90}.fatbin (cudaLibraryLoadData), launches a few kernels on random inputs and compares with a host
// double-precision reference. Also checks the fp8 conversion over every f32 bit pattern (the sm_89+ cvt path against the
// portable one). Build and run: README.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/portable.h"
#include "../../kernels/fused.cuh"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); std::exit(2); } \
  } while (0)
static int g_fail = 0;
static void expect(bool ok, const std::string& what) {
  if (!ok) { ++g_fail; if (g_fail < 40) std::printf("  FAIL %s\n", what.c_str()); }
}

// ---------------------------------------------------------------- dtypes on the host
enum Dt { F32, F16, BF16, E4M3, E5M2, I8 };
static int dsize(Dt t) { return t == F32 ? 4 : (t == F16 || t == BF16) ? 2 : 1; }
static const char* dname(Dt t) {
  static const char* n[] = {"f32", "f16", "bf16", "fp8e4m3", "fp8e5m2", "int8"};
  return n[t];
}
static float bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static float decode(Dt t, const uint8_t* p) {
  switch (t) {
    case F32: { float f; std::memcpy(&f, p, 4); return f; }
    case F16: { __half_raw r; std::memcpy(&r.x, p, 2); return __half2float(__half(r)); }
    case BF16: { uint16_t b; std::memcpy(&b, p, 2); return bits_f((uint32_t)b << 16); }
    case E4M3: {
      const int b = p[0], s = b >> 7, e = (b >> 3) & 15, m = b & 7;
      if ((b & 0x7f) == 0x7f) return NAN;
      const float v = e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp((float)m, -9);
      return s ? -v : v;
    }
    case E5M2: {
      const int b = p[0], s = b >> 7, e = (b >> 2) & 31, m = b & 3;
      if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
      const float v = e ? std::ldexp(1.0f + m / 4.0f, e - 15) : std::ldexp((float)m, -16);
      return s ? -v : v;
    }
    default: return (float)(int8_t)p[0];
  }
}
// Round-to-nearest-even encoding of an f32 (float dtypes only).
static void encode(Dt t, float f, uint8_t* p) {
  if (t == F32) std::memcpy(p, &f, 4);
  else if (t == F16) { __half_raw r = __half_raw(__float2half_rn(f)); std::memcpy(p, &r.x, 2); }
  else { __nv_bfloat16_raw r = __nv_bfloat16_raw(__float2bfloat16_rn(f)); std::memcpy(p, &r.x, 2); }
}
static float round_to(Dt t, float f) { uint8_t b[4]; encode(t, f, b); return decode(t, b); }
static double qmax(Dt t) { return t == E4M3 ? 448.0 : t == E5M2 ? 57344.0 : 127.0; }
// The quantized byte of v (reference: cuda_fp8.h's satfinite conversion; int8 nearest even, clamped).
static uint8_t quant_ref(Dt t, float v) {
  if (t == I8) return (uint8_t)(int8_t)std::nearbyint(std::fmin(std::fmax(v, -128.0f), 127.0f));
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, t == E4M3 ? __NV_E4M3 : __NV_E5M2);
}

// ---------------------------------------------------------------- device buffers
struct Buf {
  char* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t bytes) : n(bytes) { CK(cudaMalloc(&p, bytes + 64)); CK(cudaMemset(p, 0xA5, bytes + 64)); }
  ~Buf() { cudaFree(p); }
  void put(const std::vector<uint8_t>& h, size_t off = 0) {
    CK(cudaMemcpy(p + off, h.data(), h.size(), cudaMemcpyHostToDevice));
  }
  std::vector<uint8_t> get(size_t bytes, size_t off = 0) const {
    std::vector<uint8_t> h(bytes);
    CK(cudaMemcpy(h.data(), p + off, bytes, cudaMemcpyDeviceToHost));
    return h;
  }
};

// ---------------------------------------------------------------- one call
struct Call {
  bool ln = true;
  Dt ti = BF16, to = BF16, tw = F32;
  int n0 = 1, n1 = 1, d = 128;
  long long xs0 = 0, xs1 = 0, ys0 = 0, ys1 = 0;  // elements (0: packed)
  bool residual = false, inplace_h = false, weight = true, bias = true, weight2 = false;
  int split = -1;           // -1: n1
  int quant = 0;            // 0, 1 static, 2 dynamic
  bool scale_ptr = false;   // static scale from a device pointer
  float scale_value = 0.05f, scale_ub = INFINITY, eps = 1e-5f;
  int x_offset = 0;         // elements: misaligns x (scalar path)
  int grid_cap = 0;         // > 0: cap the grid (grid-stride rows)
  int zero_row = -1, nan_row = -1;
};

// A shape of a row the kernels take (ops/plan_fused.ts picks among them): tpr threads of nv chunks each, both powers
// of two (the kernels refuse others), at most 8 chunks a thread.
static void geometry(int d, int vec, int& tpr, int& nv) {
  const int chunks = (d + vec - 1) / vec;
  tpr = 1;
  while (tpr * 8 < chunks) tpr *= 2;
  nv = 1;
  while (nv * tpr < chunks) nv *= 2;
}

struct Result {
  std::vector<uint8_t> y, h, mean, rstd, scale;
};

struct Fixture {
  std::vector<uint8_t> x, r, w, b, w2;  // host bytes, laid out as the device copies
  size_t xbytes = 0;
};

static std::mt19937 rng(1234);
static std::vector<uint8_t> randoms(Dt t, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint8_t> v(n * dsize(t));
  for (size_t i = 0; i < n; ++i) encode(t, u(rng), &v[i * dsize(t)]);
  return v;
}

// The fused image of a float y and the fused_quant image of a quantized y (scripts/build-fused.sh).
static cudaLibrary_t g_lib, g_quant_lib;

static Result run(const Call& c, const Fixture& f) {
  const long long xs1 = c.xs1 ? c.xs1 : c.d, xs0 = c.xs0 ? c.xs0 : xs1 * c.n1;
  const long long ys1 = c.ys1 ? c.ys1 : c.d, ys0 = c.ys0 ? c.ys0 : ys1 * c.n1;
  const long long rows = (long long)c.n0 * c.n1;
  const size_t xb = f.x.size(), yb = (size_t)((c.n0 - 1) * ys0 + (c.n1 - 1) * ys1 + c.d) * dsize(c.to);
  Buf X(xb + 64), R(xb + 64), H(xb + 64), Y(yb), W(f.w.size() + 16), B(f.b.size() + 16), W2(f.w2.size() + 16);
  Buf M(rows * 4), RS(rows * 4), DS(rows * 4), SC(4);
  const size_t xoff = (size_t)c.x_offset * dsize(c.ti);
  X.put(f.x, xoff);
  if (c.residual) R.put(f.r, xoff);
  W.put(f.w), B.put(f.b), W2.put(f.w2);
  std::vector<uint8_t> sv(4);
  std::memcpy(sv.data(), &c.scale_value, 4);
  SC.put(sv);
  const int vec = 16 / dsize(c.ti);
  int tpr, nv;
  geometry(c.d, vec, tpr, nv);
  const int block = tpr <= 32 ? 256 : tpr, rpb = tpr <= 32 ? 256 / tpr : 1;
  long long grid = (rows + rpb - 1) / rpb;
  if (c.grid_cap > 0 && grid > c.grid_cap) grid = c.grid_cap;
  const std::string name = std::string("nk_fused_") + (c.ln ? "ln_" : "rms_") + dname(c.ti) + "_" + dname(c.to) + "_" + dname(c.tw);
  cudaKernel_t fn;
  CK(cudaLibraryGetKernel(&fn, dsize(c.to) == 1 ? g_quant_lib : g_lib, name.c_str()));
  void *px = X.p + xoff, *pr = c.residual ? R.p + xoff : nullptr;
  void* ph = c.residual ? (c.inplace_h ? pr : H.p + xoff) : nullptr;
  void *py = Y.p, *pw = c.weight ? W.p : nullptr, *pb = (c.ln && c.bias) ? B.p : nullptr;
  void *pw2 = c.weight2 ? W2.p : nullptr, *pmean = c.ln ? M.p : nullptr, *prstd = RS.p;
  void* pscale = c.quant == 2 ? DS.p : (c.scale_ptr ? SC.p : nullptr);
  int n0 = c.n0, n1 = c.n1, d = c.d, quant = c.quant, split = c.split < 0 ? c.n1 : c.split;
  long long rs0 = xs0, rs1 = xs1, hs0 = xs0, hs1 = xs1, xs0v = xs0, xs1v = xs1, ys0v = ys0, ys1v = ys1;
  float eps = c.eps, sval = c.scale_value, sub = c.scale_ub;
  void* args[] = {&px, &pr, &ph, &py, &pw, &pb, &pw2, &pmean, &prstd, &pscale, &n0, &n1, &d, &xs0v, &xs1v,
                  &rs0, &rs1, &hs0, &hs1, &ys0v, &ys1v, &eps, &sval, &sub, &quant, &split, &tpr, &nv};
  CK(cudaLaunchKernel((const void*)fn, dim3((unsigned)grid), dim3(block), args, 0, 0));
  CK(cudaDeviceSynchronize());
  Result out;
  out.y = Y.get(yb);
  if (c.residual) out.h = (c.inplace_h ? R : H).get(xb, xoff);
  if (c.ln) out.mean = M.get(rows * 4);
  out.rstd = RS.get(rows * 4);
  if (c.quant == 2) out.scale = DS.get(rows * 4);
  return out;
}

static Fixture make(const Call& c) {
  Fixture f;
  const long long xs1 = c.xs1 ? c.xs1 : c.d, xs0 = c.xs0 ? c.xs0 : xs1 * c.n1;
  const size_t n = (size_t)((c.n0 - 1) * xs0 + (c.n1 - 1) * xs1 + c.d);
  f.x = randoms(c.ti, n, -2.0f, 3.0f);
  f.r = randoms(c.ti, n, -1.0f, 1.0f);
  f.w = randoms(c.tw, c.d, 0.5f, 1.5f);
  f.b = randoms(c.tw, c.d, -0.5f, 0.5f);
  f.w2 = randoms(c.tw, c.d, -1.5f, -0.5f);
  const int es = dsize(c.ti);
  for (int row : {c.zero_row, c.nan_row}) {
    if (row < 0) continue;
    const long long i0 = row / c.n1, i1 = row % c.n1;
    for (int e = 0; e < c.d; ++e) {
      uint8_t* p = &f.x[(size_t)(i0 * xs0 + i1 * xs1 + e) * es];
      encode(c.ti, row == c.zero_row ? 0.0f : (e == c.d / 3 ? NAN : 1.0f), p);
      if (c.residual) encode(c.ti, 0.0f, &f.r[(size_t)(i0 * xs0 + i1 * xs1 + e) * es]);
    }
  }
  return f;
}

// Host reference and comparison, row by row.
static void check(const char* label, const Call& c, const Fixture& f, const Result& g) {
  const long long xs1 = c.xs1 ? c.xs1 : c.d, xs0 = c.xs0 ? c.xs0 : xs1 * c.n1;
  const long long ys1 = c.ys1 ? c.ys1 : c.d, ys0 = c.ys0 ? c.ys0 : ys1 * c.n1;
  const int es = dsize(c.ti), ws = dsize(c.tw), os = dsize(c.to);
  const double rel = c.to == F32 ? 3e-6 : c.to == F16 ? 1.5e-3 : 8e-3;
  const int split = c.split < 0 ? c.n1 : c.split;
  int bad_before = g_fail, inexact_q = 0;
  for (long long i0 = 0; i0 < c.n0; ++i0)
    for (long long i1 = 0; i1 < c.n1; ++i1) {
      const long long row = i0 * c.n1 + i1;
      std::vector<float> h(c.d);
      for (int e = 0; e < c.d; ++e) {
        const size_t off = (size_t)(i0 * xs0 + i1 * xs1 + e) * es;
        float v = decode(c.ti, &f.x[off]);
        if (c.residual) {
          v = round_to(c.ti, v + decode(c.ti, &f.r[off]));
          const float gh = decode(c.ti, &g.h[off]);
          expect(f_bits(gh) == f_bits(v) || (std::isnan(gh) && std::isnan(v)),
                 std::string(label) + ": h row " + std::to_string(row));
        }
        h[e] = v;
      }
      double mean = 0, var = 0;
      for (float v : h) mean += v;
      mean /= c.d;
      for (float v : h) var += c.ln ? (v - mean) * (v - mean) : (double)v * v;
      var /= c.d;
      const double rstd = 1.0 / std::sqrt(var + c.eps);
      const bool nanrow = row == c.nan_row;
      if (!nanrow) {
        float gr;
        std::memcpy(&gr, &g.rstd[row * 4], 4);
        expect(std::fabs(gr - rstd) <= 2e-5 * rstd, std::string(label) + ": rstd row " + std::to_string(row));
        if (c.ln) {
          float gm;
          std::memcpy(&gm, &g.mean[row * 4], 4);
          expect(std::fabs(gm - mean) <= 1e-5 * (std::fabs(mean) + 1.0 / rstd), std::string(label) + ": mean row " + std::to_string(row));
        }
      }
      const uint8_t* W = (c.weight2 && i1 >= split) ? f.w2.data() : f.w.data();
      std::vector<double> y(c.d);
      double amax = 0;
      for (int e = 0; e < c.d; ++e) {
        double v = c.ln ? (h[e] - mean) * rstd : h[e] * rstd;
        if (c.weight) v *= decode(c.tw, W + (size_t)e * ws);
        if (c.ln && c.bias) v += decode(c.tw, &f.b[(size_t)e * ws]);
        y[e] = v;
        if (!std::isnan(v)) amax = std::fmax(amax, std::fabs(v));
      }
      double s = c.quant == 1 ? c.scale_value : 1.0;
      float gs = 1.0f;
      if (c.quant == 2) {
        std::memcpy(&gs, &g.scale[row * 4], 4);
        const double floor_s = (double)(1.0f / (float)(qmax(c.to) * 512.0));
        s = std::fmin(std::fmax(amax / qmax(c.to), floor_s), (double)c.scale_ub);
        expect(std::fabs(gs - s) <= 1e-5 * s, std::string(label) + ": scale row " + std::to_string(row) + " got " +
                                                   std::to_string(gs) + " want " + std::to_string(s));
      }
      for (int e = 0; e < c.d; ++e) {
        const uint8_t* gp = &g.y[(size_t)(i0 * ys0 + i1 * ys1 + e) * os];
        const std::string where = std::string(label) + ": y row " + std::to_string(row) + " col " + std::to_string(e);
        if (nanrow) {
          if (c.to == I8) expect(gp[0] == 0, where + " (NaN -> 0)");
          else if (c.to == E4M3) expect((gp[0] & 0x7f) == 0x7f, where + " (NaN byte)");
          else if (c.to == E5M2) expect((gp[0] & 0x7f) == 0x7e, where + " (NaN byte)");
          else expect(std::isnan(decode(c.to, gp)), where + " (NaN)");
          continue;
        }
        if (c.quant == 0) {
          const double gv = decode(c.to, gp);
          expect(std::fabs(gv - y[e]) <= rel * std::fabs(y[e]) + (c.to == F32 ? 1e-5 : 2e-3), where);
        } else {
          // The byte of the reference y at the kernel's scale, or its neighbour (y differs from the reference by a
          // few f32 ulps, which can cross a rounding boundary).
          const float sc = c.quant == 2 ? gs : c.scale_value;
          const uint8_t want = quant_ref(c.to, (float)(y[e] / sc));
          if (gp[0] != want) {
            ++inexact_q;
            const int dg = c.to == I8 ? (int8_t)gp[0] : ((gp[0] & 0x80) ? -(gp[0] & 0x7f) : (gp[0] & 0x7f));
            const int dw = c.to == I8 ? (int8_t)want : ((want & 0x80) ? -(want & 0x7f) : (want & 0x7f));
            expect(std::abs(dg - dw) <= 1, where + " got byte " + std::to_string(gp[0]) + " want " + std::to_string(want));
          }
        }
      }
    }
  std::printf("%-44s %s%s\n", label, g_fail == bad_before ? "ok" : "FAILED",
              inexact_q ? (" (" + std::to_string(inexact_q) + " quantized values one code off the reference)").c_str() : "");
}

static bool same(const Result& a, const Result& b, size_t ya, size_t yb, size_t ybytes, long long ra, long long rb) {
  bool ok = std::memcmp(&a.y[ya], &b.y[yb], ybytes) == 0;
  for (auto v : {&Result::mean, &Result::rstd, &Result::scale})
    if (!(a.*v).empty()) ok = ok && std::memcmp(&(a.*v)[ra * 4], &(b.*v)[rb * 4], 4) == 0;
  return ok;
}

// Rows computed inside 4096 rows, alone, and with a capped grid: the same bits.
static void batch_invariance(Call c) {
  c.n0 = 4096, c.n1 = 1;
  const Fixture f = make(c);
  const Result all = run(c, f);
  Call capped = c;
  capped.grid_cap = 7;
  const Result cap = run(capped, f);
  const size_t ybytes = (size_t)c.d * dsize(c.to), xbytes = (size_t)c.d * dsize(c.ti);
  expect(std::memcmp(all.y.data(), cap.y.data(), all.y.size()) == 0 && all.rstd == cap.rstd && all.scale == cap.scale,
         "batch invariance: grid of 7 blocks");
  for (long long row : {0LL, 1LL, 37LL, 4095LL}) {
    Call one = c;
    one.n0 = 1;
    Fixture g;
    g.x.assign(f.x.begin() + row * xbytes, f.x.begin() + (row + 1) * xbytes);
    g.r.assign(f.r.begin() + row * xbytes, f.r.begin() + (row + 1) * xbytes);
    g.w = f.w, g.b = f.b, g.w2 = f.w2;
    const Result r1 = run(one, g);
    expect(same(all, r1, row * ybytes, 0, ybytes, row, 0), "batch invariance: row " + std::to_string(row) + " alone");
    if (c.residual) expect(std::memcmp(&all.h[row * xbytes], r1.h.data(), xbytes) == 0, "batch invariance: h");
  }
  std::printf("%-44s %s\n", (std::string("batch invariance ") + dname(c.ti) + "->" + dname(c.to)).c_str(), "done");
}

// The vector and the scalar path give the same bits: the same rows from an aligned and a misaligned x.
static void path_invariance(Call c) {
  const Fixture f = make(c);
  const Result a = run(c, f);
  c.x_offset = 1;
  const Result b = run(c, f);
  expect(a.y == b.y && a.rstd == b.rstd && a.mean == b.mean && a.scale == b.scale && a.h == b.h,
         "vector and scalar path: the same bits");
  std::printf("%-44s %s\n", (std::string("vector = scalar path ") + dname(c.ti) + "->" + dname(c.to)).c_str(), "done");
}

// The conversions the kernels use on this GPU (fp8 on sm_89+: cvt, NaN bytes set; int8: cvt.rni.s8.f32) against the
// portable ones, every f32 input.
template <class T>
__global__ void fp8_sweep(unsigned long long base, unsigned long long* bad, unsigned* first) {
  const unsigned long long i = base + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const float v = __uint_as_float((unsigned)i), w = __uint_as_float((unsigned)i ^ 0x80000000u);
  const unsigned hw = nk_quant2<T>(v, w), sw = T::soft(v) | (T::soft(w) << 8);
  if (hw != sw && atomicAdd(bad, 1ull) == 0) *first = (unsigned)i;
}

// Every 32-bit index through `kernel` (launches of 2^30 threads), which counts its mismatches in *bad and keeps the
// index of the first in *first; `differ` says what a mismatch means.
using sweep_kernel = void (*)(unsigned long long, unsigned long long*, unsigned*);
static void sweep_all(const char* name, sweep_kernel kernel, const char* differ) {
  unsigned long long* bad;
  unsigned* first;
  CK(cudaMallocManaged(&bad, 8));
  CK(cudaMallocManaged(&first, 4));
  *bad = 0;
  for (unsigned long long base = 0; base < (1ull << 32); base += 1ull << 30)
    kernel<<<(1u << 30) / 256, 256>>>(base, bad, first);
  CK(cudaDeviceSynchronize());
  expect(*bad == 0, std::string(name) + ": " + differ + ", first at " + std::to_string(*first));
  std::printf("%-44s %llu mismatches\n", name, *bad);
  cudaFree(bad), cudaFree(first);
}

// The residual add of 16-bit x (nk_add2: one packed add for two elements) against the f32 sum rounded to the dtype by
// the kernels' own packing, every pair of 16-bit inputs (each pair in both orders); NaN results compared as NaN.
template <class T>
__global__ void add2_sweep(unsigned long long base, unsigned long long* bad, unsigned* first) {
  const unsigned i = (unsigned)(base + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x);
  const unsigned a = i & 0xffffu, b = i >> 16;
  const unsigned hw = nk_add2<T>(a | (b << 16), b | (a << 16));
  const float fa = T::to_f(a), fb = T::to_f(b);
  const unsigned sw = T::pack2(fa + fb, fb + fa);
  bool same = true;
  for (int k = 0; k < 2; ++k) {
    const unsigned h = (hw >> (16 * k)) & 0xffffu, s = (sw >> (16 * k)) & 0xffffu;
    const bool hn = T::to_f(h) != T::to_f(h), sn = T::to_f(s) != T::to_f(s);
    same = same && (hn || sn ? hn && sn : h == s);
  }
  if (!same && atomicAdd(bad, 1ull) == 0) *first = i;
}

int main(int argc, char** argv) {
  CK(cudaFree(0));
  int dev, major;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  const std::string sm = major >= 9 ? "sm90" : "sm80";
  const std::string image = argc > 1 ? argv[1] : "precompiled/fused_" + sm + ".fatbin";
  const std::string quant_image = argc > 2 ? argv[2] : "precompiled/fused_quant_" + sm + ".fatbin";
  for (const auto& [path, lib] : {std::pair{image, &g_lib}, std::pair{quant_image, &g_quant_lib}}) {
    FILE* fp = std::fopen(path.c_str(), "rb");
    if (!fp) { std::printf("cannot open %s (run from the repository root or pass the images)\n", path.c_str()); return 2; }
    std::vector<char> bytes;
    char buf[1 << 16];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, fp)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(fp);
    CK(cudaLibraryLoadData(lib, bytes.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  std::printf("images %s and %s, compute capability %d.x\n", image.c_str(), quant_image.c_str(), major);

  {  // LayerNorm bf16 with f32 weight and bias, residual to a separate h, many rows of 4096.
    Call c; c.ln = true, c.ti = BF16, c.to = BF16, c.tw = F32, c.n0 = 512, c.d = 4096, c.residual = true;
    const Fixture f = make(c);
    check("LN bf16 residual, f32 w/b, d=4096", c, f, run(c, f));
  }
  {  // RMSNorm f16 -> fp8e4m3, f16 weight, static scale from a pointer, residual in place.
    Call c; c.ln = false, c.ti = F16, c.to = E4M3, c.tw = F16, c.n0 = 300, c.d = 2048, c.residual = true;
    c.inplace_h = true, c.quant = 1, c.scale_ptr = true, c.scale_value = 0.02f;
    const Fixture f = make(c);
    check("RMS f16->e4m3 static (pointer), h in place", c, f, run(c, f));
  }
  {  // RMSNorm bf16 -> fp8e4m3 dynamic, with a zero row and a NaN row.
    Call c; c.ln = false, c.ti = BF16, c.to = E4M3, c.tw = BF16, c.n0 = 200, c.d = 5120, c.quant = 2;
    c.zero_row = 3, c.nan_row = 7;
    const Fixture f = make(c);
    check("RMS bf16->e4m3 dynamic, zero and NaN rows", c, f, run(c, f));
  }
  {  // LayerNorm f32 -> int8 dynamic with an upper bound on the scale (saturating), f32 w/b.
    Call c; c.ln = true, c.ti = F32, c.to = I8, c.tw = F32, c.n0 = 64, c.d = 768, c.quant = 2, c.scale_ub = 0.01f;
    c.nan_row = 5;
    const Fixture f = make(c);
    check("LN f32->int8 dynamic, scale_ub, NaN row", c, f, run(c, f));
  }
  {  // RMSNorm bf16 -> fp8e5m2 static scale_value, f32 weight, residual.
    Call c; c.ln = false, c.ti = BF16, c.to = E5M2, c.tw = F32, c.n0 = 100, c.d = 128, c.quant = 1, c.residual = true;
    c.scale_value = 0.001f;
    const Fixture f = make(c);
    check("RMS bf16->e5m2 static value, d=128", c, f, run(c, f));
  }
  {  // QK-norm: [tokens, Hq + Hkv, 128] heads inside a QKV row of (8 + 2 + 2) heads; weight2 from head 8 on.
    Call c; c.ln = false, c.ti = BF16, c.to = BF16, c.tw = BF16, c.n0 = 64, c.n1 = 10, c.d = 128, c.weight2 = true;
    c.split = 8, c.xs1 = 128, c.xs0 = 12 * 128, c.ys1 = 128, c.ys0 = 10 * 128;
    const Fixture f = make(c);
    check("QK-norm split 8 | 2 heads in a QKV view", c, f, run(c, f));
  }
  {  // Strided 2-level rows with d not a multiple of the chunk (scalar path), LayerNorm f16, f32 weights.
    Call c; c.ln = true, c.ti = F16, c.to = F16, c.tw = F32, c.n0 = 3, c.n1 = 5, c.d = 1001, c.residual = true;
    c.xs1 = 1100, c.xs0 = 5 * 1100 + 7;
    const Fixture f = make(c);
    check("LN f16 strided 3x5 rows, d=1001 (scalar)", c, f, run(c, f));
  }
  {  // Long rows: one block per row (tpr > 32).
    Call c; c.ln = true, c.ti = BF16, c.to = E4M3, c.tw = BF16, c.n0 = 16, c.d = 32768, c.quant = 2, c.residual = true;
    const Fixture f = make(c);
    check("LN bf16->e4m3 dynamic d=32768 (block rows)", c, f, run(c, f));
  }
  {
    Call c; c.ln = true, c.ti = BF16, c.to = BF16, c.tw = F32, c.d = 4096, c.residual = true;
    batch_invariance(c);
    c.ln = false, c.to = E4M3, c.tw = BF16, c.quant = 2, c.d = 1024;
    batch_invariance(c);
    c.ti = F16, c.to = I8, c.tw = F32, c.d = 100;
    batch_invariance(c);
    c.ln = true, c.ti = F32, c.to = F32, c.tw = F32, c.quant = 0, c.d = 8192;
    batch_invariance(c);
  }
  {
    Call c; c.ln = true, c.ti = BF16, c.to = E5M2, c.tw = F32, c.n0 = 50, c.d = 2048, c.quant = 2, c.residual = true;
    path_invariance(c);
    c.ln = false, c.ti = F32, c.to = F32, c.quant = 0, c.d = 512;
    path_invariance(c);
  }
  const char* convert = "hardware and portable conversions differ";
  sweep_all("fp8e4m3 conversion, all 2^32 inputs", fp8_sweep<nk_fp8e4m3>, convert);
  sweep_all("fp8e5m2 conversion, all 2^32 inputs", fp8_sweep<nk_fp8e5m2>, convert);
  sweep_all("int8 conversion, all 2^32 inputs", fp8_sweep<nk_int8>, convert);
  const char* add = "the packed add and the f32 path differ";
  sweep_all("bf16 packed add, all 2^32 pairs", add2_sweep<nk_bf16>, add);
  sweep_all("f16 packed add, all 2^32 pairs", add2_sweep<nk_f16>, add);
  std::printf(g_fail ? "FAILED: %d checks\n" : "all checks passed\n", g_fail);
  return g_fail ? 1 : 0;
}
