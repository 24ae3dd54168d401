#!/usr/bin/env bash
# On the GPU host: the driver's load time of the shipped sm_90 images (the forward and backward norm images, the two
# fused ones) and of one image of both norm halves (build.sh), under lazy (the driver's default) and eager module
# loading. Raw JSON lines to stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=lab/module_load/.build
[[ -x "$B/load_time" && -f "$B/norm_all_sm90.fatbin" ]] || { echo "run: build first (lab/module_load/build.sh)" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
images=(nk_rms_rows_bf16_bf16_f32 "$B/norm_all_sm90.fatbin"
  nk_rms_rows_bf16_bf16_f32 precompiled/norm_sm90.fatbin
  nk_rms_bwd_cached_bf16_bf16_f32 precompiled/norm_bwd_sm90.fatbin
  nk_rms_rows_bf16_bf16_f32 "$B/norm_all_sm90.fatbin"
  nk_fused_rms_bf16_bf16_f32 precompiled/fused_sm90.fatbin
  nk_fused_rms_bf16_fp8e4m3_f32 precompiled/fused_quant_sm90.fatbin)
for mode in LAZY EAGER; do
  echo "# CUDA_MODULE_LOADING=$mode"
  CUDA_MODULE_LOADING=$mode "$B/load_time" 20 "${images[@]}"
done
