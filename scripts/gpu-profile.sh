#!/usr/bin/env bash
# On the GPU host: Nsight Compute on one launch of each given case (speed of light, occupancy, warp stalls,
# instruction mix) of lab/ncu/profile_one.ts: the forward kernel, or with `backward` as 4th word the backward's dx
# kernel. Clocks are left alone (--clock-control none). NK_RT=bun runs the case under Bun (default: Deno).
# Usage: bash scripts/gpu-profile.sh "layer bf16 4096" "rms bf16 4096 backward" ...
# Per-instruction stall sampling: lab/ncu/ncu_source.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu-carry-check.sh  # the development setup's carry limit
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
run=(deno run -A lab/ncu/profile_one.ts); [ "${NK_RT:-deno}" = bun ] && run=(bun lab/ncu/profile_one.ts)
for c in "$@"; do
  echo "== $c"
  kre='regex:nk_'; [[ "$c" == *backward* ]] && kre='regex:_bwd_(cached|cluster|wide|tile)'
  "$NCU" --clock-control none -k "$kre" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats \
    --section LaunchStats "${run[@]}" $c 2>&1 | grep -vE "^==PROF==|^\s*$|---" | grep -E "Throughput|Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Issued|Executed Ipc|Warp Cycles|Instructions|Elapsed Cycles|Memory \[|DRAM|SM Busy|Issue Slots|Block Size|Grid Size|One or More|No Eligible|Active Warps|Eligible" | head -45
done
