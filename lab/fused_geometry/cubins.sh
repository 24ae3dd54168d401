#!/usr/bin/env bash
# The sm_90 cubins that lab/fused_geometry/ab.ts compares: `main` (kernels/ as they are) and one per build name, each
# from lab/kernel_ab/trimmed_cubin.sh --fused, into lab/fused_geometry/.wg/. A name is a patch
# (lab/fused_geometry/<name>.diff) or patches joined by `+`, applied in that order (l2-prefetch+one-kernel).
# Each is also kept xz-compressed in .wg/xz/ with a stamp of what it was built from (kernels/, the patch, the build
# scripts). Built here and carried to the GPU host (carry lab/fused_geometry/.wg/xz), a cubin whose stamp matches that
# tree is unpacked there instead of built again: the builds' device time (about 40 s each) is spent on this machine.
#   bash lab/fused_geometry/cubins.sh main [patch[+patch...]...]
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: lab/fused_geometry/cubins.sh main [patch[+patch...]...]" >&2; exit 2; }
w=lab/fused_geometry/.wg
mkdir -p "$w/xz"
for name in "$@"; do
  patch=() src=(kernels/* lab/kernel_ab/trimmed_cubin.sh scripts/nvcc.sh)
  if [ "$name" != main ]; then
    IFS=+ read -ra parts <<<"$name"
    for part in "${parts[@]}"; do
      f=lab/fused_geometry/$part.diff
      [ -f "$f" ] || { echo "cubins: no $f" >&2; exit 2; }
      patch+=(--patch "$f") src+=("$f")
    done
  fi
  stamp=$(cat "${src[@]}" | sha256sum | cut -d' ' -f1)
  if [ -f "$w/xz/$name.cubin.xz" ] && [ "$(cat "$w/xz/$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    xz -dc "$w/xz/$name.cubin.xz" > "$w/$name.cubin"
    echo "== $w/$name.cubin: unpacked from $w/xz (its stamp matches this tree)"
  else
    bash lab/kernel_ab/trimmed_cubin.sh "$w/$name.cubin" --fused ${patch[@]+"${patch[@]}"}
    xz -T0 -9 -c "$w/$name.cubin" > "$w/xz/$name.cubin.xz"
    echo "$stamp" > "$w/xz/$name.stamp"
  fi
done
