#!/usr/bin/env bash
# One build for lab/fused_geometry/ab.ts: an sm_90 cubin of kernels/fused.cu with only its bf16 kernels (about a minute
# with nvcc, no GPU needed), from main's sources or with a patch to kernels/ (git diff's a/kernels/... paths) and/or
# nvcc flags. Prints each kernel's registers and spill stores (ptxas -v, kept as OUT.ptxas.txt).
#   bash lab/fused_geometry/cubin.sh OUT.cubin [--patch FILE.diff] [nvcc flags, e.g. -DNK_FUSED_RES_DEPTH=8]
# e.g. (lab/fused_geometry/README.md):
#   bash lab/fused_geometry/cubin.sh lab/fused_geometry/.wg/main.cubin
#   bash lab/fused_geometry/cubin.sh lab/fused_geometry/.wg/nc.cubin --patch lab/fused_geometry/weights-nc.diff
#   deno run -A lab/fused_geometry/ab.ts lab/fused_geometry/.wg/main.cubin lab/fused_geometry/.wg/nc.cubin
# The cubins are build outputs (git-ignored): carry them.
set -euo pipefail
usage="usage: lab/fused_geometry/cubin.sh OUT.cubin [--patch FILE.diff] [nvcc flags]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$(dirname "$1")"; out=$(realpath "$1"); shift
patchf=""; flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --patch) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; patchf=$(realpath "$2"); shift 2 ;;
    *) flags+=("$1"); shift ;;
  esac
done
cd "$(dirname "$0")/../.."
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
cp kernels/*.cu kernels/*.cuh kernels/*.h "$src/"
[ -z "$patchf" ] || patch -s -N --batch -d "$src" -p2 < "$patchf"
# Keep the bf16 kernels (one NK_FUSED_KERNEL(...) per line) and nk_fused_add_*.
grep -v -E '^NK_FUSED_KERNEL\((ln|rms), (true|false), (f32|f16),' "$src/fused.cu" > "$src/fused_bf16.cu"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -O3 --std=c++17 -cubin -arch=sm_90 ${flags[@]+"${flags[@]}"} -Xptxas -v -o "$out" "$src/fused_bf16.cu" \
  2>"$out.ptxas.txt" || { grep -v "^ptxas info" "$out.ptxas.txt" >&2; echo "nvcc failed (log: $out.ptxas.txt)" >&2; exit 1; }
echo "== $out"
awk '/Compiling entry function/ { n = $0; sub(/.*function ./, "", n); sub(/. for.*/, "", n) }
     /bytes stack frame/ && n != "" { s = $0; sub(/.*stack frame, /, "", s); sub(/, 0 bytes spill loads/, "", s) }
     /Used [0-9]+ registers/ && n != "" { print "  " n ": " $5 " registers, " s; n = "" }' "$out.ptxas.txt"
