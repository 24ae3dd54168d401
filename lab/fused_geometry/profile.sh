#!/usr/bin/env bash
# On the GPU host: Nsight Compute over profile.ts's eight launches (RMSNorm and LayerNorm: tuned, fused without a
# residual, add + norm, add + norm → fp8), the sections that say where a memory-bound kernel loses time.
# --clock-control none: the card's clocks are left as they are. Report text: $OUT/ncu-fused.txt (decode:
# $OUT/ncu-fused-decode.txt).
#   bash lab/fused_geometry/profile.sh deno|bun [decode]
# decode: profile.ts --decode, every launch (3 of each of 5 cases), caches not flushed between them.
set -uo pipefail
cd "$(dirname "$0")/../.."
rt=${1:?usage: profile.sh deno|bun [decode]}
mode=${2:-prefill}
OUT=${OUT:-/tmp/fused-profile}; mkdir -p "$OUT"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ "$rt" = deno ]; then cmd=(deno run -A --no-check lab/fused_geometry/profile.ts); else cmd=(bun lab/fused_geometry/profile.ts); fi
report=$OUT/ncu-fused.txt opts=(-c 8)
if [ "$mode" = decode ]; then report=$OUT/ncu-fused-decode.txt opts=(-c 15 --cache-control none); cmd+=(--decode); fi
"$NCU" --clock-control none -k regex:nk_ "${opts[@]}" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section WarpStateStats --section SchedulerStats --section SourceCounters \
  "${cmd[@]}" > "$report" 2>&1
echo "ncu exit $?"
grep -E "^  nk_|Memory Throughput|DRAM Throughput|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp|Stall|Local Memory|Block Size|Waves Per SM" "$report" | head -200
