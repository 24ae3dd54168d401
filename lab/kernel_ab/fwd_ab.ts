/**
 * A forward kernel A/B: the op's own plans (planNorm, the device's limits) launched from two or more builds of
 * kernels/norm.cu (cubins from lab/kernel_ab/trimmed_cubin.sh), loaded through the public API (Device.loadModule).
 * Per case (kind × dtype × D, weights of x's dtype, 1 GiB moved per call) each module is timed as bench/bench.ts
 * times a case (256 MiB memset before each call, device events, median of 30), in the order given and then
 * reversed (A B B A), with the copy ceiling of the same run; every module's y is compared with the first's over
 * the first and last 16 MiB (max |a-b|/(1+|a|); NaN, the poison, counts as a difference).
 *   deno run -A lab/kernel_ab/fwd_ab.ts a.cubin b.cubin [--kinds layer,rms] [--dtypes bf16,f16] [--ds 4096,65536]
 *   bun lab/kernel_ab/fwd_ab.ts ...
 */
import process from "node:process";
import { readFileSync } from "node:fs";
import { type Kernel, LaunchConfig, type Module } from "../../gpu.ts";
import { type DType, loadKernels } from "../../mod.ts";
import { NORM_FWD_ARGS, planLimits } from "../../ops/kernels.ts";
import { fwdFull, type LaunchPlan, planNorm } from "../../ops/plan.ts";
import { decode } from "../../runtime/dtype.ts";
import { copyCeilingGBs, deviceTimer } from "../../bench/device_timer.ts";
import { openCuda } from "../../bench/open_cuda.ts";
import { caseTensors, randomTile } from "../../bench/tile.ts";

const args = process.argv.slice(2);
const opt = (k: string, dflt: string) => (args.includes(k) ? args[args.indexOf(k) + 1] : dflt);
const paths = args.filter((a, i) => !a.startsWith("--") && !args[i - 1]?.startsWith("--"));
if (paths.length < 2) {
  console.error(
    "usage: lab/kernel_ab/fwd_ab.ts A.cubin B.cubin [...] [--kinds layer,rms] [--dtypes bf16,f16] [--ds 4096,65536]",
  );
  process.exit(2);
}
const KINDS = opt("--kinds", "layer,rms").split(",") as ("layer" | "rms")[];
const DTYPES = opt("--dtypes", "bf16,f16").split(",") as DType[];
const DS = opt("--ds", "1024,4096,16384,65536,131072").split(",").map(Number);

using dev = openCuda("lab/kernel_ab/fwd_ab.ts");
await loadKernels(dev);
using held = new DisposableStack();
const modules: Module[] = paths.map((p) => held.use(dev.loadModule(readFileSync(p))));
using timer = deviceTimer(dev, 30);
const copy = copyCeilingGBs(dev, timer);
console.log(
  `# ${dev.info.name}, copy ${copy.toFixed(0)} GB/s; modules ${paths.map((p, i) => `${"ABCDEFGH"[i]}=${p}`).join(" ")}`,
);
const tile = randomTile(7), limits = planLimits(dev);

/** The kernel and launch configuration the op takes for this plan (as ops/plan_cache.ts's PlannedLaunch does). */
function launchOf(m: Module, plan: LaunchPlan, full: boolean): { k: Kernel; cfg: LaunchConfig } {
  const useFull = full && plan.fullKernel !== null;
  const k = m.kernel(useFull ? plan.fullKernel! : plan.kernel, NORM_FWD_ARGS);
  let grid = useFull ? plan.fullGridX : plan.grid[0];
  if (plan.mapping === "cluster" && plan.cluster > 1) {
    // A cluster plan launches at most the clusters resident at once; its CTAs loop over the rows.
    grid = Math.max(1, Math.min(grid / plan.cluster, k.activeClusters(plan.block[0], plan.sharedBytes, plan.cluster))) *
      plan.cluster;
  }
  return {
    k,
    cfg: new LaunchConfig({
      grid: [grid, 1, 1],
      block: plan.block,
      sharedBytes: plan.sharedBytes,
      cluster: plan.cluster,
    }),
  };
}

for (const d of DS) {
  for (const dtype of DTYPES) {
    const b = dtype === "f32" ? 4 : 2, rows = Math.ceil(2 ** 30 / (2 * d * b));
    using c = caseTensors(dev, tile, d, dtype, rows);
    for (const kind of KINDS) {
      const r = planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, limits);
      if (!("plan" in r)) throw new Error(r.unsupported);
      const plan = r.plan, full = fwdFull(d, dtype, dtype, c.x.ptr, d, c.y.ptr, d, c.w.ptr, c.bias.ptr);
      const callArgs = (out: typeof c.y) =>
        [
          c.x,
          out,
          c.w,
          kind === "layer" ? c.bias : null,
          null,
          null,
          rows,
          d,
          d,
          d,
          1e-5,
          plan.tpr,
          plan.nv,
          plan.prefetch,
        ] as never;
      const runs = modules.map((m) => launchOf(m, plan, full));
      const pct = (ms: number) => (100 * (2 * rows * d * b) / (ms * 1e6)) / copy;
      const order = [...runs.keys(), ...[...runs.keys()].reverse()];
      const times: number[][] = runs.map(() => []);
      const first = new Map<number, ArrayLike<number>[]>();
      for (const i of order) {
        c.y.buffer.fill(0xff);
        times[i].push(pct(timer.time(() => runs[i].k.launch(dev.stream, runs[i].cfg, callArgs(c.y)))));
        if (first.has(i)) continue;
        first.set(
          i,
          [0, c.y.buffer.byteLength - 2 ** 24].map((off) => {
            const bytes = new Uint8Array(Math.min(2 ** 24, c.y.buffer.byteLength));
            c.y.buffer.read(bytes, { offset: Math.max(0, off) });
            return decode(bytes, dtype);
          }),
        );
      }
      let worst = 0;
      for (const [i, ys] of first) {
        if (i === 0) continue;
        ys.forEach((y, part) => {
          const ref = first.get(0)![part];
          for (let j = 0; j < y.length; j++) {
            const e = Math.abs(y[j] - ref[j]) / (1 + Math.abs(ref[j]));
            if (!(e <= worst)) worst = Number.isNaN(e) ? Infinity : e;
          }
        });
      }
      const cols = runs.map((_, i) => `${"ABCDEFGH"[i]} ${times[i].map((t) => t.toFixed(1)).join(" / ")}`).join("  ");
      console.log(
        `${kind.padEnd(5)} ${dtype.padEnd(4)} D=${String(d).padEnd(6)} ${
          runs[0].k.name
        }: % of copy ${cols}  max |diff|/(1+|y|) ${worst.toExponential(1)}`,
      );
    }
  }
}
