#!/usr/bin/env bash
# On the GPU host: the low-latency path under one runtime, in about a minute:
#   1. the graph / hot-path / pipeline GPU tests (tests/graph*.test.ts, tests/unit/hotpath.test.ts);
#   2. bench/coldstart.ts: import → first GPU result, empty and warm CUDA JIT cache (and whether anything was JITted);
#   3. bench/latency.ts and bench/latency_c.c: the same bf16 norm launches from TS and from C, eager and graph;
#   4. the TS-vs-C table;
#   5. bench/latency_inproc.ts: TS against C in one process (bench/launch_shim.c over FFI), three processes per setting;
#   6. the same with 32 layers' weights taken in turn (a model's sequence of calls), one process per setting.
# Writes text and JSON into $OUT. Usage (the runtime carried as .rt/<runtime>.xz, like gpu-check.sh):
#   bash scripts/gpu-latency.sh deno|bun
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu-carry-check.sh  # the development setup's carry limit
rt=${1:?deno or bun}
OUT=${OUT:-/tmp/gpu-latency}; mkdir -p "$OUT"
if ! command -v "$rt" >/dev/null; then
  for f in .rt/*.xz; do n=$(basename "$f" .xz); xz -dc "$f" > "/usr/local/bin/$n"; chmod +x "/usr/local/bin/$n"; done
fi
if [ "$rt" = deno ]; then run=(deno run -A); else run=(bun); fi
"$rt" --version | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0

echo "== GPU tests: graphs, hot path, pipeline ($rt)"
if [ "$rt" = deno ]; then
  deno test --allow-ffi --allow-env --allow-read --allow-run --allow-net --allow-write=/tmp tests/unit/graph.test.ts tests/unit/example_pipeline.test.ts tests/unit/hotpath.test.ts
else
  bun test --timeout 300000 tests/unit/graph.test.ts tests/unit/example_pipeline.test.ts tests/unit/hotpath.test.ts
fi > "$OUT/tests-latency-$rt.txt" 2>&1 || status=1
grep -E '^#|FAILED|fail|error|passed|pass$|skip' "$OUT/tests-latency-$rt.txt" | grep -v '^(pass)' | head -40

echo "== cold start ($rt)"
timeout 300 "${run[@]}" bench/coldstart.ts --runs 5 --json "$OUT/coldstart-$rt.json" 2>&1 | tee "$OUT/coldstart-$rt.txt" || status=1

bash scripts/fatbin.sh || status=1  # precompiled/norm.fatbin for the C side, joined from the per-architecture images
bash bench/build-c.sh || status=1
# Programmatic dependent launch on (the default on sm_90) and off: TS and C make the same launches each time.
for pdl in on off; do
  echo "== latency ($rt, dependent launch $pdl)"
  timeout 300 "${run[@]}" bench/latency.ts --pdl $pdl --json "$OUT/latency-$rt-$pdl.json" --cases "/tmp/latency-cases-$pdl.txt" > "/tmp/latency-$rt-$pdl.txt" 2>&1 || { status=1; tail -20 "/tmp/latency-$rt-$pdl.txt"; }
  echo "== latency (C, same launches over precompiled/norm.fatbin, dependent launch $pdl)"
  bench/latency_c precompiled/norm.fatbin "/tmp/latency-cases-$pdl.txt" "$OUT/latency-c-$pdl.json" > "/tmp/latency-c-$pdl.txt" 2>&1 || { status=1; tail -5 "/tmp/latency-c-$pdl.txt"; }
  echo "== TS ($rt) vs C, dependent launch $pdl: µs per op (eager host = one call; +sync = call and synchronize; graph = replay of 100 ops / 100)"
  "${run[@]}" bench/latency.ts --compare "$OUT/latency-$rt-$pdl.json" "$OUT/latency-c-$pdl.json" | tee "$OUT/latency-table-$rt-$pdl.txt" || status=1
done
# TS against C in the same process (the cross-process comparison above moves with each process's launch cost).
for pdl in on off; do
  for i in 1 2 3; do
    echo "== TS ($rt) vs C in one process, dependent launch $pdl, process $i"
    timeout 120 "${run[@]}" bench/latency_inproc.ts --shim bench/liblaunch_shim.so --pdl $pdl --json "$OUT/inproc-$rt-$pdl-$i.json" > "/tmp/inproc-$rt-$pdl-$i.txt" 2>&1 || status=1
    cat "/tmp/inproc-$rt-$pdl-$i.txt" >> "$OUT/inproc-$rt.txt"
    grep "^# .*within" "/tmp/inproc-$rt-$pdl-$i.txt"
  done
done
for pdl in on off; do
  echo "== TS ($rt) vs C in one process, 32 layers' weights in turn, dependent launch $pdl"
  timeout 150 "${run[@]}" bench/latency_inproc.ts --shim bench/liblaunch_shim.so --pdl $pdl --layers 32 --json "$OUT/inproc-$rt-$pdl-layers32.json" > "/tmp/inproc-$rt-$pdl-layers32.txt" 2>&1 || status=1
  cat "/tmp/inproc-$rt-$pdl-layers32.txt" >> "$OUT/inproc-$rt-layers32.txt"
  grep -E "^# .*within|rror" "/tmp/inproc-$rt-$pdl-layers32.txt"
done
exit $status
