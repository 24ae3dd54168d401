/**
 * Small-batch forward launch-plan experiments (issue 5): per case (kind × rows × D, bf16 x/y/weight/bias),
 * the plan ops/plan.ts picks (marked *) and variants with more threads per row (fewer 16-byte chunks per
 * thread: fewer serial weight/bias round trips in the output loop, a wider block reduction), each launched
 * 100 times in a captured graph and replayed; device time per op, as bench/latency.ts measures it. Every
 * variant's output is compared with the default plan's (max |a-b|/(1+|a|), flagged past 1e-5 for f32 and
 * 1e-2 for 16-bit: reduction order differs, so last-bit differences are expected). It chooses the plan's small-batch rule; it tests nothing.
 *   bun bench/latency_plans.ts [--rows 1,8,64,132,264] [--ds 2048,4096,8192] [--dtype bf16] [--json out.json]
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import { Device, type DType, loadKernels } from "../mod.ts";
import { NORM_FWD_ARGS, normKernel, planLimits } from "../ops/kernels.ts";
import { type LaunchPlan, planNorm } from "../ops/plan.ts";
import { LaunchConfig } from "../runtime/module.ts";
import { randoms } from "../tests/fixtures/random.ts";

const args = process.argv.slice(2);
const opt = (k: string) => (args.includes(k) ? args[args.indexOf(k) + 1] : undefined);
const ROWS = (opt("--rows") ?? "1,8,64,132,264").split(",").map(Number);
const DS = (opt("--ds") ?? "2048,4096,8192").split(",").map(Number);
const DT = (opt("--dtype") ?? "bf16") as DType;
const GRAPH_OPS = 100, REPLAYS = 200, REPEATS = 3;

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
using stream = dev.createStream();
using start = dev.createEvent(), end = dev.createEvent();
const limits = planLimits(dev);
console.log(`# ${dev.name}, ${"Deno" in globalThis ? "deno" : "bun"}, ${DT}, ${new Date().toISOString()}`);

/** The default plan first, then block and cluster plans at 1, 2 and 4 chunks per thread. */
function variants(kind: "layer" | "rms", rows: number, d: number): { label: string; plan: LaunchPlan }[] {
  const r = planNorm({ kind, rows, d, inputDtype: DT, outputDtype: DT, paramDtype: DT }, limits);
  if (!("plan" in r)) throw new Error(r.unsupported);
  const def = r.plan;
  const tag = (p: LaunchPlan) => `${p.mapping}${p.cluster > 1 ? p.cluster : ""} t${p.block[0]} nv${p.nv}`;
  const out = [{ label: "*" + tag(def), plan: def }];
  const chunks = Math.ceil(d / (DT === "f32" ? 4 : 8));
  const shared = (t: number, cl: number) => 2 * Math.ceil(t / 32) * 4 + (cl > 1 ? 16 : 0);
  const base = def.kernel.replace(/_(rows|block|cluster|wide)_/, "_block_");
  for (const cl of [1, 2, 4]) {
    if (cl > 1 && limits.ccMajor < 9) continue;
    for (const nv of [1, 2, 4, 8]) {
      const t = Math.ceil(Math.ceil(chunks / cl / nv) / 32) * 32;
      if (t > 512 || t < 32 || (cl > 1 && nv > 2)) continue;
      const plan: LaunchPlan = {
        kernel: cl > 1 ? base.replace("_block_", "_cluster_") : base,
        mapping: cl > 1 ? "cluster" : "block",
        grid: [rows * cl, 1, 1], block: [t, 1, 1], sharedBytes: shared(t, cl), cluster: cl, tpr: t,
        nv: Math.ceil(chunks / cl / t), prefetch: 0, // a few rows: nothing ahead to fetch
        fullKernel: null, // launched directly: the kernel with both paths
        fullGridX: rows * cl,
      };
      if (!out.some((o) => tag(o.plan) === tag(plan))) out.push({ label: tag(plan), plan });
    }
  }
  return out;
}

const results: Record<string, unknown>[] = [];
for (const kind of ["rms", "layer"] as const) {
  for (const d of DS) {
    using w = dev.tensor(randoms(d, 1, 0.5, 1.5), [d], { dtype: DT });
    using b = dev.tensor(randoms(d, 2), [d], { dtype: DT });
    for (const rows of ROWS) {
      using x = dev.tensor(randoms(rows * d, 3, -2, 2), [rows, d], { dtype: DT });
      let ref: Float32Array | undefined;
      const line: string[] = [];
      for (const { label, plan } of variants(kind, rows, d)) {
        using y = dev.tensor(new Float32Array(rows * d).fill(Number.NaN), [rows, d], { dtype: DT });
        const k = normKernel(dev, plan.kernel, NORM_FWD_ARGS);
        const cfg = new LaunchConfig(plan);
        const argv = [x, y, w, kind === "layer" ? b : null, null, null, rows, d, d, d, 1e-5, plan.tpr, plan.nv, plan.prefetch];
        const op = (): void => k.launch(stream, cfg, argv as never);
        op();
        stream.synchronize();
        const got = y.readSync({ stream });
        // Largest |a-b|/(1+|a|) against the default plan's output (the GPU tests' error form; NaN counts as Infinity).
        let err = 0;
        if (!ref) ref = got;
        else {
          for (let i = 0; i < got.length; i++) {
            const e = Math.abs(ref[i] - got[i]) / (1 + Math.abs(ref[i]));
            if (!(e <= err)) err = Number.isNaN(e) ? Infinity : e;
          }
        }
        using graph = stream.capture(() => {
          for (let i = 0; i < GRAPH_OPS; i++) op();
        });
        using exec = graph.instantiate();
        const times: number[] = [];
        for (let rep = 0; rep < REPEATS; rep++) {
          exec.launch(stream);
          start.record(stream);
          for (let i = 0; i < REPLAYS; i++) exec.launch(stream);
          end.record(stream);
          end.synchronize();
          times.push((end.elapsedSince(start) * 1000) / (REPLAYS * GRAPH_OPS));
        }
        times.sort((p, q) => p - q);
        const us = times[1];
        results.push({ kind, rows, d, dtype: DT, label, default: label.startsWith("*"), graph_device_us: us, spread_us: times[2] - times[0], max_err: err });
        line.push(`${label} ${us.toFixed(2)}${err > (DT === "f32" ? 1e-5 : 1e-2) ? ` (ERR ${err.toExponential(1)})` : ""}`);
      }
      console.log(`${kind.padEnd(5)} rows=${String(rows).padStart(3)} d=${d}: ${line.join(" | ")}`);
    }
  }
}
const json = opt("--json");
if (json) writeFileSync(json, JSON.stringify({ device: dev.name, dtype: DT, results }, null, 1));
