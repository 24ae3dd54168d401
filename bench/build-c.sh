#!/usr/bin/env bash
# Build the C baselines into bench/ (build outputs, git-ignored): launch_c (host cost of one launch), latency_c (the
# small-batch launches of bench/latency.ts), coldstart_c (the driver's share of a cold start) and liblaunch_shim.so
# (C launches inside the JS process, for bench/latency_inproc.ts). They dlopen() libcuda.so.1 at run time, so they
# build on machines without a GPU or driver; cuda.h comes from $CUDA_HOME (default /usr/local/cuda).
#   bash bench/build-c.sh && bash scripts/fatbin.sh && bench/launch_c precompiled/norm.fatbin
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
CC="${CC:-gcc}"
[[ -f "$CUDA_HOME/include/cuda.h" ]] || { echo "build-c: $CUDA_HOME/include/cuda.h not found (set CUDA_HOME)" >&2; exit 2; }
flags=(-O2 -std=c11 -Wall -Wextra -Werror -I"$CUDA_HOME/include")
for p in launch_c latency_c coldstart_c; do "$CC" "${flags[@]}" -o "$HERE/$p" "$HERE/$p.c" -ldl; done
"$CC" "${flags[@]}" -shared -fPIC -o "$HERE/liblaunch_shim.so" "$HERE/launch_shim.c" -ldl
echo "build-c: built bench/launch_c, latency_c, coldstart_c, liblaunch_shim.so" >&2
