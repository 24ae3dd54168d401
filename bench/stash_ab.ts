/**
 * The `stash` mapping against the cluster it replaced, in one process: for the grid's 256 KB rows (f32 D=65536, 16-bit
 * D=131072, weights of x's dtype, 1 GiB per case), the op's plan (stash) and the plan the same call got before it (a
 * cluster of 8 CTAs on the grid of resident clusters: planNorm with more SMs than rows, which keeps LayerNorm's and
 * RMSNorm's long rows in clusters), each timed as bench/bench.ts times a case (256 MiB memset before each call, events,
 * median of 30), alternating A B B A, with the copy ceiling of the same run. Both outputs are compared (within 1e-5 / 1e-2
 * relative: different reduction trees). Not part of the product; results in bench/RESULTS.md.
 *   deno run -A bench/stash_ab.ts      bun bench/stash_ab.ts
 */
import { Device, type DType, loadKernels } from "../mod.ts";
import { planLimits } from "../ops/kernels.ts";
import { fwdFull, type LaunchPlan, planNorm } from "../ops/plan.ts";
import { PlannedLaunch } from "../ops/plan_cache.ts";
import { decode } from "../runtime/dtype.ts";
import { copyCeilingGBs, deviceTimer } from "./device_timer.ts";
import { caseTensors, randomTile } from "./tile.ts";

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
using timer = deviceTimer(dev, 30);
const copy = copyCeilingGBs(dev, timer);
console.log(`# ${dev.info.name}, ${new Date().toISOString()}, copy ${copy.toFixed(0)} GB/s`);
const tile = randomTile(7);
const limits = planLimits(dev);
for (const [d, dtype] of [[65536, "f32"], [131072, "bf16"], [131072, "f16"]] as [number, DType][]) {
  const b = dtype === "f32" ? 4 : 2, rows = Math.ceil(2 ** 30 / (2 * d * b));
  using c = caseTensors(dev, tile, d, dtype, rows);
  for (const kind of ["layer", "rms"] as const) {
    const plan = (l: typeof limits): LaunchPlan => {
      const r = planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, l);
      if (!("plan" in r)) throw new Error(r.unsupported);
      return r.plan;
    };
    const stash = plan(limits), cluster = plan({ ...limits, multiprocessors: rows + 1 });
    const full = fwdFull(d, dtype, dtype, c.x.ptr, d, c.y.ptr, d, c.w.ptr, c.bias.ptr);
    const run = (p: LaunchPlan, out: typeof c.y) => {
      const pl = new PlannedLaunch(p), k = pl.kernel(dev, full), cfg = pl.configFor(full);
      const args = [c.x, out, c.w, kind === "layer" ? c.bias : null, null, null, rows, d, d, d, 1e-5, p.tpr, p.nv, p.prefetch];
      return { name: k.name, ms: () => timer.time(() => k.launch(dev.stream, cfg, args as never)) };
    };
    const a = run(stash, c.y), bb = run(cluster, c.ref);
    c.y.buffer.fill(0xff);
    c.ref.buffer.fill(0xff);
    const t = [a.ms(), bb.ms(), bb.ms(), a.ms()];
    const pct = (ms: number) => (100 * (2 * rows * d * b) / (ms * 1e6) / copy).toFixed(1);
    // The first and last 16 MiB of each output (NaN, the poison, counts as a difference).
    let worst = 0;
    for (const off of [0, c.y.buffer.byteLength - 2 ** 24]) {
      const ba = new Uint8Array(2 ** 24), bb2 = new Uint8Array(2 ** 24);
      c.y.buffer.read(ba, { offset: off });
      c.ref.buffer.read(bb2, { offset: off });
      const ya = decode(ba, dtype), yb = decode(bb2, dtype);
      for (let i = 0; i < ya.length; i++) {
        const e = Math.abs(ya[i] - yb[i]) / (1 + Math.abs(yb[i]));
        if (!(e <= worst)) worst = Number.isNaN(e) ? Infinity : e;
      }
    }
    console.log(`${kind.padEnd(5)} ${dtype.padEnd(4)} D=${d}: ${a.name} ${pct(t[0])} / ${pct(t[3])}  ${bb.name} (x${cluster.cluster}, t${cluster.tpr}) ${pct(t[1])} / ${pct(t[2])}  max |diff|/(1+|y|) ${worst.toExponential(1)}`);
  }
}
