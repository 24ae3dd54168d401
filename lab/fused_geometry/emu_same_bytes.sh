#!/usr/bin/env bash
# Whether a patch to the fused kernels keeps their bytes, on the host emulator (tests/emu): every launch of a full
# tests/emu/run.ts made by an emulator built with the patch is replayed through one built from HEAD, and each output
# buffer is compared byte for byte. Both are the committed tree (git archive HEAD), one with the patches applied in order.
#   bash lab/fused_geometry/emu_same_bytes.sh PATCH.diff...   exit 0: every launch gave HEAD's bytes
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: emu_same_bytes.sh PATCH.diff..." >&2; exit 2; }
root=$PWD patches=(); for f in "$@"; do patches+=("$(realpath "$f")"); done
deno=$root/node_modules/.bin/deno
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/patched" "$tmp/head"
git archive HEAD | tar -x -C "$tmp/patched"
git archive HEAD | tar -x -C "$tmp/head"
for f in "${patches[@]}"; do patch -s -N --batch -d "$tmp/patched" -p1 < "$f"; done
# The patched build runs every case and keeps each launch (manifest and buffers) under /tmp/fused_emu/case*/.
"$deno" run -A "$tmp/patched/tests/emu/run.ts" --keep > "$tmp/run.txt" 2>&1 || { tail -5 "$tmp/run.txt"; exit 1; }
tail -3 "$tmp/run.txt"
bash "$tmp/head/tests/emu/build.sh" "$tmp/head_emu" > /dev/null
n=0 bad=0
for d in /tmp/fused_emu/case*; do
  [ -f "$d/manifest" ] || continue
  # The same launch, its outputs written beside the patched build's (out3 -> hout3).
  sed -E 's#(/case[0-9]+/)(a?)out([0-9]+)$#\1\2hout\3#' "$d/manifest" > "$d/hmanifest"
  if ! "$tmp/head_emu/fused_emu" "$d/hmanifest" > /dev/null 2>&1; then echo "HEAD's build failed on $d"; bad=$((bad + 1)); fi
  for o in "$d"/out* "$d"/aout*; do
    [ -f "$o" ] || continue
    h=$(sed -E 's#/(a?)out([0-9]+)$#/\1hout\2#' <<< "$o")
    cmp -s "$o" "$h" || { echo "differs: $o"; bad=$((bad + 1)); }
  done
  n=$((n + 1))
done
echo "$n launches replayed through HEAD's build: $bad outputs differ"
[ "$bad" -eq 0 ]
