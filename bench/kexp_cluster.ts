/**
 * Times the long-row experiments of bench/kexp_cluster.cu (cubin from bench/kexp_cluster.sh) against the production
 * kernels, the way bench/bench.ts times a case (256 MiB memset before each call, events, median of 30, 1 GiB per
 * case, copy ceiling in the same run). Per case: the production plan, the production `cluster` kernel at each
 * cluster size C whose slices fit (its own grid: a cluster per row, as the plan launches it), variant `a` (cla) on
 * that grid, on a persistent one and on a persistent one with an L2 prefetch of each CTA's next row, and variant `t`
 * (tma2/tma3: 2 or 3 shared-memory stages) on a persistent grid at C = 2, 4, 8. Each variant's output must be bitwise equal to the production cluster kernel's at the same C
 * (same chunks per thread, same sums in the same order; first and last 16 MiB compared), and within 1e-5 (f32) /
 * 1e-2 (bf16) relative of the production plan's. Then an uneven case (D = 40000, 37 rows) checked whole.
 * --block1024 runs variant `b` instead (see block1024 below), --cluster1024 variant `c` (see cluster1024).
 * Informs kernels/norm_fwd.cuh and ops/plan.ts; not part of the product. Results: bench/RESULTS.md, bench/results/kexp/.
 *   deno run -A bench/kexp_cluster.ts bench/kexp_cluster.cubin [--ds 32768,65536] [--block1024 | --cluster1024] [--json out.json]
 */
import { Buffer } from "node:buffer";
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { Device, type DType, type Tensor, loadKernels } from "../mod.ts";
import { NORM_FWD_ARGS, normKernel, planLimits } from "../ops/kernels.ts";
import { type LaunchPlan, type NormKind, planNorm } from "../ops/plan.ts";
import { decode } from "../runtime/dtype.ts";
import { type Kernel, LaunchConfig } from "../runtime/module.ts";
import { copyCeilingGBs, deviceTimer } from "./device_timer.ts";
import { caseTensors as tileCase, randomTile } from "./tile.ts";

const args = process.argv.slice(2);
const opt = (name: string): string | undefined => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const DS = (opt("--ds") ?? "16384,32768,65536,131072").split(",").map(Number);
const jsonPath = opt("--json");

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
using mod = dev.loadModule(new Uint8Array(readFileSync(args[0])));
using timer = deviceTimer(dev, 30);
const copyGBs = copyCeilingGBs(dev, timer);
console.log(`# ${dev.info.name}, ${new Date().toISOString()}, copy ${copyGBs.toFixed(0)} GB/s`);
const limits = planLimits(dev);
const tile = randomTile(7);
const out: Record<string, unknown>[] = [];
const SMEM_MAX = dev.info.maxSharedPerBlockOptin;

/** Dynamic shared memory of the production cluster kernel, of `cla`, and of `tma{S}` (kexp_cluster.cu's kc_layout). */
const prodShared = (t: number) => 2 * (t / 32) * 4 + 272; // block sums, then NK_CLUSTER_SUM_BYTES (ops/plan.ts)
const layoutStage = (t: number, s: number) => (((((2 * (t / 32) * 4 + 7) & ~7) + (2 + s) * 8 + 256) + 127) & ~127);
const claShared = (t: number) => layoutStage(t, 0);
const tmaShared = (t: number, s: number, cpc: number) => layoutStage(t, s) + s * cpc * 16;

/** Largest |a-b|/(1+|b|) of two arrays (NaN: Infinity). */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs(a[i] - b[i]) / (1 + Math.abs(b[i]));
    if (!(e <= m)) m = Number.isNaN(e) ? Infinity : e;
  }
  return m;
}
/** The first and last 16 MiB of a tensor's bytes (all of it when smaller). */
function edges(t: Tensor): Uint8Array[] {
  const n = t.buffer.byteLength, part = Math.min(n, 2 ** 24);
  const head = new Uint8Array(part), tail = new Uint8Array(part);
  t.buffer.read(head);
  t.buffer.read(tail, { offset: n - part });
  return [head, tail];
}
const sameBytes = (a: Uint8Array[], b: Uint8Array[]) => a.every((x, i) => Buffer.compare(x, b[i]) === 0);
const errOf = (a: Uint8Array[], b: Uint8Array[], dtype: DType) =>
  Math.max(...a.map((x, i) => relErr(decode(x, dtype), decode(b[i], dtype))));

/** One variant's geometry: cluster size, threads, chunks per thread, grid (CTAs), shared bytes. */
interface Geo {
  c: number;
  t: number;
  nv: number;
  grid: number;
  smem: number;
}

/** One case's tensors (bench/tile.ts caseTensors) from this run's tile. */
const caseTensors = (d: number, dtype: DType, rows: number) => tileCase(dev, tile, d, dtype, rows);

function runCase(kind: NormKind, dtype: DType, d: number, rows: number, timed: boolean) {
  const b = dtype === "f32" ? 4 : 2, chunks = d / (16 / b);
  using c = caseTensors(d, dtype, rows);
  const { x, y, ref, w, bias } = c;
  const argsFor = (o: Tensor, t: number, nv: number, prefetch = 0) =>
    [x, o, w, kind === "layer" ? bias : null, null, null, rows, d, d, d, 1e-5, t, nv, prefetch] as never;
  const gbs = (ms: number) => (2 * rows * d * b) / (ms * 1e6);
  const pct = (ms: number) => (100 * gbs(ms)) / copyGBs;
  const run = (k: Kernel, g: Geo, o: Tensor, prefetch = 0): number => {
    o.buffer.fill(0xff);
    const cfg = new LaunchConfig({ grid: [g.grid], block: [g.t], sharedBytes: g.smem, cluster: g.c });
    if (!timed) {
      k.launch(dev.stream, cfg, argsFor(o, g.t, g.nv, prefetch));
      dev.stream.synchronize();
      return NaN;
    }
    return timer.time(() => k.launch(dev.stream, cfg, argsFor(o, g.t, g.nv, prefetch)));
  };
  const p = (planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, limits) as { plan: LaunchPlan }).plan;
  ref.buffer.fill(0xff);
  const cfg = new LaunchConfig(p);
  const prodK = normKernel(dev, p.kernel, NORM_FWD_ARGS);
  const prodMs = timed ? timer.time(() => prodK.launch(dev.stream, cfg, argsFor(ref, p.tpr, p.nv, p.prefetch))) : NaN;
  if (!timed) prodK.launch(dev.stream, cfg, argsFor(ref, p.tpr, p.nv, p.prefetch));
  const refBytes = edges(ref);
  const short = kind === "layer" ? "ln" : "rms";
  const line = [`${short.padEnd(3)} ${dtype.padEnd(4)} D=${String(d).padStart(6)} rows=${rows} *${p.mapping}${p.cluster > 1 ? "x" + p.cluster : ""} t${p.tpr} ${pct(prodMs).toFixed(1)}`];
  const rec: Record<string, unknown> = { kind, dtype, d, rows, plan: `${p.mapping}x${p.cluster} t${p.tpr}`, prod: gbs(prodMs) };
  let bad = 0;
  const clusterK = normKernel(dev, `nk_${short}_cluster_${dtype}_${dtype}_${dtype}`, NORM_FWD_ARGS);
  const cla = mod.kernel(`kc_${short}_cla_${dtype}`, NORM_FWD_ARGS);
  for (const c of [2, 4, 8]) {  // (C = 1, a launch without a cluster, hit an illegal instruction: st.async / mapa)
    const cpc = Math.ceil(chunks / c);
    // Threads for 8 chunks each (the production choice), and for 4.
    const threads = [...new Set([8, 4].map((n) => Math.max(32, Math.ceil(cpc / n / 32) * 32)))].filter((t) => t <= 512);
    for (const t of threads) {
      const nv = Math.ceil(cpc / t);
      // The production cluster kernel (C >= 2), one cluster per row as the plan launches it: the bitwise reference.
      let cref: Uint8Array[] | undefined;
      const tag0 = `c${c}t${t}`;
      if (c >= 2) {
        const g: Geo = { c, t, nv, grid: Math.min(rows, Math.floor(limits.maxGridX / c)) * c, smem: prodShared(t) };
        const ms = run(clusterK, g, y);
        cref = edges(y);
        const e = errOf(cref, refBytes, dtype);
        line.push(`cl${tag0} ${pct(ms).toFixed(1)}${e > (dtype === "f32" ? 1e-5 : 1e-2) ? `(ERR ${e.toExponential(1)})` : ""}`);
        rec[`cl${tag0}`] = gbs(ms);
        const active = Math.min(rows, cla.activeClusters(t, claShared(t), c));
        // The plan's grid; a persistent one; the persistent one with an L2 prefetch of each CTA's next row.
        for (const [grid, pf] of [[g.grid, 0], [active * c, 0], [active * c, active]]) {
          const ms2 = run(cla, { ...g, grid, smem: claShared(t) }, y, pf);
          const same = sameBytes(edges(y), cref);
          if (!same) bad++;
          const tag = `a${tag0}${grid === g.grid ? "" : "p" + grid / c}${pf ? "pf" : ""}`;
          line.push(`${tag} ${pct(ms2).toFixed(1)}${same ? "" : "(DIFF)"}`);
          rec[tag] = gbs(ms2);
        }
      }
      for (const s of [2, 3]) {
        const smem = tmaShared(t, s, cpc);
        if (smem > SMEM_MAX) continue;
        const k = mod.kernel(`kc_${short}_tma${s}_${dtype}`, NORM_FWD_ARGS);
        const resident = c === 1 ? k.occupancy(t, smem) * dev.info.multiprocessors : k.activeClusters(t, smem, c);
        if (resident < 1) continue;
        const g: Geo = { c, t, nv, grid: Math.min(rows, resident) * c, smem };
        const ms = run(k, g, y);
        const got = edges(y);
        const e = errOf(got, refBytes, dtype);
        const same = cref ? sameBytes(got, cref) : e <= (dtype === "f32" ? 1e-5 : 1e-2);
        if (!same) bad++;
        const tag = `t${s}${tag0}n${g.grid / c}`;
        line.push(`${tag} ${pct(ms).toFixed(1)}${same ? "" : `(DIFF ${e.toExponential(1)})`}`);
        rec[tag] = gbs(ms);
      }
    }
  }
  rec.bad = bad;
  console.log(line.join(" "));
  out.push(rec);
  return bad;
}

/**
 * One long-row case of --block1024 / --cluster1024: its tensors, the production plan's output as the reference (timed)
 * and a variant runner that times a kernel, checks its output within 1e-5 (f32) / 1e-2 (bf16) relative of the
 * reference and records it. `asOp`: the production launch as the op makes it (a cluster plan on the clusters resident
 * at once; no prefetch argument), and the plan named with its cluster size; else the plan's own launch.
 */
function versusPlan(mode: string, kind: NormKind, dtype: DType, d: number, asOp: boolean) {
  const b = dtype === "f32" ? 4 : 2, rows = Math.ceil(2 ** 30 / (2 * d * b)), chunks = d / (16 / b);
  using held = new DisposableStack(); // freed here if anything below throws; handed to the result if not
  const { x, y, ref, w, bias } = held.use(caseTensors(d, dtype, rows));
  const a = (o: Tensor, t: number, nv: number, prefetch: number) =>
    [x, o, w, kind === "layer" ? bias : null, null, null, rows, d, d, d, 1e-5, t, nv, prefetch] as never;
  const pct = (ms: number) => (100 * (2 * rows * d * b) / (ms * 1e6)) / copyGBs;
  const p = (planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, limits) as { plan: LaunchPlan }).plan;
  const prodK = normKernel(dev, p.kernel, NORM_FWD_ARGS);
  const pg = asOp && p.mapping === "cluster" ? Math.min(p.grid[0] / p.cluster, prodK.activeClusters(p.block[0], p.sharedBytes, p.cluster)) * p.cluster : p.grid[0];
  const cfg = asOp ? new LaunchConfig({ grid: [pg], block: p.block, sharedBytes: p.sharedBytes, cluster: p.cluster }) : new LaunchConfig(p);
  ref.buffer.fill(0xff);
  const prodMs = timer.time(() => prodK.launch(dev.stream, cfg, a(ref, p.tpr, p.nv, asOp ? 0 : p.prefetch)));
  const refBytes = edges(ref);
  const planName = asOp ? `${p.mapping}x${p.cluster} t${p.tpr}` : `${p.mapping} t${p.tpr}`;
  const rec: Record<string, unknown> = { mode, kind, dtype, d, rows, plan: planName, prod: pct(prodMs) };
  const line = [`${kind.padEnd(5)} ${dtype.padEnd(4)} D=${String(d).padStart(6)} *${planName} ${pct(prodMs).toFixed(1)}`];
  const kernel = mod.kernel(`kc_${kind === "layer" ? "ln" : "rms"}_${mode}_${dtype}`, NORM_FWD_ARGS);
  const tol = dtype === "f32" ? 1e-5 : 1e-2;
  let bad = 0;
  const owned = held.move();
  return {
    rows, chunks, b, kernel,
    /** Times `kernel` on `cfg` (t threads, nv chunks each, prefetch pf), checks and records it as `tag`. */
    variant(tag: string, cfg: LaunchConfig, t: number, nv: number, pf = 0): void {
      y.buffer.fill(0xff);
      const ms = timer.time(() => kernel.launch(dev.stream, cfg, a(y, t, nv, pf)));
      const e = errOf(edges(y), refBytes, dtype);
      if (!(e <= tol)) bad++;
      line.push(`${tag} ${pct(ms).toFixed(1)}${e <= tol ? "" : `(ERR ${e.toExponential(1)})`}`);
      rec[tag] = pct(ms);
    },
    /** Prints and stores the case; returns the number of outputs out of tolerance. */
    finish(): number {
      console.log(line.join(" "));
      out.push(rec);
      return bad;
    },
    [Symbol.dispose]: () => owned.dispose(),
  };
}

/**
 * --block1024: variant `b` (the production `block` kernel compiled for 1024 threads) against the production plan on
 * rows that fill 1024 threads x 8 chunks or fewer: one row per block (grid = rows), with and without an L2
 * prefetch (0.5, 1, 2 MiB of x ahead; the plan's is 2 MiB).
 */
function block1024(kind: NormKind, dtype: DType, d: number): number {
  using v = versusPlan("block1024", kind, dtype, d, false);
  for (const t of [512, 1024]) {
    const nv = Math.ceil(v.chunks / t);
    if (nv > 8) continue;
    // Prefetch distances: none, and 0.5, 1, 2 MiB of x ahead (the plan's is 2 MiB); KB1024_DS limits the cases.
    for (const pf of [...new Set([0, 0.5, 1, 2].map((m) => Math.ceil(m * 2 ** 20 / (d * v.b))))]) {
      v.variant(`b${t}nv${nv}pf${pf}`, new LaunchConfig({ grid: [v.rows], block: [t], sharedBytes: 2 * (t / 32) * 4 }), t, nv, pf);
    }
  }
  return v.finish();
}

/**
 * --cluster1024: variant `c` (the production `cluster` kernel compiled for CTAs of up to 1024 threads) at C = 2, 4, 8
 * with 8 and 4 chunks per thread, on a persistent grid (the clusters resident at once, as the op launches them),
 * against the production launch as the op makes it.
 */
function cluster1024(kind: NormKind, dtype: DType, d: number): number {
  using v = versusPlan("cluster1024", kind, dtype, d, true);
  for (const cs of [2, 4, 8]) {
    const cpc = Math.ceil(v.chunks / cs);
    for (const nvT of [8, 4]) {
      const t = Math.max(32, Math.ceil(cpc / nvT / 32) * 32);
      if (t > 1024 || t < 512) continue;  // (smaller CTAs: the production kernel's own geometry)
      const nv = Math.ceil(cpc / t), smem = prodShared(t);
      const resident = v.kernel.activeClusters(t, smem, cs);
      if (resident < 1) continue;
      const n = Math.min(v.rows, resident);
      v.variant(`c${cs}t${t}nv${nv}n${n}`, new LaunchConfig({ grid: [n * cs], block: [t], sharedBytes: smem, cluster: cs }), t, nv);
    }
  }
  return v.finish();
}

let bad = 0;
try {
  if (args.includes("--cluster1024")) {
    for (const [dtype, d] of [["f32", 65536], ["f32", 131072], ["bf16", 65536], ["bf16", 131072], ["f32", 32768]] as [DType, number][]) {
      for (const kind of ["layer", "rms"] as NormKind[]) bad += cluster1024(kind, dtype, d);
    }
  } else if (args.includes("--block1024")) {
    const cases = ([["f32", 16384], ["f32", 32768], ["bf16", 32768], ["bf16", 65536]] as [DType, number][])
      .filter(([, d]) => !process.env.KB1024_DS || process.env.KB1024_DS.split(",").map(Number).includes(d));
    for (const [dtype, d] of cases) {
      for (const kind of ["layer", "rms"] as NormKind[]) bad += block1024(kind, dtype, d);
    }
  } else {
    clusterCases();
  }
} catch (e) {
  const err = e as { error?: unknown; suppressed?: unknown; stack?: string };
  console.log("FAILED:", err.stack ?? String(e), "| error:", String(err.error), "| suppressed:", String(err.suppressed));
  bad++;
}
console.log(`# outputs differing from the reference: ${bad}`);
if (jsonPath) writeFileSync(jsonPath, JSON.stringify({ copyGBs, device: dev.info.name, date: new Date().toISOString(), results: out }, null, 1));

/** The default run: the uneven case, then the grid's long rows (runCase for each). */
function clusterCases(): void {
  // Uneven slices (D = 40000: 10000 f32 / 5000 bf16 chunks), rows not a multiple of anything: whole output compared.
  for (const dtype of ["f32", "bf16"] as DType[]) for (const kind of ["layer", "rms"] as NormKind[]) bad += runCase(kind, dtype, 40000, 37, false);
  for (const d of DS) {
    for (const dtype of ["f32", "bf16"] as DType[]) {
      for (const kind of ["layer", "rms"] as NormKind[]) bad += runCase(kind, dtype, d, Math.ceil(2 ** 30 / (2 * d * (dtype === "f32" ? 4 : 2))), true);
    }
  }
}
