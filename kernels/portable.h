// normkit kernel prelude: lets one kernel source compile with
//   nvcc  (NVIDIA: PTX/SASS), and
//   clang -x hip -nogpulib -nogpuinc --cuda-device-only (AMD: HSACO, no HIP headers).
//
// Rules for kernel sources that include this header:
//   - no cuda_runtime.h / hip_runtime.h includes, no cooperative groups, no libdevice/ocml calls;
//   - use the NK_* macros and nk_* helpers below instead of __global__, threadIdx, __syncthreads, ...;
//   - blockDim.x must be a multiple of NK_WARP_SIZE (all lanes of every warp are active).
#ifndef NORMKIT_PORTABLE_H
#define NORMKIT_PORTABLE_H

#if defined(__HIP__) && defined(__AMDGCN__)
// ---------------------------------------------------------------- AMD (clang HIP, no headers)
#define NK_GLOBAL __attribute__((global))
#define NK_SHARED __attribute__((shared))
#define NK_DEVICE __attribute__((device))
#define NK_INLINE __attribute__((device)) __attribute__((always_inline)) inline
// NK_NOINLINE (see the NVIDIA half) stays inline here: as a call, clang-19 gave the `wide` kernels a stack
// frame in scratch memory (8-220 bytes per work-item, gfx942) and more VGPRs (LN f32: 86 -> 120); inlined they
// use no scratch, and 64+ VGPRs per lane leave no spill to avoid.
#define NK_NOINLINE NK_INLINE
#define NK_LAUNCH_BOUNDS(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#define NK_LAUNCH_BOUNDS_MIN(n, m) __attribute__((amdgpu_flat_work_group_size(1, n)))
#define NK_RESTRICT __restrict__

// Wave size per target family: 64 on CDNA/GCN (gfx9xx), 32 on RDNA (gfx10/11/12, default mode).
// Newer clang no longer defines __AMDGCN_WAVEFRONT_SIZE, so derive it; nk_check_wave() below
// traps (and folds away when right) if the guess disagrees with the compiled wave size.
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define NK_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#elif defined(__GFX9__)
#define NK_WARP_SIZE 64
#elif defined(__GFX10__) || defined(__GFX11__) || defined(__GFX12__)
#define NK_WARP_SIZE 32
#else
#error "normkit: unknown AMDGPU family; define NK_WARP_SIZE"
#endif

NK_INLINE unsigned nk_thread_x() { return __builtin_amdgcn_workitem_id_x(); }
NK_INLINE unsigned nk_block_x() { return __builtin_amdgcn_workgroup_id_x(); }
NK_INLINE unsigned nk_block_dim_x() { return __builtin_amdgcn_workgroup_size_x(); }
NK_INLINE unsigned nk_grid_dim_x() {
  // gridDim.x in blocks = grid size in work-items / workgroup size (HSA dispatch packet).
  const unsigned short* dp = (const unsigned short*)__builtin_amdgcn_dispatch_ptr();
  const unsigned grid_items = *(const unsigned*)(dp + 6);  // grid_size_x at byte offset 12
  return grid_items / nk_block_dim_x();
}
NK_INLINE unsigned nk_lane() {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}
NK_INLINE int nk_log2_pow2(int v) { return __builtin_ctz((unsigned)v); }  // v a power of two
NK_INLINE void nk_check_wave() {
  if (__builtin_amdgcn_wavefrontsize() != NK_WARP_SIZE) __builtin_trap();
}
// Block barrier: release fence, s_barrier, acquire fence (fence-after-only races on gfx942).
NK_INLINE void nk_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
NK_INLINE float nk_shfl_xor(float v, int mask) {
  const int src = (int)(nk_lane() ^ (unsigned)mask);
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src << 2, __builtin_bit_cast(int, v)));
}
NK_INLINE float nk_shfl_idx(float v, int src) {
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src << 2, __builtin_bit_cast(int, v)));
}
// True in every lane when p holds in any lane of the wave (every lane calls it).
#if NK_WARP_SIZE == 64
NK_INLINE bool nk_any(bool p) { return __builtin_amdgcn_ballot_w64(p) != 0; }
#else
NK_INLINE bool nk_any(bool p) { return __builtin_amdgcn_ballot_w32(p) != 0; }
#endif
NK_INLINE float nk_rsqrt(float v) { return 1.0f / __builtin_sqrtf(v); }
NK_INLINE void nk_trap() { __builtin_trap(); }
// Empty asm that "modifies" v: the compiler must keep v itself, not values derived from it (stops
// CSE from keeping unpacked copies of register-cached data alive across a reduction).
NK_INLINE void nk_opaque(unsigned& v) { asm volatile("" : "+v"(v)); }
NK_INLINE void nk_opaque(int& v) { asm volatile("" : "+v"(v)); }
NK_INLINE float nk_u2f(unsigned u) { return __builtin_bit_cast(float, u); }
NK_INLINE unsigned nk_f2u(float f) { return __builtin_bit_cast(unsigned, f); }
NK_INLINE float nk_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }  // a * b + c, one rounding
// IEEE binary16 <-> binary32 through clang's _Float16 (hardware v_cvt_f16_f32: round to nearest even,
// NaN stays NaN, overflow to +-Inf; binary16 -> binary32 is exact).
NK_INLINE float nk_f16_to_f32(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
NK_INLINE unsigned short nk_f32_to_f16(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }

#elif defined(__CUDACC__)
// ---------------------------------------------------------------- NVIDIA (nvcc; no explicit includes)
#define NK_GLOBAL __global__
#define NK_SHARED __shared__
#define NK_DEVICE __device__
#define NK_INLINE __device__ __forceinline__
// A device function the compiler must keep as a call: its registers are allocated apart from its caller's.
#define NK_NOINLINE __device__ __noinline__
#define NK_LAUNCH_BOUNDS(n) __launch_bounds__(n)
// n threads per block at most, and registers capped so that m such blocks fit on one SM.
#define NK_LAUNCH_BOUNDS_MIN(n, m) __launch_bounds__(n, m)
#define NK_RESTRICT __restrict__
#define NK_WARP_SIZE 32

NK_INLINE unsigned nk_thread_x() { return threadIdx.x; }
NK_INLINE unsigned nk_block_x() { return blockIdx.x; }
NK_INLINE unsigned nk_block_dim_x() { return blockDim.x; }
NK_INLINE unsigned nk_grid_dim_x() { return gridDim.x; }
NK_INLINE unsigned nk_lane() { return threadIdx.x & 31u; }
NK_INLINE int nk_log2_pow2(int v) { return __ffs(v) - 1; }  // v a power of two
NK_INLINE void nk_check_wave() {}
NK_INLINE void nk_barrier() { __syncthreads(); }
NK_INLINE float nk_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask, 32); }
NK_INLINE float nk_shfl_idx(float v, int src) { return __shfl_sync(0xffffffffu, v, src, 32); }
NK_INLINE bool nk_any(bool p) { return __any_sync(0xffffffffu, p) != 0; }  // every lane of the warp calls it
NK_INLINE float nk_rsqrt(float v) { return rsqrtf(v); }  // max 2 ulp
NK_INLINE void nk_trap() { __trap(); }
// Empty asm that "modifies" v: the compiler must keep v itself, not values derived from it (stops
// CSE from keeping unpacked copies of register-cached data alive across a reduction).
NK_INLINE void nk_opaque(unsigned& v) { asm volatile("" : "+r"(v)); }
NK_INLINE void nk_opaque(int& v) { asm volatile("" : "+r"(v)); }
NK_INLINE float nk_u2f(unsigned u) { return __uint_as_float(u); }
NK_INLINE unsigned nk_f2u(float f) { return __float_as_uint(f); }
NK_INLINE float nk_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }  // a * b + c, one rounding
// IEEE binary16 <-> binary32 with the PTX conversions (what __half2float / __float2half_rn compile to):
// cvt.rn rounds to nearest even, keeps NaN a NaN and Inf an Inf, overflows to +-Inf; f16 -> f32 is exact.
NK_INLINE float nk_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
NK_INLINE unsigned short nk_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// Two floats to a packed pair (lo in bits 0..15), round to nearest even, NaN/Inf kept: one instruction.
NK_INLINE unsigned nk_pack_f16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#define NK_HAS_PACK2 1

// Hopper thread-block clusters (sm_90+ device code only; nothing else may call these).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define NK_HAS_CLUSTER 1
NK_INLINE unsigned nk_cluster_rank() { unsigned r; asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
NK_INLINE unsigned nk_cluster_size() { unsigned r; asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(r)); return r; }
NK_INLINE unsigned nk_cluster_id_x() { unsigned r; asm("mov.u32 %0, %%clusterid.x;" : "=r"(r)); return r; }
NK_INLINE unsigned nk_cluster_count_x() { unsigned r; asm("mov.u32 %0, %%nclusterid.x;" : "=r"(r)); return r; }
// All threads of all CTAs of the cluster: arrive (release: this thread's earlier loads and stores,
// shared memory included, are ordered before) and wait (acquire). Every thread must call it, uniformly.
NK_INLINE void nk_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The shared-memory address (32-bit, .shared window) of a generic pointer into this CTA's shared memory.
NK_INLINE unsigned nk_smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// The same shared-memory address in CTA `rank` of the cluster.
NK_INLINE unsigned nk_mapa(unsigned a, unsigned rank) {
  unsigned r;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
// mbarriers (8-byte aligned shared words): init with one expected arrival; arm = that arrival plus `bytes`
// of transactions still to come (remote st.async below completes them); wait for the phase of parity
// `parity`, acquiring at cluster scope what the transactions wrote.
NK_INLINE void nk_mbar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
NK_INLINE void nk_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
NK_INLINE void nk_mbar_arm(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
NK_INLINE void nk_mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n\t.reg .pred p;\n"
      "NK_MBAR_WAIT:\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra NK_MBAR_WAIT;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Stores into another CTA's shared memory (addresses from nk_mapa) that complete their bytes on that CTA's
// mbarrier: no fence, no wait for this thread's earlier global stores (a cluster barrier's release waits).
NK_INLINE void nk_st_async(unsigned remote, float v, unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote),
               "r"(nk_f2u(v)), "r"(remote_bar)
               : "memory");
}
NK_INLINE void nk_st_async(unsigned remote, float v0, float v1, unsigned remote_bar) {  // 8-byte aligned
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(remote),
               "r"(nk_f2u(v0)), "r"(nk_f2u(v1)), "r"(remote_bar)
               : "memory");
}

// One bulk copy (the sm_90 copy engine, 1-D) of `bytes` from global memory to this CTA's shared memory at `dst` (a
// shared address), completing its bytes on the mbarrier `bar`: one instruction for a whole row slice, no registers.
// Both addresses 16-byte aligned, bytes a multiple of 16. nk_mbar_ready: whether the phase of parity `parity` of
// `bar` has completed (acquiring, for this CTA, what the copies wrote). nk_fence_async_smem: orders this thread's
// earlier shared-memory accesses, and those its barrier made visible to it, before its later bulk copies.
NK_INLINE void nk_bulk_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
NK_INLINE bool nk_mbar_ready(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
NK_INLINE void nk_fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Asynchronous 16-byte copies global -> shared (cp.async, sm_80+; compiled for sm_90, where the `block` mapping's
// 1024-thread rows use them): the data goes to shared memory without passing through registers, so the copies of a
// row's weight/bias run beside its x loads. Both addresses 16-byte aligned. wait_all: this thread's copies landed.
#define NK_HAS_CP_ASYNC 1
NK_INLINE void nk_cp_async16(void* smem, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(nk_smem_addr(smem)), "l"(g) : "memory");
}
NK_INLINE void nk_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
NK_INLINE void nk_cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Dynamic shared memory of this launch, in bytes.
NK_INLINE unsigned nk_dynamic_smem_bytes() {
  unsigned r;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

// Ask L2 to fetch [p, p + bytes) ahead of use (sm_90 bulk prefetch: one instruction for a whole row, no
// registers, no completion to wait for). p is rounded down and the end up to 16 bytes, as the instruction
// requires; the few bytes past either end stay inside the allocation's 256-byte granule. A hint only.
#define NK_HAS_PREFETCH_L2 1
NK_INLINE void nk_prefetch_l2(const void* p, long long bytes) {
  const unsigned long long a = (unsigned long long)p & ~15ull;
  const unsigned long long e = ((unsigned long long)p + (unsigned long long)bytes + 15ull) & ~15ull;
  if (bytes > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((unsigned)(e - a)) : "memory");
}

// Programmatic dependent launch (sm_90+). A kernel launched with the driver's
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may be scheduled while the previous kernel of its
// stream still runs; griddepcontrol.wait then blocks until that kernel has completed and its memory is
// visible, so nothing before it may touch global memory. launch_dependents lets the next such launch be
// scheduled as soon as every CTA of this grid has started (it gives no memory visibility by itself).
// Without the attribute both are no-ops. The runtime sets the attribute only where this SASS runs (sm_90).
#define NK_HAS_PDL 1
NK_INLINE void nk_pdl_enter() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#endif

#else
#error "normkit kernels: compile with nvcc or clang -x hip"
#endif

#ifndef NK_HAS_CP_ASYNC
#define NK_HAS_CP_ASYNC 0  // sm_80 SASS, compute_80 PTX, HIP: nothing is staged (nk_fwd_block_full)
#endif
#ifndef NK_HAS_CLUSTER
#define NK_HAS_CLUSTER 0
// sm_80 SASS, compute_80 PTX, HIP: no mbarriers or bulk copies. The backward's bulk-staged rows are compiled out
// there (nk_bwd_tma_ok); these stand in for the names its template mentions and are never reached.
NK_INLINE unsigned nk_smem_addr(const void*) { return 0u; }
NK_INLINE void nk_mbar_init(unsigned) { nk_trap(); }
NK_INLINE void nk_mbar_init_fence() { nk_trap(); }
NK_INLINE void nk_mbar_arm(unsigned, unsigned) { nk_trap(); }
NK_INLINE void nk_bulk_g2s(unsigned, const void*, unsigned, unsigned) { nk_trap(); }
NK_INLINE bool nk_mbar_ready(unsigned, unsigned) { nk_trap(); return true; }
NK_INLINE void nk_fence_async_smem() { nk_trap(); }
#endif
#ifndef NK_HAS_PREFETCH_L2
#define NK_HAS_PREFETCH_L2 0
// sm_80 SASS, compute_80 PTX, HIP: no bulk prefetch; the hint is dropped.
NK_INLINE void nk_prefetch_l2(const void*, long long) {}
#endif
#ifndef NK_HAS_PDL
#define NK_HAS_PDL 0
// sm_80 SASS, compute_80 PTX, HIP: no programmatic launches (the runtime never asks for them there).
NK_INLINE void nk_pdl_enter() {}
#endif

// ---------------------------------------------------------------- half types (both targets)
// bfloat16 <-> binary32 by bit manipulation: round to nearest even; NaN stays a (quiet) NaN with its
// sign; values that round past the largest bf16 become +-Inf; Inf stays Inf. bf16 -> f32 is exact.
NK_INLINE float nk_bf16_to_f32(unsigned short h) { return nk_u2f((unsigned)h << 16); }
#if defined(NK_HAS_PACK2)
NK_INLINE unsigned nk_pack_bf16x2(float lo, float hi) {  // sm_80+: cvt.rn.bf16x2.f32 (RNE, NaN kept)
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif
NK_INLINE unsigned short nk_f32_to_bf16(float f) {
  const unsigned u = nk_f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#if !defined(NK_HAS_PACK2)
NK_INLINE unsigned nk_pack_bf16x2(float lo, float hi) {
  return (unsigned)nk_f32_to_bf16(lo) | ((unsigned)nk_f32_to_bf16(hi) << 16);
}
NK_INLINE unsigned nk_pack_f16x2(float lo, float hi) {
  return (unsigned)nk_f32_to_f16(lo) | ((unsigned)nk_f32_to_f16(hi) << 16);
}
#endif

// Butterfly sum over the whole warp/wave: every lane ends with the same total, summed in the same
// order on every lane (bitwise identical results across lanes).
NK_INLINE float nk_warp_sum(float v) {
#pragma unroll
  for (int m = NK_WARP_SIZE / 2; m > 0; m >>= 1) v += nk_shfl_xor(v, m);
  return v;
}

// Block-wide sum; every thread gets the total (bitwise identical in every thread).
// `buf` must hold blockDim.x / NK_WARP_SIZE floats in shared memory and must not be reused for
// another reduction until every thread of the block has passed one more nk_barrier() (callers
// alternate between two buffers). One barrier per call. blockDim.x / NK_WARP_SIZE <= NK_WARP_SIZE.
NK_INLINE float nk_block_sum(float v, float* buf) {
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  const unsigned lane = nk_lane();
  v = nk_warp_sum(v);
  if (lane == 0) buf[nk_thread_x() / NK_WARP_SIZE] = v;
  nk_barrier();
  // Every warp reduces the per-warp partials itself: no second barrier, no broadcast.
  float t = lane < nwarps ? buf[lane] : 0.0f;
  return nk_warp_sum(t);
}

// nk_block_sum of two values at once: one barrier instead of two. buf: 2 * nwarps floats.
NK_INLINE void nk_block_sum2(float& a, float& b, float* buf) {
  const unsigned nwarps = nk_block_dim_x() / NK_WARP_SIZE;
  const unsigned lane = nk_lane(), w = nk_thread_x() / NK_WARP_SIZE;
  a = nk_warp_sum(a);
  b = nk_warp_sum(b);
  if (lane == 0) buf[w] = a, buf[nwarps + w] = b;
  nk_barrier();
  a = nk_warp_sum(lane < nwarps ? buf[lane] : 0.0f);
  b = nk_warp_sum(lane < nwarps ? buf[nwarps + lane] : 0.0f);
}

#endif  // NORMKIT_PORTABLE_H
