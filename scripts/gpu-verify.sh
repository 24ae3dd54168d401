#!/usr/bin/env bash
# On the GPU host (see ../shared/gpu/README.md): what a change to loading, interop or threads needs checked on a GPU,
# under one runtime per call (carried as .rt/<runtime>.xz), with logs under $OUT and a summary last.
#
#   bash scripts/gpu-verify.sh deno|bun [steps...]
#
# Steps (default: quickstart interop workers coldstart gpu-tests):
#   quickstart  examples/quickstart.ts with the per-architecture image
#   interop     tests/gpu/interop.test.ts and tests/unit/interop.test.ts
#   workers     tests/unit/workers.test.ts (one Device per Worker on the GPU)
#   coldstart   bench/coldstart.ts with the C baseline beside each run (import → first result; the driver's part)
#   ptxjit      bench/coldstart.ts --ptx-jit (CUDA_FORCE_PTX_JIT=1: the first-use JIT of the PTX package)
#   gpu-tests   every file of tests/gpu/ but ptx_jit.test.ts
#   ptx-test    tests/gpu/ptx_jit.test.ts (the driver JIT-compiles the whole PTX package: minutes on a fresh host)
#   sanitize    scripts/gpu-sanitize.sh (compute-sanitizer, four tools × three kernel families)
#   fused-tests tests/gpu/fused.test.ts (the fused kernels against float64, batch invariance bitwise, QK views;
#               FUSED_TESTS_FILTER=regex: only the tests whose names match it)
#   invariant   tests/gpu/norm_forward.test.ts's batchInvariant test: plain norms on the invariant tuned plan (and the
#               fused kernels where it has none) against float64
#   fused       bench/fused.ts, then bench/compare_torch_fused.py (torch eager and torch.compile, same cases): raw JSON
#               as $OUT/fused-<runtime>.json and $OUT/fused-torch.json (FUSED_QUICK=1: both with --quick;
#               FUSED_ONLY=decode,qk (or add, invariance): those parts alone, torch without invariance)
#   splits      lab/fused_geometry/sweep.ts: every split of the fused kernels' row tree timed at decode and prefill,
#               outputs bitwise equal across splits; raw JSON as $OUT/splits-<runtime>.json, rewritten after each case
#               (SPLITS_ONLY=decode or prefill: that part alone; SPLITS_DS=4096,8192: the prefill row lengths)
#   fused-ab    lab/fused_geometry/ab.ts over sm_90 builds: main and one per patch named in FUSED_AB_PATCHES
#               (lab/fused_geometry/<name>.diff; default: one-kernel), by lab/fused_geometry/cubins.sh (built here, or
#               unpacked from a carried lab/fused_geometry/.wg/xz built from the same tree): raw JSON as
#               $OUT/fused-ab-<runtime>.json, rewritten after each case (FUSED_AB_ONLY=decode or prefill: those alone;
#               FUSED_AB_DS=4096,5120: the prefill row lengths; FUSED_AB_NEAR=1: patches that change the arithmetic,
#               y within a step of the op's: ab.ts --near; FUSED_AB_X=f16: f16 rows, ab.ts --x f16)
#   fused-check lab/fused_check/fused_check.cu (nvcc): the shipped fused images' launches against a host reference, and
#               the hardware conversions to the 1-byte dtypes against the portable ones over every f32 input
#   synccheck-repro  lab/synccheck_cluster/run.sh (the backward's cluster-16 kernel plainly and under synccheck)
#   profile     lab/fused_geometry/profile.sh: Nsight Compute over the tuned and the fused kernels (RMS, LN)
#   profile-decode  the same over one decode row (add + RMSNorm, → fp8, QK-norm of a token), caches warm
set -uo pipefail
cd "$(dirname "$0")/.."
rt=${1:?usage: gpu-verify.sh deno|bun [steps...]}; shift
case "$rt" in deno|bun) ;; *) echo "gpu-verify: runtime must be deno or bun, got '$rt'" >&2; exit 2 ;; esac
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(quickstart interop workers coldstart gpu-tests)
OUT=${OUT:-/tmp/gpu-verify}; mkdir -p "$OUT"
for f in .rt/*.xz; do [ -e "$f" ] || continue; n=$(basename "$f" .xz); xz -dc "$f" > "/usr/local/bin/$n"; chmod +x "/usr/local/bin/$n"; done
command -v "$rt" >/dev/null || { echo "gpu-verify: $rt not found (carry .rt/$rt.xz)" >&2; exit 2; }
mkdir -p node_modules/.bin && ln -sf "$(command -v "$rt")" "node_modules/.bin/$rt"
"$rt" --version | head -1
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader

run() { # script args... : a TypeScript entry point under the chosen runtime
  if [ "$rt" = deno ]; then deno run -A --no-check "$@"; else bun "$@"; fi
}
tests() { # test files...
  if [ "$rt" = deno ]; then deno test -A --no-check "$@"; else bun test --timeout 300000 "$@"; fi
}
summary=""
step() { # name, command...
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name ($rt)"
  "$@" > "$OUT/$name-$rt.txt" 2>&1
  local rc=$?
  tail -25 "$OUT/$name-$rt.txt"
  summary+=$(printf '%-11s exit %3d  %4ds' "$name" "$rc" $((SECONDS - t0)))$'\n'
}
for s in "${steps[@]}"; do
  case "$s" in
    quickstart) step quickstart run examples/quickstart.ts ;;
    interop) step interop tests tests/gpu/interop.test.ts tests/unit/interop.test.ts ;;
    workers) step workers tests tests/unit/workers.test.ts ;;
    coldstart) bash bench/build-c.sh >/dev/null 2>&1; step coldstart run bench/coldstart.ts --runs 5 --c bench/coldstart_c ;;
    ptxjit) step ptxjit run bench/coldstart.ts --runs 1 --ptx-jit ;;
    gpu-tests) step gpu-tests tests $(ls tests/gpu/*.test.ts | grep -v ptx_jit) ;;
    ptx-test) step ptx-test tests tests/gpu/ptx_jit.test.ts ;;
    sanitize) step sanitize bash scripts/gpu-sanitize.sh "$rt" ;;
    fused-tests)
      f=(); if [ -n "${FUSED_TESTS_FILTER:-}" ]; then
        if [ "$rt" = deno ]; then f=(--filter "/$FUSED_TESTS_FILTER/"); else f=(-t "$FUSED_TESTS_FILTER"); fi
      fi
      if [ "$rt" = deno ]; then step fused-tests deno test -A --no-check ${f[@]+"${f[@]}"} tests/gpu/fused.test.ts
      else step fused-tests bun test --timeout 300000 ${f[@]+"${f[@]}"} tests/gpu/fused.test.ts; fi ;;
    invariant)
      if [ "$rt" = deno ]; then step invariant deno test -A --no-check --filter "/batchInvariant/" tests/gpu/norm_forward.test.ts
      else step invariant bun test --timeout 300000 -t batchInvariant tests/gpu/norm_forward.test.ts; fi ;;
    fused)
      q=(); [ "${FUSED_QUICK:-}" = 1 ] && q=(--quick)
      o=(); t=()
      if [ -n "${FUSED_ONLY:-}" ]; then
        o=(--only "$FUSED_ONLY")
        tp=$(tr ',' '\n' <<<"$FUSED_ONLY" | grep -vx invariance | paste -sd, -)  # torch has no invariance part
        t=(--only "${tp:-none}")
      fi
      step fused run bench/fused.ts ${q[@]+"${q[@]}"} ${o[@]+"${o[@]}"} --json "$OUT/fused-$rt.json"
      if [ "${t[1]:-}" != none ]; then
        step fused-torch env PYTHONUNBUFFERED=1 python3 bench/compare_torch_fused.py ${q[@]+"${q[@]}"} ${t[@]+"${t[@]}"} \
          --json "$OUT/fused-torch.json"
      fi ;;
    splits)
      o=(); [ -n "${SPLITS_ONLY:-}" ] && o+=(--only "$SPLITS_ONLY"); [ -n "${SPLITS_DS:-}" ] && o+=(--ds "$SPLITS_DS")
      step splits run lab/fused_geometry/sweep.ts --json "$OUT/splits-$rt.json" ${o[@]+"${o[@]}"} ;;
    fused-ab)
      w=lab/fused_geometry/.wg; rm -f "$w"/*.cubin
      read -ra patches <<<"${FUSED_AB_PATCHES:-one-kernel}"
      cubins=("$w/main.cubin"); for p in "${patches[@]}"; do cubins+=("$w/$p.cubin"); done
      step fused-ab-builds bash lab/fused_geometry/cubins.sh main "${patches[@]}"
      if [ -f "${cubins[-1]}" ]; then
        o=(); [ -n "${FUSED_AB_ONLY:-}" ] && o+=(--only "$FUSED_AB_ONLY"); [ -n "${FUSED_AB_DS:-}" ] && o+=(--ds "$FUSED_AB_DS")
        [ "${FUSED_AB_NEAR:-}" = 1 ] && o+=(--near)
        [ -n "${FUSED_AB_X:-}" ] && o+=(--x "$FUSED_AB_X")
        step fused-ab run lab/fused_geometry/ab.ts "${cubins[@]}" ${o[@]+"${o[@]}"} --json "$OUT/fused-ab-$rt.json"
      fi ;;
    fused-check)
      rm -f /tmp/fused_check
      step fused-check-build nvcc -O2 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
        -o /tmp/fused_check lab/fused_check/fused_check.cu
      [ -x /tmp/fused_check ] && step fused-check /tmp/fused_check ;;
    synccheck-repro) step synccheck-repro bash lab/synccheck_cluster/run.sh ;;
    profile) step profile bash lab/fused_geometry/profile.sh "$rt" ;;
    profile-decode) step profile-decode bash lab/fused_geometry/profile.sh "$rt" decode ;;
    *) echo "gpu-verify: unknown step '$s'" >&2; exit 2 ;;
  esac
done
echo "== summary ($rt)"; printf '%s' "$summary"
