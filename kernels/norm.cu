// normkit kernels: LayerNorm / RMSNorm over the last dimension (PyTorch F.layer_norm / F.rms_norm
// semantics, biased variance), plus a scale kernel used by runtime tests and the launch bench.
// (The first, simple f32 kernels that proved the chain were replaced by these; git history has them.)
//
// One source for nvcc and clang-HIP: only portable.h, no runtime headers.
// Build: scripts/build-kernels.sh (writes precompiled/; never edit those files by hand).
//
// The fast forward kernels (templates in the fwd_*.cuh files norm_fwd.cuh includes, contracts in kernels/README.md) are
// instantiated at the end of this file as extern "C" nk_{ln|rms}_{rows|block|cluster|wide|latency|stash}_{tin}_{tout}_{tw},
// nk_ln_{block|cluster}full_* (LayerNorm's FULL path alone), nk_ln_rowstwopass_* (short rows, two passes) and
// nk_{ln|rms}_rowstile_* (short rows, FULL path alone, a transposed warp tile).
#include "portable.h"
#include "norm_fwd.cuh"
#include "diag.cuh"
#include "norm_bwd.cuh"

// NK_NORM_IMAGE picks the kernels of one image (scripts/build-kernels.sh, scripts/build-hsaco.sh): 1, scale_f32, the
// diagnostics and the forward kernels (norm_<target>); 2, the backward kernels and their finalize (norm_bwd_<target>),
// which a program loads only when it computes gradients. Undefined: every kernel (the host emulator, the lab's builds).
#if !defined(NK_NORM_IMAGE) || NK_NORM_IMAGE == 1
#define NK_NORM_FORWARD_IMAGE 1
#endif
#if !defined(NK_NORM_IMAGE) || NK_NORM_IMAGE == 2
#define NK_NORM_BACKWARD_IMAGE 1
#endif
#if defined(NK_NORM_IMAGE) && NK_NORM_IMAGE != 1 && NK_NORM_IMAGE != 2
#error "NK_NORM_IMAGE: 1 (forward) or 2 (backward)"
#endif

#ifdef NK_NORM_FORWARD_IMAGE
// y[i] = a * x[i] for i in [0, n), grid-stride (any grid, any block size).
extern "C" NK_GLOBAL void scale_f32(const float* x, float* y, float a, long long n) {
  const long long stride = (long long)nk_grid_dim_x() * nk_block_dim_x();
  for (long long i = (long long)nk_block_x() * nk_block_dim_x() + nk_thread_x(); i < n; i += stride) {
    y[i] = a * x[i];
  }
}

// Check-mode diagnostics (diag.cuh): per-block non-finite counts and abs-max, then one final reduction.
// Written out one per line: scripts/build-kernels.sh lists the kernels from these lines.
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) nk_diag_partial_f32(const unsigned* x, long long rows, int d, long long stride, unsigned long long* counts, float* maxes) { nk_diag_partial<nk_f32>(x, rows, d, stride, counts, maxes); }
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) nk_diag_partial_f16(const unsigned short* x, long long rows, int d, long long stride, unsigned long long* counts, float* maxes) { nk_diag_partial<nk_f16>(x, rows, d, stride, counts, maxes); }
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) nk_diag_partial_bf16(const unsigned short* x, long long rows, int d, long long stride, unsigned long long* counts, float* maxes) { nk_diag_partial<nk_bf16>(x, rows, d, stride, counts, maxes); }
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) nk_diag_final(const unsigned long long* counts, const float* maxes, int n, unsigned long long* out_count, float* out_max) { nk_diag_final_impl(counts, maxes, n, out_count, out_max); }

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

// One kernel: kind (ln|rms), LN flag, mapping (rows|block|cluster|wide|latency), launch bounds, dtypes.
// rows: 256 threads, registers capped at 64 (4 blocks per SM); block: up to 1024 threads (64 registers, as
// before at 512 threads and 2 blocks per SM: 1024 threads x 8 chunks hold a 128 KB row); cluster: up to 512
// threads, at least 2 blocks of them per SM (64 registers); wide: up to 1024; latency: up to 512 threads, one
// block per SM (x, weight and bias for 4 chunks in registers). The mapping order here is the order of NORM_KERNELS (scripts/build-kernels.sh).
// The register-caching mappings pick their FULL (mask-free, vector-only) path once per launch.
// NK_FWD_KERNEL_AS: the same under another name (nk_<kind>_<name>_*), with template arguments after FULL (`...`,
// written with a leading comma; empty for none).
#define NK_FWD_KERNEL_AS(kind, isln, name, map, bounds, ti, to, tw, ...)                                 \
  extern "C" NK_GLOBAL void bounds nk_##kind##_##name##_##ti##_##to##_##tw(NK_FWD_PARAMS) {               \
    nk_pdl_enter();                                                                                       \
    if (nk_fwd_full<nk_##ti, nk_##to, nk_##tw, isln>(x, y, weight, bias, d, x_stride, y_stride))          \
      nk_fwd_##map<nk_##ti, nk_##to, nk_##tw, isln, true __VA_ARGS__>(NK_FWD_ARGS);                       \
    else                                                                                                  \
      nk_fwd_##map<nk_##ti, nk_##to, nk_##tw, isln, false __VA_ARGS__>(NK_FWD_ARGS);                      \
  }
#define NK_FWD_KERNEL(kind, isln, map, bounds, ti, to, tw) NK_FWD_KERNEL_AS(kind, isln, map, map, bounds, ti, to, tw, )
// LayerNorm's FULL path alone, as a kernel of its own (nk_ln_{block|cluster}full_*): the plan's choice when the
// call qualifies (ops/plan.ts, fwdFull mirrors nk_fwd_full; a call that does not traps). With the masked path
// beside it in one kernel, ptxas sm_90 spills 16-32 bytes in LN's 16-bit clusters and 8 in LN's bf16-input
// blocks with f32 weights (here: none, but 8 in the clusters of 16-bit x to f32 y with f32 weights), and a
// FULL-only copy ran up to 12 points of copy faster (H200, LN bf16 D=131072: bench/README.md); as a call of
// its own (NK_NOINLINE) it lost up to 23 points. RMSNorm's kernels have none: they spill nowhere, and the
// fatbin must stay small (tests/unit/precompiled.test.ts).
#define NK_FWD_FULL_KERNEL(kind, isln, map, bounds, ti, to, tw)                                      \
  extern "C" NK_GLOBAL void bounds nk_##kind##_##map##full_##ti##_##to##_##tw(NK_FWD_PARAMS) {        \
    nk_pdl_enter();                                                                                   \
    if (!nk_fwd_full<nk_##ti, nk_##to, nk_##tw, isln>(x, y, weight, bias, d, x_stride, y_stride))     \
      nk_trap();                                                                                      \
    nk_fwd_##map##_full<nk_##ti, nk_##to, nk_##tw, isln, true>(NK_FWD_ARGS);                          \
  }
// LayerNorm's `rows` with the statistics in two passes (mean, then the centred variance; no ONEPASS), for rows of
// 1 or 2 lanes (nk_ln_rowstwopass_*, the plan's choice there). With one pass compiled in, 16-bit rows of D = 128
// (2 lanes) ran at 77-78% of copy even where every row took the centred pass, against 85 without it (H200,
// bench/README.md): the kernel's code, not the work, slows them. Longer rows gain from one pass.
#define NK_FWD_TWOPASS_KERNEL(ti, to, tw) \
  NK_FWD_KERNEL_AS(ln, true, rowstwopass, rows, NK_LAUNCH_BOUNDS_MIN(256, 4), ti, to, tw, , false)
// The `rows` vector-only kernel, a transposed warp tile (nk_{ln|rms}_rowstile_*, nk_fwd_rowstile in fwd_rows.cuh): the
// plan's choice for calls that qualify (ops/plan.ts: tileRows and fwdFull). Launch bounds by x and weight dtype: 16-bit
// x with 16-bit weights (no shift k, 4 words per weight chunk) at 48 registers, 5 CTAs of 256 per SM (H200, LN bf16
// D=128: 94.7% of copy, against 91.7 at 64 registers; ptxas sm_90 spills 4 bytes, sm_80 28); f32 weights (8 words
// per chunk: 36-44 bytes of spills at 48) and f32 x (the shift) at 64, where they spill nothing.
#define NK_TILE_BOUNDS_f32_f32 NK_LAUNCH_BOUNDS_MIN(256, 4)
#define NK_TILE_BOUNDS_f16_f32 NK_LAUNCH_BOUNDS_MIN(256, 4)
#define NK_TILE_BOUNDS_bf16_f32 NK_LAUNCH_BOUNDS_MIN(256, 4)
#define NK_TILE_BOUNDS_f16_f16 NK_LAUNCH_BOUNDS_MIN(256, 5)
#define NK_TILE_BOUNDS_bf16_bf16 NK_LAUNCH_BOUNDS_MIN(256, 5)
#define NK_FWD_TILE_KERNEL(kind, isln, ti, to, tw)                                                            \
  extern "C" NK_GLOBAL void NK_TILE_BOUNDS_##ti##_##tw nk_##kind##_rowstile_##ti##_##to##_##tw(NK_FWD_PARAMS) {  \
    nk_pdl_enter();                                                                                              \
    nk_fwd_rowstile_entry<nk_##ti, nk_##to, nk_##tw, isln>(NK_FWD_ARGS);                                         \
  }
// The `stash` kernels (nk_{ln|rms}_stash_*, nk_fwd_stash_entry): rows of up to 1024 x 16 chunks in one 1024-thread block,
// half of each row in shared memory (sm_90; ops/plan.ts stashGeometry).
#define NK_FWD_STASH_KERNEL(kind, isln, ti, to, tw)                                                       \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(1024) nk_##kind##_stash_##ti##_##to##_##tw(NK_FWD_PARAMS) {  \
    nk_pdl_enter();                                                                                       \
    nk_fwd_stash_entry<nk_##ti, nk_##to, nk_##tw, isln>(NK_FWD_ARGS);                                     \
  }
#define NK_FWD_KIND(kind, isln, ti, to, tw)                                              \
  NK_FWD_KERNEL(kind, isln, rows, NK_LAUNCH_BOUNDS_MIN(256, 4), ti, to, tw)              \
  NK_FWD_KERNEL(kind, isln, block, NK_LAUNCH_BOUNDS(1024), ti, to, tw)                   \
  NK_FWD_KERNEL(kind, isln, cluster, NK_LAUNCH_BOUNDS_MIN(512, 2), ti, to, tw)           \
  NK_FWD_KERNEL(kind, isln, wide, NK_LAUNCH_BOUNDS(1024), ti, to, tw)                    \
  NK_FWD_KERNEL(kind, isln, latency, NK_LAUNCH_BOUNDS(512), ti, to, tw)                 \
  NK_FWD_STASH_KERNEL(kind, isln, ti, to, tw)
#define NK_FWD_TRIPLE(ti, to, tw)                                                   \
  NK_FWD_KIND(ln, true, ti, to, tw)                                                 \
  NK_FWD_FULL_KERNEL(ln, true, block, NK_LAUNCH_BOUNDS(1024), ti, to, tw)           \
  NK_FWD_FULL_KERNEL(ln, true, cluster, NK_LAUNCH_BOUNDS_MIN(512, 2), ti, to, tw)   \
  NK_FWD_TWOPASS_KERNEL(ti, to, tw)                                                 \
  NK_FWD_TILE_KERNEL(ln, true, ti, to, tw)                                          \
  NK_FWD_KIND(rms, false, ti, to, tw)                                               \
  NK_FWD_TILE_KERNEL(rms, false, ti, to, tw)

NK_FWD_DTYPES(NK_FWD_TRIPLE)
#endif  // NK_NORM_FORWARD_IMAGE

// ---------------------------------------------------------------- backward kernels
#ifdef NK_NORM_BACKWARD_IMAGE
// Every (x, dy, weight) dtype triple built: B(tx, tdy, tw), one per line (dx has x's dtype; dy has the
// forward output's, any of the three; weight is f32 or x's dtype). scripts/build-kernels.sh reads these
// B(...) lines to list nk_{ln|rms}_bwd_{cached|wide|rowsum|tile|cluster}_{tx}_{tdy}_{tw}: keep one per line.
#define NK_BWD_DTYPES(B) \
  B(f32, f32, f32)       \
  B(f32, f16, f32)       \
  B(f32, bf16, f32)      \
  B(f16, f32, f32)       \
  B(f16, f16, f32)       \
  B(f16, bf16, f32)      \
  B(f16, f32, f16)       \
  B(f16, f16, f16)       \
  B(f16, bf16, f16)      \
  B(bf16, f32, f32)      \
  B(bf16, f16, f32)      \
  B(bf16, bf16, f32)     \
  B(bf16, f32, bf16)     \
  B(bf16, f16, bf16)     \
  B(bf16, bf16, bf16)

// cached and cluster: up to 512 threads and 128 registers (nk_bwd_maxv chunks of x and dy, and their
// parameter sums, in registers); wide and rowsum: up to 512; tile: 256 (its column sums live in registers).
// `cached` (cl false) and `cluster` (cl true): one body, nk_bwd_cached, with its FULL path picked per launch,
// compiled apart for a weight and for none (see nk_bwd_cached's WK), each a call of its own (nk_bwd_cached_full).
#define NK_BWD_REGS_KERNEL(kind, isln, map, cl, tx, td, tw)                                                  \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS_MIN(512, 1) nk_##kind##_bwd_##map##_##tx##_##td##_##tw(NK_BWD_PARAMS) { \
    nk_pdl_enter();                                                                                            \
    if (!nk_bwd_full<nk_##tx, nk_##td, nk_##tw>(dy, x, weight, dx, d, dy_stride, x_stride, dx_stride))        \
      nk_bwd_cached<nk_##tx, nk_##td, nk_##tw, isln, false, cl>(NK_BWD_ARGS);                                 \
    else if (weight)                                                                                           \
      nk_bwd_cached_full<nk_##tx, nk_##td, nk_##tw, isln, cl, NK_W_YES>(NK_BWD_ARGS);                         \
    else                                                                                                       \
      nk_bwd_cached_full<nk_##tx, nk_##td, nk_##tw, isln, cl, NK_W_NO>(NK_BWD_ARGS);                          \
  }
#define NK_BWD_KIND(kind, isln, tx, td, tw)                                                                    \
  NK_BWD_REGS_KERNEL(kind, isln, cached, false, tx, td, tw)                                                          \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(512) nk_##kind##_bwd_wide_##tx##_##td##_##tw(NK_BWD_PARAMS) {         \
    nk_pdl_enter();                                                                                                \
    nk_bwd_wide<nk_##tx, nk_##td, nk_##tw, isln>(NK_BWD_ARGS);                                                     \
  }                                                                                                                 \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(512) nk_##kind##_bwd_rowsum_##tx##_##td##_##tw(NK_BWD_PARAMS) {       \
    nk_pdl_enter();                                                                                                \
    nk_bwd_rowsum<nk_##tx, nk_##td, nk_##tw, isln>(NK_BWD_ARGS);                                                   \
  }                                                                                                                 \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) nk_##kind##_bwd_tile_##tx##_##td##_##tw(NK_BWD_PARAMS) {         \
    nk_pdl_enter();                                                                                                \
    nk_bwd_tile<nk_##tx, nk_##td, nk_##tw, isln>(NK_BWD_ARGS);                                                     \
  }                                                                                                                 \
  NK_BWD_REGS_KERNEL(kind, isln, cluster, true, tx, td, tw)
#define NK_BWD_TRIPLE(tx, td, tw)    \
  NK_BWD_KIND(ln, true, tx, td, tw) \
  NK_BWD_KIND(rms, false, tx, td, tw)

NK_BWD_DTYPES(NK_BWD_TRIPLE)

// `cached` (one row per block) and `cluster` with bulk-staged rows (nk_bwd_cached's TM; flags' stage count >= 1), the
// FULL path alone (a call that does not qualify traps), sm_90 only (the sm_80 SASS and the compute_80 PTX trap):
// nk_ln_bwd_{cachedstaged|clusterstaged}_* and nk_rms_bwd_clusterstaged_*, the plan's choices (ops/plan_bwd.ts,
// bwdStages: RMSNorm's one-row blocks lost with staging). For x and dy of one dtype (16-byte chunks of both:
// nk_bwd_tma_ok), weights f32 or x's: S(tx, tdy, tw), one per line (scripts/build-kernels.sh reads them). The fatbin's
// size keeps the list to these (tests/unit/precompiled.test.ts bounds it).
#define NK_BWD_STAGED_DTYPES(S) \
  S(f32, f32, f32)              \
  S(f16, f16, f32)              \
  S(f16, f16, f16)              \
  S(bf16, bf16, f32)            \
  S(bf16, bf16, bf16)
#define NK_BWD_STAGED_KERNEL(kind, isln, map, cl, tx, td, tw)                                                     \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS_MIN(512, 1) nk_##kind##_bwd_##map##staged_##tx##_##td##_##tw(NK_BWD_PARAMS) { \
    nk_pdl_enter();                                                                                              \
    if constexpr (nk_bwd_tma_ok<nk_##tx, nk_##td>::V) {                                                          \
      if (!nk_bwd_full<nk_##tx, nk_##td, nk_##tw>(dy, x, weight, dx, d, dy_stride, x_stride, dx_stride))        \
        nk_trap();                                                                                               \
      else if (weight)                                                                                           \
        nk_bwd_cached_staged<nk_##tx, nk_##td, nk_##tw, isln, cl, NK_W_YES>(NK_BWD_ARGS);                       \
      else                                                                                                       \
        nk_bwd_cached_staged<nk_##tx, nk_##td, nk_##tw, isln, cl, NK_W_NO>(NK_BWD_ARGS);                        \
    } else {                                                                                                     \
      nk_trap();                                                                                                 \
    }                                                                                                            \
  }
#define NK_BWD_STAGED_TRIPLE(tx, td, tw)                         \
  NK_BWD_STAGED_KERNEL(ln, true, cached, false, tx, td, tw)      \
  NK_BWD_STAGED_KERNEL(ln, true, cluster, true, tx, td, tw)      \
  NK_BWD_STAGED_KERNEL(rms, false, cluster, true, tx, td, tw)

NK_BWD_STAGED_DTYPES(NK_BWD_STAGED_TRIPLE)

// Parameter-gradient finalize, one per output dtype (see nk_bwd_finalize).
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(512) nk_bwd_finalize_f32(const float* part, int nparts, int d, int nacc, void* dweight, void* dbias, int accumulate) {
  nk_pdl_enter();
  nk_bwd_finalize<nk_f32>(part, nparts, d, nacc, dweight, dbias, accumulate);
}
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(512) nk_bwd_finalize_f16(const float* part, int nparts, int d, int nacc, void* dweight, void* dbias, int accumulate) {
  nk_pdl_enter();
  nk_bwd_finalize<nk_f16>(part, nparts, d, nacc, dweight, dbias, accumulate);
}
extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(512) nk_bwd_finalize_bf16(const float* part, int nparts, int d, int nacc, void* dweight, void* dbias, int accumulate) {
  nk_pdl_enter();
  nk_bwd_finalize<nk_bf16>(part, nparts, d, nacc, dweight, dbias, accumulate);
}
#endif  // NK_NORM_BACKWARD_IMAGE
