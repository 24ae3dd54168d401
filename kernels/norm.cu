// normkit kernels: LayerNorm / RMSNorm over the last dimension (PyTorch F.layer_norm / F.rms_norm
// semantics, biased variance), plus a scale kernel used by runtime tests and the launch bench.
//
// One source for nvcc and clang-HIP: only portable.h, no runtime headers.
// Build: scripts/build-kernels.sh (writes precompiled/; never edit those files by hand).
//
// Launch contract for the *_fwd_f32_simple kernels:
//   grid.x  : any >= 1 (rows are processed with a stride of gridDim.x; rows blocks is natural)
//   block.x : a multiple of 32 up to 1024 (256 expected, the launch bound)
//   dynamic shared memory: at least 2 * (blockDim.x / 32) * 4 bytes = (blockDim.x / 32) * 8 bytes
//            (two alternating buffers of one float per warp; 64 bytes for 256 threads,
//             256 bytes for 1024). The kernel never needs more than that.
//   x_stride / y_stride are in elements: row i starts at x + i * x_stride, y + i * y_stride.
//   weight, bias, mean, rstd may be null. mean/rstd (float, one per row) are written when non-null.
//
// These "simple" kernels read each row twice (mean, then centred variance) and write y from a third
// pass; they are the correctness baseline that the fast kernels are checked against.
//
// The fast forward kernels (templates in norm_fwd.cuh, contracts in kernels/README.md) are
// instantiated at the end of this file as extern "C" nk_{ln|rms}_{rows|block|cluster|wide}_{tin}_{tout}_{tw}.
#include "portable.h"
#include "norm_fwd.cuh"

extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) ln_fwd_f32_simple(
    const float* x, float* y, const float* weight, const float* bias,
    float* mean, float* rstd,
    int rows, int d, long long x_stride, long long y_stride, float eps) {
  nk_check_wave();
  extern NK_SHARED float nk_smem[];
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  const int tid = (int)nk_thread_x();
  const int nthreads = (int)nk_block_dim_x();
  const float fd = (float)d;
  for (int row = (int)nk_block_x(); row < rows; row += (int)nk_grid_dim_x()) {
    const float* xr = x + (long long)row * x_stride;
    float* yr = y + (long long)row * y_stride;

    // Pass 1: mean.
    float s = 0.0f;
    for (int j = tid; j < d; j += nthreads) s += xr[j];
    const float mu = nk_block_sum(s, nk_smem) / fd;

    // Pass 2: centred variance (never E[x^2] - E[x]^2).
    float q = 0.0f;
    for (int j = tid; j < d; j += nthreads) {
      const float c = xr[j] - mu;
      q += c * c;
    }
    const float var = nk_block_sum(q, nk_smem + nwarps) / fd;
    const float rs = nk_rsqrt(var + eps);

    if (tid == 0) {
      if (mean) mean[row] = mu;
      if (rstd) rstd[row] = rs;
    }

    // Pass 3: normalize, scale, shift.
    if (weight && bias) {
      for (int j = tid; j < d; j += nthreads) yr[j] = (xr[j] - mu) * rs * weight[j] + bias[j];
    } else if (weight) {
      for (int j = tid; j < d; j += nthreads) yr[j] = (xr[j] - mu) * rs * weight[j];
    } else if (bias) {
      for (int j = tid; j < d; j += nthreads) yr[j] = (xr[j] - mu) * rs + bias[j];
    } else {
      for (int j = tid; j < d; j += nthreads) yr[j] = (xr[j] - mu) * rs;
    }
    // Buffer reuse across rows: the next row's first reduction writes nk_smem[0..nwarps), which
    // every thread finished reading before it arrived at the barrier inside the variance
    // reduction above, so no extra barrier is needed here.
  }
}

// Same parameter list as ln_fwd_f32_simple; `bias` is ignored and `mean` is never written.
// rstd = rsqrt(mean(x^2) + eps); y = x * rstd * weight.
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) rms_fwd_f32_simple(
    const float* x, float* y, const float* weight, const float* bias,
    float* mean, float* rstd,
    int rows, int d, long long x_stride, long long y_stride, float eps) {
  (void)bias;
  (void)mean;
  nk_check_wave();
  extern NK_SHARED float nk_smem[];
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  const int tid = (int)nk_thread_x();
  const int nthreads = (int)nk_block_dim_x();
  const float fd = (float)d;
  int parity = 0;
  for (int row = (int)nk_block_x(); row < rows; row += (int)nk_grid_dim_x()) {
    const float* xr = x + (long long)row * x_stride;
    float* yr = y + (long long)row * y_stride;

    float q = 0.0f;
    for (int j = tid; j < d; j += nthreads) {
      const float v = xr[j];
      q += v * v;
    }
    // One reduction per row: alternate the two buffers between consecutive rows so that a fast
    // warp writing row r+1's partials cannot overwrite row r's before a slow warp has read them.
    const float ms = nk_block_sum(q, nk_smem + parity * nwarps) / fd;
    parity ^= 1;
    const float rs = nk_rsqrt(ms + eps);

    if (tid == 0 && rstd) rstd[row] = rs;

    if (weight) {
      for (int j = tid; j < d; j += nthreads) yr[j] = xr[j] * rs * weight[j];
    } else {
      for (int j = tid; j < d; j += nthreads) yr[j] = xr[j] * rs;
    }
  }
}

// y[i] = a * x[i] for i in [0, n), grid-stride (any grid, any block size).
extern "C" NK_GLOBAL void scale_f32(const float* x, float* y, float a, long long n) {
  const long long stride = (long long)nk_grid_dim_x() * nk_block_dim_x();
  for (long long i = (long long)nk_block_x() * nk_block_dim_x() + nk_thread_x(); i < n; i += stride) {
    y[i] = a * x[i];
  }
}

// ---------------------------------------------------------------- fast forward kernels
// Every (input, output, weight/bias) dtype triple built: X(tin, tout, tw), one per line.
// scripts/build-kernels.sh reads these X(...) lines to list the kernel names: keep one per line.
#define NK_FWD_DTYPES(X) \
  X(f32, f32, f32)       \
  X(f32, f16, f32)       \
  X(f32, bf16, f32)      \
  X(f16, f32, f32)       \
  X(f16, f16, f32)       \
  X(f16, bf16, f32)      \
  X(f16, f32, f16)       \
  X(f16, f16, f16)       \
  X(f16, bf16, f16)      \
  X(bf16, f32, f32)      \
  X(bf16, f16, f32)      \
  X(bf16, bf16, f32)     \
  X(bf16, f32, bf16)     \
  X(bf16, f16, bf16)     \
  X(bf16, bf16, bf16)

// One kernel: kind (ln|rms), LN flag, mapping (rows|block|cluster|wide), launch bounds, dtypes.
// rows: 256 threads, registers capped at 85 (3 blocks per SM); block/cluster: up to 512 threads (128
// registers); wide: up to 1024. The mapping order here is the order of NORM_KERNELS (scripts/build-kernels.sh).
// The register-caching mappings pick their FULL (mask-free, vector-only) path once per launch.
#define NK_FWD_KERNEL(kind, isln, map, bounds, ti, to, tw)                                              \
  extern "C" NK_GLOBAL void bounds nk_##kind##_##map##_##ti##_##to##_##tw(NK_FWD_PARAMS) {                \
    if (nk_fwd_full<nk_##ti, nk_##to, nk_##tw, isln>(x, y, weight, bias, d, x_stride, y_stride))          \
      nk_fwd_##map<nk_##ti, nk_##to, nk_##tw, isln, true>(NK_FWD_ARGS);                                   \
    else                                                                                                  \
      nk_fwd_##map<nk_##ti, nk_##to, nk_##tw, isln, false>(NK_FWD_ARGS);                                  \
  }
#define NK_FWD_KERNEL_WIDE(kind, isln, bounds, ti, to, tw)                                   \
  extern "C" NK_GLOBAL void bounds nk_##kind##_wide_##ti##_##to##_##tw(NK_FWD_PARAMS) {        \
    nk_fwd_wide<nk_##ti, nk_##to, nk_##tw, isln>(NK_FWD_ARGS);                                 \
  }
#define NK_FWD_KIND(kind, isln, ti, to, tw)                                    \
  NK_FWD_KERNEL(kind, isln, rows, NK_LAUNCH_BOUNDS_MIN(256, 4), ti, to, tw)    \
  NK_FWD_KERNEL(kind, isln, block, NK_LAUNCH_BOUNDS_MIN(512, 2), ti, to, tw)   \
  NK_FWD_KERNEL(kind, isln, cluster, NK_LAUNCH_BOUNDS_MIN(512, 2), ti, to, tw) \
  NK_FWD_KERNEL_WIDE(kind, isln, NK_LAUNCH_BOUNDS(1024), ti, to, tw)
#define NK_FWD_TRIPLE(ti, to, tw)   \
  NK_FWD_KIND(ln, true, ti, to, tw) \
  NK_FWD_KIND(rms, false, ti, to, tw)

NK_FWD_DTYPES(NK_FWD_TRIPLE)
