/**
 * Cold start: time from process start, and from `import`, to the first GPU result (Device.open, loadKernels of the
 * device's own image, a bf16 rmsNorm of 8 × 4096 with a weight, read back), each in a fresh process of the same
 * runtime, split into the driver's own part and normkit's:
 *
 * - cold: CUDA_CACHE_PATH pointing at a new empty directory, so nothing can come from the driver's JIT cache;
 *   afterwards the directory is counted: any file in it means the driver JIT-compiled PTX (it should not where
 *   normkit ships SASS: sm_80 for 8.x, sm_90 for 9.x);
 * - warm: the same cache directory again (what a second start of a service sees);
 * - with --ptx-jit also CUDA_FORCE_PTX_JIT=1 in a new cache directory, loading @normkit/ptx's compute_90 PTX: what
 *   the first start costs on a GPU newer than the newest SASS (the driver compiles the PTX, then caches it).
 *
 * The driver's part comes from bench/coldstart_c (C: cuInit, primary context, cuModuleLoadData of the same image,
 * the first launch + synchronize; build it with the gcc line in coldstart_c.c), run after each child with the
 * child's image and environment; normkit's part is import → result minus that. Without --c, no split.
 * One untimed run first warms the runtime's own caches (Deno's transpile cache), which are not the subject.
 *
 *   deno run -A bench/coldstart.ts [--runs 5] [--json out.json] [--ptx-jit] [--c bench/coldstart_c]
 *   bun bench/coldstart.ts ...
 */
import process from "node:process";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const runtime = "Deno" in globalThis ? "deno" : "bun";
const root = new URL("../", import.meta.url);
/** The image file of each target (precompiled/norm_cuda.ts and packages/ptx/mod.ts name the same). */
const IMAGE_FILES: Record<string, string> = {
  sm_80: "precompiled/norm_sm80.fatbin",
  sm_90: "precompiled/norm_sm90.fatbin",
  compute_90: "packages/ptx/norm_compute90.fatbin",
};
const ptxImage = (): URL => new URL(IMAGE_FILES.compute_90, root);

if (process.argv.includes("--child")) {
  // Nothing of normkit is loaded before this line: the import is part of what is measured.
  const t0 = performance.now();
  const nk = await import("../mod.ts");
  const gpu = await import("../gpu.ts"); // imageChoice, NORM_SOURCE_SHA256: modules mod.ts has loaded already
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
  // CUDA_FORCE_PTX_JIT: the PTX package's image, as a GPU newer than sm_90 loads it.
  const ptx = process.env.CUDA_FORCE_PTX_JIT === "1";
  const images = ptx
    ? { sourceSha256: gpu.NORM_SOURCE_SHA256, images: { [gpu.imageChoice(dev).target]: ptxImage() } }
    : undefined;
  await nk.loadKernels(dev, { images });
  const tLoad = performance.now();
  const d = 4096, rows = 8;
  const x = dev.tensor(Float32Array.from({ length: rows * d }, (_, i) => Math.sin(i) * 2 + (i % 7)), [rows, d], {
    dtype: "bf16",
  });
  const w = dev.tensor(Float32Array.from({ length: d }, (_, i) => 1 + Math.cos(i) / 4), [d], { dtype: "bf16" });
  const y = nk.rmsNorm(x, { weight: w });
  const out = await y.toArray();
  const tResult = performance.now();
  if (!out.every(Number.isFinite) || out.every((v) => v === 0)) throw new Error("coldstart: wrong first result");
  console.log(JSON.stringify({
    image: ptx ? "packages/ptx/norm_compute90.fatbin" : IMAGE_FILES[gpu.imageChoice(dev).target],
    process_to_import_ms: t0, // the runtime's own start, up to the first line of this script
    import_ms: tImport - t0,
    open_ms: tOpen - tImport, // cuInit, device, primary context (and normkit's device setup)
    load_kernels_ms: tLoad - tOpen, // reading the image file, cuModuleLoadData (PTX: the JIT compile)
    first_op_ms: tResult - tLoad, // upload, plan, kernel lookup, launch, read back
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
const cBinary = arg("--c");

function countFiles(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    n += statSync(p).isDirectory() ? countFiles(p) : 1;
  }
  return n;
}

/** bench/coldstart_c on `image` in a fresh process with `env`: the driver's own times (JSON line). */
function driverPart(image: string, env: Record<string, string>): Record<string, number> {
  const r = spawnSync(cBinary!, [fileURLToPath(new URL(image, root))], {
    env: { ...process.env, ...env },
    encoding: "utf8",
    timeout: 120_000,
  });
  if (r.status !== 0) throw new Error(`coldstart_c failed (${r.status}): ${r.stderr || r.error}`);
  return JSON.parse(r.stdout.trim().split("\n").pop()!);
}

function child(env: Record<string, string>, jitCacheDir?: string): Record<string, number> {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, childArgs, {
    env: { ...process.env, ...env },
    encoding: "utf8",
    timeout: 300_000,
  });
  const wall = performance.now() - t0;
  if (r.status === 2) { // the child's one-line message: no CUDA GPU
    console.error(r.stderr.trim());
    process.exit(2);
  }
  if (r.status !== 0) throw new Error(`coldstart child failed (${r.status}): ${r.stderr || r.error}`);
  const { image, ...times } = JSON.parse(r.stdout.trim().split("\n").pop()!);
  const out: Record<string, number> = { ...times, spawn_to_exit_ms: wall };
  // Counted before coldstart_c runs in the same directory.
  if (jitCacheDir) out.jit_cache_files = countFiles(jitCacheDir);
  if (cBinary) {
    const c = driverPart(image, env);
    const driver = c.init_ms + c.context_ms + c.module_load_ms + c.first_launch_ms;
    Object.assign(out, {
      c_init_ms: c.init_ms,
      c_context_ms: c.context_ms,
      c_module_load_ms: c.module_load_ms,
      c_first_launch_ms: c.first_launch_ms,
    });
    out.driver_ms = driver;
    out.normkit_ms = out.import_to_result_ms - driver;
  }
  return out;
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
    cold.push(child({ CUDA_CACHE_PATH: dir }, dir));
  }
  const warmDir = fresh();
  child({ CUDA_CACHE_PATH: warmDir });
  const warm = Array.from({ length: RUNS }, () => child({ CUDA_CACHE_PATH: warmDir }));
  const variants: [string, Record<string, number>[]][] = [["cold", cold], ["warm", warm]];
  if (process.argv.includes("--ptx-jit")) {
    const dir = fresh();
    variants.push(["ptx_jit", [child({ CUDA_CACHE_PATH: dir, CUDA_FORCE_PTX_JIT: "1" }, dir)]]);
  }
  for (const [name, runs] of variants) {
    const keys = Object.keys(runs[0]);
    const med = Object.fromEntries(keys.map((k) => [k, median(runs.map((r) => r[k]))]));
    report[name] = { median: med, runs };
    console.log(
      `${runtime} ${name.padEnd(7)} import→result ${med.import_to_result_ms.toFixed(1)} ms ` +
        `(import ${med.import_ms.toFixed(1)}, open ${med.open_ms.toFixed(1)}, loadKernels ${
          med.load_kernels_ms.toFixed(1)
        }, ` +
        `first op ${med.first_op_ms.toFixed(1)}); ` +
        ("driver_ms" in med
          ? `driver (C) ${med.driver_ms.toFixed(1)} ms, normkit ${med.normkit_ms.toFixed(1)} ms; `
          : "") +
        `process start→result ${med.process_to_result_ms.toFixed(1)} ms; spawn→exit ${
          med.spawn_to_exit_ms.toFixed(1)
        } ms` +
        ("jit_cache_files" in med ? `; JIT cache files ${Math.max(...runs.map((r) => r.jit_cache_files))}` : ""),
    );
  }
} finally {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
const json = arg("--json");
if (json) writeFileSync(json, JSON.stringify(report, null, 1));
