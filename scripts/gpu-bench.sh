#!/usr/bin/env bash
# On the GPU host, after scripts/gpu-check.sh has unpacked the runtime: the forward benchmark under
# that runtime (JSON into $OUT) and, with --torch, torch eager/compile on the same grid, then the report.
# With --backward: the backward pass (bench.ts --backward, compare_torch_bwd.py), files suffixed -bwd.
# Usage: bash scripts/gpu-bench.sh deno|bun [--torch] [--quick | --ds=32768,65536] [--backward] [--passes=N]
# (--passes=N: normkit's grid N times in one process, the last pass reported; bench/bench.ts)
# Each pass writes 5 files (normkit JSON, torch JSON, report, chart, the clock trace) into $OUT; a device call returns at most 8 files,
# so a call that runs both passes (or saves more beside them) should pack its outputs: tar czf $OUT/all.tgz -C <dir> .
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu-carry-check.sh  # the development setup's carry limit
rt=${1:?deno or bun}; shift
OUT=${OUT:-/tmp/gpu-bench}; mkdir -p "$OUT"
quick=""; ds=(); passes=(); torch=""; bwd=""; sfx=""; pass=forward; torchpy=bench/compare_torch.py
for a in "$@"; do case "$a" in --quick) quick=--quick ;; --ds=*) ds=(--ds "${a#--ds=}") ;; --passes=*) passes=(--passes "${a#--passes=}") ;; --torch) torch=1 ;; --backward) bwd=--backward; sfx=-bwd; pass=backward; torchpy=bench/compare_torch_bwd.py ;; esac; done
echo "== normkit $pass benchmark ($rt)"
# Which card: device calls may land on different machines, and the long rows have read 10 points apart between calls.
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader 2>/dev/null || true
# The card's clocks, power and temperature every 500 ms while normkit runs ($OUT/clocks-*.csv): LN f32's staged cases
# read up to 19 points apart between processes a minute apart, and a clock still ramping is one suspect.
# GPU 0: the one normkit opens by default.
nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 500 \
  > "$OUT/clocks-$rt$sfx.csv" 2>/dev/null & smi=$!
trap 'kill "$smi" 2>/dev/null' EXIT
if [ "$rt" = deno ]; then deno run -A bench/bench.ts $quick ${ds[@]+"${ds[@]}"} ${passes[@]+"${passes[@]}"} $bwd --json "$OUT/normkit-$rt$sfx.json"; else bun bench/bench.ts $quick ${ds[@]+"${ds[@]}"} ${passes[@]+"${passes[@]}"} $bwd --json "$OUT/normkit-$rt$sfx.json"; fi
kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
awk -F', ' 'NR > 1 { n++; s += $2; if (min == "" || $2 + 0 < min) min = $2 + 0; if ($2 + 0 > max) max = $2 + 0 }
  END { if (n) printf "# SM clock while normkit ran: %d samples, min %d, mean %d, max %d MHz\n", n, min, s / n, max }' "$OUT/clocks-$rt$sfx.csv"
if [ -n "$torch" ]; then
  echo "== torch eager / torch.compile ($pass)"
  PYTHONUNBUFFERED=1 python3 $torchpy $quick ${ds[@]+"${ds[@]}"} --json "$OUT/torch$sfx.json" 2>&1 | grep -v Warning
fi
if [ -f "$OUT/torch$sfx.json" ]; then
  rep=(bench/report.ts "$OUT/normkit-$rt$sfx.json" "$OUT/torch$sfx.json" --svg "$OUT/$pass.svg" --title "normkit $pass" --md "$OUT/results-$rt$sfx.md")
  if [ "$rt" = deno ]; then deno run -A "${rep[@]}" > /dev/null; else bun "${rep[@]}" > /dev/null; fi
  grep -A60 "short of" "$OUT/results-$rt$sfx.md"
fi
