#!/usr/bin/env bash
# Builds quot_check.cpp against kernels/fused_quant.cuh with quot.diff applied (in a temporary copy) and runs it.
#   bash lab/fused_geometry/quot_check.sh [random pairs, default 2e9]     exit 0: no mismatch
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r kernels "$tmp/kernels"
patch -s -N --batch -d "$tmp" -p1 < lab/fused_geometry/quot.diff
g++ -O2 -std=c++17 -ffp-contract=off -I"$tmp/kernels" lab/fused_geometry/quot_check.cpp -o "$tmp/quot_check"
"$tmp/quot_check" "$@"
