/**
 * Backward launch-plan experiments: per case, the plan ops/plan_bwd.ts picks (marked *) and variants of it
 * (the default with the next-row prefetch flipped, the rows layout at other lane counts, one row per block at
 * other CTA sizes, clusters of 2/4/8 CTAs, and 16 on sm_90), timed
 * in one run with bench.ts's device timer and bytes. It chooses the plan's heuristics; it tests nothing.
 *   bun bench/bwd_plans.ts [--ds 1024,4096] [--kinds layer,rms] [--dtypes f32,bf16] [--json out.json]
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import { Device, type DType, layerNorm, rmsNorm, loadKernels } from "../mod.ts";
import { launchBackward } from "../ops/backward.ts";
import { bwdPlanLimits } from "../ops/kernels.ts";
import { type BwdPlan, cachedShared, maxvBwd, planNormBackward, prefetchNextRow, smemDbias } from "../ops/plan_bwd.ts";
import { bwdCase } from "./bwd_case.ts";
import { deviceTimer } from "./device_timer.ts";

const args = process.argv.slice(2);
const opt = (k: string) => (args.includes(k) ? args[args.indexOf(k) + 1] : undefined);
const DS = (opt("--ds") ?? "128,512,768,1024,2048,4096,5120,8192,12288,16384,32768,65536").split(",").map(Number);
const KINDS = (opt("--kinds") ?? "layer,rms").split(",") as ("layer" | "rms")[];
const DTYPES = (opt("--dtypes") ?? "f32,bf16").split(",") as DType[];

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
const info = dev.info;
using timer = deviceTimer(dev, 20);
let copyGBs: number;
{
  using src = dev.alloc(2 ** 30), dst = dev.alloc(2 ** 30);
  src.fill(7);
  copyGBs = 2 ** 31 / (timer.time(() => dst.copyFrom(src)) * 1e6);
}
console.log(`# ${info.name}, copy ${copyGBs.toFixed(0)} GB/s, ${new Date().toISOString()}`);

/** Candidate plans for a case: the default first, then variants (kernel contracts as in plan_bwd.ts). */
function variants(kind: "layer" | "rms", d: number, dt: DType): { label: string; plan: BwdPlan }[] {
  const r = planNormBackward({ kind, d, xDtype: dt, dyDtype: dt, weightDtype: dt, paramGrads: true }, bwdPlanLimits(dev));
  if (!("plan" in r)) return [];
  // The register kernels' geometries: without the plan's staged variant (bench/bwd_staged_ab.ts times those), which
  // launchBackward would otherwise take for every variant made from it.
  const { staged: _, ...plain } = r.plan;
  const def = { plan: plain as BwdPlan };
  const tag = (p: BwdPlan) => p.mapping + (p.cluster > 1 ? p.cluster : "") + ` b${p.block} nv${p.nv}` + (p.prefetch ? " pf" : "");
  const out = [{ label: "*" + tag(def.plan), plan: def.plan }];
  // The default plan with the next-row L2 prefetch flipped: the A/B behind prefetchNextRow.
  if (def.plan.mapping === "cluster" || (def.plan.mapping === "cached" && def.plan.rowsPerBlock === 1 && def.plan.tpr > 32)) {
    const flipped = { ...def.plan, prefetch: !def.plan.prefetch };
    out.push({ label: tag(flipped), plan: flipped });
  }
  const vec = dt === "f32" ? 4 : 8, chunks = Math.ceil(d / vec), maxv = maxvBwd(kind, dt, dt), nacc = kind === "layer" ? 2 : 1;
  const sdb = smemDbias(kind, dt, dt);
  const base = { ...def.plan, kernel: def.plan.kernel.replace(/_bwd_[a-z]+_/, "_bwd_cached_"), mapping: "cached" as const, cluster: 1, nacc };
  const same = (p: BwdPlan) => out.some((o) => o.plan.mapping === p.mapping && o.plan.block === p.block && o.plan.tpr === p.tpr && o.plan.cluster === p.cluster && o.plan.prefetch === p.prefetch);
  const add = (label: string, p: BwdPlan) => { if (!same(p)) out.push({ label, plan: p }); };
  for (const tpr of [4, 8, 16, 32]) {
    const nv = Math.ceil(chunks / tpr);
    if (nv > maxv) continue;
    for (const block of [256, 128]) {
      const R = block / tpr;
      const shared = cachedShared(sdb, block, 32, R, nacc, d);
      if (shared <= info.maxSharedPerBlockOptin) add(`rows t${tpr} b${block} nv${nv}`, { ...base, prefetch: false, block, tpr, nv, rowsPerBlock: R, sharedBytes: shared });
    }
  }
  for (let nv = 1; nv <= maxv; nv++) {
    const block = Math.max(32, Math.ceil(Math.ceil(chunks / nv) / 32) * 32);
    const n = Math.ceil(chunks / block);
    if (block <= 512 && block > 32 && n <= maxv) add(`block b${block} nv${n}`, { ...base, prefetch: prefetchNextRow(kind, dt, "cached", block, chunks), block, tpr: block, nv: n, rowsPerBlock: 1, sharedBytes: cachedShared(sdb, block, 32, 1, nacc, d) });
  }
  // 16: sm_90's non-portable clusters (the kernel opts in at launch).
  for (const c of info.computeCapability[0] === 9 ? [2, 4, 8, 16] : [2, 4, 8]) {
    const per = Math.ceil(chunks / c);
    for (let nv = 1; nv <= maxv; nv++) {
      const block = Math.max(32, Math.ceil(Math.ceil(per / nv) / 32) * 32);
      const n = Math.ceil(per / block);
      if (block <= 512 && n <= maxv && (block >= 64 || per <= 32 * maxv)) {
        add(`cluster${c} b${block} nv${n}`, { ...base, kernel: base.kernel.replace("_bwd_cached_", "_bwd_cluster_"), mapping: "cluster", cluster: c, prefetch: prefetchNextRow(kind, dt, "cluster", block, chunks, c), block, tpr: block, nv: n, rowsPerBlock: 1, sharedBytes: cachedShared(sdb, block, 32, 1, nacc, d, per * vec, c) });
      }
    }
  }
  return out;
}

const results: { kind: string; dtype: DType; d: number; label: string; pctCopy: number }[] = [];
for (const d of DS) {
  for (const dt of DTYPES) {
    using c = bwdCase(dev, d, dt, (i) => Math.sin(i * 0.37) * 2);
    const { x: xs, dy, dx, w, bias, dw, db } = c;
    for (const kind of KINDS) {
      const f = kind === "layer" ? layerNorm(xs, { weight: w, bias, stats: true }) : rmsNorm(xs, { weight: w, stats: true });
      using _y = f.y, _m = f.mean, _r = f.rstd;
      const bytes = c.bytes(kind);
      const line: string[] = [];
      for (const v of variants(kind, d, dt)) {
        const ms = timer.time(() =>
          launchBackward(v.plan, {
            dy, x: xs, weight: w, mean: kind === "layer" ? f.mean : undefined, rstd: f.rstd!, dx, dweight: dw,
            dbias: kind === "layer" ? db : undefined, accumulate: false, stream: dev.stream, pdtype: dt,
          })
        );
        const pct = (100 * bytes) / (ms * 1e6) / copyGBs;
        results.push({ kind, dtype: dt, d, label: v.label, pctCopy: pct });
        line.push(`${v.label} ${pct.toFixed(1)}`);
      }
      console.log(`${kind.padEnd(5)} ${dt.padEnd(4)} ${String(d).padStart(6)} | ${line.join(" | ")}`);
    }
  }
}
const json = opt("--json");
if (json) writeFileSync(json, JSON.stringify({ device: info.name, copyGBs, date: new Date().toISOString(), results }, null, 1));
