// normkit kernels: LayerNorm / RMSNorm over the last dimension (PyTorch F.layer_norm / F.rms_norm
// semantics, biased variance), plus a scale kernel used by runtime tests and the launch bench.
// (The first, simple f32 kernels that proved the chain were replaced by these; git history has them.)
//
// One source for nvcc and clang-HIP: only portable.h, no runtime headers.
// Build: scripts/build-kernels.sh (writes precompiled/; never edit those files by hand).
//
// The fast forward kernels (templates in norm_fwd.cuh, contracts in kernels/README.md) are
// instantiated at the end of this file as extern "C" nk_{ln|rms}_{rows|block|cluster|wide}_{tin}_{tout}_{tw}.
#include "portable.h"
#include "norm_fwd.cuh"

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
