#!/usr/bin/env bash
# Build bench/launch_c (C launch-overhead baseline; dlopen()s libcuda.so.1 at run time, so it builds
# on machines without a GPU or driver). The binary is a build output: keep it out of git.
#   bash scripts/fatbin.sh && bash bench/build-launch-c.sh && bench/launch_c precompiled/norm.fatbin
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
CC="${CC:-gcc}"
[[ -f "$CUDA_HOME/include/cuda.h" ]] || { echo "build-launch-c: $CUDA_HOME/include/cuda.h not found (set CUDA_HOME)" >&2; exit 2; }
"$CC" -O2 -std=c11 -Wall -Wextra -Werror -I"$CUDA_HOME/include" -o "$HERE/launch_c" "$HERE/launch_c.c" -ldl
echo "build-launch-c: built $HERE/launch_c" >&2
