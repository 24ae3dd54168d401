#!/usr/bin/env bash
# Builds bench/kexp.cu (forward-kernel experiments) into one sm_90 cubin: bash bench/kexp.sh [out.cubin]
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc -O3 --std=c++17 -cubin -arch=sm_90 bench/kexp.cu -o "${1:-bench/kexp.cubin}"
