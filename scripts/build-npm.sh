#!/usr/bin/env bash
# Builds the npm package `normkit` into dist/ (git-ignored): JavaScript + .d.ts compiled from mod.ts, gpu.ts and
# everything they import (tsconfig.npm.json; relative .ts imports rewritten to .js), and the kernel images that
# loadKernels reads beside them (precompiled/*.fatbin, at the same relative path as in the repository).
# Run by `npm pack`/`npm publish` (prepack) and by tests/unit/npm_package.test.ts.
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/node_modules/.bin:$PATH"
command -v tsc >/dev/null || { echo "build-npm: tsc not found: run npm ci (typescript is a devDependency)" >&2; exit 1; }
rm -rf dist
tsc -p tsconfig.npm.json
cp precompiled/norm_sm80.fatbin precompiled/norm_sm90.fatbin precompiled/fused_sm80.fatbin precompiled/fused_sm90.fatbin dist/precompiled/
for entry in mod gpu; do
  [ -s "dist/$entry.js" ] && [ -s "dist/$entry.d.ts" ] || { echo "build-npm: dist/$entry.js or .d.ts missing" >&2; exit 1; }
done
echo "build-npm: dist/ $(find dist -type f | wc -l) files, $(du -sb dist | cut -f1) bytes" >&2
