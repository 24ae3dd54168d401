/**
 * The README's example, as a user copies it: its first TypeScript block runs under this runtime with the package
 * specifier pointed at this checkout, on whatever Device.open() finds (the CPU here), and prints the normalized rows.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** The first ```ts block under "## Use" in README.md. */
function readmeExample(): string {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const use = readme.indexOf("\n## Use");
  assert.ok(use >= 0, "README.md has a Use section");
  const m = /```ts\n([\s\S]*?)```/.exec(readme.slice(use));
  assert.ok(m, "the Use section has a ts block");
  return m[1];
}

test("README example: runs as written (package specifier → this checkout) and prints normalized rows", () => {
  const source = readmeExample();
  assert.match(source, /from "@normkit\/normkit"/);
  const dir = mkdtempSync(join(tmpdir(), "normkit-readme-"));
  try {
    const file = join(dir, "example.ts");
    writeFileSync(
      file,
      source.replaceAll('"@normkit/normkit"', JSON.stringify(pathToFileURL(join(root, "mod.ts")).href)),
    );
    const isDeno = "Deno" in globalThis;
    const args = isDeno ? ["run", "--allow-read", "--allow-env", "--allow-ffi", file] : [file];
    const r = spawnSync(process.execPath, args, {
      encoding: "utf8",
      timeout: 120_000,
      env: { ...process.env, NO_COLOR: "1" },
    });
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
    // console.log of the Float32Array: 4 rows × 1024 values of a LayerNorm (mean 0, unit variance per row).
    const printed = r.stdout.match(/-?\d+\.\d+(e[+-]\d+)?/g)?.map(Number) ?? [];
    assert.ok(printed.length >= 10, `printed values: ${r.stdout.slice(0, 200)}`);
    assert.ok(printed.every((v) => Number.isFinite(v) && Math.abs(v) < 10), "normalized values are finite and O(1)");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
