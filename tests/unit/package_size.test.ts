/**
 * The JSR package as `deno publish --dry-run` would upload it (offline; --allow-dirty so that it runs on a
 * working tree): every package in its output within the size budget (file sizes in bytes, as JSR counts them),
 * only what a user runs (no tests, benchmarks, experiments or build scripts), and no warning other than the
 * allowed ones listed below with their reasons.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { existsSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const denoBin = [join(root, "node_modules/.bin/deno"), "/usr/local/bin/deno"].find((p) => existsSync(p));
const skip = denoBin ? undefined : "no deno binary in node_modules/.bin or /usr/local/bin";

/** JSR allows 20 MB per version; normkit keeps half of it, leaving room for the kernels still to come. */
const BUDGET_BYTES = 10_000_000;

/** Top-level folders that hold nothing a user runs. */
const NEVER_PUBLISHED = ["bench/", "lab/", "scripts/", "tests/", "kernels/", ".ci/", "node_modules/", "npm/"];

/**
 * Warnings the dry run may print, by kind and file. ops/hip_module.ts imports the AMD code objects through a
 * relative URL computed at run time, so that Deno does not load them into the module graph of CUDA and CPU
 * users; the target is a file inside the package, which JSR serves as it is.
 */
const ALLOWED_WARNINGS: ReadonlyArray<{ kind: string; file: string }> = [
  { kind: "unanalyzable-dynamic-import", file: "ops/hip_module.ts" },
];

interface PublishedFile {
  path: string; // relative to the repository root
  bytes: number; // the file's size on disk
  shownBytes: number; // the size the dry run printed (rounded, in KiB/MiB)
}

interface DryRun {
  packages: Map<string, PublishedFile[]>;
  warnings: { kind: string; file: string }[];
  output: string;
}

const UNIT: Record<string, number> = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 };

function dryRun(): DryRun {
  const r = spawnSync(denoBin!, ["publish", "--dry-run", "--allow-dirty"], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1" },
    timeout: 120_000,
  });
  const output = `${r.stdout}${r.stderr}`;
  assert.equal(r.status, 0, `deno publish --dry-run failed:\n${output}`);
  const packages = new Map<string, PublishedFile[]>();
  const warnings: { kind: string; file: string }[] = [];
  let files: PublishedFile[] | undefined;
  let pendingKind: string | undefined;
  for (const line of output.split("\n")) {
    const pkg = /^Simulating publish of (\S+) with files:/.exec(line);
    if (pkg) {
      files = [];
      packages.set(pkg[1]!, files);
      continue;
    }
    const file = /^\s+file:\/\/(\/.+) \(([\d.]+)(B|KB|MB|GB)\)$/.exec(line);
    if (file && files) {
      const abs = file[1]!;
      files.push({
        path: abs.startsWith(root + "/") ? abs.slice(root.length + 1) : abs,
        bytes: statSync(abs).size,
        shownBytes: Number(file[2]) * UNIT[file[3]!]!,
      });
      continue;
    }
    files = undefined;
    const warning = /^warning\[([\w-]+)\]/.exec(line);
    if (warning) pendingKind = warning[1];
    const at = /^\s*--> (\/\S+?):\d+:\d+/.exec(line);
    if (at && pendingKind) {
      warnings.push({ kind: pendingKind, file: at[1]!.slice(root.length + 1) });
      pendingKind = undefined;
    }
  }
  if (pendingKind) warnings.push({ kind: pendingKind, file: "(no location)" });
  return { packages, warnings, output };
}

let cached: DryRun | undefined;
/** The dry run, made once for all the tests below. */
const run = (): DryRun => cached ??= dryRun();

test("deno publish --dry-run lists the JSR package @normkit/normkit", { skip, timeout: 180_000 }, () => {
  assert.ok([...run().packages.keys()].some((k) => k.startsWith("@normkit/normkit@")), run().output);
  const files = [...run().packages.values()].flat().map((f) => f.path);
  for (const entry of ["mod.ts", "gpu.ts", "ffi/runtime.ts", "ffi/bun.ts", "ffi/deno.ts", "README.md", "LICENSE"]) {
    assert.ok(files.includes(entry), `${entry} is not published:\n${files.join("\n")}`);
  }
});

test(`each published package totals at most ${BUDGET_BYTES} bytes`, { skip, timeout: 180_000 }, () => {
  for (const [name, files] of run().packages) {
    const total = files.reduce((s, f) => s + f.bytes, 0);
    const largest = [...files].sort((a, b) => b.bytes - a.bytes).slice(0, 5).map((f) => `${f.path} ${f.bytes}`);
    console.log(`# ${name}: ${files.length} files, ${total} bytes (largest: ${largest.join(", ")})`);
    assert.ok(total > 0, `${name}: no file sizes parsed`);
    assert.ok(
      total <= BUDGET_BYTES,
      `${name}: ${total} bytes published, budget ${BUDGET_BYTES}: ${largest.join(", ")}`,
    );
    // The printed sizes (KiB/MiB, rounded to 2 decimals) agree with the files read here.
    const shown = files.reduce((s, f) => s + f.shownBytes, 0);
    assert.ok(Math.abs(shown - total) <= 0.01 * total + 1024, `${name}: printed ${shown} vs ${total} bytes`);
  }
});

test("only what a user runs is published", { skip, timeout: 180_000 }, () => {
  for (const [name, files] of run().packages) {
    const path = (f: PublishedFile) => f.path.startsWith("packages/") ? f.path.split("/").slice(2).join("/") : f.path;
    const stray = files.filter((f) => NEVER_PUBLISHED.some((p) => path(f).startsWith(p)) || f.path.endsWith(".ptx.gz"));
    assert.deepEqual(stray.map((f) => f.path), [], `${name} publishes files no user runs`);
    assert.ok(files.every((f) => !f.path.startsWith("/")), `${name}: a published file lies outside the repository`);
  }
});

test("the dry run prints no warning beyond the allowed ones", { skip, timeout: 180_000 }, () => {
  // Every warning printed was parsed (with its file), so none can slip past the filter below.
  assert.equal(run().warnings.length, run().output.match(/^warning\[/gm)?.length ?? 0, run().output);
  const unexpected = run().warnings.filter((w) =>
    !ALLOWED_WARNINGS.some((a) => a.kind === w.kind && a.file === w.file)
  );
  assert.deepEqual(unexpected, [], run().output);
});
