// Host emulation of kernels/portable.h for the fused kernels and the tuned forward kernels (tests/emu/README.md).
// Included before kernels/fused.cu and kernels/norm.cu (g++ -include): defines NORMKIT_PORTABLE_H so that portable.h's device halves are
// skipped, gives the platform primitives on the CPU with CUDA semantics (one std::thread per CUDA thread, one block at a
// time), then includes the target-independent tail of portable.h (nk_f32_to_bf16, the software packs, nk_warp_sum,
// nk_block_sum, the NK_HAS_* fallbacks) extracted verbatim by build.sh into $BUILD/portable_tail.h: that code is the
// kernels' own and is exercised as is.
#ifndef NK_EMU_PRELUDE_H
#define NK_EMU_PRELUDE_H
#define NORMKIT_PORTABLE_H

#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NK_GLOBAL
#define NK_DEVICE
#define NK_INLINE inline
#define NK_NOINLINE inline
#define NK_LAUNCH_BOUNDS(n)
#define NK_LAUNCH_BOUNDS_MIN(n, m)
#define NK_RESTRICT __restrict__
#define NK_WARP_SIZE 32
// NK_SHARED: `static` (one block runs at a time, so a function-local static is the block's shared memory), except for
// fwd_common.cuh's namespace-scope `extern NK_SHARED float nk_fwd_smem[];` (the tuned kernels' dynamic shared memory,
// defined in emu_main.cpp), included below with NK_SHARED empty.

// ---------------------------------------------------------------- the emulated block
struct nk_emu_block {
  unsigned bid, bdim, gdim;
  std::barrier<>* block_bar;   // all bdim threads
  std::barrier<>* warp_bars;   // bdim / 32 barriers of 32 threads each (array of std::barrier<> objects)
  float (*slots)[32];          // per-warp exchange slots for the shuffles
  unsigned (*uslots)[32];
};
inline thread_local unsigned nk_emu_tid = 0;
inline thread_local nk_emu_block* nk_emu_blk = nullptr;
void nk_emu_trap_report();  // emu_main.cpp

NK_INLINE unsigned nk_thread_x() { return nk_emu_tid; }
NK_INLINE unsigned nk_block_x() { return nk_emu_blk->bid; }
NK_INLINE unsigned nk_block_dim_x() { return nk_emu_blk->bdim; }
NK_INLINE unsigned nk_grid_dim_x() { return nk_emu_blk->gdim; }
NK_INLINE unsigned nk_lane() { return nk_emu_tid & 31u; }
NK_INLINE int nk_log2_pow2(int v) { return __builtin_ctz((unsigned)v); }
NK_INLINE void nk_check_wave() {}
NK_INLINE void nk_barrier() { nk_emu_blk->block_bar->arrive_and_wait(); }
// __shfl_xor_sync(0xffffffff, v, mask, 32) / __shfl_sync: every lane of the warp publishes v, waits for the 31 others,
// reads its source lane's, and waits again before the slot can be reused.
NK_INLINE float nk_emu_exchange(float v, unsigned src) {
  const unsigned w = nk_emu_tid / 32u, lane = nk_emu_tid & 31u;
  nk_emu_blk->slots[w][lane] = v;
  nk_emu_blk->warp_bars[w].arrive_and_wait();
  const float r = nk_emu_blk->slots[w][src & 31u];
  nk_emu_blk->warp_bars[w].arrive_and_wait();
  return r;
}
NK_INLINE float nk_shfl_xor(float v, int mask) { return nk_emu_exchange(v, nk_lane() ^ (unsigned)mask); }
NK_INLINE float nk_shfl_idx(float v, int src) { return nk_emu_exchange(v, (unsigned)src); }
NK_INLINE bool nk_any(bool p) {
  const unsigned w = nk_emu_tid / 32u, lane = nk_emu_tid & 31u;
  nk_emu_blk->uslots[w][lane] = p ? 1u : 0u;
  nk_emu_blk->warp_bars[w].arrive_and_wait();
  unsigned a = 0;
  for (int i = 0; i < 32; ++i) a |= nk_emu_blk->uslots[w][i];
  nk_emu_blk->warp_bars[w].arrive_and_wait();
  return a != 0;
}
// rsqrtf: at most 2 ulp on the GPU; here 1 / sqrtf (correctly rounded sqrt, then one rounding: within 1 ulp).
NK_INLINE float nk_rsqrt(float v) { return 1.0f / std::sqrt(v); }
[[noreturn]] NK_INLINE void nk_trap() {
  nk_emu_trap_report();
  std::abort();
}
NK_INLINE void nk_opaque(unsigned& v) { asm volatile("" : "+r"(v)); }
NK_INLINE void nk_opaque(int& v) { asm volatile("" : "+r"(v)); }
NK_INLINE float nk_u2f(unsigned u) { return __builtin_bit_cast(float, u); }
NK_INLINE unsigned nk_f2u(float f) { return __builtin_bit_cast(unsigned, f); }
NK_INLINE float nk_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
// IEEE binary16 through GCC's _Float16 (software or F16C: round to nearest even, NaN kept, overflow to Inf).
NK_INLINE float nk_f16_to_f32(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
NK_INLINE unsigned short nk_f32_to_f16(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }

// The target-independent rest of portable.h, verbatim (build.sh extracts it).
#include "portable_tail.h"

// fwd_common.cuh here, with NK_SHARED empty for its extern declaration; then NK_SHARED is block shared memory.
#define NK_SHARED
#include "fwd_common.cuh"
#undef NK_SHARED
#define NK_SHARED static

#endif  // NK_EMU_PRELUDE_H
