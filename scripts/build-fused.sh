#!/usr/bin/env bash
# Build the precompiled fused kernels (kernels/fused.cu) into precompiled/.
#
#   bash scripts/build-fused.sh          # rebuild the images and fused_cuda.ts (twice: the output must be reproducible)
#   bash scripts/build-fused.sh --check  # rebuild into a temp dir; exit 1 naming any stale file
#
# Outputs (generated; never edit them by hand), two images per architecture (docs/loading.md): fused_* holds the kernels
# of a float y and nk_fused_add_* (NK_FUSED_IMAGE=1), fused_quant_* those of a quantized y (NK_FUSED_IMAGE=2):
#   precompiled/fused_sm80.fatbin, fused_quant_sm80.fatbin   SASS for sm_80 (serves compute capability 8.x)
#   precompiled/fused_sm90.fatbin, fused_quant_sm90.fatbin   SASS for sm_90
#   precompiled/fused_cuda.ts       the source hash, the kernel names, and where the images are (no image bytes)
#   packages/ptx/fused_compute90.fatbin, fused_quant_compute90.fatbin  PTX for compute_90 (JIT-compiled on GPUs newer
#                                   than sm_90), in @normkit/ptx
#   packages/ptx/fused_build.ts     the source hash that PTX was compiled from
#   bench/results/fused-ptxas.txt   each kernel's registers and spill stores in those images (ptxas -v)
# Each image is a fatbin of one compressed entry, split from the fatbin nvcc writes (scripts/fatbin_split.sh).
#
# Kernel names: three per NK_FUSED_KERNEL(kind, isln, ti, to, tw) line of kernels/fused.cu, nk_fused_{kind}_{ti}_{to}_{tw}
# and the same name + _nv2 and + _nv4 (the few-chunk kernels);
# each image's list must equal the .entry set of its compute_80 PTX compile (an intermediate, not kept).
# Reproducibility: as scripts/build-kernels.sh (nvcc 13.0 V13.0.88: the same bytes across runs and directories; another
# nvcc release gives other bytes, so --check fails there; the module records the nvcc version).
# Registers: the kernels are compiled with __launch_bounds__(1024) (64 registers per thread), the _nv2 and _nv4 kernels
# with __launch_bounds__(256); the build prints each kernel's registers and spill stores (ptxas -v) and fails when one
# spills more than MAX_SPILL bytes.
#
# Env: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc).
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/fatbin_split.sh
source "$ROOT/scripts/fatbin_split.sh"
SRC_REL="kernels/fused.cu"
# Everything fused.cu compiles from, in hash order (FUSED_SOURCE_FILES in the generated module).
HASHED_REL=(kernels/fused.cu kernels/portable.h kernels/fused.cuh kernels/fwd_common.cuh kernels/fused_quant.cuh)
COMMITTED=(precompiled/fused_sm80.fatbin precompiled/fused_sm90.fatbin precompiled/fused_quant_sm80.fatbin
  precompiled/fused_quant_sm90.fatbin precompiled/fused_cuda.ts packages/ptx/fused_compute90.fatbin
  packages/ptx/fused_quant_compute90.fatbin packages/ptx/fused_build.ts bench/results/fused-ptxas.txt)

# Spill stores per kernel, ptxas -v (both paths' spill code summed): with nvcc 13.0 at most 132 bytes on sm_90 and 152
# on sm_80 (the 8-chunk kernels of quantized y with f32 weights), at most 44 on sm_90 and 48 on sm_80 in the _nv2 and
# _nv4 kernels (bench/results/fused-ptxas.txt).
# More than MAX_SPILL is a build error.
MAX_SPILL=160
MODE=build
case "${1:-}" in
  "") ;;
  --check) MODE=check ;;
  -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
  *) echo "build-fused: unknown argument '$1' (use --check or nothing)" >&2; exit 2 ;;
esac

# shellcheck source=scripts/nvcc.sh
source "$ROOT/scripts/nvcc.sh"

# kernel_names: the norm kernels of fused.cu (scripts/fused_kernel_names.sh), then its NK_FUSED_ADD_KERNEL(...) lines, in
# order.
kernel_names() {
  bash "$ROOT/scripts/fused_kernel_names.sh" "$ROOT/$SRC_REL"
  sed -nE 's/^NK_FUSED_ADD_KERNEL\(([a-z0-9]+)\)[[:space:]]*$/nk_fused_add_\1/p' "$ROOT/$SRC_REL"
}

# spill_table LOG: "arch kernel registers spill-bytes" per kernel from ptxas -v output.
spill_table() {
  awk '
    /Compiling entry function/ { name = $7; gsub(/\047/, "", name); arch = $NF; gsub(/\047/, "", arch) }
    /bytes spill stores/ { spill = $5 }
    /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") regs = $(i + 1); print arch, name, regs, spill }
  ' "$1"
}

# The images, built from kernels/fused.cu with -DNK_FUSED_IMAGE=1 and =2: the kernels of a float y and nk_fused_add_*,
# and those of a quantized y (a program that never quantizes never reads those).
IMAGES=(fused fused_quant)
QUANT_NAME='_(fp8e4m3|fp8e5m2|int8)_'
# image_names IMAGE: kernel_names of that image, in order.
image_names() {
  if [[ "$1" == fused_quant ]]; then kernel_names | grep -E "$QUANT_NAME"; else kernel_names | grep -vE "$QUANT_NAME"; fi
}

# build OUTDIR [quiet]: compile from the repository root with fixed relative paths into OUTDIR.
build() {
  local out="$1" quiet="${2:-}" img n
  for n in 1 2; do
    img=${IMAGES[$((n - 1))]}
    (
      cd "$ROOT"
      "$NVCC" "${NVCC_FLAGS[@]}" "${PTX_FLAGS[@]}" -DNK_FUSED_IMAGE=$n -o "$out/$img.ptx" "$SRC_REL" 2>"$out/ptx.log" &
      local ptx_pid=$!
      if ! "$NVCC" "${NVCC_FLAGS[@]}" "${FATBIN_FLAGS[@]}" -DNK_FUSED_IMAGE=$n -o "$out/$img.fatbin" "$SRC_REL" \
        2>"$out/ptxas.log"; then
        wait "$ptx_pid" || true
        cat "$out/ptxas.log" >&2; exit 1
      fi
      if ! wait "$ptx_pid"; then cat "$out/ptx.log" >&2; exit 1; fi
      spill_table "$out/ptxas.log" >>"$out/spills.txt"
      rm -f "$out/ptxas.log" "$out/ptx.log"
    )
    local names entries
    names="$(image_names "$img")"
    entries="$(sed -nE 's/^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' "$out/$img.ptx")"
    if [[ "$(sort <<<"$names")" != "$(sort <<<"$entries")" ]]; then
      echo "build-fused: $img: kernels in $SRC_REL ($(echo $names)) differ from .entry in PTX ($(echo $entries))" >&2
      exit 1
    fi
    split_fatbin "$out/$img.fatbin" "$out" "$img" "${img}_sm80.fatbin ${img}_sm90.fatbin ${img}_compute90.fatbin"
    rm -f "$out/$img.ptx" "$out/$img.fatbin"
  done
  [[ -n "$quiet" ]] || { echo "build-fused: arch kernel registers spill-store-bytes"; cat "$out/spills.txt"; } >&2
  {
    echo "# GENERATED by scripts/build-fused.sh: ptxas -v of $NVCC_VERSION"
    echo "# for precompiled/fused_sm80.fatbin, fused_sm90.fatbin, fused_quant_sm80.fatbin and fused_quant_sm90.fatbin,"
    echo "# both paths' spill code summed. Columns: arch kernel registers spill-store-bytes"
    cat "$out/spills.txt"
  } >"$out/fused-ptxas.txt"
  local worst
  worst="$(awk '{ print $4 }' "$out/spills.txt" | sort -n | tail -1)"
  if (( ${worst:-0} > MAX_SPILL )); then
    echo "build-fused: a kernel spills ${worst} bytes (> ${MAX_SPILL}):" >&2
    awk -v w="$worst" '$4 == w' "$out/spills.txt" >&2
    exit 1
  fi
  rm -f "$out/spills.txt"
  write_module "$out"
}

# write_module OUTDIR: fused_cuda.ts and the PTX package's fused_build.ts (formatted as deno fmt leaves them).
write_module() {
  local out="$1" sha f n
  sha="$(cd "$ROOT" && cat "${HASHED_REL[@]}" | sha256sum | cut -d' ' -f1)"
  {
    echo "// GENERATED by scripts/build-fused.sh. DO NOT EDIT: run \`bash scripts/build-fused.sh\`."
    echo "// Source: ${HASHED_REL[*]}; sha256 of them concatenated in that order:"
    echo "//   $sha"
    echo "// Compiler: $NVCC_VERSION"
    echo "// Images: nvcc ${NVCC_FLAGS[*]} ${FATBIN_FLAGS[*]},"
    echo "//   -DNK_FUSED_IMAGE=1 (fused_*) and 2 (fused_quant_*), one fatbin per entry: fused_sm80.fatbin,"
    echo "//   fused_sm90.fatbin, fused_quant_sm80.fatbin, fused_quant_sm90.fatbin (SASS), and"
    echo "//   packages/ptx/fused_compute90.fatbin, packages/ptx/fused_quant_compute90.fatbin (PTX)"
    echo ""
    echo "/** The fused kernel sources, in the order FUSED_SOURCE_SHA256 hashes them (paths from the repository root). */"
    echo "export const FUSED_SOURCE_FILES: readonly string[] = Object.freeze(["
    for f in "${HASHED_REL[@]}"; do echo "  \"$f\","; done
    echo "]);"
    echo ""
    echo "/** sha256 (hex) of the FUSED_SOURCE_FILES concatenated in that order, as compiled. */"
    echo "export const FUSED_SOURCE_SHA256: string = \"$sha\";"
    echo ""
    echo "/** The extern \"C\" kernels of the fused images, in kernels/fused.cu's order: nk_fused_{ln|rms}_{ti}_{to}_{tw} of a float y and its _nv2 and _nv4, then nk_fused_add_{t}. */"
    echo "export const FUSED_KERNELS: readonly string[] = Object.freeze(["
    for n in $(image_names fused); do echo "  \"$n\","; done
    echo "]);"
    echo ""
    echo "/** The extern \"C\" kernels of the fused_quant images, in kernels/fused.cu's order: nk_fused_{ln|rms}_{ti}_{to}_{tw} of a quantized y and its _nv2 and _nv4. */"
    echo "export const FUSED_QUANT_KERNELS: readonly string[] = Object.freeze(["
    for n in $(image_names fused_quant); do echo "  \"$n\","; done
    echo "]);"
    echo ""
    echo "/** Where the SASS images of the fused kernels of a float y are, by target: files beside this module (importing it reads none). */"
    echo "export const FUSED_CUDA_IMAGES: Readonly<Record<string, { readonly href: string }>> = Object.freeze({"
    echo "  sm_80: new URL(\"./fused_sm80.fatbin\", import.meta.url),"
    echo "  sm_90: new URL(\"./fused_sm90.fatbin\", import.meta.url),"
    echo "});"
    echo ""
    echo "/** Where the SASS images of the fused kernels of a quantized y are, by target (as FUSED_CUDA_IMAGES). */"
    echo "export const FUSED_QUANT_CUDA_IMAGES: Readonly<Record<string, { readonly href: string }>> = Object.freeze({"
    echo "  sm_80: new URL(\"./fused_quant_sm80.fatbin\", import.meta.url),"
    echo "  sm_90: new URL(\"./fused_quant_sm90.fatbin\", import.meta.url),"
    echo "});"
  } >"$out/fused_cuda.ts"
  {
    echo "// GENERATED by scripts/build-fused.sh. DO NOT EDIT: run \`bash scripts/build-fused.sh\`."
    echo "// Compiler: $NVCC_VERSION"
    echo ""
    echo "/** sha256 of the kernel sources fused_compute90.fatbin and fused_quant_compute90.fatbin were compiled from:"
    echo " *  loadKernels() takes them only for a normkit of the same FUSED_SOURCE_SHA256. */"
    echo "export const fusedSourceSha256: string = \"$sha\";"
  } >"$out/fused_build.ts"
}

TMP="$(mktemp -d "${TMPDIR:-/tmp}/normkit-fused.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

if [[ "$MODE" == check ]]; then
  build "$TMP" quiet
  stale=()
  for f in "${COMMITTED[@]}"; do
    if [[ ! -f "$ROOT/$f" ]]; then stale+=("$f (missing)")
    elif ! cmp -s "$TMP/$(basename "$f")" "$ROOT/$f"; then
      stale+=("$f")
      [[ "$f" != *.txt ]] || diff "$ROOT/$f" "$TMP/$(basename "$f")" | head -20 >&2
    fi
  done
  if ((${#stale[@]})); then
    echo "build-fused --check: STALE precompiled output (does not match a rebuild of $SRC_REL):" >&2
    for s in "${stale[@]}"; do echo "  $s" >&2; done
    recorded="$(sed -nE 's#^// Compiler: (.*)#\1#p' "$ROOT/precompiled/fused_cuda.ts" 2>/dev/null || true)"
    if [[ -n "$recorded" && "$recorded" != "$NVCC_VERSION" ]]; then
      echo "  note: committed files were built with '$recorded', this nvcc is '$NVCC_VERSION'" >&2
    fi
    echo "Fix: run 'bash scripts/build-fused.sh' and commit precompiled/." >&2
    exit 1
  fi
  echo "build-fused --check: precompiled/ is up to date (${COMMITTED[*]})"
  exit 0
fi

build "$TMP"
# Reproducibility guard: a second build in another directory must give identical bytes.
mkdir "$TMP/again"
build "$TMP/again" quiet
for f in "${COMMITTED[@]}"; do
  cmp -s "$TMP/$(basename "$f")" "$TMP/again/$(basename "$f")" ||
    { echo "build-fused: $f is not reproducible (two builds differ)" >&2; exit 1; }
done
for f in "${COMMITTED[@]}"; do cp "$TMP/$(basename "$f")" "$ROOT/$f"; done
echo "build-fused: wrote ${COMMITTED[*]} ($(stat -c %s "${COMMITTED[@]:0:4}" | tr '\n' ' ')bytes; reproducible: two builds identical)" >&2
