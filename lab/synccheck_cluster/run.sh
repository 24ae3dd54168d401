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
: > "$log"
# mode, cluster size, threads per CTA, extra dynamic shared memory (fewer CTAs per SM, the same code)
for m in "xchg 16 128 49184" "regs 16 128 0" "staged 16 128 0" "staged 16 128 60000" "staged 16 256 0" "staged 8 128 0"; do
  for tool in none synccheck; do
    echo "== $m, $tool" >> "$log"
    if [ "$tool" = none ]; then timeout 60 "$bin" $m 8 65536 >> "$log" 2>&1
    else timeout 120 "$CS" --tool synccheck "$bin" $m 8 65536 >> "$log" 2>&1; fi
    echo "exit $?" >> "$log"
  done
done
grep -E "^==|^exit|ok$|worst|->|ERROR SUMMARY" "$log"
