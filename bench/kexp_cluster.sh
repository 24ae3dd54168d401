#!/usr/bin/env bash
# Builds bench/kexp_cluster.cu (long-row forward experiments) into one sm_90 cubin: bash bench/kexp_cluster.sh [out.cubin]
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc -O3 --std=c++17 -cubin -arch=sm_90 bench/kexp_cluster.cu -o "${1:-bench/kexp_cluster.cubin}"
