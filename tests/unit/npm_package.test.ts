/**
 * The npm package `normkit` as a Bun user gets it, offline: `npm pack` (prepack builds dist/ with
 * scripts/build-npm.sh), then in a fresh project outside the repository the tarball installed with `bun add`,
 * the user's script run (CPU norm against a float64 reference), type-checked with `tsc --noEmit` under the
 * tsconfig `bun init` writes, bundled with `bun build` and the bundle run from a folder of its own.
 * Bun's types are linked from this repository's node_modules (where `bun init` would download @types/bun).
 * The .d.ts files are also checked on their own with no runtime's types and skipLibCheck off.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const bin = (name: string) => join(root, "node_modules/.bin", name);
const npm = spawnSync("npm", ["--version"], { encoding: "utf8" }).status === 0 ? "npm" : undefined;
const skip = !npm
  ? "no npm on PATH"
  : !existsSync(bin("bun"))
  ? "no bun in node_modules/.bin (npm ci)"
  : !existsSync(bin("tsc"))
  ? "no tsc in node_modules/.bin (npm ci)"
  : undefined;

/** The tarball (gzip) and its unpacked contents: the kernel images dominate both; room is left for more kernels. */
const PACKED_BUDGET = 8_000_000;
const UNPACKED_BUDGET = 10_000_000;

/** The tsconfig.json `bun init` writes (Bun 1.4.5), comments dropped. */
const BUN_INIT_TSCONFIG = {
  compilerOptions: {
    lib: ["ESNext"],
    target: "ESNext",
    module: "Preserve",
    moduleDetection: "force",
    jsx: "react-jsx",
    allowJs: true,
    types: ["bun"],
    moduleResolution: "bundler",
    allowImportingTsExtensions: true,
    verbatimModuleSyntax: true,
    noEmit: true,
    strict: true,
    skipLibCheck: true,
    noFallthroughCasesInSwitch: true,
    noUncheckedIndexedAccess: true,
    noImplicitOverride: true,
    noUnusedLocals: false,
    noUnusedParameters: false,
    noPropertyAccessFromIndexSignature: false,
  },
};

/** The user's script: both entry points, an RMSNorm on the CPU backend checked against float64 here. */
const USER_SCRIPT = `import { Device, rmsNorm, type Tensor } from "normkit";
import { LaunchConfig } from "normkit/gpu";

const rows = 33, d = 257, eps = 1e-6;
let seed = 7;
const rand = (): number => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 4 - 2;
const xs = Float32Array.from({ length: rows * d }, () => rand() + 0.25);
const ws = Float32Array.from({ length: d }, () => 1 + rand() / 4);

using dev = Device.open({ backend: "cpu" });
using x: Tensor = dev.tensor(xs, [rows, d]);
using w = dev.tensor(ws, [d]);
using y = rmsNorm(x, { weight: w, eps });
const out: Float32Array = await y.toArray();

let maxErr = 0;
for (let r = 0; r < rows; r++) {
  let ss = 0;
  for (let c = 0; c < d; c++) ss += (xs[r * d + c] ?? NaN) ** 2;
  const inv = 1 / Math.sqrt(ss / d + eps);
  for (let c = 0; c < d; c++) {
    const ref = (xs[r * d + c] ?? NaN) * inv * (ws[c] ?? NaN);
    maxErr = Math.max(maxErr, Math.abs((out[r * d + c] ?? NaN) - ref));
  }
}
const cfg = new LaunchConfig({ grid: [rows], block: [256] });
console.log(JSON.stringify({ backend: dev.backend, n: out.length, maxErr, grid: cfg.grid }));
`;

/** A user mistake the published types must catch (eps is a number). */
const BAD_SCRIPT = `import { Device, rmsNorm } from "normkit";
using dev = Device.open({ backend: "cpu" });
using x = dev.tensor(new Float32Array(4), [1, 4]);
rmsNorm(x, { eps: "1e-6" });
`;

function run(cmd: string, args: string[], cwd: string): { code: number; out: string; stdout: string } {
  const r = spawnSync(cmd, args, {
    cwd,
    encoding: "utf8",
    timeout: 180_000,
    maxBuffer: 64 << 20,
    env: { ...process.env, NO_COLOR: "1", BUN_INSTALL_CACHE_DIR: join(cwd, "..", "bun-cache") },
  });
  return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}${r.error ?? ""}`, stdout: r.stdout ?? "" };
}

/** What the user's script printed, checked: CPU backend, all elements, f32 rounding of |y| < 8 (≤ 4.8e-7). */
function checkUserOutput(out: string): void {
  const line = out.split("\n").find((l) => l.startsWith("{"));
  assert.ok(line, out);
  const r = JSON.parse(line) as { backend: string; n: number; maxErr: number; grid: number[] };
  assert.equal(r.backend, "cpu");
  assert.equal(r.n, 33 * 257);
  assert.ok(r.maxErr > 0 && r.maxErr <= 1e-6, `max abs error vs float64 ${r.maxErr}`);
  assert.deepEqual(r.grid, [33, 1, 1]);
}

interface PackResult {
  filename: string;
  size: number;
  unpackedSize: number;
  files: { path: string; size: number }[];
}

test("npm pack → bun add in a fresh project: import, run, tsc --noEmit, bun build", { skip, timeout: 600_000 }, () => {
  const work = mkdtempSync(join(tmpdir(), "normkit-npm-"));
  try {
    // 1. Pack (prepack builds dist/).
    const pack = run(npm!, ["pack", "--json", "--pack-destination", work], root);
    assert.equal(pack.code, 0, pack.out);
    const [tar] = JSON.parse(pack.stdout.slice(pack.stdout.indexOf("["))) as PackResult[];
    assert.ok(tar, pack.out);
    console.log(`# ${tar.filename}: ${tar.size} bytes packed, ${tar.unpackedSize} unpacked, ${tar.files.length} files`);
    const paths = tar.files.map((f) => f.path);
    for (
      const entry of [
        "dist/mod.js",
        "dist/mod.d.ts",
        "dist/gpu.js",
        "dist/gpu.d.ts",
        "dist/precompiled/norm_sm80.fatbin",
        "dist/precompiled/norm_sm90.fatbin",
        "dist/precompiled/norm_bwd_sm80.fatbin",
        "dist/precompiled/norm_bwd_sm90.fatbin",
        "dist/precompiled/fused_sm80.fatbin",
        "dist/precompiled/fused_sm90.fatbin",
        "dist/precompiled/fused_quant_sm80.fatbin",
        "dist/precompiled/fused_quant_sm90.fatbin",
        "package.json",
        "README.md",
        "LICENSE",
      ]
    ) {
      assert.ok(paths.includes(entry), `${entry} not in the tarball`);
    }
    const stray = paths.filter((p) =>
      !["package.json", "README.md", "LICENSE"].includes(p) &&
      (!p.startsWith("dist/") || /^dist\/(tests|bench|lab|scripts|examples|kernels)\//.test(p) ||
        p.endsWith(".tsbuildinfo"))
    );
    assert.deepEqual(stray, [], "the tarball holds files no user runs");
    assert.ok(tar.size <= PACKED_BUDGET, `tarball ${tar.size} bytes, budget ${PACKED_BUDGET}`);
    assert.ok(tar.unpackedSize <= UNPACKED_BUDGET, `unpacked ${tar.unpackedSize} bytes, budget ${UNPACKED_BUDGET}`);
    const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { dependencies?: object };
    assert.deepEqual(Object.keys(manifest.dependencies ?? {}), [], "normkit must not pull in dependencies");

    // The published .d.ts alone, stricter than any user: no runtime's types, skipLibCheck off.
    const strict = join(work, "tsconfig.dts.json");
    writeFileSync(
      strict,
      JSON.stringify({
        compilerOptions: {
          lib: ["ESNext"],
          types: [],
          strict: true,
          noUncheckedIndexedAccess: true,
          skipLibCheck: false,
          noEmit: true,
          module: "Preserve",
          moduleResolution: "bundler",
        },
        files: [join(root, "dist/mod.d.ts"), join(root, "dist/gpu.d.ts")],
      }),
    );
    const dts = run(bin("tsc"), ["-p", strict], work);
    assert.equal(dts.code, 0, `the .d.ts files do not check on their own:\n${dts.out}`);

    // 2. A fresh project outside the repository, as `bun init` leaves it, with the tarball installed.
    const app = join(work, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify(BUN_INIT_TSCONFIG, null, 2));
    writeFileSync(join(app, "index.ts"), USER_SCRIPT);
    const add = run(bin("bun"), ["add", join(work, tar.filename)], app);
    assert.equal(add.code, 0, add.out);
    assert.ok(existsSync(join(app, "node_modules/normkit/dist/mod.js")), add.out);
    mkdirSync(join(app, "node_modules/@types"), { recursive: true });
    // Links made by ln: Deno's symlinkSync needs unscoped read/write permissions, the suite grants --allow-write=/tmp.
    for (const pkg of ["@types/bun", "@types/node", "bun-types", "undici-types"]) {
      const ln = run("ln", ["-s", join(root, "node_modules", pkg), join(app, "node_modules", pkg)], app);
      assert.equal(ln.code, 0, ln.out);
    }

    // 3. Run it with Bun.
    const direct = run(bin("bun"), ["index.ts"], app);
    assert.equal(direct.code, 0, direct.out);
    checkUserOutput(direct.out);

    // 4. Type-check the user's file under bun init's tsconfig: 0 errors; a wrong call is caught.
    const tsc = run(bin("tsc"), ["--noEmit", "-p", "tsconfig.json"], app);
    assert.equal(tsc.code, 0, `tsc reported errors:\n${tsc.out}`);
    writeFileSync(join(app, "bad.ts"), BAD_SCRIPT);
    const bad = run(bin("tsc"), ["--noEmit", "-p", "tsconfig.json"], app);
    assert.notEqual(bad.code, 0, bad.out);
    assert.match(bad.out, /bad\.ts\(4,\d+\): error TS\d+[^]*'string' is not assignable to type 'number'/);
    rmSync(join(app, "bad.ts"));

    // 5. Bundle it and run the bundle from a folder with no node_modules.
    const outdir = join(work, "bundle");
    const build = run(bin("bun"), ["build", "index.ts", "--target=bun", "--outdir", outdir], app);
    assert.equal(build.code, 0, build.out);
    const bundled = run(bin("bun"), [join(outdir, "index.js")], outdir);
    assert.equal(bundled.code, 0, bundled.out);
    checkUserOutput(bundled.out);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

/** A Bun user's script with the image packages: each image they name is a file beside them, for this normkit. */
const IMAGES_SCRIPT = `import { Device, loadKernels } from "normkit";
import { FUSED_SOURCE_SHA256, NORM_SOURCE_SHA256 } from "normkit/gpu";
import * as ptx from "@normkit/ptx";
import * as hip from "@normkit/hip";
import { statSync } from "node:fs";
import { fileURLToPath } from "node:url";

const files: Record<string, number> = {};
for (const set of [ptx.images, ptx.fused.images, ptx.fusedQuant.images, hip.images, hip.fused.images, hip.fusedQuant.images]) {
  for (const url of Object.values(set)) files[fileURLToPath(url.href)] = statSync(fileURLToPath(url.href)).size;
}
using dev = Device.open({ backend: "cpu" });
await loadKernels(dev, { quant: true, images: [ptx, hip] }); // a no-op on the CPU, after checking the sets
console.log(JSON.stringify({
  files,
  targets: [...Object.keys(ptx.images), ...hip.TARGETS],
  same: [ptx.sourceSha256, hip.sourceSha256].every((s) => s === NORM_SOURCE_SHA256) &&
    [ptx.fused, hip.fused, ptx.fusedQuant, hip.fusedQuant].every((s) => s.sourceSha256 === FUSED_SOURCE_SHA256),
}));
`;

/** Budgets of the image packages (packed; the images are already compressed): hip holds three targets' two images. */
const IMAGE_PACKAGE_BUDGET: Record<string, number> = { ptx: 5_500_000, hip: 10_000_000 };

test("@normkit/ptx and @normkit/hip: npm pack → bun add beside normkit, images found, tsc --noEmit", {
  skip,
  timeout: 600_000,
}, () => {
  const work = mkdtempSync(join(tmpdir(), "normkit-npm-images-"));
  try {
    const tarballs: string[] = [];
    for (const name of ["", "ptx", "hip"]) {
      // normkit packs from the root (prepack builds dist/); the image packages from their built dist/ folders.
      if (name !== "") {
        const build = run("bash", [join(root, "scripts/build-npm.sh"), name], root);
        assert.equal(build.code, 0, build.out);
      }
      const dir = name === "" ? root : join(root, "packages", name, "dist");
      const pack = run(npm!, ["pack", "--json", "--pack-destination", work], dir);
      assert.equal(pack.code, 0, pack.out);
      const [tar] = JSON.parse(pack.stdout.slice(pack.stdout.indexOf("["))) as PackResult[];
      assert.ok(tar, pack.out);
      tarballs.push(join(work, tar.filename));
      if (name === "") continue;
      console.log(`# ${tar.filename}: ${tar.size} bytes packed, ${tar.files.length} files`);
      const paths = tar.files.map((f) => f.path).sort();
      const images = readdirSync(join(root, "packages", name)).filter((f) => /\.(fatbin|hsaco\.gz)$/.test(f));
      assert.ok(images.length > 0);
      const code = name === "ptx" ? ["build", "fused_build", "mod"] : ["build", "mod"];
      const want = ["package.json", "LICENSE", "README.md", ...images, ...code.flatMap((m) => [`${m}.js`, `${m}.d.ts`])]
        .sort();
      assert.deepEqual(paths, want, `@normkit/${name}: the tarball holds what mod.js needs and nothing else`);
      const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as Record<string, unknown>;
      const deno = JSON.parse(readFileSync(join(root, "packages", name, "deno.json"), "utf8")) as { version: string };
      assert.equal(manifest.name, `@normkit/${name}`);
      assert.equal(manifest.version, deno.version, "the npm version is the JSR version");
      assert.equal(manifest.dependencies, undefined);
      assert.ok(tar.size <= IMAGE_PACKAGE_BUDGET[name]!, `${tar.size} bytes, budget ${IMAGE_PACKAGE_BUDGET[name]}`);
    }

    const app = join(work, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify(BUN_INIT_TSCONFIG, null, 2));
    writeFileSync(join(app, "index.ts"), IMAGES_SCRIPT);
    const add = run(bin("bun"), ["add", ...tarballs], app);
    assert.equal(add.code, 0, add.out);
    for (const pkg of ["@types/bun", "@types/node", "bun-types", "undici-types"]) {
      mkdirSync(dirname(join(app, "node_modules", pkg)), { recursive: true });
      const ln = run("ln", ["-s", join(root, "node_modules", pkg), join(app, "node_modules", pkg)], app);
      assert.equal(ln.code, 0, ln.out);
    }

    const direct = run(bin("bun"), ["index.ts"], app);
    assert.equal(direct.code, 0, direct.out);
    const line = direct.out.split("\n").find((l) => l.startsWith("{"));
    assert.ok(line, direct.out);
    const r = JSON.parse(line) as { files: Record<string, number>; targets: string[]; same: boolean };
    assert.deepEqual(r.targets, ["compute_90", "gfx90a", "gfx942", "gfx1100"]);
    assert.equal(r.same, true, "the packages were built from the kernel sources of this normkit");
    const installed = Object.entries(r.files);
    assert.equal(installed.length, 12, direct.out);
    for (const [path, bytes] of installed) {
      const name = path.split("/").at(-1)!;
      const pkg = name.endsWith(".fatbin") ? "ptx" : "hip";
      assert.ok(path.startsWith(join(app, "node_modules/@normkit", pkg) + "/"), path);
      assert.equal(bytes, statSync(join(root, "packages", pkg, name)).size, `${name}: the repository's image`);
    }

    const tsc = run(bin("tsc"), ["--noEmit", "-p", "tsconfig.json"], app);
    assert.equal(tsc.code, 0, `tsc reported errors:\n${tsc.out}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
