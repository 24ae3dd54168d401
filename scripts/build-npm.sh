#!/usr/bin/env bash
# Builds an npm package into its dist/ (git-ignored):
#   bash scripts/build-npm.sh          normkit: JavaScript + .d.ts compiled from mod.ts, gpu.ts and everything they
#                                      import (tsconfig.npm.json; relative .ts imports rewritten to .js), and the kernel
#                                      images loadKernels reads beside them (precompiled/*.fatbin, at the same relative
#                                      path as in the repository)
#   bash scripts/build-npm.sh ptx|hip  @normkit/ptx or @normkit/hip, whole in packages/<name>/dist/ (pack and publish
#                                      that folder): mod.ts compiled the same way, the images mod.ts finds beside
#                                      itself, LICENSE, and package.json from packages/<name>/npm.json with the version
#                                      of packages/<name>/deno.json. (No package.json beside deno.json: Deno would
#                                      resolve the package's name in the repository to its npm build.)
# Run by `npm pack`/`npm publish` of normkit (prepack) and by tests/unit/npm_package.test.ts.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
PATH="$PWD/node_modules/.bin:$PATH"
command -v tsc >/dev/null || { echo "build-npm: tsc not found: run npm ci (typescript is a devDependency)" >&2; exit 1; }
case "${1:-normkit}" in
  normkit)
    rm -rf dist
    tsc -p tsconfig.npm.json
    cp precompiled/norm_sm80.fatbin precompiled/norm_sm90.fatbin precompiled/norm_bwd_sm80.fatbin \
      precompiled/norm_bwd_sm90.fatbin precompiled/fused_sm80.fatbin precompiled/fused_sm90.fatbin \
      precompiled/fused_quant_sm80.fatbin precompiled/fused_quant_sm90.fatbin dist/precompiled/
    for entry in mod gpu; do
      [ -s "dist/$entry.js" ] && [ -s "dist/$entry.d.ts" ] || { echo "build-npm: dist/$entry.js or .d.ts missing" >&2; exit 1; }
    done
    out=dist ;;
  ptx|hip)
    pkg=packages/$1 out=packages/$1/dist
    rm -rf "$out"
    # tsconfig.npm.json's options (tsc takes no project file beside a source file), for this entry point alone.
    tsc --target ESNext --module ESNext --moduleResolution bundler --lib ESNext --types node \
      --rewriteRelativeImportExtensions --allowImportingTsExtensions --declaration --strict --skipLibCheck \
      --rootDir "$pkg" --outDir "$out" "$pkg/mod.ts"
    images=("$pkg"/*.fatbin "$pkg"/*.hsaco.gz)  # what mod.ts names beside itself
    cp "${images[@]}" LICENSE "$pkg/README.md" "$out/"
    node -e 'const fs = require("fs"), [npm, deno, out] = process.argv.slice(1);
      const version = JSON.parse(fs.readFileSync(deno, "utf8")).version;
      const m = JSON.parse(fs.readFileSync(npm, "utf8"));
      fs.writeFileSync(out, JSON.stringify({ name: m.name, version, ...m }, null, 2) + "\n");' \
      "$pkg/npm.json" "$pkg/deno.json" "$out/package.json"
    [ -s "$out/mod.js" ] && [ -s "$out/mod.d.ts" ] || { echo "build-npm: $out/mod.js or .d.ts missing" >&2; exit 1; } ;;
  *) echo "build-npm: unknown package '$1' (normkit, ptx or hip)" >&2; exit 2 ;;
esac
echo "build-npm: $out/ $(find "$out" -type f | wc -l) files, $(du -sb "$out" | cut -f1) bytes" >&2
