// normkit fast forward kernels: LayerNorm / RMSNorm over the last dimension, templated on the input,
// output and parameter (weight/bias) dtypes and on the kind (LN or RMS), in five thread mappings.
// Included by norm.cu, which instantiates every (kind, mapping, dtype triple) as an extern "C" kernel.
// Launch contracts: kernels/README.md (and the comments on each mapping, in the fwd_*.cuh files this includes).
//
// Numerics (PyTorch F.layer_norm / F.rms_norm, biased variance), all in f32:
//   LN : mean = sum(x)/d; var from the values held in registers about a shift k (the row's first element), never
//        as E[x^2]-E[x]^2 of x itself: E[t^2]-E[t]^2 of t = x-k where k lies within 3 std of the mean, else the
//        centred sum of squares (ONEPASS in nk_row_cached); rstd = rsqrt(var+eps); y = (x-mean)*rstd*w + b.
//        (The `rows` tile, nk_fwd_rowstile, takes 16-bit rows without the shift: see there.)
//   RMS: rstd = rsqrt(sum(x^2)/d + eps); y = x*rstd*w. `bias` is ignored, `mean` never written.
// Deterministic: every sum has a fixed order (per-thread in chunk order, then a fixed shuffle tree /
// warp tree / cluster rank order); no atomics. In place (y == x with the same stride) is correct:
// every element of a row is loaded before the row's first reduction completes, and no element is
// stored before it (the `wide` mapping re-reads x[j] and writes y[j] in the same thread).
#ifndef NORMKIT_NORM_FWD_CUH
#define NORMKIT_NORM_FWD_CUH

#include "fwd_common.cuh"
#include "fwd_row_cache.cuh"
#include "fwd_rows.cuh"
#include "fwd_block.cuh"
#include "fwd_cluster.cuh"
#include "fwd_wide.cuh"
#include "fwd_stash.cuh"

#endif  // NORMKIT_NORM_FWD_CUH
