#!/usr/bin/env bash
# Where a kernel's warps wait, per SASS instruction (ncu's warp-state sampling, the SourceCounters section):
# for each case, profiles one launch of the forward (or, with `backward` as 4th word, the backward's dx
# kernel) of lab/ncu/profile_one.ts, writes the full per-instruction CSV to $OUT/ncu-src-<case>.csv and prints
# the instructions with the most stall samples, with their top stall reasons.
#   OUT=/tmp/o bash lab/ncu/ncu_source.sh <deno|bun> "layer bf16 4096 backward" "rms bf16 4096 backward" ...
set -uo pipefail
rt=$1; shift
out=${OUT:-/tmp}; mkdir -p "$out"; out=$(realpath "$out")
cd "$(dirname "$0")/../.."
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$NCU" ] || { echo "ncu not found" >&2; exit 2; }
run=(bun lab/ncu/profile_one.ts); [ "$rt" = deno ] && run=(deno run -A lab/ncu/profile_one.ts)
for c in "$@"; do
  tag=$(tr ' ' '-' <<<"$c")
  kre='regex:nk_'; [[ "$c" == *backward* ]] && kre='regex:_bwd_(cached|cluster|wide|tile)'
  echo "== $c"
  "$NCU" --clock-control none -k "$kre" --launch-skip 2 --launch-count 1 --section SourceCounters \
    --section WarpStateStats --section Occupancy -f -o "$out/ncu-$tag" "${run[@]}" $c >"$out/ncu-$tag.log" 2>&1 \
    || { tail -5 "$out/ncu-$tag.log"; continue; }
  "$NCU" --import "$out/ncu-$tag.ncu-rep" --page details --print-units base 2>/dev/null \
    | grep -E "Stall|Warp Cycles|Active Warps|Achieved Occupancy|Issued Warp|Registers|Duration|nk_" | head -30
  "$NCU" --import "$out/ncu-$tag.ncu-rep" --page source --csv --print-source sass >"$out/ncu-src-$tag.csv" 2>/dev/null
  python3 - "$out/ncu-src-$tag.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
hdr = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in h for h in r)), None)
if hdr is None:
    print("no stall-sampling column; header:", rows[:2]); sys.exit()
h = rows[hdr]; body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
col = lambda name: next(i for i, x in enumerate(h) if name in x)
ca, cs, cn = col("Address"), col("Source"), col("Warp Stall Sampling (All")
num = lambda v: float(v.replace(",", "") or 0)
total = sum(num(r[cn]) for r in body) or 1
# The per-reason columns (stall_*), counted once: not their "(Not Issued)" subsets.
reasons = [i for i, x in enumerate(h) if x.startswith("stall_") and not x.endswith("(Not Issued)")]
print(f"{len(body)} instructions, {int(total)} samples; top 25:")
for r in sorted(body, key=lambda r: -num(r[cn]))[:25]:
    why = sorted(((num(r[i]), h[i]) for i in reasons if num(r[i]) > 0), reverse=True)[:3]
    print(f"{100 * num(r[cn]) / total:5.1f}%  {r[ca]:>6}  {r[cs][:60]:60}  " + ", ".join(f"{n.replace('stall_', '')} {v:.0f}" for v, n in why))
PY
done
