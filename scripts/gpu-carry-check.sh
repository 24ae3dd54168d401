#!/usr/bin/env bash
# The development setup's carry limit: one GPU-host call carries the working tree and a runtime (.rt/<runtime>.xz) in
# at most 64 MiB. Checks that precompiled/ stays within its share of that, and the whole carried tree within the limit.
# Run it before a GPU-host call (bash scripts/gpu-carry-check.sh); the scripts/gpu-*.sh call it on the host.
# Exit status: 0 when everything fits, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
MiB=$((1024 * 1024))
status=0
check() { # name, bytes, limit in bytes
  local verdict=ok
  [ "$2" -lt "$3" ] || { verdict="TOO LARGE"; status=1; }
  awk -v n="$1" -v b="$2" -v l="$3" -v v="$verdict" 'BEGIN { printf "carry check: %-44s %6.1f MiB of %5.1f MiB  %s\n", n, b / 2^20, l / 2^20, v }'
}
size() { local n=0 f; for f in "$@"; do [ -f "$f" ] && n=$((n + $(wc -c < "$f"))); done; echo "$n"; }

# The kernel images' share: 64 MiB less Bun's runtime (about 37 MiB compressed) and the rest of the tree.
check "kernel images (precompiled/, packages/)" \
  "$(size precompiled/*_cuda.ts precompiled/*_sm*.fatbin packages/ptx/*.fatbin packages/hip/*.hsaco.gz)" \
  $((49 * MiB / 2))

# The whole call: the files git would copy (tracked and untracked, not ignored) and the runtimes in .rt/; without git
# (on the GPU host), every file but node_modules/.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  tree=$(git ls-files -co --exclude-standard -z | xargs -0 -r du -b 2>/dev/null | awk '{ n += $1 } END { print n + 0 }')
else
  tree=$(find . -path ./node_modules -prune -o -path ./.rt -prune -o -type f -print0 | xargs -0 -r du -b | awk '{ n += $1 } END { print n + 0 }')
fi
check "the call (tree and .rt/ runtimes)" $((tree + $(size .rt/*.xz))) $((64 * MiB))
exit $status
