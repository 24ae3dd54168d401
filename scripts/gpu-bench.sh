#!/usr/bin/env bash
# On the GPU host, after scripts/gpu-check.sh has unpacked the runtime: the forward benchmark under
# that runtime (JSON into $OUT) and, with --torch, torch eager/compile on the same grid, then the report.
# Usage: bash scripts/gpu-bench.sh deno|bun [--torch] [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
rt=${1:?deno or bun}; shift
OUT=${OUT:-/tmp/gpu-bench}; mkdir -p "$OUT"
quick=""; torch=""
for a in "$@"; do case "$a" in --quick) quick=--quick ;; --torch) torch=1 ;; esac; done
echo "== normkit forward benchmark ($rt)"
if [ "$rt" = deno ]; then deno run -A bench/bench.ts $quick --json "$OUT/normkit-$rt.json"; else bun bench/bench.ts $quick --json "$OUT/normkit-$rt.json"; fi
if [ -n "$torch" ]; then
  echo "== torch eager / torch.compile"
  PYTHONUNBUFFERED=1 python3 bench/compare_torch.py $quick --json "$OUT/torch.json" 2>&1 | grep -v Warning
fi
if [ -f "$OUT/torch.json" ]; then
  if [ "$rt" = deno ]; then deno run -A bench/report.ts "$OUT/normkit-$rt.json" "$OUT/torch.json" --svg "$OUT/forward.svg" --md "$OUT/results-$rt.md" > /dev/null
  else bun bench/report.ts "$OUT/normkit-$rt.json" "$OUT/torch.json" --svg "$OUT/forward.svg" --md "$OUT/results-$rt.md" > /dev/null; fi
  grep -A40 "short of" "$OUT/results-$rt.md"
fi
