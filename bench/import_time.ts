/**
 * The JS side of a cold start, without a GPU: time to `import` mod.ts in a fresh process of the same runtime, median
 * of N processes. Deno also with an empty DENO_DIR (a first run after install: Deno then transpiles every .ts module
 * it imports; a JSON module it does not). What it measures is the import alone (bench/coldstart.ts times import,
 * Device.open and the first result on a GPU). A micro-benchmark, not a test: numbers depend on the machine.
 *
 *   deno run -A bench/import_time.ts [--runs 7]      bun bench/import_time.ts [--runs 7]
 */
import process from "node:process";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const runtime = "Deno" in globalThis ? "deno" : "bun";

if (process.argv.includes("--child")) {
  const t0 = performance.now();
  await import("../mod.ts");
  console.log(JSON.stringify({ importMs: performance.now() - t0 }));
  process.exit(0);
}

const runs = Number(process.argv[process.argv.indexOf("--runs") + 1]) || 7;
const self = fileURLToPath(import.meta.url);
const child = (env: Record<string, string> = {}): number => {
  const args = runtime === "deno" ? ["run", "-A", self, "--child"] : [self, "--child"];
  const r = spawnSync(process.execPath, args, { env: { ...process.env, ...env }, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`child failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").pop()!).importMs;
};
const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
child(); // warms the runtime's caches (Deno's transpile cache) for the warm runs
const warm = Array.from({ length: runs }, () => child());
console.log(`${runtime}: import mod.ts, warm caches: median ${median(warm).toFixed(1)} ms (${warm.map((v) => v.toFixed(0)).join(", ")})`);
if (runtime === "deno") {
  const cold = Array.from({ length: runs }, () => {
    const dir = mkdtempSync(join(tmpdir(), "normkit-deno-dir-"));
    try {
      return child({ DENO_DIR: dir });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  console.log(`${runtime}: import mod.ts, empty DENO_DIR: median ${median(cold).toFixed(1)} ms (${cold.map((v) => v.toFixed(0)).join(", ")})`);
}
