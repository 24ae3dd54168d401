#!/usr/bin/env bash
# Builds the host emulator: kernels/fused.cu and kernels/norm.cu unmodified, with emu_prelude.h in place of
# portable.h's device halves. usage: tests/emu/build.sh [OUT_DIR] [extra g++ flags...]   (default OUT_DIR: /tmp/fused_emu)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-/tmp/fused_emu}"
shift || true
mkdir -p "$out"
# portable.h's target-independent tail, verbatim: from the NK_HAS_CP_ASYNC fallback to the guard's #endif (exclusive).
sed -n '/^#ifndef NK_HAS_CP_ASYNC/,/^#endif  \/\/ NORMKIT_PORTABLE_H/p' "$root/kernels/portable.h" | sed '$d' \
  >"$out/portable_tail.h"
grep -q 'nk_block_sum' "$out/portable_tail.h" || { echo "build.sh: portable.h's tail not found" >&2; exit 1; }
# The kernel table: every norm kernel of fused.cu (scripts/fused_kernel_names.sh).
bash "$root/scripts/fused_kernel_names.sh" "$root/kernels/fused.cu" | while read -r k; do echo "{\"$k\", $k},"; done \
  >"$out/kernel_table.inc"
[ "$(wc -l <"$out/kernel_table.inc")" -eq 120 ] || { echo "build.sh: expected 120 kernels (40 NK_FUSED_KERNEL lines)" >&2; exit 1; }
# norm.cu's arithmetic on dtype structs' enums (T::SIZE) and a variable only its CUDA paths read: g++ warns, nvcc not.
${CXX:-g++} -std=c++20 -O2 -ffp-contract=off -fno-fast-math -pthread -Wall -Wno-unknown-pragmas -Wno-unused-function \
  -Wno-deprecated-enum-enum-conversion -Wno-enum-compare -Wno-unused-variable \
  -I"$out" -I"$root/kernels" -include "$here/emu_prelude.h" "$@" \
  -o "$out/fused_emu" "$here/emu_main.cpp"
echo "$out/fused_emu"
