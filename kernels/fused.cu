// normkit fused forward kernels: residual add, LayerNorm / RMSNorm over strided rows, optional quantization of y
// (kernels/fused.cuh; contract in kernels/README.md, "Fused kernels"). One translation unit of its own, built by
// scripts/build-fused.sh into precompiled/fused_sm80.fatbin and precompiled/fused_sm90.fatbin.
#include "portable.h"
#include "fused.cuh"

// nk_fused_{kind}_{ti}_{to}_{tw}: to is ti itself or a quantized dtype (fp8e4m3, fp8e5m2, int8); tw is f32 or ti.
// Blocks of up to 1024 threads (64 registers per thread). Every kernel begins with nk_pdl_enter(), so it may be
// launched as a programmatic dependent launch on sm_90.
// scripts/build-fused.sh lists the kernels from the NK_FUSED_KERNEL(...) lines below: keep one per line.
#define NK_FUSED_KERNEL(kind, isln, ti, to, tw)                                                            \
  extern "C" NK_GLOBAL void NK_LAUNCH_BOUNDS(1024) nk_fused_##kind##_##ti##_##to##_##tw(NK_FUSED_PARAMS) { \
    nk_pdl_enter();                                                                                       \
    nk_fused<nk_##ti, nk_##to, nk_##tw, isln>(NK_FUSED_ARGS);                                             \
  }

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
