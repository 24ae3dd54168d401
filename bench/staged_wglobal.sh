#!/usr/bin/env bash
# Experiment (prepared in stop 32, 2026-12-04; not run on a GPU yet): the staged backward kernels reading the weights
# from global memory (NK_BWD_STAGED_WSMEM=0, kernels/norm_bwd.cuh) so that LN 16-bit's staged 128-thread CTAs fit 4 per
# SM instead of 3 (57,712 bytes of shared memory each with the weight slice: 368 too many; 49,520 without).
#
# Here (nvcc, no GPU): two trimmed sm_90 cubins of kernels/, bf16 and f16 triples only (x, dy, weight of one dtype or f32
# weights; the forward's for the statistics), as main builds them and with NK_BWD_STAGED_WSMEM=0, into DIR (~2.5 min);
# prints ptxas's registers for the staged kernels and how many staged functions spill (stop 32: 0 in both builds).
#   bash bench/staged_wglobal.sh [DIR=bench/.wg]
# On the GPU host (Bun unpacked), same process order A B B A (bench/bwd_staged_ab.ts; --staged-wglobal sizes shared
# memory without the weight slice; without --geometries it first checks dx bit for bit against the register kernels):
#   for m in wsmem wglobal; do f=; [ $m = wglobal ] && f=--staged-wglobal   # the check first: dx bit for bit
#     bun bench/bwd_staged_ab.ts --module DIR/$m.cubin $f --ds 4096,32768 --kinds layer --dtypes bf16; done
#   for m in wsmem wglobal wglobal wsmem; do f=; [ $m = wglobal ] && f=--staged-wglobal
#     bun bench/bwd_staged_ab.ts --module DIR/$m.cubin $f --geometries --blocks 128,256,512 \
#       (the geometries mode times without the bitwise check; the first loop checks the plan's own geometries)
#       --ds 4096,8192,16384,32768,65536 --kinds layer --dtypes bf16; done
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bench/.wg}; mkdir -p "$dir"
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
cp kernels/*.cu kernels/*.cuh kernels/*.h "$src/"
# Keep the 16-bit triples of one x/dy dtype in every dtype list (one X(...) per line, the last without a backslash).
python3 - "$src/norm.cu" <<'EOF'
import re, sys
p = sys.argv[1]; lines = open(p).read().split("\n"); out = []; i = 0
keep = re.compile(r"^\s+[XBS]\((bf16, bf16|f16, f16), (bf16|f16|f32)\)")
while i < len(lines):
    l = lines[i]; out.append(l); i += 1
    if re.match(r"#define NK_(FWD|BWD|BWD_STAGED)_DTYPES\(", l):
        body = []
        while i < len(lines) and re.match(r"^\s+[XBS]\(", lines[i]):
            body.append(lines[i].rstrip(" \\")); i += 1
        body = [b for b in body if keep.match(b)]
        out += [b + " \\" for b in body[:-1]] + body[-1:]
open(p, "w").write("\n".join(out))
EOF
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
for m in wsmem wglobal; do
  def=(); [ "$m" = wglobal ] && def=(-DNK_BWD_STAGED_WSMEM=0)
  "$NVCC" -O3 --std=c++17 -cubin -arch=sm_90 ${def[@]+"${def[@]}"} -Xptxas -v -o "$dir/$m.cubin" "$src/norm.cu" 2>"$dir/$m.ptxas.txt"
  echo "== $m: staged entries' registers; staged functions that spill: $(grep -A1 "Function properties for .*nk_bwd_cached_staged" "$dir/$m.ptxas.txt" | grep -c "[1-9][0-9]* bytes spill")"
  awk '/Compiling entry function .*staged/ { n = $0; sub(/.*function .nk_/, "", n); sub(/. for.*/, "", n) }
       /Used [0-9]+ registers/ && n != "" { print "  " n ": " $5 " registers"; n = "" }' "$dir/$m.ptxas.txt"
done
