#!/usr/bin/env bash
# Builds quot_check.cpp against kernels/fused_quant.cuh (g++) and runs it: nk_quot, the few-chunk kernels' division-free
# y / s, against the f32 division.
#   bash tests/host/quot_check.sh [random pairs, default 2e9]     exit 0: no mismatch (CI runs 2e7)
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++17 -ffp-contract=off -Ikernels tests/host/quot_check.cpp -o "$tmp/quot_check"
"$tmp/quot_check" "$@"
