#!/usr/bin/env bash
# ncu stall breakdown for a forward case: bash /tmp/prof2.sh "layer f32 32768" ...
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
for c in "$@"; do
  echo "== $c"
  "$NCU" --clock-control none -k regex:nk_ --launch-skip 2 --launch-count 1 \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,l1tex__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active \
    deno run -A bench/profile_one.ts $c 2>&1 | grep -E "stalled|dram__|lts__|l1tex|warps_active" | awk '$NF+0 > 0.05 || /dram|lts|l1tex|warps_active/' 
done
