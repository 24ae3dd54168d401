#!/usr/bin/env bash
# Builds what run.sh times, into lab/module_load/.build (ignored): an sm_90 image of every kernel of kernels/norm.cu
# (no NK_NORM_IMAGE: forward and backward in one image, as the shipped norm_sm90.fatbin and norm_bwd_sm90.fatbin
# would be together), with the flags and compression of scripts/build-kernels.sh's sm_90 entry; and load_time.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/scripts/nvcc.sh"
B="$HERE/.build"; mkdir -p "$B"
cd "$ROOT"
"$NVCC" "${NVCC_FLAGS[@]}" -fatbin -gencode arch=compute_90,code=sm_90 -Xfatbin -compress-all --compress-mode=size \
  -o "$B/norm_all_sm90.fatbin" kernels/norm.cu
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
gcc -O2 -std=c11 -Wall -Wextra -Werror -I"$CUDA_HOME/include" -o "$B/load_time" "$HERE/load_time.c" -ldl
ls -l "$B"
