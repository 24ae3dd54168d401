#!/usr/bin/env bash
# Build the precompiled NVIDIA kernels from kernels/ into precompiled/.
#
#   bash scripts/build-kernels.sh          # rebuild precompiled/norm.ptx.gz, norm_cuda.ts, norm_fatbin.json (and norm.fatbin)
#   bash scripts/build-kernels.sh --check  # rebuild into a temp dir; exit 1 naming any stale file
#   bash scripts/build-kernels.sh --modules-only  # rewrite norm_cuda.ts and norm_fatbin.json from the existing
#                                          # precompiled/norm.fatbin, compiling nothing (after a full build, when only
#                                          # the modules' layout changed; --check still rebuilds everything)
#
# Outputs (all generated; never edit them by hand):
#   precompiled/norm.ptx.gz  PTX for compute_80 (JIT fallback for any GPU >= sm_80), gzip -9n: 11 MB of
#                            text would crowd the 64 MiB a GPU-host call may carry
#   precompiled/norm.fatbin  SASS for sm_80 and sm_90, plus PTX for compute_90; not committed (.gitignore):
#                            norm_cuda.ts holds the same bytes, and scripts/fatbin.sh writes them back out
#   precompiled/norm_cuda.ts the source hash, the kernel names, and NORM_FATBIN from norm_fatbin.json
#   precompiled/norm_fatbin.json  the fatbin as a base64 string (a JSON module: Deno and Bun import a 9 MB JSON
#                            string in about half the time of the same string in a .ts module)
#
# Kernel names: the extern "C" NK_GLOBAL kernels written out in kernels/norm.cu, then the generated
# fast forward kernels nk_{ln|rms}_{rows|block|cluster|wide|latency|stash}_{tin}_{tout}_{tw} and nk_ln_{blockfull|clusterfull|rowstwopass}_*, nk_{ln|rms}_rowstile_*, one set per X(tin, tout, tw)
# line of NK_FWD_DTYPES in kernels/norm.cu; the list must equal the PTX's .entry set exactly.
# The PTX and fatbin compiles run concurrently (about 8 minutes on 2 cores for the 368 kernels; twice, with the
# reproducibility check below).
#
# Reproducibility: with nvcc 13.0 (V13.0.88) the outputs are byte-for-byte identical across runs,
# working directories, absolute/relative source paths and output paths (checked by building in two
# temp dirs). They do depend on the exact nvcc release and on every flag, including ptxas's -v
# (it is recorded in the SASS .note.nv.tkinfo and in the fatbin PTX entry): change a flag here and
# everything in precompiled/ changes. A different nvcc release produces different bytes, so
# --check fails there; the generated module records the nvcc version it was built with.
#
# Env: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc).
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC_REL="kernels/norm.cu"
# Everything norm.cu compiles from, in hash order (NORM_SOURCE_FILES in the generated module).
HASHED_REL=(
  kernels/norm.cu kernels/portable.h kernels/norm_fwd.cuh kernels/fwd_common.cuh kernels/fwd_row_cache.cuh kernels/fwd_rows.cuh kernels/fwd_block.cuh kernels/fwd_cluster.cuh kernels/fwd_wide.cuh kernels/fwd_stash.cuh
  kernels/diag.cuh kernels/norm_bwd.cuh kernels/bwd_common.cuh kernels/bwd_cached.cuh kernels/bwd_wide.cuh kernels/bwd_rowsum_tile.cuh kernels/bwd_finalize.cuh)
OUT_REL="precompiled"
GENERATED=(norm.ptx.gz norm.fatbin norm_cuda.ts norm_fatbin.json)
# What --check compares with the committed files: the fatbin through its base64 copy in norm_fatbin.json.
COMMITTED=(norm.ptx.gz norm_cuda.ts norm_fatbin.json)

MAX_SPILL=96
MODE=build
case "${1:-}" in
  "") ;;
  --check) MODE=check ;;
  --modules-only) MODE=modules ;;
  -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
  *) echo "build-kernels: unknown argument '$1' (use --check, --modules-only or nothing)" >&2; exit 2 ;;
esac

NVCC="${NVCC:-}"
if [[ -z "$NVCC" ]]; then
  if command -v nvcc >/dev/null 2>&1; then NVCC="$(command -v nvcc)";
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc;
  else echo "build-kernels: nvcc not found (set NVCC=/path/to/nvcc)" >&2; exit 2; fi
fi
NVCC_VERSION="$("$NVCC" --version | grep -E '^Cuda compilation tools' | head -n1)"
[[ -n "$NVCC_VERSION" ]] || { echo "build-kernels: cannot read '$NVCC --version'" >&2; exit 2; }

NVCC_FLAGS=(-O3 --std=c++17)
PTX_FLAGS=(-ptx -arch=compute_80)
FATBIN_FLAGS=(-fatbin
  -gencode arch=compute_80,code=sm_80
  -gencode "arch=compute_90,code=[sm_90,compute_90]"
  -Xptxas -v
  -Xfatbin -compress-all --compress-mode=size)  # ~8x smaller (10.5 MB -> 1.3 MB); the driver inflates it at load

# build OUTDIR [quiet]: compile from the repository root with fixed relative paths into OUTDIR.
build() {
  local out="$1" quiet="${2:-}"
  (
    cd "$ROOT"
    "$NVCC" "${NVCC_FLAGS[@]}" "${PTX_FLAGS[@]}" -o "$out/norm.ptx" "$SRC_REL" 2>"$out/ptx.log" &
    local ptx_pid=$!
    if ! "$NVCC" "${NVCC_FLAGS[@]}" "${FATBIN_FLAGS[@]}" -o "$out/norm.fatbin" "$SRC_REL" \
        2>"$out/ptxas.log"; then
      wait "$ptx_pid" || true
      cat "$out/ptxas.log" >&2; exit 1
    fi
    if ! wait "$ptx_pid"; then cat "$out/ptx.log" >&2; exit 1; fi
    [[ -n "$quiet" ]] || cat "$out/ptx.log" "$out/ptxas.log" >&2
    # Spills: the register caps (64 per thread, for occupancy) leave a few LN kernels a few words
    # short; up to MAX_SPILL bytes per kernel are accepted: on the H200 these kernels ran faster than
    # the spill-free 106-register ones (LN bf16 D=4096: 82% -> 93% of copy, bench/RESULTS.md).
    # More is a build error.
    local worst
    worst="$(grep -oE '[0-9]+ bytes spill stores' "$out/ptxas.log" | grep -oE '^[0-9]+' | sort -n | tail -1)"
    if (( ${worst:-0} > MAX_SPILL )); then
      echo "build-kernels: a kernel spills ${worst} bytes (> ${MAX_SPILL}):" >&2
      grep -B3 -E "(^|[^0-9])${worst} bytes spill stores" "$out/ptxas.log" >&2
      exit 1
    fi
    # The forward `wide` kernels may not spill at all: spilling, LayerNorm's ran 8-9 points of copy slower on
    # the H200 (kernels/README.md, NK_NOINLINE). Their lines: the kernels and the nk_fwd_wide calls, each a
    # "Function properties" line followed by "N bytes stack frame, N bytes spill stores, ...". No match at all
    # means the names moved: fail rather than pass without checking.
    local wide_lines nonzero='(^|[^0-9])[1-9][0-9]* bytes (stack frame|spill stores)'
    wide_lines="$(grep -A1 -E 'Function properties for (nk_(ln|rms)_wide_|_Z[0-9]+nk_fwd_wide)' "$out/ptxas.log" || true)"
    if ! grep -qE 'bytes stack frame' <<<"$wide_lines"; then
      echo "build-kernels: found no forward wide kernel in ptxas -v output (renamed? update this check)" >&2
      exit 1
    fi
    if grep -qE "$nonzero" <<<"$wide_lines"; then
      echo "build-kernels: a forward wide kernel spills registers or has a stack frame:" >&2
      grep -B1 -E "$nonzero" <<<"$wide_lines" >&2
      exit 1
    fi
    rm -f "$out/ptxas.log" "$out/ptx.log"
  )

  local names
  names="$(kernel_names)"
  local entries
  entries="$(sed -nE 's/^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' "$out/norm.ptx")"
  if [[ "$(sort <<<"$names")" != "$(sort <<<"$entries")" ]]; then
    echo "build-kernels: kernels in $SRC_REL ($(echo $names)) differ from .entry in PTX ($(echo $entries))" >&2
    exit 1
  fi
  grep -q '^\.target sm_80$' "$out/norm.ptx" || { echo "build-kernels: norm.ptx is not .target sm_80" >&2; exit 1; }
  check_fatbin "$out" "$quiet"
  write_modules "$out" "$names"
  gzip -9 -n -c "$out/norm.ptx" >"$out/norm.ptx.gz"  # -n: no name or time stamp, so the bytes reproduce
}

# The kernel names, from the source alone: every extern "C" NK_GLOBAL function, in source order, then the generated ones.
kernel_names() {
  local names
  names="$(sed -nE 's/^extern "C"[[:space:]]+NK_GLOBAL[[:space:]]+void[[:space:]]+(NK_LAUNCH_BOUNDS\([0-9]+\)[[:space:]]+)?([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\(.*/\2/p' "$ROOT/$SRC_REL")"
  [[ -n "$names" ]] || { echo "build-kernels: no extern \"C\" NK_GLOBAL kernels found in $SRC_REL" >&2; exit 1; }
  # Generated kernels, one set per dtype-triple line of norm.cu: X(tin, tout, tw) in NK_FWD_DTYPES gives
  # nk_{ln|rms}_{map}_{triple}, B(tx, tdy, tw) in NK_BWD_DTYPES gives nk_{ln|rms}_bwd_{map}_{triple} (and S(...) in
  # NK_BWD_STAGED_DTYPES nk_{ln|rms}_bwd_{cachedstaged|clusterstaged}_{triple}).
  generated() { # LETTER PREFIX "LN MAPS" "RMS MAPS"
    local letter=$1 prefix=$2 lnmaps=$3 rmsmaps=$4
    local triples t map
    triples="$(sed -nE "s/^[[:space:]]*$letter\\([[:space:]]*([a-z0-9]+)[[:space:]]*,[[:space:]]*([a-z0-9]+)[[:space:]]*,[[:space:]]*([a-z0-9]+)[[:space:]]*\\).*/\\1_\\2_\\3/p" "$ROOT/$SRC_REL")"
    [[ -n "$triples" ]] || { echo "build-kernels: no $letter(...) dtype lines in $SRC_REL" >&2; exit 1; }
    for t in $triples; do
      for map in $lnmaps; do names+=$'\n'"nk_ln_${prefix}${map}_${t}"; done
      for map in $rmsmaps; do names+=$'\n'"nk_rms_${prefix}${map}_${t}"; done
    done
  }
  # LayerNorm alone has the vector-only blockfull/clusterfull kernels and rowstwopass; both have rowstile (NK_FWD_TRIPLE in norm.cu).
  generated X "" "rows block cluster wide latency stash blockfull clusterfull rowstwopass rowstile" "rows block cluster wide latency stash rowstile"
  generated B bwd_ "cached wide rowsum tile cluster" "cached wide rowsum tile cluster"
  # S(tx, tdy, tw) in NK_BWD_STAGED_DTYPES: the bulk-staged backward kernels.
  generated S bwd_ "cachedstaged clusterstaged" "clusterstaged"
  echo "$names"
}

# check_fatbin OUTDIR [quiet]
check_fatbin() {
  local out="$1" quiet="${2:-}"
  # Fatbin contents: use cuobjdump when the toolkit has it (tests/unit/precompiled.test.ts parses the
  # fatbin headers itself, so the check also runs where cuobjdump is missing).
  local cuobjdump=""
  if command -v cuobjdump >/dev/null 2>&1; then cuobjdump="$(command -v cuobjdump)";
  elif [[ -x "$(dirname "$NVCC")/cuobjdump" ]]; then cuobjdump="$(dirname "$NVCC")/cuobjdump"; fi
  if [[ -n "$cuobjdump" ]]; then
    local elfs ptxs
    elfs="$("$cuobjdump" --list-elf "$out/norm.fatbin")"
    ptxs="$("$cuobjdump" --list-ptx "$out/norm.fatbin")"
    for want in sm_80 sm_90; do
      grep -q "$want" <<<"$elfs" || { echo "build-kernels: fatbin lacks SASS for $want:"$'\n'"$elfs" >&2; exit 1; }
    done
    grep -q sm_90 <<<"$ptxs" || { echo "build-kernels: fatbin lacks PTX for compute_90:"$'\n'"$ptxs" >&2; exit 1; }
    [[ -n "$quiet" ]] || { echo "$elfs"; echo "$ptxs"; } >&2
  elif [[ -z "$quiet" ]]; then
    echo "build-kernels: cuobjdump not found; fatbin entries are checked by tests/unit/precompiled.test.ts" >&2
  fi
}

# write_modules OUTDIR NAMES: norm_cuda.ts and norm_fatbin.json for OUTDIR/norm.fatbin.
write_modules() {
  local out="$1" names="$2"
  local sha
  sha="$(cd "$ROOT" && cat "${HASHED_REL[@]}" | sha256sum | cut -d' ' -f1)"
  {
    echo "// GENERATED by scripts/build-kernels.sh. DO NOT EDIT: run \`bash scripts/build-kernels.sh\`."
    echo "// Source: ${HASHED_REL[*]}; sha256 of them concatenated in that order:"
    echo "//   $sha"
    echo "// Compiler: $NVCC_VERSION"
    echo "// PTX:         precompiled/norm.ptx.gz nvcc ${NVCC_FLAGS[*]} ${PTX_FLAGS[*]} (gzip -9n)"
    echo "// NORM_FATBIN: precompiled/norm.fatbin nvcc ${NVCC_FLAGS[*]} ${FATBIN_FLAGS[*]}"
    echo "//              (SASS sm_80 + sm_90, PTX compute_90)"
    echo ""
    echo "/** The kernel sources, in the order NORM_SOURCE_SHA256 hashes them (paths from the repository root). */"
    echo "export const NORM_SOURCE_FILES: readonly string[] = Object.freeze(["
    local f
    for f in "${HASHED_REL[@]}"; do echo "  \"$f\","; done
    echo "]);"
    echo ""
    echo "/** sha256 (hex) of the NORM_SOURCE_FILES concatenated in that order, as compiled. */"
    echo "export const NORM_SOURCE_SHA256: string ="
    echo "  \"$sha\";"
    echo ""
    echo "/** The extern \"C\" kernels in both images: the hand-written ones in source order, then"
    echo " *  nk_{ln|rms}_{rows|block|cluster|wide|latency}_{tin}_{tout}_{tw} per dtype triple, then the backward"
    echo " *  nk_{ln|rms}_bwd_{cached|wide|rowsum|tile|cluster}_{tx}_{tdy}_{tw} per B(...) triple (kernels/README.md). */"
    echo "export const NORM_KERNELS: readonly string[] = Object.freeze(["
    local n
    for n in $names; do echo "  \"$n\","; done
    echo "]);"
    echo ""
    echo "/** precompiled/norm.fatbin as base64: SASS for sm_80 and sm_90, PTX for compute_90 (compressed entries), from"
    echo " *  norm_fatbin.json. (precompiled/norm.ptx.gz, compute_80 PTX for JIT elsewhere, is a file only: 11 MB of text is"
    echo " *  too much to embed.) */"
    echo "export const NORM_FATBIN: string = fatbin;"
  } >"$out/norm_cuda.ts.body"
  {
    echo "// GENERATED by scripts/build-kernels.sh. DO NOT EDIT: run \`bash scripts/build-kernels.sh\`."
    echo "import fatbin from \"./norm_fatbin.json\" with { type: \"json\" };"
    tail -n +2 "$out/norm_cuda.ts.body"
  } >"$out/norm_cuda.ts"
  rm -f "$out/norm_cuda.ts.body"
  echo "\"$(base64 -w0 "$out/norm.fatbin")\"" >"$out/norm_fatbin.json"
}

TMP="$(mktemp -d "${TMPDIR:-/tmp}/normkit-kernels.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

if [[ "$MODE" == modules ]]; then
  [[ -f "$ROOT/$OUT_REL/norm.fatbin" ]] || { echo "build-kernels --modules-only: no $OUT_REL/norm.fatbin (run a full build)" >&2; exit 1; }
  cp "$ROOT/$OUT_REL/norm.fatbin" "$TMP/norm.fatbin"
  write_modules "$TMP" "$(kernel_names)"
  cp "$TMP/norm_cuda.ts" "$TMP/norm_fatbin.json" "$ROOT/$OUT_REL/"
  echo "build-kernels: wrote $OUT_REL/norm_cuda.ts and $OUT_REL/norm_fatbin.json from $OUT_REL/norm.fatbin (nothing compiled)" >&2
  exit 0
fi

if [[ "$MODE" == check ]]; then
  build "$TMP" quiet
  stale=()
  for f in "${COMMITTED[@]}"; do
    if [[ ! -f "$ROOT/$OUT_REL/$f" ]]; then stale+=("$OUT_REL/$f (missing)")
    elif ! cmp -s "$TMP/$f" "$ROOT/$OUT_REL/$f"; then stale+=("$OUT_REL/$f"); fi
  done
  if ((${#stale[@]})); then
    echo "build-kernels --check: STALE precompiled output (does not match a rebuild of kernels/):" >&2
    for s in "${stale[@]}"; do echo "  $s" >&2; done
    recorded="$(sed -nE 's#^// Compiler: (.*)#\1#p' "$ROOT/$OUT_REL/norm_cuda.ts" 2>/dev/null || true)"
    if [[ -n "$recorded" && "$recorded" != "$NVCC_VERSION" ]]; then
      echo "  note: committed files were built with '$recorded', this nvcc is '$NVCC_VERSION'" >&2
    fi
    echo "Fix: run 'bash scripts/build-kernels.sh' and commit precompiled/." >&2
    exit 1
  fi
  echo "build-kernels --check: precompiled/ is up to date (${COMMITTED[*]})"
  exit 0
fi

build "$TMP"
# Reproducibility guard: a second build in another directory must give identical bytes.
mkdir "$TMP/again"
build "$TMP/again" quiet
for f in "${GENERATED[@]}"; do
  cmp -s "$TMP/$f" "$TMP/again/$f" || { echo "build-kernels: $f is not reproducible (two builds differ)" >&2; exit 1; }
done
mkdir -p "$ROOT/$OUT_REL"
for f in "${GENERATED[@]}"; do cp "$TMP/$f" "$ROOT/$OUT_REL/$f"; done
echo "build-kernels: wrote ${GENERATED[*]/#/$OUT_REL/} (reproducible: two builds identical)" >&2
