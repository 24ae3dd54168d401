/**
 * Clusters of 16 CTAs (sm_90's non-portable size) against what the same call runs without them, in one process, for the
 * rows they would take (1 GiB per case, bench.ts's timing: 256 MiB memset before each call, events, median of 30,
 * alternating A B B A, the copy ceiling of the same run). Not part of the product; results in bench/RESULTS.md.
 * - forward, LN / RMS f32 D=131072: the op's plan (a cluster of 8 × 512 threads) against 16 × 256 threads (8 chunks
 *   each, as CLUSTER_CTA asks of smaller rows); the outputs compared (first and last 16 MiB).
 * - backward, LN / RMS f32 D=131072 and LN / RMS bf16 D=262144 (not in the grid): the plan with clusters of 16 against
 *   the portable plan (`split`), dx compared likewise.
 *   deno run -A bench/cluster16_ab.ts      bun bench/cluster16_ab.ts
 */
import { Device, type DType, layerNorm, rmsNorm, loadKernels } from "../mod.ts";
import { devicePlanBackward, launchBackward } from "../ops/backward.ts";
import { bwdPlanLimits, planLimits } from "../ops/kernels.ts";
import { CLUSTER_SUM_BYTES, fwdFull, type LaunchPlan, planNorm } from "../ops/plan.ts";
import { type BwdPlan, planNormBackward } from "../ops/plan_bwd.ts";
import { PlannedLaunch } from "../ops/plan_cache.ts";
import { decode } from "../runtime/dtype.ts";
import type { Tensor } from "../runtime/tensor.ts";
import { copyCeilingGBs, deviceTimer } from "./device_timer.ts";
import { caseTensors, randomTile } from "./tile.ts";

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
using timer = deviceTimer(dev, 30);
const copy = copyCeilingGBs(dev, timer);
console.log(`# ${dev.info.name}, ${new Date().toISOString()}, copy ${copy.toFixed(0)} GB/s`);
const tile = randomTile(7);

/** The largest of max |a − b| / (1 + |b|) over the first and last 16 MiB of two equal-sized tensors (NaN: Infinity). */
function worstDiff(a: Tensor, b: Tensor): number {
  let worst = 0;
  const n = Math.min(2 ** 24, a.buffer.byteLength);
  for (const off of [0, a.buffer.byteLength - n]) {
    const ba = new Uint8Array(n), bb = new Uint8Array(n);
    a.buffer.read(ba, { offset: off });
    b.buffer.read(bb, { offset: off });
    const ya = decode(ba, a.dtype), yb = decode(bb, b.dtype);
    for (let i = 0; i < ya.length; i++) {
      const e = Math.abs(ya[i] - yb[i]) / (1 + Math.abs(yb[i]));
      if (!(e <= worst)) worst = Number.isNaN(e) ? Infinity : e;
    }
  }
  return worst;
}
const pct = (bytes: number, ms: number) => (100 * bytes / (ms * 1e6) / copy).toFixed(1);

// ---- forward
{
  const d = 131072, dtype: DType = "f32", rows = Math.ceil(2 ** 30 / (2 * d * 4));
  using c = caseTensors(dev, tile, d, dtype, rows);
  for (const kind of ["layer", "rms"] as const) {
    const r = planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, planLimits(dev));
    if (!("plan" in r)) throw new Error(r.unsupported);
    const p8 = r.plan, t = 256;
    const p16: LaunchPlan = {
      ...p8, cluster: 16, block: [t, 1, 1], tpr: t, nv: Math.ceil(d / 4 / 16 / t), grid: [rows * 16, 1, 1], fullGridX: rows * 16,
      sharedBytes: 2 * (t / 32) * 4 + CLUSTER_SUM_BYTES,
    };
    const full = fwdFull(d, dtype, dtype, c.x.ptr, d, c.y.ptr, d, c.w.ptr, c.bias.ptr);
    const run = (p: LaunchPlan, out: Tensor) => {
      const pl = new PlannedLaunch(p), k = pl.kernel(dev, full), cfg = pl.configFor(full);
      const args = [c.x, out, c.w, kind === "layer" ? c.bias : null, null, null, rows, d, d, d, 1e-5, p.tpr, p.nv, p.prefetch];
      return { label: `${k.name} x${p.cluster} t${p.tpr} nv${p.nv} grid ${cfg.grid[0]}`, ms: () => timer.time(() => k.launch(dev.stream, cfg, args as never)) };
    };
    const a = run(p8, c.y), b = run(p16, c.ref);
    c.y.buffer.fill(0xff);
    c.ref.buffer.fill(0xff);
    const ms = [a.ms(), b.ms(), b.ms(), a.ms()], bytes = 2 * rows * d * 4;
    console.log(`fwd ${kind.padEnd(5)} f32 D=${d}: ${a.label} ${pct(bytes, ms[0])} / ${pct(bytes, ms[3])} | ${b.label} ${pct(bytes, ms[1])} / ${pct(bytes, ms[2])} | max |diff|/(1+|y|) ${worstDiff(c.y, c.ref).toExponential(1)}`);
  }
}

// ---- backward
for (const [d, dt] of [[131072, "f32"], [262144, "bf16"]] as [number, DType][]) {
  const b = dt === "f32" ? 4 : 2, rows = Math.ceil(2 ** 30 / (3 * d * b));
  using c = caseTensors(dev, tile, d, dt, rows);
  using dy = dev.empty([rows, d], { dtype: dt });
  dy.buffer.copyFrom(c.x.buffer);
  using dx2 = dev.empty([rows, d], { dtype: dt });
  using dw = dev.empty([d], { dtype: dt });
  using db = dev.empty([d], { dtype: dt });
  for (const kind of ["layer", "rms"] as const) {
    const f = kind === "layer" ? layerNorm(c.x, { weight: c.w, bias: c.bias, stats: true }) : rmsNorm(c.x, { weight: c.w, stats: true });
    using _y = f.y, _m = f.mean, _r = f.rstd;
    const input = { kind, d, xDtype: dt, dyDtype: dt, weightDtype: dt, paramGrads: true };
    // The register kernels (this A/B predates the staged ones, which bench/bwd_staged_ab.ts times): plans without
    // their staged variant.
    const plain = (p: BwdPlan): BwdPlan => (({ staged: _, ...rest }) => rest)(p);
    const plan = (maxCluster: number): BwdPlan => {
      const r = planNormBackward(input, { ...bwdPlanLimits(dev), maxCluster });
      if (!("plan" in r)) throw new Error(r.unsupported);
      return plain(r.plan);
    };
    const bytes = 3 * rows * d * b + rows * 4 * (kind === "layer" ? 2 : 1) + d * b * (kind === "layer" ? 3 : 2);
    const run = (p: BwdPlan, dx: Tensor) => ({
      label: `${p.mapping}${p.cluster > 1 ? p.cluster : ""} b${p.block} nv${p.nv}`,
      ms: () => timer.time(() => launchBackward(p, {
        dy, x: c.x, weight: c.w, mean: kind === "layer" ? f.mean : undefined, rstd: f.rstd!, dx, dweight: dw,
        dbias: kind === "layer" ? db : undefined, accumulate: false, stream: dev.stream, pdtype: dt,
      })),
    });
    // The op's plan (devicePlanBackward: the portable one where this GPU holds no cluster of 16).
    const r16 = devicePlanBackward(dev, input);
    if (!("plan" in r16) || r16.plan.cluster !== 16) {
      console.log(`bwd ${kind} ${dt} D=${d}: this GPU runs no cluster of 16 here (${"plan" in r16 ? r16.plan.mapping : r16.unsupported})`);
      continue;
    }
    const a = run(plain(r16.plan), c.y), p = run(plan(8), dx2);
    c.y.buffer.fill(0xff);
    dx2.buffer.fill(0xff);
    const ms = [a.ms(), p.ms(), p.ms(), a.ms()];
    console.log(`bwd ${kind.padEnd(5)} ${dt.padEnd(4)} D=${d}: ${a.label} ${pct(bytes, ms[0])} / ${pct(bytes, ms[3])} | ${p.label} ${pct(bytes, ms[1])} / ${pct(bytes, ms[2])} | dx max |diff|/(1+|dx|) ${worstDiff(c.y, dx2).toExponential(1)}`);
  }
}
