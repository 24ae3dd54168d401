#!/usr/bin/env bash
# ncu summary of the backward's dx kernel for a few cases (GPU host, Bun unpacked):
#   bash bench/ncu_bwd.sh "layer bf16 4096" "rms bf16 4096" ...
# NK_RT=deno NK_RT_ARGS="run -A" runs it under Deno (default: bun).
# Prints issue activity, occupancy, DRAM throughput and the main warp-stall reasons per instruction.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
for c in "$@"; do
  echo "== $c"
  "$NCU" --clock-control none -k regex:_bwd_ --launch-skip 2 --launch-count 1 \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,launch__occupancy_limit_registers,gpu__time_duration.sum \
    ${NK_RT:-bun} ${NK_RT_ARGS:-} bench/profile_one.ts $c backward 2>&1 | grep -E "stalled|dram__|issue_active|warps_active|inst_executed|launch__|gpu__time|nk_" | awk '$NF+0 > 0.1 || /dram|issue|warps_active|inst|launch|time|nk_/'
done
