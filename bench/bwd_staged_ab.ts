/**
 * The backward's bulk-staged kernels (nk_{ln|rms}_bwd_{cached|cluster}staged_*: each CTA's slice of the next rows copied
 * into shared memory by the copy engine) against the register kernels, in one process: per case the plan without its
 * staged variant, then with 1..3 rows in flight (bench/bwd_plans.ts's bytes, timer and 1 GiB per case, the copy
 * ceiling measured in the same run). Before timing, on a small random call with and without a weight and parameter
 * gradients, every staged variant's dx must equal the register kernel's of its own geometry bit for bit (the same
 * arithmetic in the same order), or, for a geometry no register kernel takes (more chunks per thread), the plan's
 * register kernel's within rounding; its dweight/dbias agree within summation-order tolerance; a mismatch stops the
 * run. It chooses bwdStages (ops/plan_bwd.ts); it tests nothing else.
 * --geometries instead times every geometry of the one-row and cluster mappings, unstaged and staged (see geometries()).
 *   bun bench/bwd_staged_ab.ts [--module x.cubin (bench/trimmed_cubin.sh)] [--geometries [--blocks 128,512]] [--ds 4096,65536] [--kinds layer,rms] [--dtypes f32,bf16] [--json out.json]
 */
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { Device, type DType, layerNorm, rmsNorm, type Tensor, loadKernels } from "../mod.ts";
import { launchBackward, NORM_BWD_ARGS } from "../ops/backward.ts";
import { bwdPlanLimits, normKernel, replaceNormModule } from "../ops/kernels.ts";
import { type BwdPlan, cachedShared, MAX_BWD_STAGES, maxvBwd, planNormBackward, prefetchNextRow, smemDbias, stagedShared } from "../ops/plan_bwd.ts";
import { decode } from "../runtime/dtype.ts";
import { bwdCase, lcg } from "./bwd_case.ts";
import { copyCeilingGBs, deviceTimer } from "./device_timer.ts";

const args = process.argv.slice(2);
const opt = (k: string) => (args.includes(k) ? args[args.indexOf(k) + 1] : undefined);
const DS = (opt("--ds") ?? "2048,4096,8192,12288,16384,32768,65536,131072").split(",").map(Number);
const KINDS = (opt("--kinds") ?? "layer,rms").split(",") as ("layer" | "rms")[];
const DTYPES = (opt("--dtypes") ?? "f32,bf16").split(",") as DType[];
/** --blocks 128,512: --geometries times only CTAs of these sizes. */
const BLOCKS = opt("--blocks")?.split(",").map(Number);

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
const moduleArg = opt("--module");
if (moduleArg) replaceNormModule(dev, readFileSync(moduleArg));
const limits = bwdPlanLimits(dev);
using timer = deviceTimer(dev, 20);
const copyGBs = copyCeilingGBs(dev, timer);
console.log(`# ${dev.info.name}, copy ${copyGBs.toFixed(0)} GB/s, ${new Date().toISOString()}${moduleArg ? `, module ${moduleArg}` : ""}`);

/** The plan without its staged variant, then the variant at each depth that fits. */
function variants(kind: "layer" | "rms", d: number, dt: DType, paramGrads = true): { label: string; plan: BwdPlan }[] {
  const r = planNormBackward({ kind, d, xDtype: dt, dyDtype: dt, weightDtype: dt, paramGrads }, limits);
  if (!("plan" in r)) return [];
  const { staged, ...base } = r.plan;
  const tag = base.mapping + (base.cluster > 1 ? base.cluster : "") + ` b${base.block}`;
  const out = [{ label: tag, plan: base as BwdPlan }];
  // The plan's own staged variant where its geometry differs (smallStagedCtas in ops/plan_bwd.ts).
  // Its register kernel in that geometry first: the staged one's dx equals it bit for bit (another geometry sums a row
  // in another order).
  if (staged && (staged.block !== base.block || staged.cluster !== base.cluster)) {
    if (staged.nv <= maxvBwd(kind, dt, dt)) {
      const vec = dt === "f32" ? 4 : 8, columns = Math.ceil(Math.ceil(d / vec) / staged.cluster) * vec;
      const sharedBytes = cachedShared(smemDbias(kind, dt, dt), staged.block, 32, 1, base.nacc, d, columns, staged.cluster);
      const geom = { block: staged.block, tpr: staged.block, nv: staged.nv, cluster: staged.cluster, sharedBytes };
      out.push({ label: `c${staged.cluster} b${staged.block}`, plan: { ...base, ...geom, mapping: staged.cluster > 1 ? "cluster" : "cached", kernel: staged.kernel.replace("staged_", "_") } });
    }
    out.push({ label: `plan c${staged.cluster} b${staged.block} S${staged.stages}`, plan: r.plan });
  }
  // Staged kernels exist for LayerNorm's one-row blocks and both kinds' clusters (kernels/norm.cu).
  if (base.mapping !== "cluster" && !(base.mapping === "cached" && base.rowsPerBlock === 1 && kind === "layer")) return out;
  const vec = dt === "f32" ? 4 : 8, columns = Math.ceil(Math.ceil(d / vec) / base.cluster) * vec;
  for (let s = 1; s <= Math.min(3, MAX_BWD_STAGES); s++) {
    const sharedBytes = stagedShared(cachedShared(smemDbias(kind, dt, dt, true), base.block, 32, 1, base.nacc, d, columns, base.cluster), s, columns, dt, dt, dt);
    if (sharedBytes > limits.maxSharedPerBlockOptin) break;
    const kernel = base.kernel.replace(/_bwd_(cached|cluster)_/, "_bwd_$1staged_");
    out.push({ label: `S${s}`, plan: { ...base, staged: { kernel, stages: s, sharedBytes, block: base.block, nv: base.nv, cluster: base.cluster } } });
  }
  return out;
}

function run(plan: BwdPlan, kind: "layer" | "rms", t: { dy: Tensor; x: Tensor; w?: Tensor; mean?: Tensor; rstd: Tensor; dx: Tensor; dw?: Tensor; db?: Tensor }, dt: DType) {
  launchBackward(plan, {
    dy: t.dy, x: t.x, weight: t.w, mean: kind === "layer" ? t.mean : undefined, rstd: t.rstd, dx: t.dx, dweight: t.dw,
    dbias: kind === "layer" ? t.db : undefined, accumulate: false, stream: dev.stream, pdtype: dt,
  });
}

/**
 * --geometries: for rows of one block or a cluster, every geometry the kernels take (clusters of 1 (LayerNorm's one-row
 * blocks), 2, 4, 8, 16 CTAs; nv 1..maxv chunks per thread, the block that holds the CTA's slice), each unstaged and
 * with 2 staged rows where a staged kernel exists; skipped where no cluster fits (activeClusters 0).
 */
function geometries(kind: "layer" | "rms", d: number, dt: DType): { label: string; plan: BwdPlan }[] {
  const r = planNormBackward({ kind, d, xDtype: dt, dyDtype: dt, weightDtype: dt, paramGrads: true }, limits);
  if (!("plan" in r)) return [];
  const { staged: _, ...def } = r.plan;
  if (def.mapping !== "cluster" && !(def.mapping === "cached" && def.rowsPerBlock === 1)) return [];
  const vec = dt === "f32" ? 4 : 8, chunks = Math.ceil(d / vec), maxv = maxvBwd(kind, dt, dt), nacc = kind === "layer" ? 2 : 1;
  // The staged kernels cache more chunks per thread where they keep LayerNorm's dbias sums in shared memory (f32).
  const maxvS = maxvBwd(kind, dt, dt, true);
  const out: { label: string; plan: BwdPlan }[] = [];
  const k = kind === "layer" ? "ln" : "rms";
  for (const c of [1, 2, 4, 8, 16]) {
    const per = Math.ceil(chunks / c);
    for (let nv = 1; nv <= maxvS; nv++) {
      const block = Math.max(64, Math.ceil(Math.ceil(per / nv) / 32) * 32);
      const n = Math.ceil(per / block);
      if (block > 512 || n > maxvS || (c === 1 && block < 64) || (BLOCKS && !BLOCKS.includes(block))) continue;
      const mapping = c === 1 ? "cached" as const : "cluster" as const;
      const base = cachedShared(smemDbias(kind, dt, dt), block, 32, 1, nacc, d, per * vec, c);
      const plan: BwdPlan = {
        kernel: `nk_${k}_bwd_${mapping}_${dt}_${dt}_${dt}`, mapping, cluster: c, prefetch: prefetchNextRow(kind, dt, mapping, block, chunks, c),
        block, sharedBytes: base, tpr: block, nv: n, rowsPerBlock: 1, nacc,
      };
      const tag = `c${c} b${block} nv${n}`;
      if (out.some((o) => o.label.startsWith(tag + " "))) continue;
      const fits = (p: BwdPlan, name: string, smem: number) =>
        smem <= limits.maxSharedPerBlockOptin &&
        (c === 1 || normKernel(dev, name, NORM_BWD_ARGS).activeClusters(p.block, smem, c) > 0);
      if (n <= maxv && fits(plan, plan.kernel, base)) out.push({ label: `${tag} S0${def.cluster === c && def.block === block ? "*" : ""}`, plan });
      if (kind === "rms" && c === 1) continue; // no staged one-row RMSNorm kernels
      const baseS = cachedShared(smemDbias(kind, dt, dt, true), block, 32, 1, nacc, d, per * vec, c);
      const sharedBytes = stagedShared(baseS, 2, per * vec, dt, dt, dt);
      const kernel = plan.kernel.replace(/_bwd_(cached|cluster)_/, "_bwd_$1staged_");
      if (fits(plan, kernel, sharedBytes)) out.push({ label: `${tag} S2`, plan: { ...plan, staged: { kernel, stages: 2, sharedBytes, block, nv: n, cluster: c } } });
    }
  }
  return out;
}

/**
 * Staged against unstaged on a small random call: dx bitwise against the register kernel of the same geometry, or
 * within rounding where no register kernel takes that geometry; parameter sums within tolerance; else the run stops.
 */
function check(kind: "layer" | "rms", d: number, dt: DType): void {
  const rows = 777;
  const rnd = lcg(d * 7 + (kind === "layer" ? 1 : 2));
  using x = dev.tensor(Float32Array.from({ length: rows * d }, rnd), [rows, d], { dtype: dt });
  using dy = dev.tensor(Float32Array.from({ length: rows * d }, rnd), [rows, d], { dtype: dt });
  using w = dev.tensor(Float32Array.from({ length: d }, () => 1 + rnd() / 4), [d], { dtype: dt });
  using bias = dev.tensor(Float32Array.from({ length: d }, rnd), [d], { dtype: dt });
  const f = kind === "layer" ? layerNorm(x, { weight: w, bias, stats: true }) : rmsNorm(x, { weight: w, stats: true });
  using _y = f.y, _m = f.mean, rstd = f.rstd!;
  for (const withW of [true, false]) {
    const vs = variants(kind, d, dt, withW);
    // The reference of each geometry: its register kernel (the first variant of that geometry).
    // (dx decoded only where compared within rounding, once per reference: a decode of 777 rows per variant was most of
    // the check's time at long D.)
    const refs = new Map<string, { bytes: Uint8Array; sums: Float32Array[]; dx?: Float32Array }>();
    let bitwise = 0, rounded = 0;
    for (const v of vs) {
      using dx = dev.empty([rows, d], { dtype: dt });
      using dw = dev.empty([d], { dtype: dt });
      using db = dev.empty([d], { dtype: dt });
      dx.buffer.fill(0xff), dw.buffer.fill(0xff), db.buffer.fill(0xff); // poisoned: NaN until written
      run(v.plan, kind, { dy, x, w: withW ? w : undefined, mean: f.mean, rstd, dx, dw: withW ? dw : undefined, db: withW ? db : undefined }, dt);
      // dx bitwise (the same arithmetic per row); dweight/dbias within summation-order tolerance (a staged block's shared
      // memory may change the persistent grid, hence how rows are grouped into the partial sums).
      const bytes = new Uint8Array(dx.buffer.byteLength);
      dx.buffer.read(bytes);
      const sums = withW ? [dw.readSync(), ...(kind === "layer" ? [db.readSync()] : [])] : [];
      const g = v.plan.staged ?? v.plan, key = `${g.cluster}/${g.block}/${g.nv}`;
      if (!refs.size || (!v.plan.staged && !refs.has(key))) {
        refs.set(key, { bytes, sums });
        continue;
      }
      // A staged geometry the register kernel cannot take (more chunks per thread): dx against the plan's register kernel
      // within the rounding of another summation order, not bitwise.
      const r = refs.get(key) ?? [...refs.values()][0];
      if (!refs.has(key)) {
        const tol = dt === "f32" ? 1e-4 : 2 ** -6;
        const want = (r.dx ??= decode(r.bytes, dt) as Float32Array); // (bytes already read: no second device copy)
        (decode(bytes, dt) as Float32Array).forEach((val, j) => {
          if (!(Math.abs(val - want[j]) <= tol * (1 + Math.abs(want[j])))) throw new Error(`${kind} ${dt} D=${d} ${v.label} (weight ${withW}): dx ${j} ${val} vs ${want[j]}`);
        });
        rounded++;
      } else if (bytes.some((b, j) => b !== r.bytes[j])) throw new Error(`${kind} ${dt} D=${d} ${v.label} (weight ${withW}): dx differs from the register kernel's`);
      else bitwise++;
      // Over 777 rows of terms up to ~4 in size: reordering moves an f32 sum by up to ~1e-4 where it cancels.
      const [rel, abs] = dt === "f32" ? [1e-5, 5e-4] : [2 ** -7, 5e-3];
      sums.forEach((g, i) => g.forEach((val, j) => {
        const want = r.sums[i][j];
        if (!(Math.abs(val - want) <= rel * Math.abs(want) + abs)) throw new Error(`${kind} ${dt} D=${d} ${v.label} (weight ${withW}): parameter sum ${i} column ${j}: ${val} vs ${want}`);
      }));
    }
    const checked = bitwise + rounded, refsN = vs.length - checked;
    if (checked) console.log(`# check ${kind} ${dt} D=${d} weight=${withW}: ${checked} staged variants against ${refsN} register kernel(s): dx bitwise equal ${bitwise}, within rounding ${rounded}; parameter sums within tolerance`);
  }
}

const results: { kind: string; dtype: DType; d: number; label: string; pctCopy: number }[] = [];
// --json is rewritten after every case (complete: false until the last), so that a device call's time limit keeps what
// ran (stop 33's A/B runs were cut before their last D, and their JSON with them).
const json = opt("--json");
const save = (complete: boolean) =>
  json && writeFileSync(json, JSON.stringify({ device: dev.info.name, copyGBs, date: new Date().toISOString(), complete, results }, null, 1));
for (const d of DS) {
  for (const dt of DTYPES) {
    if (!args.includes("--geometries")) for (const kind of KINDS) check(kind, d, dt);
    using c = bwdCase(dev, d, dt, lcg(d));
    const { x: xs, dy, dx, w, bias, dw, db } = c;
    for (const kind of KINDS) {
      const f = kind === "layer" ? layerNorm(xs, { weight: w, bias, stats: true }) : rmsNorm(xs, { weight: w, stats: true });
      using _y = f.y, _m = f.mean, rstd = f.rstd!;
      const bytes = c.bytes(kind);
      const line: string[] = [];
      for (const v of args.includes("--geometries") ? geometries(kind, d, dt) : variants(kind, d, dt)) {
        const ms = timer.time(() => run(v.plan, kind, { dy, x: xs, w, mean: f.mean, rstd, dx, dw, db }, dt));
        const pct = (100 * bytes) / (ms * 1e6) / copyGBs;
        results.push({ kind, dtype: dt, d, label: v.label, pctCopy: pct });
        line.push(`${v.label} ${pct.toFixed(1)}`);
      }
      console.log(`${kind.padEnd(5)} ${dt.padEnd(4)} ${String(d).padStart(6)} | ${line.join(" | ")}`);
      save(false);
    }
  }
}
save(true);
