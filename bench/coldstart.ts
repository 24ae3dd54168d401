/**
 * Cold start: time from process start, and from `import`, to the first GPU result (Device.open, a bf16
 * rmsNorm of 8 × 4096 with a weight, read back), each in a fresh process of the same runtime:
 *
 * - cold: CUDA_CACHE_PATH pointing at a new empty directory, so nothing can come from the driver's JIT cache;
 *   afterwards the directory is counted: any file in it means the driver JIT-compiled PTX (it should not:
 *   the fatbin carries SASS for sm_80 and sm_90);
 * - warm: the same cache directory again (what a second start of a service sees);
 * - with --ptx-jit also CUDA_FORCE_PTX_JIT=1 in a new cache directory: what the start would cost without SASS.
 *
 * One untimed run first warms the runtime's own caches (Deno's transpile cache), which are not the subject.
 *
 *   deno run -A bench/coldstart.ts [--runs 5] [--json out.json] [--ptx-jit]      bun bench/coldstart.ts ...
 */
import process from "node:process";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const runtime = "Deno" in globalThis ? "deno" : "bun";

if (process.argv.includes("--child")) {
  // Nothing of normkit is loaded before this line: the import is part of what is measured.
  const t0 = performance.now();
  const nk = await import("../mod.ts");
  const tImport = performance.now();
  let dev;
  try {
    dev = nk.Device.open({ backend: "cuda" });
  } catch (e) {
    if (!(e instanceof nk.BackendUnavailableError)) throw e;
    console.error(`bench/coldstart.ts: needs a CUDA GPU (${e.reason})`);
    process.exit(2);
  }
  const tOpen = performance.now();
  const d = 4096, rows = 8;
  const x = dev.tensor(Float32Array.from({ length: rows * d }, (_, i) => Math.sin(i) * 2 + (i % 7)), [rows, d], { dtype: "bf16" });
  const w = dev.tensor(Float32Array.from({ length: d }, (_, i) => 1 + Math.cos(i) / 4), [d], { dtype: "bf16" });
  const y = nk.rmsNorm(x, { weight: w });
  const out = await y.toArray();
  const tResult = performance.now();
  if (!out.every(Number.isFinite) || out.every((v) => v === 0)) throw new Error("coldstart: wrong first result");
  console.log(JSON.stringify({
    process_to_import_ms: t0, // the runtime's own start, up to the first line of this script
    import_ms: tImport - t0,
    open_ms: tOpen - tImport, // cuInit, device, primary context
    first_op_ms: tResult - tOpen, // module load (fatbin), upload, launch, read back
    import_to_result_ms: tResult - t0,
    process_to_result_ms: tResult,
  }));
  dev.close();
  process.exit(0);
}

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const RUNS = Number(arg("--runs") ?? 5);
const self = fileURLToPath(import.meta.url);
const childArgs = runtime === "deno" ? ["run", "-A", self, "--child"] : [self, "--child"];

function countFiles(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    n += statSync(p).isDirectory() ? countFiles(p) : 1;
  }
  return n;
}

function child(env: Record<string, string>): Record<string, number> {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, childArgs, { env: { ...process.env, ...env }, encoding: "utf8", timeout: 120_000 });
  const wall = performance.now() - t0;
  if (r.status === 2) { // the child's one-line message: no CUDA GPU
    console.error(r.stderr.trim());
    process.exit(2);
  }
  if (r.status !== 0) throw new Error(`coldstart child failed (${r.status}): ${r.stderr || r.error}`);
  const line = r.stdout.trim().split("\n").pop()!;
  return { ...JSON.parse(line), spawn_to_exit_ms: wall };
}

const median = (a: number[]): number => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const dirs: string[] = [];
const fresh = (): string => (dirs.push(mkdtempSync(join(tmpdir(), "normkit-jitcache-"))), dirs[dirs.length - 1]);
const report: Record<string, unknown> = { runtime, runs: RUNS };

try {
  child({ CUDA_CACHE_PATH: fresh() }); // untimed: the runtime's own caches

  const cold: Record<string, number>[] = [];
  for (let i = 0; i < RUNS; i++) {
    const dir = fresh();
    cold.push({ ...child({ CUDA_CACHE_PATH: dir }), jit_cache_files: countFiles(dir) });
  }
  const warmDir = fresh();
  child({ CUDA_CACHE_PATH: warmDir });
  const warm = Array.from({ length: RUNS }, () => child({ CUDA_CACHE_PATH: warmDir }));
  const variants: [string, Record<string, number>[]][] = [["cold", cold], ["warm", warm]];
  if (process.argv.includes("--ptx-jit")) {
    const dir = fresh();
    variants.push(["ptx_jit", [{ ...child({ CUDA_CACHE_PATH: dir, CUDA_FORCE_PTX_JIT: "1" }), jit_cache_files: countFiles(dir) }]]);
  }
  for (const [name, runs] of variants) {
    const keys = Object.keys(runs[0]);
    const med = Object.fromEntries(keys.map((k) => [k, median(runs.map((r) => r[k]))]));
    report[name] = { median: med, runs };
    console.log(
      `${runtime} ${name.padEnd(7)} import→result ${med.import_to_result_ms.toFixed(1)} ms ` +
        `(import ${med.import_ms.toFixed(1)}, open ${med.open_ms.toFixed(1)}, first op ${med.first_op_ms.toFixed(1)}); ` +
        `process start→result ${med.process_to_result_ms.toFixed(1)} ms; spawn→exit ${med.spawn_to_exit_ms.toFixed(1)} ms` +
        ("jit_cache_files" in med ? `; JIT cache files ${Math.max(...runs.map((r) => r.jit_cache_files))}` : ""),
    );
  }
} finally {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
const json = arg("--json");
if (json) writeFileSync(json, JSON.stringify(report, null, 1));
