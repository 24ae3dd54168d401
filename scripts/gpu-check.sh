#!/usr/bin/env bash
# On the GPU host (see ../shared/gpu/README.md): unpack the runtime that travelled in .rt/, then run the
# whole test suite, the quickstart and the launch-overhead benchmarks (TS and C) under it.
# Usage (one runtime per call, it must be carried as .rt/<runtime>.xz):  bash scripts/gpu-check.sh deno|bun
# Size: a call carries at most 64 MiB. bench/results (0.9 MiB) may stay in the tree. With Bun (.rt/bun.xz,
# 37.3 MiB) the tracked files (about 24 MiB, most of them precompiled/) leave room for mitata only: Bun's
# whole suite (fast-check, pure-rand, @msgpack: 2.2 MiB more) no longer fits; run tests/property and tests/hsaco_abi
# under Deno there (its runtime is 29.3 MiB) or without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu-carry-check.sh  # the development setup's carry limit
rt=${1:?deno or bun}
OUT=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT"
for f in .rt/*.xz; do n=$(basename "$f" .xz); xz -dc "$f" > "/usr/local/bin/$n"; chmod +x "/usr/local/bin/$n"; done
mkdir -p node_modules/.bin && ln -sf "/usr/local/bin/$rt" "node_modules/.bin/$rt"
"$rt" --version | head -1; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem --format=csv,noheader  # uuid: which card (calls may land on different machines)

echo "== tests ($rt)"; bash scripts/test.sh "$rt" 2>&1 | tee "$OUT/tests-$rt.txt" | grep -vE '^\(pass\)| \.\.\. .*ok' 
echo "== quickstart ($rt)"
if [ "$rt" = deno ]; then deno run --allow-ffi --allow-env --allow-read examples/quickstart.ts; else bun examples/quickstart.ts; fi
echo "== launch overhead ($rt)"
if [ "$rt" = deno ]; then deno run -A bench/launch.ts; else bun bench/launch.ts; fi
echo "== launch overhead (C)"
bash bench/build-c.sh
bash scripts/fatbin.sh && bench/launch_c precompiled/norm.fatbin | tail -1
