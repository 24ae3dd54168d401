// normkit backward kernels: dx, and per-block partial sums of dweight / dbias, for LayerNorm and
// RMSNorm over the last dimension; then one small kernel that adds the partials up.
// Included by norm.cu, which instantiates them as extern "C" kernels (names in kernels/README.md).
//
// Maths (f32), with xhat = (x - mean) * rstd (LN) or x * rstd (RMS), g = dy * w (w = 1 without weight):
//   LN : dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   RMS: dx = rstd * (g - xhat * mean(g * xhat))
//   dweight[j] = sum over rows of dy[j] * xhat[j];  dbias[j] = sum over rows of dy[j]   (LN only)
// mean / rstd are the forward's statistics (f32, one per row).
//
// Parameter gradients without atomics: the grid is persistent (about as many blocks as fit on the GPU
// at once), and a thread always owns the same columns of the rows it visits, so it adds its rows'
// dy * xhat into its own slots (shared memory, or this block's row of `part` for `wide`). At the end a
// block adds its row groups' slots in group order and writes one row of `part` ([grid][nacc][d] f32,
// nacc = 2 for LN, 1 for RMS); nk_bwd_finalize then adds the rows of `part` in a fixed order. Every sum
// has a fixed order: the results are bitwise identical run to run.
// (An element-major slot layout, meant to avoid the 2-way bank conflicts of float4 updates of 8-element
// chunks, measured slower on the H200: 8x the shared-memory instructions, and conflicts across row
// groups; LN bf16 D=128 fell from 68% to 31% of copy. The slots stay chunk-major.)
#ifndef NORMKIT_NORM_BWD_CUH
#define NORMKIT_NORM_BWD_CUH

#include "bwd_common.cuh"
#include "bwd_cached.cuh"
#include "bwd_wide.cuh"
#include "bwd_rowsum_tile.cuh"
#include "bwd_finalize.cuh"

#endif  // NORMKIT_NORM_BWD_CUH
