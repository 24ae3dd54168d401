# Sourced by scripts/build-kernels.sh and scripts/build-fused.sh: the nvcc both builds use and the flags they share.
# NVCC: $NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc. NVCC_VERSION: its "Cuda compilation tools" line (the
# generated modules record it). Messages name the sourcing script.
NVCC="${NVCC:-}"
if [[ -z "$NVCC" ]]; then
  if command -v nvcc >/dev/null 2>&1; then NVCC="$(command -v nvcc)";
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc;
  else echo "$(basename "$0" .sh): nvcc not found (set NVCC=/path/to/nvcc)" >&2; exit 2; fi
fi
NVCC_VERSION="$("$NVCC" --version | grep -E '^Cuda compilation tools' | head -n1)"
[[ -n "$NVCC_VERSION" ]] || { echo "$(basename "$0" .sh): cannot read '$NVCC --version'" >&2; exit 2; }

NVCC_FLAGS=(-O3 --std=c++17)
PTX_FLAGS=(-ptx -arch=compute_80)
# SASS for sm_80 and sm_90 and PTX for compute_90 in one fatbin (scripts/fatbin_split.sh splits it per architecture),
# compressed (the norm kernels' ~8x smaller, 10.5 MB -> 1.3 MB; the driver inflates it at load).
FATBIN_FLAGS=(-fatbin
  -gencode arch=compute_80,code=sm_80
  -gencode "arch=compute_90,code=[sm_90,compute_90]"
  -Xptxas -v
  -Xfatbin -compress-all --compress-mode=size)
