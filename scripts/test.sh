#!/usr/bin/env bash
# The test command (README, `npm test`, .ci/run): the whole suite under Deno, then under Bun.
# Prints each runner's output, then one line per runtime and a total `N passed, N failed[, N skipped]`.
# Usage: bash scripts/test.sh [deno|bun]...   (default: both)
set -uo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/node_modules/.bin:$PATH"
runtimes=("$@"); [ ${#runtimes[@]} -gt 0 ] || runtimes=(deno bun)
log=$(mktemp -d)
total_pass=0; total_fail=0; total_skip=0; status=0
strip() { sed -r 's/\x1b\[[0-9;]*m//g'; }
for rt in "${runtimes[@]}"; do
  case "$rt" in
    deno) deno test --allow-ffi --allow-env --allow-read --allow-run --allow-net --allow-write=/tmp tests/ 2>&1 | tee "$log/deno.txt"; rc=${PIPESTATUS[0]}
          line=$(strip < "$log/deno.txt" | grep -E '^(ok|FAILED) \| [0-9]+ passed' | tail -1)
          p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '^[0-9]+'); f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '^[0-9]+')
          s=$(grep -oE '[0-9]+ ignored' <<<"$line" | grep -oE '^[0-9]+') ;;
    bun)  bun test --timeout 300000 ./tests/ 2>&1 | tee "$log/bun.txt"; rc=${PIPESTATUS[0]}
          p=$(strip < "$log/bun.txt" | grep -E '^ *[0-9]+ pass$' | tail -1 | grep -oE '[0-9]+')
          f=$(strip < "$log/bun.txt" | grep -E '^ *[0-9]+ fail$' | tail -1 | grep -oE '[0-9]+')
          s=$(strip < "$log/bun.txt" | grep -E '^ *[0-9]+ skip$' | tail -1 | grep -oE '[0-9]+') ;;
    *) echo "unknown runtime $rt (deno|bun)" >&2; exit 2 ;;
  esac
  p=${p:-0}; f=${f:-0}; s=${s:-0}
  # A runner that crashed before reporting counts as one failure.
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  [ "$p" -gt 0 ] || { echo "$rt: no test passed" >&2; f=$((f + 1)); }
  [ "$rc" -eq 0 ] && [ "$f" -eq 0 ] || status=1
  summary+="$rt: $p passed, $f failed, $s skipped"$'\n'
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
done
echo; printf '%s' "$summary"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
exit $status
