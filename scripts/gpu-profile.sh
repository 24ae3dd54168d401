#!/usr/bin/env bash
# On the GPU host: Nsight Compute on one launch of each given forward case (speed of light, occupancy,
# warp stalls, instruction mix). Clocks are left alone (--clock-control none).
# Usage: bash scripts/gpu-profile.sh "layer bf16 4096" "rms bf16 4096" ...
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu-carry-check.sh  # the development setup's carry limit
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
for c in "$@"; do
  echo "== $c"
  "$NCU" --clock-control none -k regex:nk_ --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats \
    --section LaunchStats deno run -A bench/profile_one.ts $c 2>&1 | grep -vE "^==PROF==|^\s*$|---" | grep -E "Throughput|Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Issued|Executed Ipc|Warp Cycles|Instructions|Elapsed Cycles|Memory \[|DRAM|SM Busy|Issue Slots|Block Size|Grid Size|One or More|No Eligible|Active Warps|Eligible" | head -45
done
