// norm_bwd.cuh: mappings `rowsum` and `tile`.
// Included through norm_bwd.cuh (kernels/README.md lists the files).
#ifndef NORMKIT_BWD_ROWSUM_TILE_CUH
#define NORMKIT_BWD_ROWSUM_TILE_CUH
#include "bwd_wide.cuh"

// ---------------------------------------------------------------- mappings `rowsum` + `tile`
// Rows whose parameter sums fit neither in registers nor in shared memory (LN D >= ~29K, RMS D >= ~58K):
// a read-modify-write of a global row of sums per row would move more bytes than the rows themselves.
// Instead two kernels: `rowsum` writes each row's a = mean(g) and b = mean(g * xhat) (reads x and dy once),
// then `tile` gives each block a tile of columns for a strided set of rows: dx needs only a and b, and each
// thread keeps its 16 columns' sums in registers across the rows (no reductions, no barriers). 5 row-sized
// transfers instead of 3, against about 10 for the global read-modify-write.
//
// Workspace layout (`part`): rowsums [2 * rows] floats (rounded up to 4), then the column partials
// [G][nacc][d] (G = row groups of `tile`), which nk_bwd_finalize adds up (nparts = G).
//
// rowsum: one row per block (blockDim.x = tpr, a multiple of the warp size), rows grid-strided.
// Dynamic smem: 2 * warps floats. dx, nv unused.
template <class TX, class TD, class TW, bool LN>
NK_INLINE void nk_bwd_rowsum(NK_BWD_PARAMS) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC;
  (void)dx, (void)dx_stride, (void)nv, (void)flags;
  nk_check_wave();
  if ((unsigned)tpr != nk_block_dim_x() || tpr % NK_WARP_SIZE || !part) nk_trap();
  if (d <= 0) return;
  NK_BWD_TYPED_PTRS;
  (void)DX;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  const float fd = (float)d;
  nk_red_block red{nk_block_dim_x() / NK_WARP_SIZE, 0u};
  const bool pvec = nk_aligned(W, nk_chunk_align<TW, VEC>::A);
  for (long long row = nk_block_x(); row < rows; row += nk_grid_dim_x()) {
    const typename TX::S* xr = X + row * x_stride;
    const typename TD::S* dyr = DY + row * dy_stride;
    const bool xvec = nk_aligned(xr, nk_chunk_align<TX, VEC>::A);
    const bool dvec = nk_aligned(dyr, nk_chunk_align<TD, VEC>::A);
    const float mu = LN ? mean[row] : 0.0f, rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    NK_BWD_ROW_PASS(nk_bwd_sums<TW, LN, VEC>(xf, df, W ? W + off : W, pvec, nvalid, mu, rs, sg, sgx));
    const float a = LN ? red(sg) / fd : 0.0f;
    const float b = red(sgx) / fd;
    if (t == 0) {
      part[2 * row] = a;
      part[2 * row + 1] = b;
    }
  }
}

// tile: blockDim.x = tpr (a multiple of the warp size); a tile is tpr * NT chunks (NT = 16 / VEC: 16
// columns per thread); gridDim.x = ntiles * G, block = (g, tile) with tile = blockIdx % ntiles; rows g,
// g + G, ... Dynamic smem: 0. nv unused.
template <class TX, class TD, class TW, bool LN>
NK_INLINE void nk_bwd_tile(NK_BWD_PARAMS) {
  constexpr int VEC = nk_bwd_geom<TX, TD>::VEC;
  constexpr int NT = 16 / VEC;
  constexpr int NACC = LN ? 2 : 1;
  (void)nv, (void)flags;
  if ((unsigned)tpr != nk_block_dim_x() || !part) nk_trap();
  if (d <= 0) return;
  NK_BWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const int nchunks = (d - 1) / VEC + 1;
  const int tile_chunks = tpr * NT;
  const int ntiles = (nchunks - 1) / tile_chunks + 1;
  const int tile = (int)(nk_block_x() % (unsigned)ntiles);
  const long long g = nk_block_x() / (unsigned)ntiles, G = nk_grid_dim_x() / (unsigned)ntiles;
  if (g >= G) return;  // a partial last group (the launcher sizes the grid as ntiles * G)
  const float* rowsums = part;
  float* cols = part + ((2 * (long long)rows + 3) & ~3ll) + g * NACC * d;
  const int c0 = tile * tile_chunks + t;  // this thread's chunks: c0 + i * tpr, i < NT
  const bool pvec = nk_aligned(W, nk_chunk_align<TW, VEC>::A);
  float accw[NT * VEC], accb[NT * VEC];
#pragma unroll
  for (int k = 0; k < NT * VEC; ++k) accw[k] = 0.0f, accb[k] = 0.0f;
  for (long long row = g; row < rows; row += G) {
    NK_BWD_ROW_LOCALS;
    const float a = rowsums[2 * row], b = rowsums[2 * row + 1];
    float xf[NT][VEC], df[NT][VEC];
#pragma unroll
    for (int i = 0; i < NT; ++i) {  // every load of the row first: NT chunks of x and dy in flight
      const int c = c0 + i * tpr;
      const int nvalid = c < nchunks ? nk_chunk_valid<VEC>(c, d) : 0;
      nk_load_f<TX, VEC>(xr + (long long)c * VEC, xvec, nvalid, xf[i]);
      nk_load_f<TD, VEC>(dyr + (long long)c * VEC, dvec, nvalid, df[i]);
    }
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int c = c0 + i * tpr;
      const int nvalid = c < nchunks ? nk_chunk_valid<VEC>(c, d) : 0;
      if (nvalid <= 0) continue;
      const long long off = (long long)c * VEC;
      float wf[VEC], o[VEC];
      if (W) nk_load_f<TW, VEC>(W + off, pvec, nvalid, wf);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float xh = LN ? (xf[i][e] - mu) * rs : xf[i][e] * rs;
        const float gg = W ? df[i][e] * wf[e] : df[i][e];
        o[e] = rs * (LN ? (gg - a) - xh * b : gg - xh * b);
        accw[i * VEC + e] += e < nvalid ? df[i][e] * xh : 0.0f;
        if (LN) accb[i * VEC + e] += e < nvalid ? df[i][e] : 0.0f;
      }
      nk_store_f<TX, VEC>(dxr + off, dxvec, nvalid, o);
    }
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const int c = c0 + i * tpr;
    const int nvalid = c < nchunks ? nk_chunk_valid<VEC>(c, d) : 0;
    for (int e = 0; e < nvalid; ++e) {
      cols[(long long)c * VEC + e] = accw[i * VEC + e];
      if (LN) cols[d + (long long)c * VEC + e] = accb[i * VEC + e];
    }
  }
}

#endif  // NORMKIT_BWD_ROWSUM_TILE_CUH
