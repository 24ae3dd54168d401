#!/usr/bin/env bash
# Writes the CUDA fatbin that precompiled/norm_cuda.ts embeds (NORM_FATBIN: base64, from norm_fatbin.json) as a
# file, for the C programs in bench/ (launch_c, latency_c, coldstart_c). The fatbin is not committed as a file of its
# own: it would travel twice in every GPU-host call (the call carries at most 64 MiB), and norm_fatbin.json holds the
# same bytes (scripts/build-kernels.sh --check compares them with a rebuild; tests/unit/precompiled.test.ts checks this
# script's output against NORM_FATBIN).
#   bash scripts/fatbin.sh [out]        # default: precompiled/norm.fatbin
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-precompiled/norm.fatbin}
b64=$(sed -E 's/^"([A-Za-z0-9+\/=]+)"$/\1/' precompiled/norm_fatbin.json)
[[ -n "$b64" && "$b64" != *'"'* ]] || { echo "fatbin.sh: no base64 string in precompiled/norm_fatbin.json" >&2; exit 1; }
base64 -d <<<"$b64" >"$out.tmp"
mv "$out.tmp" "$out"
