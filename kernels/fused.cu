// normkit fused forward kernels: residual add, LayerNorm / RMSNorm over strided rows, optional quantization of y
// (kernels/fused.cuh; contract in kernels/README.md, "Fused kernels"). One translation unit of its own, built by
// scripts/build-fused.sh twice (NK_FUSED_IMAGE below): into precompiled/fused_sm{80,90}.fatbin (a float y) and
// precompiled/fused_quant_sm{80,90}.fatbin (a quantized y).
#include "portable.h"
#include "fused.cuh"

// nk_fused_{kind}_{ti}_{to}_{tw}: to is ti itself or a quantized dtype (fp8e4m3, fp8e5m2, int8); tw is f32 or ti.
// Blocks of up to 1024 threads (64 registers per thread), up to NK_FUSED_MAXV chunks a thread.
// nk_fused_{kind}_{ti}_{to}_{tw}_nv2 and _nv4 (CUDA only): the same kernel for launches of at most 2 or 4 chunks a
// thread in blocks of at most NK_FUSED_FEW_THREADS (decode; short rows in one wave; prefill rows of up to 1024 chunks),
// each with registers of its own, so that the many-chunk kernel's code stays as it is; the same bits for the same
// launch arguments but LayerNorm's statistics, which they take in one pass (nk_ln_stats; the plan keeps every split of
// a LayerNorm row length on one family); the blocks an SM they ask ptxas for: nk_fused_min_blocks below. Not in the
// AMD code objects (not measured there; they would take @normkit/hip past its size budget): the plan gives HIP the one
// kernel.
// Every nk_fused_{ln|rms}_* kernel calls nk_pdl_enter() before its first access to global memory (nk_fused_rows_*,
// after the launch checks and the row index's divisions), so it may be launched as a programmatic dependent launch on
// sm_90 (nk_fused_add_* below does not).
// scripts/build-fused.sh lists the kernels from the NK_FUSED_KERNEL(...) lines below: keep one per line.
// Blocks an SM the few-chunk kernels ask ptxas for (0: what it gives; lab/fused_geometry has the A/Bs). _nv4 with a
// float y: 4 (64 registers: more rows in flight at prefill; 4 for every kernel spilled more and made decode up to 0.6 µs
// slower). RMSNorm's _nv4 with a quantized y: 3 (80 registers; in f16, 12 to 44 bytes of spill, 91.7 to 92.0 % of copy
// against 84.5 to 87.0 at 96 to 110 registers). LayerNorm's _nv4 with a quantized y: on bf16 x 4 (64 registers, 0 to 8
// bytes of spill against 78 to 80 registers and 0 to 24; with bf16 weights 3.5 and 4.6 points of copy more on an H200
// at D 1024 and 4096), on other x what ptxas gives (78 to 118 registers; f16 x asked for 3 spilled 12 to 32 bytes and
// ran 1.0 to 2.4 points slower, asked for 4 it spills 60 to 80).
constexpr int nk_fused_min_blocks(int maxv, bool ln, bool quant, bool bf16) {
  return maxv != 4 ? 0 : !quant ? 4 : !ln ? 3 : bf16 ? 4 : 0;
}
#if defined(__HIP__)
#define NK_FUSED_FEW_KERNEL(kind, isln, ti, to, tw, maxv)
#else
#define NK_FUSED_FEW_KERNEL(kind, isln, ti, to, tw, maxv)                                                             \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS_MIN(NK_FUSED_FEW_THREADS,                                               \
                                                 nk_fused_min_blocks(maxv, isln, nk_is_quant<nk_##to>::V,              \
                                                                     nk_is_bf16<nk_##ti>::V))                          \
      nk_fused_##kind##_##ti##_##to##_##tw##_nv##maxv(NK_FUSED_PARAMS) {                                              \
    nk_fused<nk_##ti, nk_##to, nk_##tw, isln, maxv, NK_FUSED_FEW_THREADS>(NK_FUSED_ARGS);                             \
  }
#endif
// NK_FUSED_IMAGE picks the kernels of one image (scripts/build-fused.sh, scripts/build-hsaco.sh): 1, those of a float y
// and nk_fused_add_* (fused_<target>); 2, those of a quantized y (fused_quant_<target>), which a program loads only
// when it quantizes. Undefined: every kernel (the host emulator, the lab's builds).
#if !defined(NK_FUSED_IMAGE)
#define NK_FUSED_FLOAT_Y(def) def
#define NK_FUSED_QUANT_Y(def) def
#elif NK_FUSED_IMAGE == 1
#define NK_FUSED_FLOAT_Y(def) def
#define NK_FUSED_QUANT_Y(def)
#elif NK_FUSED_IMAGE == 2
#define NK_FUSED_FLOAT_Y(def)
#define NK_FUSED_QUANT_Y(def) def
#else
#error "NK_FUSED_IMAGE: 1 (float y) or 2 (quantized y)"
#endif
#define NK_FUSED_IMAGE_OF_f32 NK_FUSED_FLOAT_Y
#define NK_FUSED_IMAGE_OF_f16 NK_FUSED_FLOAT_Y
#define NK_FUSED_IMAGE_OF_bf16 NK_FUSED_FLOAT_Y
#define NK_FUSED_IMAGE_OF_fp8e4m3 NK_FUSED_QUANT_Y
#define NK_FUSED_IMAGE_OF_fp8e5m2 NK_FUSED_QUANT_Y
#define NK_FUSED_IMAGE_OF_int8 NK_FUSED_QUANT_Y
#define NK_FUSED_KERNEL(kind, isln, ti, to, tw) NK_FUSED_IMAGE_OF_##to(NK_FUSED_KERNELS_OF(kind, isln, ti, to, tw))
#define NK_FUSED_KERNELS_OF(kind, isln, ti, to, tw)                                                                   \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(NK_FUSED_MAX_THREADS) nk_fused_##kind##_##ti##_##to##_##tw(               \
      NK_FUSED_PARAMS) {                                                                                               \
    nk_fused<nk_##ti, nk_##to, nk_##tw, isln, NK_FUSED_MAXV, NK_FUSED_MAX_THREADS>(NK_FUSED_ARGS);                     \
  }                                                                                                                   \
  NK_FUSED_FEW_KERNEL(kind, isln, ti, to, tw, 2)                                                                      \
  NK_FUSED_FEW_KERNEL(kind, isln, ti, to, tw, 4)

NK_FUSED_KERNEL(ln, true, f32, f32, f32)
NK_FUSED_KERNEL(ln, true, f32, fp8e4m3, f32)
NK_FUSED_KERNEL(ln, true, f32, fp8e5m2, f32)
NK_FUSED_KERNEL(ln, true, f32, int8, f32)
NK_FUSED_KERNEL(ln, true, f16, f16, f32)
NK_FUSED_KERNEL(ln, true, f16, f16, f16)
NK_FUSED_KERNEL(ln, true, f16, fp8e4m3, f32)
NK_FUSED_KERNEL(ln, true, f16, fp8e4m3, f16)
NK_FUSED_KERNEL(ln, true, f16, fp8e5m2, f32)
NK_FUSED_KERNEL(ln, true, f16, fp8e5m2, f16)
NK_FUSED_KERNEL(ln, true, f16, int8, f32)
NK_FUSED_KERNEL(ln, true, f16, int8, f16)
NK_FUSED_KERNEL(ln, true, bf16, bf16, f32)
NK_FUSED_KERNEL(ln, true, bf16, bf16, bf16)
NK_FUSED_KERNEL(ln, true, bf16, fp8e4m3, f32)
NK_FUSED_KERNEL(ln, true, bf16, fp8e4m3, bf16)
NK_FUSED_KERNEL(ln, true, bf16, fp8e5m2, f32)
NK_FUSED_KERNEL(ln, true, bf16, fp8e5m2, bf16)
NK_FUSED_KERNEL(ln, true, bf16, int8, f32)
NK_FUSED_KERNEL(ln, true, bf16, int8, bf16)
NK_FUSED_KERNEL(rms, false, f32, f32, f32)
NK_FUSED_KERNEL(rms, false, f32, fp8e4m3, f32)
NK_FUSED_KERNEL(rms, false, f32, fp8e5m2, f32)
NK_FUSED_KERNEL(rms, false, f32, int8, f32)
NK_FUSED_KERNEL(rms, false, f16, f16, f32)
NK_FUSED_KERNEL(rms, false, f16, f16, f16)
NK_FUSED_KERNEL(rms, false, f16, fp8e4m3, f32)
NK_FUSED_KERNEL(rms, false, f16, fp8e4m3, f16)
NK_FUSED_KERNEL(rms, false, f16, fp8e5m2, f32)
NK_FUSED_KERNEL(rms, false, f16, fp8e5m2, f16)
NK_FUSED_KERNEL(rms, false, f16, int8, f32)
NK_FUSED_KERNEL(rms, false, f16, int8, f16)
NK_FUSED_KERNEL(rms, false, bf16, bf16, f32)
NK_FUSED_KERNEL(rms, false, bf16, bf16, bf16)
NK_FUSED_KERNEL(rms, false, bf16, fp8e4m3, f32)
NK_FUSED_KERNEL(rms, false, bf16, fp8e4m3, bf16)
NK_FUSED_KERNEL(rms, false, bf16, fp8e5m2, f32)
NK_FUSED_KERNEL(rms, false, bf16, fp8e5m2, bf16)
NK_FUSED_KERNEL(rms, false, bf16, int8, f32)
NK_FUSED_KERNEL(rms, false, bf16, int8, bf16)

// nk_fused_add_{t}: dst[r, i] = round_t(f32(dst[r, i]) + f32(src[r, i])), rows `*_stride` elements apart: the
// backward's dResidual added to dx (ops/backward.ts). A block per row, grid-striding over rows.
template <class T>
NK_INLINE void nk_fused_add(void* dst, const void* src, int rows, int d, long long dst_stride, long long src_stride) {
  typedef typename T::S S;
  for (long long r = nk_block_x(); r < rows; r += nk_grid_dim_x()) {
    S* out = (S*)dst + r * dst_stride;
    const S* in = (const S*)src + r * src_stride;
    for (int i = nk_thread_x(); i < d; i += nk_block_dim_x()) out[i] = T::from_f(T::to_f(out[i]) + T::to_f(in[i]));
  }
}
// scripts/build-fused.sh lists these from the NK_FUSED_ADD_KERNEL(...) lines: keep one per line.
#define NK_FUSED_ADD_KERNEL(t) NK_FUSED_FLOAT_Y(NK_FUSED_ADD_KERNEL_OF(t))
#define NK_FUSED_ADD_KERNEL_OF(t)                                                                                 \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(256) nk_fused_add_##t(void* dst, const void* src, int rows, int d,   \
                                                                   long long dst_stride, long long src_stride) { \
    nk_fused_add<nk_##t>(dst, src, rows, d, dst_stride, src_stride);                                               \
  }
NK_FUSED_ADD_KERNEL(f32)
NK_FUSED_ADD_KERNEL(f16)
NK_FUSED_ADD_KERNEL(bf16)
