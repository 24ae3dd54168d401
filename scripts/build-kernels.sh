#!/usr/bin/env bash
# Build the precompiled NVIDIA kernels from kernels/ into precompiled/ (and packages/ptx/).
#
#   bash scripts/build-kernels.sh          # rebuild the images and norm_cuda.ts (and the combined fatbins)
#   bash scripts/build-kernels.sh --check  # rebuild into a temp dir; exit 1 naming any stale file
#   bash scripts/build-kernels.sh --modules-only  # rewrite the images and modules from the existing
#                                          # precompiled/norm.fatbin and norm_bwd.fatbin, compiling nothing (after a
#                                          # full build, when only the modules' layout changed; --check still rebuilds
#                                          # everything)
#
# Two images per architecture, built from kernels/norm.cu with -DNK_NORM_IMAGE=1 and =2, so that a device reads only its
# own and a program that computes no gradient never reads the backward kernels (docs/loading.md): norm_* holds scale_f32,
# the diagnostics and the forward kernels, norm_bwd_* the backward kernels and their finalize. Outputs (all generated;
# never edit them by hand):
#   precompiled/norm_sm80.fatbin, norm_bwd_sm80.fatbin   SASS for sm_80 (serves compute capability 8.x)
#   precompiled/norm_sm90.fatbin, norm_bwd_sm90.fatbin   SASS for sm_90
#   packages/ptx/norm_compute90.fatbin, norm_bwd_compute90.fatbin  PTX for compute_90 (JIT-compiled on GPUs newer than
#                                    sm_90): the package @normkit/ptx, published on its own
#   precompiled/norm_cuda.ts         the source hash, the kernel names, and where the images are (no image bytes)
#   packages/ptx/build.ts            the source hash the PTX was compiled from
#   precompiled/norm.fatbin, norm_bwd.fatbin  each image's three entries in one fatbin, as nvcc wrote it: not committed
#                                    (.gitignore); the images above are their entries, byte for byte, each behind a
#                                    fatbin header of its own (split_fatbin), and scripts/fatbin.sh puts norm.fatbin back
#                                    together
#
# Kernel names: the extern "C" NK_GLOBAL kernels written out in kernels/norm.cu, then the generated
# fast forward kernels nk_{ln|rms}_{rows|block|cluster|wide|latency|stash}_{tin}_{tout}_{tw} and nk_ln_{blockfull|clusterfull|rowstwopass}_*, nk_{ln|rms}_rowstile_*, one set per X(tin, tout, tw)
# line of NK_FWD_DTYPES in kernels/norm.cu, then the backward ones (B(...) and S(...) lines); each image's list must
# equal the .entry set of its compute_80 PTX compile exactly (an intermediate, not kept:
# tests/unit/precompiled.test.ts checks the names in the SASS images' symbol tables).
# Each image's PTX and fatbin compiles run concurrently (about 8 minutes on 2 cores for the 368 kernels of both images;
# twice, with the reproducibility check below).
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
# shellcheck source=scripts/fatbin_split.sh
source "$ROOT/scripts/fatbin_split.sh"
SRC_REL="kernels/norm.cu"
# Everything norm.cu compiles from, in hash order (NORM_SOURCE_FILES in the generated module).
HASHED_REL=(
  kernels/norm.cu kernels/portable.h kernels/norm_fwd.cuh kernels/fwd_common.cuh kernels/fwd_row_cache.cuh kernels/fwd_rows.cuh kernels/fwd_block.cuh kernels/fwd_cluster.cuh kernels/fwd_wide.cuh kernels/fwd_stash.cuh
  kernels/diag.cuh kernels/norm_bwd.cuh kernels/bwd_common.cuh kernels/bwd_cached.cuh kernels/bwd_wide.cuh kernels/bwd_rowsum_tile.cuh kernels/bwd_finalize.cuh)
OUT_REL="precompiled"
# Generated files, by path from the repository root; the build writes each to OUTDIR/<its base name>.
# What --check compares with the committed files: all but the combined fatbin (its entries are the images).
COMMITTED=(precompiled/norm_sm80.fatbin precompiled/norm_sm90.fatbin precompiled/norm_bwd_sm80.fatbin
  precompiled/norm_bwd_sm90.fatbin precompiled/norm_cuda.ts packages/ptx/norm_compute90.fatbin
  packages/ptx/norm_bwd_compute90.fatbin packages/ptx/build.ts)
GENERATED=(precompiled/norm.fatbin precompiled/norm_bwd.fatbin "${COMMITTED[@]}")
# The images: NK_NORM_IMAGE=1 builds norm, 2 norm_bwd.
IMAGES=(norm norm_bwd)

MAX_SPILL=96
MODE=build
case "${1:-}" in
  "") ;;
  --check) MODE=check ;;
  --modules-only) MODE=modules ;;
  -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
  *) echo "build-kernels: unknown argument '$1' (use --check, --modules-only or nothing)" >&2; exit 2 ;;
esac

# shellcheck source=scripts/nvcc.sh
source "$ROOT/scripts/nvcc.sh"

# build OUTDIR [quiet]: compile both images from the repository root with fixed relative paths into OUTDIR.
build() {
  local out="$1" quiet="${2:-}" n
  for n in 1 2; do build_image "$out" "${IMAGES[$((n - 1))]}" "$n" "$quiet"; done
  write_modules "$out"
}

# build_image OUTDIR IMAGE N [quiet]: IMAGE (-DNK_NORM_IMAGE=N) into OUTDIR/IMAGE.fatbin and its three entries.
build_image() {
  local out="$1" img="$2" n="$3" quiet="${4:-}"
  (
    cd "$ROOT"
    "$NVCC" "${NVCC_FLAGS[@]}" "${PTX_FLAGS[@]}" -DNK_NORM_IMAGE="$n" -o "$out/$img.ptx" "$SRC_REL" 2>"$out/ptx.log" &
    local ptx_pid=$!
    if ! "$NVCC" "${NVCC_FLAGS[@]}" "${FATBIN_FLAGS[@]}" -DNK_NORM_IMAGE="$n" -o "$out/$img.fatbin" "$SRC_REL" \
        2>"$out/ptxas.log"; then
      wait "$ptx_pid" || true
      cat "$out/ptxas.log" >&2; exit 1
    fi
    if ! wait "$ptx_pid"; then cat "$out/ptx.log" >&2; exit 1; fi
    [[ -n "$quiet" ]] || cat "$out/ptx.log" "$out/ptxas.log" >&2
    # Spills: the register caps (64 per thread, for occupancy) leave a few LN kernels a few words
    # short; up to MAX_SPILL bytes per kernel are accepted: on the H200 these kernels ran faster than
    # the spill-free 106-register ones (LN bf16 D=4096: 82% -> 93% of copy, bench/README.md).
    # More is a build error.
    local worst
    worst="$(grep -oE '[0-9]+ bytes spill stores' "$out/ptxas.log" | grep -oE '^[0-9]+' | sort -n | tail -1)"
    if (( ${worst:-0} > MAX_SPILL )); then
      echo "build-kernels: a kernel of $img spills ${worst} bytes (> ${MAX_SPILL}):" >&2
      grep -B3 -E "(^|[^0-9])${worst} bytes spill stores" "$out/ptxas.log" >&2
      exit 1
    fi
    # The forward `wide` kernels may not spill at all: spilling, LayerNorm's ran 8-9 points of copy slower on
    # the H200 (kernels/README.md, NK_NOINLINE). Their lines: the kernels and the nk_fwd_wide calls, each a
    # "Function properties" line followed by "N bytes stack frame, N bytes spill stores, ...". No match at all
    # in the forward image means the names moved: fail rather than pass without checking.
    local wide_lines nonzero='(^|[^0-9])[1-9][0-9]* bytes (stack frame|spill stores)'
    wide_lines="$(grep -A1 -E 'Function properties for (nk_(ln|rms)_wide_|_Z[0-9]+nk_fwd_wide)' "$out/ptxas.log" || true)"
    if [[ "$img" == norm ]] && ! grep -qE 'bytes stack frame' <<<"$wide_lines"; then
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

  local names entries
  names="$(kernel_names "$img")"
  entries="$(sed -nE 's/^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' "$out/$img.ptx")"
  if [[ "$(sort <<<"$names")" != "$(sort <<<"$entries")" ]]; then
    echo "build-kernels: $img: kernels in $SRC_REL ($(echo $names)) differ from .entry in PTX ($(echo $entries))" >&2
    exit 1
  fi
  grep -q '^\.target sm_80$' "$out/$img.ptx" || { echo "build-kernels: $img.ptx is not .target sm_80" >&2; exit 1; }
  check_fatbin "$out" "$img" "$quiet"
  split_image "$out" "$img"
  rm -f "$out/$img.ptx"
}

# split_image OUTDIR IMAGE: OUTDIR/IMAGE.fatbin into IMAGE_sm80.fatbin, IMAGE_sm90.fatbin and IMAGE_compute90.fatbin.
split_image() { split_fatbin "$1/$2.fatbin" "$1" "$2" "$2_sm80.fatbin $2_sm90.fatbin $2_compute90.fatbin"; }

# kernel_names IMAGE: the kernel names of IMAGE (norm or norm_bwd), from the source alone.
kernel_names() {
  if [[ "$1" == norm_bwd ]]; then all_kernel_names | grep -E '^nk_(bwd_finalize_|(ln|rms)_bwd_)'
  else all_kernel_names | grep -vE '^nk_(bwd_finalize_|(ln|rms)_bwd_)'; fi
}

# Every kernel name: every extern "C" NK_GLOBAL function, in source order, then the generated ones.
all_kernel_names() {
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

# check_fatbin OUTDIR IMAGE [quiet]
check_fatbin() {
  local out="$1" img="$2" quiet="${3:-}"
  # Fatbin contents: use cuobjdump when the toolkit has it (tests/unit/precompiled.test.ts parses the
  # fatbin headers itself, so the check also runs where cuobjdump is missing).
  local cuobjdump=""
  if command -v cuobjdump >/dev/null 2>&1; then cuobjdump="$(command -v cuobjdump)";
  elif [[ -x "$(dirname "$NVCC")/cuobjdump" ]]; then cuobjdump="$(dirname "$NVCC")/cuobjdump"; fi
  if [[ -n "$cuobjdump" ]]; then
    local elfs ptxs
    elfs="$("$cuobjdump" --list-elf "$out/$img.fatbin")"
    ptxs="$("$cuobjdump" --list-ptx "$out/$img.fatbin")"
    for want in sm_80 sm_90; do
      grep -q "$want" <<<"$elfs" || { echo "build-kernels: $img fatbin lacks SASS for $want:"$'\n'"$elfs" >&2; exit 1; }
    done
    grep -q sm_90 <<<"$ptxs" || { echo "build-kernels: $img fatbin lacks PTX for compute_90:"$'\n'"$ptxs" >&2; exit 1; }
    [[ -n "$quiet" ]] || { echo "$elfs"; echo "$ptxs"; } >&2
  elif [[ -z "$quiet" ]]; then
    echo "build-kernels: cuobjdump not found; fatbin entries are checked by tests/unit/precompiled.test.ts" >&2
  fi
}

# write_modules OUTDIR: norm_cuda.ts and the PTX package's build.ts for the images in OUTDIR.
write_modules() {
  local out="$1"
  local sha
  sha="$(cd "$ROOT" && cat "${HASHED_REL[@]}" | sha256sum | cut -d' ' -f1)"
  {
    echo "// GENERATED by scripts/build-kernels.sh. DO NOT EDIT: run \`bash scripts/build-kernels.sh\`."
    echo "// Source: ${HASHED_REL[*]}; sha256 of them concatenated in that order:"
    echo "//   $sha"
    echo "// Compiler: $NVCC_VERSION"
    echo "// Images: nvcc ${NVCC_FLAGS[*]} ${FATBIN_FLAGS[*]},"
    echo "//   -DNK_NORM_IMAGE=1 (norm_*) and 2 (norm_bwd_*), one fatbin per entry: norm_sm80.fatbin, norm_sm90.fatbin,"
    echo "//   norm_bwd_sm80.fatbin, norm_bwd_sm90.fatbin (SASS), and packages/ptx/norm_compute90.fatbin,"
    echo "//   packages/ptx/norm_bwd_compute90.fatbin (PTX)"
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
    echo "/** The extern \"C\" kernels of the norm images: scale_f32 and the diagnostics, then"
    echo " *  nk_{ln|rms}_{rows|block|cluster|wide|latency|stash|…}_{tin}_{tout}_{tw} per dtype triple (kernels/README.md). */"
    echo "export const NORM_KERNELS: readonly string[] = Object.freeze(["
    local n
    for n in $(kernel_names norm); do echo "  \"$n\","; done
    echo "]);"
    echo ""
    echo "/** The extern \"C\" kernels of the norm_bwd images: the finalize kernels, then"
    echo " *  nk_{ln|rms}_bwd_{cached|wide|rowsum|tile|cluster}_{tx}_{tdy}_{tw} per B(...) triple and the staged ones per S(...) triple. */"
    echo "export const NORM_BWD_KERNELS: readonly string[] = Object.freeze(["
    for n in $(kernel_names norm_bwd); do echo "  \"$n\","; done
    echo "]);"
    echo ""
    echo "/** Where the SASS images this package ships are, by target: files beside this module, read by loadKernels() for"
    echo " *  the device's own target only (importing this module reads none). Each is a fatbin of one compressed entry. */"
    echo "export const NORM_CUDA_IMAGES: Readonly<Record<string, { readonly href: string }>> = Object.freeze({"
    echo "  sm_80: new URL(\"./norm_sm80.fatbin\", import.meta.url),"
    echo "  sm_90: new URL(\"./norm_sm90.fatbin\", import.meta.url),"
    echo "});"
    echo ""
    echo "/** Where the SASS images of the backward kernels are, by target (as NORM_CUDA_IMAGES). */"
    echo "export const NORM_BWD_CUDA_IMAGES: Readonly<Record<string, { readonly href: string }>> = Object.freeze({"
    echo "  sm_80: new URL(\"./norm_bwd_sm80.fatbin\", import.meta.url),"
    echo "  sm_90: new URL(\"./norm_bwd_sm90.fatbin\", import.meta.url),"
    echo "});"
  } >"$out/norm_cuda.ts"
  {
    echo "// GENERATED by scripts/build-kernels.sh. DO NOT EDIT: run \`bash scripts/build-kernels.sh\`."
    echo "// Compiler: $NVCC_VERSION"
    echo ""
    echo "/** sha256 of the kernel sources norm_compute90.fatbin and norm_bwd_compute90.fatbin were compiled from: loadKernels() takes these images only"
    echo " *  for a normkit of the same NORM_SOURCE_SHA256. */"
    echo "export const sourceSha256: string = \"$sha\";"
  } >"$out/build.ts"
}

# dest REL: where the generated file REL (a path from the repository root) lies in a build directory.
dest() { basename "$1"; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/normkit-kernels.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

if [[ "$MODE" == modules ]]; then
  for img in "${IMAGES[@]}"; do
    [[ -f "$ROOT/$OUT_REL/$img.fatbin" ]] ||
      { echo "build-kernels --modules-only: no $OUT_REL/$img.fatbin (run a full build)" >&2; exit 1; }
    cp "$ROOT/$OUT_REL/$img.fatbin" "$TMP/$img.fatbin"
    split_image "$TMP" "$img"
  done
  write_modules "$TMP"
  for f in "${COMMITTED[@]}"; do cp "$TMP/$(dest "$f")" "$ROOT/$f"; done
  echo "build-kernels: wrote ${COMMITTED[*]} from $OUT_REL/norm.fatbin and norm_bwd.fatbin (nothing compiled)" >&2
  exit 0
fi

if [[ "$MODE" == check ]]; then
  build "$TMP" quiet
  stale=()
  for f in "${COMMITTED[@]}"; do
    if [[ ! -f "$ROOT/$f" ]]; then stale+=("$f (missing)")
    elif ! cmp -s "$TMP/$(dest "$f")" "$ROOT/$f"; then stale+=("$f"); fi
  done
  if ((${#stale[@]})); then
    echo "build-kernels --check: STALE precompiled output (does not match a rebuild of kernels/):" >&2
    for s in "${stale[@]}"; do echo "  $s" >&2; done
    recorded="$(sed -nE 's#^// Compiler: (.*)#\1#p' "$ROOT/$OUT_REL/norm_cuda.ts" 2>/dev/null || true)"
    if [[ -n "$recorded" && "$recorded" != "$NVCC_VERSION" ]]; then
      echo "  note: committed files were built with '$recorded', this nvcc is '$NVCC_VERSION'" >&2
    fi
    echo "Fix: run 'bash scripts/build-kernels.sh' and commit precompiled/ and packages/ptx/." >&2
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
  cmp -s "$TMP/$(dest "$f")" "$TMP/again/$(dest "$f")" ||
    { echo "build-kernels: $f is not reproducible (two builds differ)" >&2; exit 1; }
done
for f in "${GENERATED[@]}"; do mkdir -p "$(dirname "$ROOT/$f")"; cp "$TMP/$(dest "$f")" "$ROOT/$f"; done
echo "build-kernels: wrote ${GENERATED[*]} (reproducible: two builds identical)" >&2
