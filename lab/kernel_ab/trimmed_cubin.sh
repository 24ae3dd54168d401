#!/usr/bin/env bash
# A kernel experiment's A/B needs two builds of the same kernels that differ in one thing. This builds one of them: an
# sm_90 cubin of kernels/ with only the 16-bit triples (bf16 or f16 x and dy, weights of that dtype or f32; the forward's
# kernels for the statistics), ~1 min here (nvcc, no GPU) instead of the whole fatbin's ~15. The change under test comes
# as patches to kernels/ (git diff's a/kernels/... paths, applied in order) and/or nvcc flags; without either it is main's
# code.
# Prints the staged kernels' registers, and the kernels and FULL-path functions that spill (ptxas -v, kept as OUT.ptxas.txt).
# With --fused: kernels/fused.cu instead, its bf16 and f16 kernels only (~30 s), each kernel's registers and spills printed
# (lab/fused_geometry/ab.ts takes these).
#   bash lab/kernel_ab/trimmed_cubin.sh OUT.cubin [--fused] [--patch FILE.diff]... [nvcc flags, e.g. -DNAME=0]
# e.g. main against a patch, then on the GPU host, in one call (lab/kernel_ab/README.md):
#   bash lab/kernel_ab/trimmed_cubin.sh lab/kernel_ab/.wg/main.cubin
#   bash lab/kernel_ab/trimmed_cubin.sh lab/kernel_ab/.wg/new.cubin --patch my-change.diff
#   bun lab/kernel_ab/fwd_ab.ts lab/kernel_ab/.wg/main.cubin lab/kernel_ab/.wg/new.cubin --dtypes bf16
# The cubins are build outputs (git-ignored); carry them xz-compressed (lab/fused_geometry/cubins.sh does so for --fused).
set -euo pipefail
usage="usage: lab/kernel_ab/trimmed_cubin.sh OUT.cubin [--fused] [--patch FILE.diff]... [nvcc flags]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
# Paths as the caller gave them (relative to the caller's directory), before the cd to the project root.
mkdir -p "$(dirname "$1")"; out=$(realpath "$1"); shift
patches=(); flags=(); fused=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fused) fused=1; shift ;;
    --patch) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; patches+=("$(realpath "$2")"); shift 2 ;;
    *) flags+=("$1"); shift ;;
  esac
done
cd "$(dirname "$0")/../.."
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
cp kernels/* "$src/"  # README.md too: a patch may carry the contract's text
for f in ${patches[@]+"${patches[@]}"}; do patch -s -N --batch -d "$src" -p2 < "$f"; done
# shellcheck source=scripts/nvcc.sh
source scripts/nvcc.sh  # NVCC and the product's NVCC_FLAGS
# cubin SRC: sm_90 SASS of SRC into $out, ptxas -v's report beside it.
cubin() {
  "$NVCC" "${NVCC_FLAGS[@]}" -cubin -arch=sm_90 ${flags[@]+"${flags[@]}"} -Xptxas -v -o "$out" "$1" 2>"$out.ptxas.txt" ||
    { grep -v "^ptxas info" "$out.ptxas.txt" >&2; echo "nvcc failed (log: $out.ptxas.txt)" >&2; exit 1; }
  echo "== $out"
}
if [ "$fused" = 1 ]; then
  # The bf16 and f16 kernels (one NK_FUSED_KERNEL(...) per line) and nk_fused_add_*.
  grep -v -E '^NK_FUSED_KERNEL\((ln|rms), (true|false), f32,' "$src/fused.cu" > "$src/fused_16bit.cu"
  cubin "$src/fused_16bit.cu"
  awk '/Compiling entry function/ { n = $0; sub(/.*function ./, "", n); sub(/. for.*/, "", n) }
       /bytes stack frame/ && n != "" { s = $0; sub(/.*stack frame, /, "", s); sub(/, 0 bytes spill loads/, "", s) }
       /Used [0-9]+ registers/ && n != "" { print "  " n ": " $5 " registers, " s; n = "" }' "$out.ptxas.txt"
  exit 0
fi
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
cubin "$src/norm.cu"
awk '/Compiling entry function .*staged/ { n = $0; sub(/.*function .nk_/, "", n); sub(/. for.*/, "", n) }
     /Used [0-9]+ registers/ && n != "" { print "  " n ": " $5 " registers"; n = "" }' "$out.ptxas.txt"
echo "  spilling (kernels, and the FULL paths' calls nk_bwd_cached_full / _staged):"
awk '/Function properties for (nk_|_Z[0-9]*nk_bwd_cached_)/ { f = $NF; next }
     f != "" && /bytes spill/ { if ($0 ~ /[1-9][0-9]* bytes spill/) { sub(/.*stack frame, /, ""); print "    " f ": " $0; n++ } f = "" }
     END { if (!n) print "    none" }' "$out.ptxas.txt"
