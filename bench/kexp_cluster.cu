// Forward-kernel experiments for rows past one block's registers (not part of the product): the `cluster` mapping
// with its cluster barrier replaced, and rows streamed through shared memory by the Tensor Memory Accelerator.
// Built by bench/kexp_cluster.sh into one sm_90 cubin and timed by bench/kexp_cluster.ts against the production
// kernels in the same run. Results and conclusions: bench/RESULTS.md.
//
// Why: Nsight on the production cluster kernel (LN f32 D = 32768) showed "membar" stalls at the cluster barrier:
// `barrier.cluster.arrive.release` makes every thread wait until its earlier global stores (the previous row's
// y) are performed before it arrives, once per reduction. The variants here avoid that barrier:
//   a (kc_*_cla_*): nk_row_cached in the production cluster geometry, but each CTA's partial sum goes to every CTA
//     of the cluster by `st.async` (a remote shared-memory store that signals the receiver's mbarrier; no fence
//     on global memory), and each CTA waits on its own mbarrier. The same sums in the same order: bitwise equal.
//     With prefetch > 0, thread 0 first asks L2 for its slice of the row `prefetch` rows on.
//   t (kc_*_tma{S}_*): a persistent cluster grid; each CTA's slice of a row arrives in one of S shared-memory stages
//     by one bulk copy (cp.async.bulk, issued by thread 0, completion on the stage's mbarrier), so the loads of the
//     next S-1 rows are in flight while a row is reduced and written; then the same row function and reduction as
//     `a` (its x loads read the stage). Stage s is refilled (row + S clusters on) right after the row's first
//     reduction, once every thread has loaded its chunks. Works without a cluster too (a launch of C = 1).
// FULL path only (aligned rows, d a multiple of the chunk); anything else traps.
#include "../kernels/norm_fwd.cuh"

// (The mbarrier, st.async and mapa helpers are kernels/portable.h's, which took them from here.)
// Bulk copy global -> this CTA's shared memory (16-byte aligned, size a multiple of 16), completion on `bar`.
__device__ __forceinline__ void kc_bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Shared memory after the two block-reduction buffers (2 * nwarps floats): 8-byte aligned mbarriers (2 for the
// reductions, then the stages'), 64 floats of slots (2 x 32 ranks), then the stages (128-byte aligned).
struct kc_layout {
  unsigned bars;   // shared address of mbarrier 0
  float* slots;    // generic pointer to the 64 slot floats
  unsigned stage0; // shared address of stage 0
  char* stage0p;   // the same, generic
  __device__ kc_layout(unsigned nwarps, int nstages) {
    char* base = (char*)nk_fwd_smem;
    const unsigned o_bars = (2 * nwarps * 4 + 7) & ~7u;
    const unsigned o_slots = o_bars + (2 + nstages) * 8;
    const unsigned o_stage = (o_slots + 256 + 127) & ~127u;
    bars = nk_smem_addr(base + o_bars);
    slots = (float*)(base + o_slots);
    stage0p = base + o_stage;
    stage0 = nk_smem_addr(stage0p);
  }
};

// The cluster reduction without a cluster barrier (see the file comment). Reduction n uses slot row n & 1 and
// mbarrier n & 1, phase (n >> 1) & 1. Slot row q is written again two reductions later: a CTA sends its partial
// for n + 2 only after it has every CTA's partial for n + 1, which each CTA sends after the block barrier of
// n + 1, which its threads pass only after reading the slots of n.
struct kc_red_async {
  unsigned nwarps, parity, csize, crank, n, bars;
  float* slots;
  // Thread 0's stage refill, issued after the first block sum of a row (the `t` kernels; null: none).
  const void* refill_src;
  unsigned refill_dst, refill_bytes, refill_bar;
  __device__ __forceinline__ float operator()(float v) {
    const float p = nk_block_sum(v, nk_fwd_smem + parity * nwarps);
    parity ^= 1u;
    const unsigned b = n & 1u, bar = bars + 8 * b;
    if (nk_thread_x() == 0) {
      if (refill_src) {
        nk_mbar_arm(refill_bar, refill_bytes);
        kc_bulk_load(refill_dst, refill_src, refill_bytes, refill_bar);
        refill_src = nullptr;
      }
      nk_mbar_arm(bar, csize * 4);
      const unsigned sa = nk_smem_addr(slots + b * 32 + crank);
      for (unsigned r = 0; r < csize; ++r) nk_st_async(nk_mapa(sa, r), p, nk_mapa(bar, r));
    }
    nk_mbar_wait(bar, (n >> 1) & 1u);
    const unsigned lane = nk_lane();
    const float mine = lane < csize ? slots[b * 32 + lane] : 0.0f;
    float t = nk_shfl_idx(mine, 0);
    for (unsigned r = 1; r < csize; ++r) t += nk_shfl_idx(mine, (int)r);
    ++n;
    return t;
  }
};

__device__ __forceinline__ void kc_init_bars(const kc_layout& L, int count) {
  if (nk_thread_x() == 0) {
    for (int i = 0; i < count; ++i) nk_mbar_init(L.bars + 8 * i);
    nk_mbar_init_fence();
  }
  nk_cluster_sync();  // every mbarrier of the cluster initialised before any remote write
}

// A cluster CTA's slice of every row, in nk_fwd_cluster's geometry: chunks [crank * cpc, crank * cpc + c_end) of
// the row, elements from e0 on, dpart of them to the row's end. Traps on a launch outside the contract.
template <class TI>
struct kc_slice {
  unsigned csize, crank;
  int cpc, c_end, dpart;
  long long e0;
  __device__ __forceinline__ kc_slice(int d, int tpr, int nv) {
    constexpr int VEC = 16 / TI::SIZE;
    csize = nk_cluster_size(), crank = nk_cluster_rank();
    const int nchunks = d / VEC;
    cpc = (int)((nchunks + csize - 1) / csize);
    if ((unsigned)tpr != nk_block_dim_x() || nv < 1 || nv > NK_MAXV_BLOCK || (long long)nv * tpr < cpc || csize > 32)
      nk_trap();
    e0 = (long long)crank * cpc * VEC;
    c_end = nk_mini(cpc, nchunks - (int)crank * cpc);
    dpart = c_end > 0 ? (int)(d - e0) : 0;
  }
};

// `a`: the production cluster mapping (nk_fwd_cluster's geometry and contract) with kc_red_async.
// Dynamic smem: ((2 * nwarps * 4 + 7) & ~7) + 16 + 256 bytes.
template <class TI, class TO, class TW, bool LN>
__device__ __forceinline__ void kc_cluster_async(NK_FWD_PARAMS) {
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap();
  const kc_slice<TI> sl(d, tpr, nv);
  const unsigned csize = sl.csize, crank = sl.crank;
  const int cpc = sl.cpc, c_end = sl.c_end, dpart = sl.dpart;
  const long long e0 = sl.e0;
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  const kc_layout L(nwarps, 0);
  kc_init_bars(L, 2);
  kc_red_async red{nwarps, 0u, csize, crank, 0u, L.bars, L.slots, nullptr, 0u, 0u, 0u};
  const bool writer = crank == 0 && t == 0;
  const typename TW::S* Ws = Wt ? Wt + e0 : Wt;
  const typename TW::S* Bss = Bs ? Bs + e0 : Bs;
  const long long last = rows - 1;
  for (long long row = nk_cluster_id_x(); row < rows; row += nk_cluster_count_x()) {
    // prefetch > 0: this CTA's slice of the row `prefetch` rows on (on a persistent grid of that many clusters,
    // its own next row) asked of L2 first.
    if (prefetch > 0 && t == 0 && row + prefetch <= last && c_end > 0)
      nk_prefetch_l2(X + (row + prefetch) * x_stride + e0, (long long)c_end * 16);
    const float k = LN ? TI::to_f(X[row * x_stride]) : 0.0f;
    nk_row_cached<TI, TO, TW, LN, NK_MAXV_BLOCK, true, kc_red_async>(
        X + row * x_stride + e0, Y + row * y_stride + e0, Ws, Bss, dpart, t, tpr, c_end, nv, (float)d, eps, k, red,
        (writer && LN && mean) ? mean + row : nullptr, (writer && rstd) ? rstd + row : nullptr);
  }
  nk_cluster_sync();
}

// `t`: S stages (the kernel's template argument), a persistent cluster grid (rows strided by the clusters).
// Geometry as `a`. Dynamic smem: kc_layout's offset of stage 0 + S * cpc * 16 bytes.
template <class TI, class TO, class TW, bool LN, int S>
__device__ __forceinline__ void kc_tma(NK_FWD_PARAMS) {
  if (!nk_fwd_full<TI, TO, TW, LN>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap();
  const kc_slice<TI> sl(d, tpr, nv);
  const unsigned csize = sl.csize, crank = sl.crank;
  const int cpc = sl.cpc, c_end = sl.c_end, dpart = sl.dpart;
  const long long e0 = sl.e0;
  NK_FWD_TYPED_PTRS;
  const int t = (int)nk_thread_x();
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  const kc_layout L(nwarps, S);
  kc_init_bars(L, 2 + S);
  kc_red_async red{nwarps, 0u, csize, crank, 0u, L.bars, L.slots, nullptr, 0u, 0u, 0u};
  const unsigned bytes = c_end > 0 ? (unsigned)c_end * 16u : 0u;
  const bool writer = crank == 0 && t == 0;
  const typename TW::S* Ws = Wt ? Wt + e0 : Wt;
  const typename TW::S* Bss = Bs ? Bs + e0 : Bs;
  const long long cid = nk_cluster_id_x(), ncl = nk_cluster_count_x();
  const unsigned sbar = L.bars + 16;  // the stages' mbarriers
  const unsigned sbytes = (unsigned)cpc * 16u;
  if (t == 0 && bytes > 0)
    for (int s = 0; s < S; ++s) {
      const long long row = cid + s * ncl;
      if (row < rows) {
        nk_mbar_arm(sbar + 8 * s, bytes);
        kc_bulk_load(L.stage0 + s * sbytes, X + row * x_stride + e0, bytes, sbar + 8 * s);
      }
    }
  int s = 0;
  unsigned phase = 0;
  for (long long row = cid; row < rows; row += ncl) {
    if (bytes > 0) nk_mbar_wait(sbar + 8 * s, phase);
    const long long next = row + S * ncl;
    if (t == 0 && bytes > 0 && next < rows) {
      red.refill_src = X + next * x_stride + e0;
      red.refill_dst = L.stage0 + s * sbytes;
      red.refill_bytes = bytes;
      red.refill_bar = sbar + 8 * s;
    }
    const float k = LN ? TI::to_f(X[row * x_stride]) : 0.0f;
    nk_row_cached<TI, TO, TW, LN, NK_MAXV_BLOCK, true, kc_red_async>(
        (const typename TI::S*)(L.stage0p + s * sbytes), Y + row * y_stride + e0, Ws, Bss, dpart, t, tpr, c_end, nv,
        (float)d, eps, k, red, (writer && LN && mean) ? mean + row : nullptr, (writer && rstd) ? rstd + row : nullptr);
    if (++s == S) s = 0, phase ^= 1u;
  }
  nk_cluster_sync();
}

#define KC(kind, isln, ti)                                                                             \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(512, 2) kc_##kind##_cla_##ti(NK_FWD_PARAMS) {         \
    nk_pdl_enter();                                                                                    \
    kc_cluster_async<nk_##ti, nk_##ti, nk_##ti, isln>(NK_FWD_ARGS);                                    \
  }                                                                                                    \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(512, 2) kc_##kind##_tma2_##ti(NK_FWD_PARAMS) {        \
    nk_pdl_enter();                                                                                    \
    kc_tma<nk_##ti, nk_##ti, nk_##ti, isln, 2>(NK_FWD_ARGS);                                           \
  }                                                                                                    \
  extern "C" __global__ void NK_LAUNCH_BOUNDS_MIN(512, 2) kc_##kind##_tma3_##ti(NK_FWD_PARAMS) {        \
    nk_pdl_enter();                                                                                    \
    kc_tma<nk_##ti, nk_##ti, nk_##ti, isln, 3>(NK_FWD_ARGS);                                           \
  }
KC(ln, true, f32)
KC(rms, false, f32)
KC(ln, true, bf16)
KC(rms, false, bf16)

// `b` (kc_*_block1024_*) and `c` (kc_*_cluster1024_*): the production `block` and `cluster` mappings (FULL path)
// compiled for CTAs of up to 1024 threads. Their register cap is the same as production's (__launch_bounds__(512, 2)
// and (1024) both leave 64 per thread), so a 1024-thread block holds 1024 x 8 chunks: f32 rows of 32768, 16-bit rows
// of 65536, one row per SM in flight; C such CTAs of a cluster hold a row of C * 128 KB, one CTA per SM.
#define K1024(kind, isln, ti, map)                                                                        \
  extern "C" __global__ void NK_LAUNCH_BOUNDS(1024) kc_##kind##_##map##1024_##ti(NK_FWD_PARAMS) {         \
    nk_pdl_enter();                                                                                       \
    if (!nk_fwd_full<nk_##ti, nk_##ti, nk_##ti, isln>(x, y, weight, bias, d, x_stride, y_stride)) nk_trap(); \
    nk_fwd_##map<nk_##ti, nk_##ti, nk_##ti, isln, true>(NK_FWD_ARGS);                                     \
  }
#define K1024_ALL(map) K1024(ln, true, f32, map) K1024(rms, false, f32, map) K1024(ln, true, bf16, map) K1024(rms, false, bf16, map)
K1024_ALL(block)
K1024_ALL(cluster)
