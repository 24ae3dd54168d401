#!/usr/bin/env bash
# Probe (GPU host): how torch.compile's Triton kernel runs LayerNorm bf16 D=128 (2^21 rows) against normkit's, with
# Nsight Compute on one launch of each, and Triton's generated source/IR. Writes under $OUT/probe.
#   bash bench/probe_ln128.sh deno
set -uo pipefail
cd "$(dirname "$0")/.."
rt=${1:-deno}; P=${OUT:-/tmp}/probe; mkdir -p "$P"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
export TRITON_CACHE_DIR=/tmp/tcache TORCHINDUCTOR_CACHE_DIR=/tmp/icache
cat > /tmp/t128.py <<'PY'
import sys, torch, torch.nn.functional as F
d = int(sys.argv[1]) if len(sys.argv) > 1 else 128
rows = 2**30 // (2 * d * 2)
x = (torch.rand(rows, d, device="cuda") * 4 - 2).to(torch.bfloat16)
w = (1 + torch.rand(d, device="cuda") / 8).to(torch.bfloat16)
b = torch.rand(d, device="cuda").to(torch.bfloat16)
f = torch.compile(lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5), dynamic=False)
for _ in range(4): y = f(x, w, b)
torch.cuda.synchronize()
PY
SECT="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
TORCH_LOGS=output_code timeout 120 python3 /tmp/t128.py > "$P/triton-output-code.txt" 2>&1
find /tmp/tcache -name "*.ttgir" -o -name "*.ptx" -o -name "*.json" | head -20 > "$P/triton-files.txt"
for f in $(find /tmp/tcache -name "*.ttgir" -o -name "*.ptx"); do cp "$f" "$P/"; done
timeout 150 "$NCU" --clock-control none -k regex:triton --launch-skip 2 --launch-count 1 $SECT python3 /tmp/t128.py > "$P/ncu-torch.txt" 2>&1
if [ "$rt" = deno ]; then run=(deno run -A); else run=(bun); fi
timeout 150 "$NCU" --clock-control none -k regex:nk_ --launch-skip 2 --launch-count 1 $SECT "${run[@]}" bench/profile_one.ts layer bf16 128 > "$P/ncu-nk.txt" 2>&1
timeout 150 "$NCU" --clock-control none -k regex:nk_ --launch-skip 2 --launch-count 1 $SECT "${run[@]}" bench/profile_one.ts rms bf16 128 > "$P/ncu-nk-rms.txt" 2>&1
grep -E "Duration|DRAM Throughput|Executed Ipc A|Issue Slots Busy|Registers Per|Achieved Occupancy|Executed Instructions  |L2 Cache Throughput|Memory Throughput|Grid Size|Block Size" "$P"/ncu-*.txt
