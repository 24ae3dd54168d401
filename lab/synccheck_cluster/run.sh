#!/usr/bin/env bash
# On a CUDA GPU host (sm_90, nvcc and compute-sanitizer there): builds repro.cu and runs each mode plainly and under
# synccheck, RMSNorm backward bf16, 8 rows of D = 65536 (lab/synccheck_cluster/README.md). Logs: $OUT/synccheck-repro.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/synccheck-repro}; mkdir -p "$OUT"; log="$OUT/synccheck-repro.txt"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
bin=$(mktemp -d)/repro
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -O3 -std=c++17 -arch=sm_90 -Ikernels -o "$bin" lab/synccheck_cluster/repro.cu || exit 1
"$NVCC" -O3 -std=c++17 -arch=sm_90 -o "$bin-minimal" lab/synccheck_cluster/minimal.cu || exit 1
: > "$log"
# minimal.cu: cluster kernels with none of normkit's code, 8 clusters each
for m in sync dsmem stasync; do
  for c in 2 8 16; do
    for t in 128 288; do
      for tool in none synccheck; do
        echo "== minimal $m $c $t, $tool" >> "$log"
        if [ "$tool" = none ]; then timeout 60 "$bin-minimal" $m $c $t 8 >> "$log" 2>&1
        else timeout 120 "$CS" --tool synccheck "$bin-minimal" $m $c $t 8 >> "$log" 2>&1; fi
        echo "exit $?" >> "$log"
      done
    done
  done
done
# stasync at cluster 16 with a CTA alone on its SM (200 KB of shared memory each) and with two (100 KB)
for pad in 204800 102400; do
  for tool in none synccheck; do
    echo "== minimal stasync 16 128 pad $pad, $tool" >> "$log"
    if [ "$tool" = none ]; then timeout 60 "$bin-minimal" stasync 16 128 8 $pad >> "$log" 2>&1
    else timeout 120 "$CS" --tool synccheck "$bin-minimal" stasync 16 128 8 $pad >> "$log" 2>&1; fi
    echo "exit $?" >> "$log"
  done
done
# repro.cu: mode, cluster size, threads per CTA, extra dynamic shared memory (fewer CTAs per SM, the same code)
for m in "xchg 16 128 49184" "regs 16 128 0" "staged 16 128 0" "staged 16 128 60000" "staged 16 256 0" "staged 8 256 0"; do
  for tool in none synccheck; do
    echo "== $m, $tool" >> "$log"
    if [ "$tool" = none ]; then timeout 60 "$bin" $m 8 65536 >> "$log" 2>&1
    else timeout 120 "$CS" --tool synccheck "$bin" $m 8 65536 >> "$log" 2>&1; fi
    echo "exit $?" >> "$log"
  done
done
grep -E "^==|^exit|ok$|worst|->|ERROR SUMMARY" "$log"
