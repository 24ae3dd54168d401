#!/usr/bin/env bash
# The fused norm kernels that kernels/fused.cu defines, one name a line, in its order: nk_fused_{kind}_{ti}_{to}_{tw}
# for each NK_FUSED_KERNEL(kind, isln, ti, to, tw) line, each followed by the same name with the suffix of each
# NK_FUSED_FEW_KERNEL(..., maxv) line in NK_FUSED_KERNEL's body (_nv<maxv>). Read by scripts/build-fused.sh and
# tests/emu/build.sh.
#   bash scripts/fused_kernel_names.sh [FUSED_CU]     (default: kernels/fused.cu beside this script)
set -euo pipefail
src=${1:-"$(dirname "$0")/../kernels/fused.cu"}
bases="$(sed -nE 's/^NK_FUSED_KERNEL\(([a-z]+),[[:space:]]*(true|false),[[:space:]]*([a-z0-9]+),[[:space:]]*([a-z0-9]+),[[:space:]]*([a-z0-9]+)\)[[:space:]]*$/nk_fused_\1_\3_\4_\5/p' "$src")"
[[ -n "$bases" ]] || { echo "fused_kernel_names: no NK_FUSED_KERNEL(...) lines in $src" >&2; exit 1; }
suffixes="$(sed -nE 's/^[[:space:]]+NK_FUSED_FEW_KERNEL\(kind, isln, ti, to, tw, ([0-9]+)\).*$/_nv\1/p' "$src")"
for b in $bases; do
  echo "$b"
  for s in $suffixes; do echo "$b$s"; done
done
