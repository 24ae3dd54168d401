#!/usr/bin/env bash
# Writes one CUDA fatbin holding all three precompiled images (SASS sm_80, SASS sm_90, PTX compute_90), for the C
# programs in bench/ that load "the" module on any GPU (launch_c, latency_c). It is what nvcc wrote before
# scripts/build-kernels.sh split it into one file per entry: each image is a fatbin of one entry (16-byte fatbin
# header, then the entry), so the combined file is a fatbin header followed by the three entries, byte for byte
# (tests/unit/kernel_images.test.ts checks this). bench/coldstart_c loads a per-architecture image instead.
#   bash scripts/fatbin.sh [out]        # default: precompiled/norm.fatbin
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-precompiled/norm.fatbin}
parts=(precompiled/norm_sm80.fatbin precompiled/norm_sm90.fatbin packages/ptx/norm_compute90.fatbin)
size=0
for p in "${parts[@]}"; do
  [[ -f "$p" ]] || { echo "fatbin.sh: $p is missing (bash scripts/build-kernels.sh)" >&2; exit 1; }
  size=$((size + $(stat -c %s "$p") - 16))
done
le() { local n=$1 v=$2 i; for ((i = 0; i < n; i++)); do printf '\\x%02x' $(((v >> (8 * i)) & 255)); done; }
{
  printf "$(le 4 $((0xBA55ED50)))$(le 2 1)$(le 2 16)$(le 8 "$size")"
  for p in "${parts[@]}"; do dd if="$p" iflag=skip_bytes skip=16 bs=1M status=none; done
} >"$out.tmp"
mv "$out.tmp" "$out"
