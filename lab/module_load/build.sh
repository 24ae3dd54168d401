#!/usr/bin/env bash
# Builds what run.sh times, into lab/module_load/.build (ignored): sm_90 images of kernels/norm.cu cut in two, its
# forward half (the hand-written kernels and the forward, without norm_bwd.cuh) and its backward half (the hand-written
# kernels and the backward), with the flags and compression of scripts/build-kernels.sh's sm_90 entry; and load_time.
# Both halves are generated copies of norm.cu: the product's source is not touched.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/scripts/nvcc.sh"
B="$HERE/.build"; mkdir -p "$B"
src="$ROOT/kernels/norm.cu"
bwd_at=$(grep -n -- '-- backward kernels' "$src" | cut -d: -f1)
fwd_at=$(grep -n -- '-- fast forward kernels' "$src" | cut -d: -f1)
[[ -n "$bwd_at" && -n "$fwd_at" ]] || { echo "build: section markers of norm.cu not found" >&2; exit 1; }
# forward half: everything before the backward section, without the backward header
head -n $((bwd_at - 1)) "$src" | grep -v '#include "norm_bwd.cuh"' > "$B/norm_fwd.cu"
# backward half: the header and hand-written kernels before the forward section, then the backward section
{ head -n $((fwd_at - 1)) "$src"; tail -n +"$bwd_at" "$src"; } > "$B/norm_bwd.cu"
flags=(-fatbin -gencode arch=compute_90,code=sm_90 -Xfatbin -compress-all --compress-mode=size)
cd "$ROOT"
"$NVCC" "${NVCC_FLAGS[@]}" "${flags[@]}" -I kernels -o "$B/norm_fwd_sm90.fatbin" "$B/norm_fwd.cu" &
p=$!
"$NVCC" "${NVCC_FLAGS[@]}" "${flags[@]}" -I kernels -o "$B/norm_bwd_sm90.fatbin" "$B/norm_bwd.cu"
wait $p
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
gcc -O2 -std=c11 -Wall -Wextra -Werror -I"$CUDA_HOME/include" -o "$B/load_time" "$HERE/load_time.c" -ldl
ls -l "$B"
