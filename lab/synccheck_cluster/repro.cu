// Standalone repro for the synccheck crash of nk_rms_bwd_clusterstaged_* at 16 CTAs x 128 threads.
// Build and run: bash lab/synccheck_cluster/run.sh (nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels).
// Usage: ./repro MODE C T PAD ROWS D      MODE: staged | regs | xchg ; PAD: extra dynamic smem bytes (changes CTAs/SM only)
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cmath>
#include "portable.h"
#include "norm_fwd.cuh"
#include "norm_bwd.cuh"

// The real staged kernel body (as nk_rms_bwd_clusterstaged_bf16_bf16_f32 with a weight).
extern "C" __global__ void __launch_bounds__(512, 1) k_staged(NK_BWD_PARAMS) {
  nk_bwd_cached_staged<nk_bf16, nk_bf16, nk_f32, false, true, NK_W_YES>(NK_BWD_ARGS);
}
// The register `cluster` kernel body in the same geometry (no bulk copies, same exchange).
extern "C" __global__ void __launch_bounds__(512, 1) k_regs(NK_BWD_PARAMS) {
  nk_bwd_cached_full<nk_bf16, nk_bf16, nk_f32, false, true, NK_W_YES>(NK_BWD_ARGS);
}
// Only the exchange: setup (cluster barrier), `rows` block sums + cluster sums, cluster barrier, exit.
extern "C" __global__ void __launch_bounds__(512, 1) k_xchg(NK_BWD_PARAMS) {
#if NK_HAS_CLUSTER
  const unsigned nwarps = blockDim.x / 32;
  nk_cluster_sum cs;
  cs.setup(nk_fwd_smem + 4 * nwarps);
  unsigned parity = 0;
  float acc = 0.f;
  for (int r = 0; r < rows; ++r) {
    float q = nk_block_sum(1.0f, nk_fwd_smem + parity * 2 * nwarps);
    float v[1] = {q};
    cs(v);
    acc += v[0];
    parity ^= 1u;
  }
  nk_cluster_sync();
  if (threadIdx.x == 0 && part) part[blockIdx.x] = acc;
#endif
}

static unsigned short f2bf(float f) { unsigned u; memcpy(&u, &f, 4); return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static float bf2f(unsigned short h) { unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s -> %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main(int argc, char** argv) {
  if (argc < 7) { printf("usage: %s staged|regs|xchg C T PAD ROWS D\n", argv[0]); return 2; }
  const char* mode = argv[1];
  const int C = atoi(argv[2]), T = atoi(argv[3]), pad = atoi(argv[4]), rows = atoi(argv[5]), d = atoi(argv[6]);
  void* fn = !strcmp(mode, "staged") ? (void*)k_staged : !strcmp(mode, "regs") ? (void*)k_regs : (void*)k_xchg;
  const bool staged = !strcmp(mode, "staged");
  const int vec = 8, chunks = d / vec, cpc = (chunks + C - 1) / C, cols = cpc * vec, nv = (cpc + T - 1) / T, stages = 2;
  // ops/plan_bwd.ts: cachedShared(RMS, rpb 1) + stagedShared (f32 weights)
  int shared = 16 * (T / 32) + (16 + 2 * 16 * 2 * 4);
  if (staged) shared += ((8 * (stages + 1) + 15) / 16) * 16 + ((cols * 4 + 15) / 16) * 16 + stages * cols * 4;
  shared += pad;
  const int flags = staged ? (stages << 4) : 0;
  CK(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.attrs = at, cfg.numAttrs = 1, cfg.blockDim = dim3(T), cfg.dynamicSmemBytes = shared, cfg.gridDim = dim3(C);
  int active = 0;
  CK(cudaOccupancyMaxActiveClusters(&active, fn, &cfg));
  const int clusters = std::max(1, std::min(rows, active));
  cfg.gridDim = dim3(clusters * C);
  printf("%s: C=%d T=%d nv=%d shared=%d B, active clusters %d, launching %d clusters, rows %d, d %d\n", mode, C, T, nv,
         shared, active, clusters, rows, d);
  const size_t n = (size_t)rows * d;
  std::vector<unsigned short> hx(n), hdy(n);
  std::vector<float> hw(d), hr(rows);
  unsigned s = 12345;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; return ((s >> 8) / 16777216.0f) * 2.f - 1.f; };
  for (size_t i = 0; i < n; ++i) hx[i] = f2bf(rnd()), hdy[i] = f2bf(rnd());
  for (int j = 0; j < d; ++j) hw[j] = 1.0f + 0.5f * rnd();
  for (int r = 0; r < rows; ++r) hr[r] = 1.3f;
  unsigned short *x, *dy, *dx; float *w, *rstd, *part;
  CK(cudaMalloc(&x, n * 2)); CK(cudaMalloc(&dy, n * 2)); CK(cudaMalloc(&dx, n * 2));
  CK(cudaMalloc(&w, d * 4)); CK(cudaMalloc(&rstd, rows * 4)); CK(cudaMalloc(&part, (size_t)clusters * C * d * 4));
  CK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dy, hdy.data(), n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(w, hw.data(), d * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(rstd, hr.data(), rows * 4, cudaMemcpyHostToDevice));
  const void* a_dy = dy; const void* a_x = x; const void* a_w = w; const float* a_mean = nullptr; const float* a_rstd = rstd;
  void* a_dx = dx; float* a_part = part; int a_rows = rows, a_d = d; long long s1 = d, s2 = d, s3 = d; int a_tpr = T, a_nv = nv, a_flags = flags;
  void* args[] = {&a_dy, &a_x, &a_w, &a_mean, &a_rstd, &a_dx, &a_part, &a_rows, &a_d, &s1, &s2, &s3, &a_tpr, &a_nv, &a_flags};
  for (int it = 0; it < 3; ++it) {
    CK(cudaLaunchKernelExC(&cfg, fn, args));
    CK(cudaDeviceSynchronize());
  }
  if (strcmp(mode, "xchg")) {  // dx against a float reference (RMS: dx = rs * (g - xh * mean(g * xh)))
    std::vector<unsigned short> hdx(n);
    CK(cudaMemcpy(hdx.data(), dx, n * 2, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      double sgx = 0;
      for (int j = 0; j < d; ++j) sgx += (double)bf2f(hdy[(size_t)r * d + j]) * hw[j] * bf2f(hx[(size_t)r * d + j]) * hr[r];
      const double b = sgx / d;
      for (int j = 0; j < d; ++j) {
        const double xh = bf2f(hx[(size_t)r * d + j]) * hr[r], g = bf2f(hdy[(size_t)r * d + j]) * hw[j];
        const double want = hr[r] * (g - xh * b), got = bf2f(hdx[(size_t)r * d + j]);
        worst = std::max(worst, fabs(got - want) / (3e-2 * (1 + fabs(want))));
      }
    }
    printf("dx worst error %.3f x tolerance\n", worst);
  }
  printf("ok\n");
  return 0;
}
