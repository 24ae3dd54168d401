#!/usr/bin/env bash
# On the GPU host (see ../shared/gpu/README.md): run the GPU test files under compute-sanitizer's memcheck,
# racecheck and synccheck, one runtime per call, and print the error count of each tool last.
#
#   bash scripts/gpu-sanitize.sh deno|bun        # the runtime must travel as .rt/<runtime>.xz (like gpu-check.sh)
#
# Files: the GPU suites (tests/gpu*.test.ts) plus the GPU halves of validation, diagnostics and the property
# tests (100 CUDA cases here: NORMKIT_PROPERTY_RUNS). Not the CPU-only files, not tests/unit/recovery.test.ts (its
# child process, tests/fixtures/fault_child.ts, faults a kernel on purpose: compute-sanitizer follows child
# processes and memcheck reports that, correctly) and not tests/gpu/leaks.test.ts (host-side cycles).
# Each tool gets SANITIZE_TOOL_TIMEOUT seconds (default 110: three tools stay under ~6 minutes); a tool that
# runs out is reported as TIMEOUT and fails the script. Full logs: $OUT/sanitize-<runtime>-<tool>.log.
# Exit status: 0 only when every tool reported 0 errors and its test run passed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu-carry-check.sh  # the development setup's carry limit
rt=${1:?usage: gpu-sanitize.sh deno|bun}
case "$rt" in deno|bun) ;; *) echo "gpu-sanitize: runtime must be deno or bun, got '$rt'" >&2; exit 2 ;; esac
OUT=${OUT:-/tmp/gpu-sanitize}; mkdir -p "$OUT"
TOOL_TIMEOUT=${SANITIZE_TOOL_TIMEOUT:-110}

# compute-sanitizer: on PATH, else the usual CUDA install locations.
CS=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
  [ -n "$CS" ] && break
  [ -x "$c" ] && CS=$c
done
if [ -z "$CS" ]; then
  echo "gpu-sanitize: compute-sanitizer not found (PATH, /usr/local/cuda/bin, /usr/local/cuda/compute-sanitizer): install the CUDA toolkit's sanitizer" >&2
  exit 2
fi
"$CS" --version | tail -1

for f in .rt/*.xz; do [ -e "$f" ] || continue; n=$(basename "$f" .xz); xz -dc "$f" > "/usr/local/bin/$n"; chmod +x "/usr/local/bin/$n"; done
command -v "$rt" >/dev/null || { echo "gpu-sanitize: $rt not found (carry .rt/$rt.xz)" >&2; exit 2; }

# SANITIZE_FILES / SANITIZE_FILTER narrow the run (e.g. to fit a short GPU-host call): a space-separated
# file list, and a test-name pattern (deno test --filter / bun test -t).
read -r -a files <<<"${SANITIZE_FILES:-$(echo tests/gpu/*.test.ts) tests/unit/validation.test.ts tests/unit/diagnostics.test.ts tests/unit/property.test.ts}"
filter=()
if [ "$rt" = deno ]; then
  [ -n "${SANITIZE_FILTER:-}" ] && filter=(--filter "$SANITIZE_FILTER")
  cmd=(deno test --allow-ffi --allow-env --allow-read --allow-run --allow-net --allow-write=/tmp "${filter[@]}" "${files[@]}")
else
  [ -n "${SANITIZE_FILTER:-}" ] && filter=(-t "$SANITIZE_FILTER")
  cmd=(bun test --timeout 300000 "${filter[@]}" "${files[@]/#/./}")
fi
export NORMKIT_PROPERTY_RUNS=${NORMKIT_PROPERTY_RUNS:-100}

status=0; summary=""
for tool in memcheck racecheck synccheck; do
  log="$OUT/sanitize-$rt-$tool.log"
  echo "== $tool ($rt): ${files[*]}"
  start=$(date +%s)
  timeout "$TOOL_TIMEOUT" "$CS" --tool "$tool" --print-limit 50 "${cmd[@]}" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  # One summary line per process the sanitizer watched: "ERROR SUMMARY: N error(s)", or for racecheck
  # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)". Add the errors up.
  errors=$( { grep -oE 'ERROR SUMMARY: [0-9]+ error' "$log" | grep -oE '[0-9]+'; grep -oE 'RACECHECK SUMMARY: .*\(([0-9]+) errors' "$log" | grep -oE '\([0-9]+' | tr -d '('; } | awk '{s+=$1} END {print s+0}')
  found=$(grep -cE '(ERROR|RACECHECK) SUMMARY' "$log")
  grep -E '^=========' "$log" | grep -vE 'COMPUTE-SANITIZER|(ERROR|RACECHECK) SUMMARY' | head -20
  if [ "$rc" -eq 124 ]; then verdict="TIMEOUT after ${TOOL_TIMEOUT}s"; status=1
  elif [ "$found" -eq 0 ]; then verdict="no sanitizer summary (crashed? see $log)"; status=1
  elif [ "$errors" -ne 0 ]; then verdict="$errors error(s)"; status=1
  elif [ "$rc" -ne 0 ]; then verdict="0 errors, but the tests failed (rc $rc, see $log)"; status=1
  else verdict="0 errors"; fi
  tail -3 "$log"
  summary+=$(printf '%-10s %-5s %5ss  %s' "$tool" "$rt" "$secs" "$verdict")$'\n'
done
echo; echo "== compute-sanitizer summary"; printf '%s' "$summary"
exit $status
