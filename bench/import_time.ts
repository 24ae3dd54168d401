/**
 * The cost of importing normkit, without a GPU: fresh processes of the running runtime, warm caches (one untimed
 * run of each first: Deno's transpile cache), median of N. Three scripts:
 *
 * - empty:  nothing imported (the runtime's own start);
 * - import: `import "../mod.ts"`, no device opened;
 * - norm:   the import, then Device.open({ backend: "cpu" }), `await loadKernels(dev)` (a no-op there) and a first
 *           layerNorm of 8 × 1024 read back.
 *
 * Each is timed from spawn to exit (what a user waits for), inside the child from the first line of the script to
 * the end (the import alone for `import`), and by the child's CPU time (user + system, start included): on a loaded
 * machine the wall times stretch, the CPU times much less. The figure that matters is import − empty (target:
 * ≤ 30 ms).
 * bench/coldstart.ts times import → first result on a GPU. A micro-benchmark, not a test: numbers depend on the
 * machine and its load.
 *
 *   deno run -A bench/import_time.ts [--runs 11] [--json out.json]      bun bench/import_time.ts [--runs 11] ...
 */
import process from "node:process";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const runtime = "Deno" in globalThis ? "deno" : "bun";
const MODES = ["empty", "import", "norm"] as const;
type Mode = typeof MODES[number];

const childMode = process.argv[process.argv.indexOf("--child") + 1] as Mode;
if (process.argv.includes("--child")) {
  const t0 = performance.now();
  if (childMode !== "empty") {
    // A computed specifier: Deno loads the target of a literal import() while building the graph, before the first
    // line runs, which would put the import's cost into `empty` too.
    const modTs = "../mod.ts";
    const nk: typeof import("../mod.ts") = await import(modTs);
    if (childMode === "norm") {
      using dev = nk.Device.open({ backend: "cpu" });
      await nk.loadKernels(dev);
      const d = 1024;
      using x = dev.tensor(Float32Array.from({ length: 8 * d }, (_, i) => Math.sin(i)), [8, d]);
      using y = nk.layerNorm(x);
      if (!(await y.toArray()).every(Number.isFinite)) throw new Error("import_time: wrong first result");
    }
  }
  const cpu = process.cpuUsage(); // the whole process so far: the runtime's start included, as in `empty`
  console.log(JSON.stringify({ inProcessMs: performance.now() - t0, cpuMs: (cpu.user + cpu.system) / 1000 }));
  process.exit(0);
}

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const runs = Number(arg("--runs") ?? 11);
const self = fileURLToPath(import.meta.url);

interface Sample {
  wallMs: number;
  inProcessMs: number;
  cpuMs: number;
}

function child(mode: Mode): Sample {
  const args = runtime === "deno" ? ["run", "-A", self, "--child", mode] : [self, "--child", mode];
  const t0 = performance.now();
  const r = spawnSync(process.execPath, args, { encoding: "utf8" });
  const wallMs = performance.now() - t0;
  if (r.status !== 0) throw new Error(`import_time child (${mode}) failed: ${r.stderr}`);
  return { wallMs, ...JSON.parse(r.stdout.trim().split("\n").pop()!) };
}

const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
for (const m of MODES) child(m); // warm the runtime's caches
// Interleaved, so that a change in the machine's load touches every mode alike.
const samples: Record<Mode, Sample[]> = { empty: [], import: [], norm: [] };
for (let i = 0; i < runs; i++) for (const m of MODES) samples[m].push(child(m));
const keys = ["wallMs", "inProcessMs", "cpuMs"] as const;
const med = Object.fromEntries(
  MODES.map((m) => [m, Object.fromEntries(keys.map((k) => [k, median(samples[m].map((s) => s[k]))]))]),
) as unknown as Record<Mode, Sample>;
for (const m of MODES) {
  const over = (k: keyof Sample) => (m === "empty" ? "" : ` (+${(med[m][k] - med.empty[k]).toFixed(1)})`);
  console.log(
    `${runtime} ${m.padEnd(6)} medians of ${runs}: spawn→exit ${med[m].wallMs.toFixed(1)} ms${over("wallMs")}, ` +
      `CPU ${med[m].cpuMs.toFixed(1)} ms${over("cpuMs")}, in process ${med[m].inProcessMs.toFixed(1)} ms`,
  );
}
const json = arg("--json");
if (json) writeFileSync(json, JSON.stringify({ runtime, runs, median: med, samples }, null, 1));
