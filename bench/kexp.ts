/**
 * Times the forward-kernel experiments of bench/kexp.cu (cubin from bench/kexp.sh) against the production kernel
 * on the production plan's geometry and the grid the op launches (resident clusters for `cluster`), the way
 * bench/bench.ts times a case (256 MiB memset before each call, events, median of 30, 1 GiB per case, copy
 * ceiling in the same run), and checks every variant's output against the
 * production kernel's (bitwise for the same thread mapping, within 1e-5 / 1e-2 relative for the others).
 * Cluster cases also try persistent grids (as many clusters as the driver says fit at once, and twice that);
 * KX_STAGED=1 adds the cp.async `staged` kernels, KX_VARIANTS=0,3 limits the v-variants. --latency, --latency2 and
 * --wide3 run one experiment each instead (see each below).
 * Deno only (it asks the driver for max active clusters through its own Deno.dlopen). Informs
 * kernels/norm_fwd.cuh and ops/plan.ts; not part of the product. Results: bench/RESULTS.md, bench/results/kexp/.
 *   deno run -A bench/kexp.ts bench/kexp.cubin [--ds 128,32768] [--json out.json]
 */
import { Buffer } from "node:buffer";
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { Device, type DType, loadKernels } from "../mod.ts";
import { NORM_FWD_ARGS, normKernel, planLimits } from "../ops/kernels.ts";
import { fwdFull, type LaunchPlan, planNorm } from "../ops/plan.ts";
import { PlannedLaunch } from "../ops/plan_cache.ts";
import { decode } from "../runtime/dtype.ts";
import { LaunchConfig, type Kernel } from "../runtime/module.ts";
import { copyCeilingGBs, deviceTimer, median } from "./device_timer.ts";
import { caseTensors, randomTile } from "./tile.ts";

const args = process.argv.slice(2);
const cubinPath = args[0];
const dsArg = args.includes("--ds") ? args[args.indexOf("--ds") + 1] : undefined;
const jsonPath = args.includes("--json") ? args[args.indexOf("--json") + 1] : undefined;
const DS = dsArg ? dsArg.split(",").map(Number) : [128, 512, 768, 1024, 2048, 4096, 5120, 8192, 12288, 16384, 32768, 65536, 131072];
const VARIANTS = [0, 1, 2, 3, 4, 5, 6, 10, 12, 13, 14, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55];

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
using mod = dev.loadModule(new Uint8Array(readFileSync(cubinPath)));
using timer = deviceTimer(dev, 30); // memset before each call: device time only (bench/device_timer.ts)
const timeIt = (fn: () => void): number => timer.time(fn);
const copyGBs = copyCeilingGBs(dev, timer);
console.log(`# ${dev.info.name}, ${new Date().toISOString()}, copy ${copyGBs.toFixed(0)} GB/s`);
const tileValues = randomTile(7);
const out: Record<string, unknown>[] = [];
// Deno only: the driver calls this experiment needs and the runtime does not offer (max active clusters).
// deno-lint-ignore no-explicit-any
const D = (globalThis as any).Deno;
const cu = D.dlopen("libcuda.so.1", {
  cuModuleGetFunction: { parameters: ["buffer", "u64", "buffer"], result: "i32" },
  cuFuncSetAttribute: { parameters: ["u64", "i32", "i32"], result: "i32" },
  cuOccupancyMaxActiveClusters: { parameters: ["buffer", "u64", "buffer"], result: "i32" },
  cuOccupancyMaxActiveBlocksPerMultiprocessor: { parameters: ["buffer", "u64", "i32", "u64"], result: "i32" },
}).symbols;
/** Resident CTAs per SM and resident clusters for one geometry (0 when it cannot run). */
function residency(name: string, block: number, smem: number, cluster: number): { occ: number; clusters: number } {
  const fn = new BigUint64Array(1), n = new Int32Array(1);
  if (cu.cuModuleGetFunction(fn, mod.handle, new TextEncoder().encode(name + "\0")) !== 0) throw new Error("no " + name);
  if (cu.cuFuncSetAttribute(fn[0], 8, 232448) !== 0) throw new Error("cuFuncSetAttribute");
  if (cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(n, fn[0], block, BigInt(smem)) !== 0) throw new Error("occupancy");
  const occ = n[0];
  if (cluster === 1) return { occ, clusters: occ * dev.info.multiprocessors };
  const cfg = new ArrayBuffer(56 + 72), u32 = new Uint32Array(cfg), u64 = new BigUint64Array(cfg);
  u32[0] = cluster, u32[1] = 1, u32[2] = 1, u32[3] = block, u32[4] = 1, u32[5] = 1, u32[6] = smem;
  u64[40 / 8] = D.UnsafePointer.value(D.UnsafePointer.of(new Uint8Array(cfg))) + 56n;
  u32[48 / 4] = 1;
  u32[56 / 4] = 4, u32[64 / 4] = cluster, u32[68 / 4] = 1, u32[72 / 4] = 1;
  const rc = cu.cuOccupancyMaxActiveClusters(n, fn[0], new Uint8Array(cfg));
  if (rc !== 0) throw new Error("cuOccupancyMaxActiveClusters " + rc);
  return { occ, clusters: n[0] };
}
/** Largest |a-b|/(1+|b|) over two arrays (a NaN counts as Infinity). */
function relErr(a: Float32Array, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs(a[i] - b[i]) / (1 + Math.abs(b[i]));
    if (!(e <= m)) m = Number.isNaN(e) ? Infinity : e;
  }
  return m;
}
/**
 * One case of the 1 GiB grid: x (from the tile) and y of `rows` rows of D, a reference output of the same shape,
 * and γ = 1 + v/8, β = v from the tile, all in `dtype`; b: bytes per element. Disposing it frees them all.
 */
function longRowCase(d: number, dtype: DType) {
  const b = dtype === "f32" ? 4 : 2, rows = Math.ceil(2 ** 30 / (2 * d * b));
  return { b, rows, ...caseTensors(dev, tileValues, d, dtype, rows) };
}
/**
 * Hard LayerNorm rows, f32: mean 1e4, std 1e-2, x[0] 100 std off (so a shift k = x[0] is far from the mean),
 * and their float64 LayerNorm (no affine, eps 1e-5).
 */
function hardLnRows(rows: number, d: number): { xs: Float32Array; want: Float64Array } {
  const xs = new Float32Array(rows * d);
  for (let i = 0; i < xs.length; i++) xs[i] = 1e4 + 1e-2 * tileValues[i];
  for (let r = 0; r < rows; r++) xs[r * d] = 1e4 + (r % 2 ? 1 : -1);
  const want = new Float64Array(rows * d);
  for (let r = 0; r < rows; r++) {
    let m = 0, v = 0;
    for (let j = 0; j < d; j++) m += xs[r * d + j];
    m /= d;
    for (let j = 0; j < d; j++) v += (xs[r * d + j] - m) ** 2;
    const rs = 1 / Math.sqrt(v / d + 1e-5);
    for (let j = 0; j < d; j++) want[r * d + j] = (xs[r * d + j] - m) * rs;
  }
  return { xs, want };
}
/** Largest |a-b|/(1+|b|) over the first and last 16 MiB of two tensors (a NaN anywhere counts as Infinity). */
function maxRelDiff(a: { buffer: { read(d: Uint8Array, o?: { offset: number }): void; byteLength: number } }, r: typeof a, dtype: DType): number {
  let m = 0;
  for (const off of [0, a.buffer.byteLength - 2 ** 24]) {
    const ba = new Uint8Array(2 ** 24), br = new Uint8Array(2 ** 24);
    a.buffer.read(ba, { offset: off });
    r.buffer.read(br, { offset: off });
    const va = decode(ba, dtype), vr = decode(br, dtype);
    for (let i = 0; i < va.length; i++) {
      const e = Math.abs(va[i] - vr[i]) / (1 + Math.abs(vr[i]));
      if (!(e <= m)) m = Number.isNaN(e) ? Infinity : e;
    }
  }
  return m;
}
const limits = planLimits(dev);
/** v6's dynamic shared memory: the mapping's own (reduction buffers, 16-byte aligned), then weight and bias rows. */
const v6Shared = (base: number, kind: "layer" | "rms", d: number, b: number): number =>
  Math.ceil(base / 16) * 16 + (kind === "layer" ? 2 : 1) * d * b;

// --latency: the small-batch regime of issue 5 instead (bf16, weight/bias bf16, 1–64 rows): device time per op
// from a captured graph of 100 launches replayed 50 times, production kernel against the v-variants, with
// programmatic dependent launch on for all of them.
if (args.includes("--latency")) {
  using stream = dev.createStream();
  using e0 = dev.createEvent(), e1 = dev.createEvent();
  for (const kind of ["layer", "rms"] as const) {
    for (const d of [2048, 4096, 8192]) {
      using w = dev.tensor(tileValues.subarray(0, d).map((v) => 1 + v / 8), [d], { dtype: "bf16" });
      using bias = dev.tensor(tileValues.subarray(d, 2 * d), [d], { dtype: "bf16" });
      for (const rows of [1, 8, 64]) {
        using x = dev.tensor(tileValues.subarray(0, rows * d), [rows, d], { dtype: "bf16" });
        using y = dev.empty([rows, d], { dtype: "bf16" });
        const p = (planNorm({ kind, rows, d, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "bf16" }, limits) as { plan: LaunchPlan }).plan;
        const cfg = new LaunchConfig(p);
        const a = [x, y, w, kind === "layer" ? bias : null, null, null, rows, d, d, d, 1e-5, p.tpr, p.nv, p.prefetch];
        const short = p.kernel.split("_")[1];
        const line: string[] = [`${kind.padEnd(5)} D=${String(d).padStart(5)} rows=${String(rows).padStart(2)} ${p.mapping}:`];
        const kernels: [string, Kernel][] = [["prod", normKernel(dev, p.kernel, NORM_FWD_ARGS)]];
        for (const v of [0, 3, 4]) kernels.push([`v${v}`, mod.kernel(`kx_${short}_${p.mapping}_bf16_v${v}`, NORM_FWD_ARGS)]);
        for (const [tag, k] of kernels) {
          k.dependentLaunch = true;
          using graph = stream.capture(() => {
            for (let i = 0; i < 100; i++) k.launch(stream, cfg, a);
          });
          using exec = graph.instantiate();
          for (let i = 0; i < 5; i++) exec.launch(stream);
          stream.synchronize();
          const ts: number[] = [];
          for (let r = 0; r < 5; r++) {
            e0.record(stream);
            for (let i = 0; i < 10; i++) exec.launch(stream);
            e1.record(stream);
            e1.synchronize();
            ts.push((e1.elapsedSince(e0) * 1000) / 1000);
          }
          line.push(`${tag} ${median(ts).toFixed(2)}µs`);
        }
        console.log(line.join(" "));
      }
    }
  }
  process.exit(0);
}
// --latency2: the small-batch block-mapping variants kx_*_lat_*_v{6,7,8,9} (bench/kexp.cu) against the production
// kernels, at 1, 2 and 4 chunks per thread, bf16 and f32, weight/bias in the input dtype, PDL on; device time per
// op from a replayed graph of 100 launches. Every output is compared with the production default plan's
// (max |a-b|/(1+|b|)), and a hard LN case (f32 rows with mean 1e4, std 1e-2 and x[0] 100 std off) with float64.
if (args.includes("--latency2")) {
  using stream = dev.createStream();
  using e0 = dev.createEvent(), e1 = dev.createEvent();
  const graphUs = (k: Kernel, cfg: LaunchConfig, a: unknown[]): number => {
    k.dependentLaunch = true;
    using graph = stream.capture(() => {
      for (let i = 0; i < 100; i++) k.launch(stream, cfg, a as never);
    });
    using exec = graph.instantiate();
    for (let i = 0; i < 5; i++) exec.launch(stream);
    stream.synchronize();
    const ts: number[] = [];
    for (let r = 0; r < 5; r++) {
      e0.record(stream);
      for (let i = 0; i < 20; i++) exec.launch(stream);
      e1.record(stream);
      e1.synchronize();
      ts.push((e1.elapsedSince(e0) * 1000) / 2000);
    }
    return median(ts);
  };
  for (const dtype of ["bf16", "f32"] as DType[]) {
    for (const kind of ["layer", "rms"] as const) {
      for (const d of [2048, 4096, 8192]) {
        using w = dev.tensor(tileValues.subarray(0, d).map((v) => 1 + v / 8), [d], { dtype });
        using bias = dev.tensor(tileValues.subarray(d, 2 * d), [d], { dtype });
        for (const rows of [1, 8, 64, 132]) {
          using x = dev.tensor(tileValues.subarray(0, rows * d), [rows, d], { dtype });
          using y = dev.empty([rows, d], { dtype });
          const p = (planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, limits) as { plan: LaunchPlan }).plan;
          const short = kind === "layer" ? "ln" : "rms";
          const argsFor = (q: { tpr: number; nv: number }) => [x, y, w, kind === "layer" ? bias : null, null, null, rows, d, d, d, 1e-5, q.tpr, q.nv, 0];
          const prod = normKernel(dev, p.kernel, NORM_FWD_ARGS);
          const line = [`${dtype} ${kind.padEnd(5)} D=${String(d).padStart(5)} rows=${String(rows).padStart(3)}: *${p.mapping} t${p.block[0]} nv${p.nv} ${graphUs(prod, new LaunchConfig(p), argsFor(p)).toFixed(2)}`];
          y.buffer.fill(0xff);
          prod.launch(stream, new LaunchConfig(p), argsFor(p) as never);
          const ref = y.readSync({ stream });
          const chunks = d / (dtype === "f32" ? 4 : 8);
          for (const nv of [1, 2, 4]) {
            const t = Math.ceil(chunks / nv / 32) * 32;
            if (t > 512) continue;
            const q = { tpr: t, nv: Math.ceil(chunks / t) };
            const cfg = new LaunchConfig({ grid: rows, block: t, sharedBytes: 3 * (t / 32) * 4 });
            const ks: [string, Kernel][] = [["blk", normKernel(dev, p.kernel.replace(/_(rows|block)_/, "_block_"), NORM_FWD_ARGS)]];
            for (const v of kind === "layer" ? [6, 7, 8, 9] : [6]) ks.push([`v${v}`, mod.kernel(`kx_${short}_lat_${dtype}_v${v}`, NORM_FWD_ARGS)]);
            const cells: string[] = [];
            for (const [tag, k] of ks) {
              y.buffer.fill(0xff);
              k.launch(stream, cfg, argsFor(q) as never);
              const err = relErr(y.readSync({ stream }), ref);
              const us = graphUs(k, cfg, argsFor(q));
              out.push({ mode: "latency2", dtype, kind, d, rows, variant: tag, tpr: t, nv: q.nv, us, err, default_plan: `${p.mapping} t${p.block[0]} nv${p.nv}` });
              cells.push(`${tag} ${us.toFixed(2)}${err > (dtype === "f32" ? 1e-5 : 1e-2) ? ` ERR ${err.toExponential(1)}` : ""}`);
            }
            line.push(`t${t} nv${q.nv}: ${cells.join(" ")}`);
          }
          console.log(line.join(" | "));
        }
      }
    }
  }
  // Hard LN rows: mean 1e4, std 1e-2, x[0] 100 std off (the shift k = x[0] is far from the mean), f32, no affine.
  {
    const d = 4096, rows = 8;
    const { xs, want } = hardLnRows(rows, d);
    using x = dev.tensor(xs, [rows, d]);
    using y = dev.empty([rows, d]);
    const cfg = new LaunchConfig({ grid: rows, block: 256, sharedBytes: 3 * 8 * 4 });
    const a = [x, y, null, null, null, null, rows, d, d, d, 1e-5, 256, 4, 0];
    const cells: string[] = [];
    for (const [tag, k] of [["blk", normKernel(dev, "nk_ln_block_f32_f32_f32", NORM_FWD_ARGS)], ...[6, 7, 8, 9].map((v) => [`v${v}`, mod.kernel(`kx_ln_lat_f32_v${v}`, NORM_FWD_ARGS)])] as [string, Kernel][]) {
      y.buffer.fill(0xff);
      k.launch(stream, cfg, a as never);
      const err = relErr(y.readSync({ stream }), want);
      out.push({ mode: "latency2-hard", variant: tag, err });
      cells.push(`${tag} ${err.toExponential(2)}`);
    }
    console.log(`hard LN f32 D=4096 (mean 1e4, std 1e-2, x0 100 std off), max |y-y64|/(1+|y64|): ${cells.join(" ")}`);
  }
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(out, null, 1));
  process.exit(0);
}
// --wide3: LayerNorm's long rows (D >= 16384), weight/bias in the input dtype: the production plan, the production
// `wide` kernel (three passes), and kx_ln_wide3 (two passes, Chan statistics; bench/kexp.cu) at U = 2, 4 and 512 or
// 1024 threads, one or two CTAs per SM (persistent). Outputs are compared with the production plan's
// (max |a-b|/(1+|b|) over the first and last 16 MiB); then hard f32 rows (mean 1e4, std 1e-2, x[0] 100 std off)
// against float64 for both `wide` kernels.
if (args.includes("--wide3")) {
  for (const d of dsArg ? DS : [16384, 32768, 65536, 131072]) {
    for (const dtype of ["f32", "bf16"] as DType[]) {
      using c = longRowCase(d, dtype);
      const { b, rows, x, y, ref, w, bias } = c;
      const p = (planNorm({ kind: "layer", rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, limits) as { plan: LaunchPlan }).plan;
      const argsFor = (o: typeof y, tpr: number, nv: number) => [x, o, w, bias, null, null, rows, d, d, d, 1e-5, tpr, nv, 0];
      const gbs = (ms: number) => (2 * rows * d * b) / (ms * 1e6);
      const pct = (ms: number) => (100 * gbs(ms) / copyGBs).toFixed(1);
      ref.buffer.fill(0xff);
      const prodMs = timeIt(() => normKernel(dev, p.kernel, NORM_FWD_ARGS).launch(dev.stream, new LaunchConfig(p), argsFor(ref, p.tpr, p.nv)));
      const rec: Record<string, unknown> = { mode: "wide3", dtype, d, rows, plan: `${p.mapping}x${p.cluster} t${p.tpr}`, prod: gbs(prodMs) };
      const line = [`ln ${dtype.padEnd(4)} D=${String(d).padStart(6)} *${p.mapping}${p.cluster > 1 ? "x" + p.cluster : ""} t${p.tpr} ${pct(prodMs)}`];
      const kernels: [string, Kernel][] = [["wide", normKernel(dev, `nk_ln_wide_${dtype}_${dtype}_${dtype}`, NORM_FWD_ARGS)]];
      for (const u of [2, 4]) kernels.push([`w3u${u}`, mod.kernel(`kx_ln_wide3u${u}_${dtype}`, NORM_FWD_ARGS)]);
      for (const [tag, k] of kernels) {
        for (const T of [512, 1024]) {
          const smem = 2 * (T / 32) * 4;
          for (const perSm of [1, 2]) {
            if (T * perSm > 2048 || (tag === "wide" && T === 512 && perSm === 1)) continue;
            const c = new LaunchConfig({ grid: [Math.min(rows, perSm * dev.info.multiprocessors)], block: [T], sharedBytes: smem });
            y.buffer.fill(0xff);
            const ms = timeIt(() => k.launch(dev.stream, c, argsFor(y, T, 0)));
            const err = maxRelDiff(y, ref, dtype);
            const cell = `${tag}t${T}x${perSm}`;
            rec[cell] = gbs(ms);
            rec[cell + "_err"] = err;
            line.push(`${cell} ${pct(ms)}${err > (dtype === "f32" ? 1e-5 : 1e-2) ? `(ERR ${err.toExponential(1)})` : ""}`);
          }
        }
      }
      console.log(line.join(" "));
      out.push(rec);
    }
  }
  {
    const d = 32768, rows = 8;
    const { xs, want } = hardLnRows(rows, d);
    using x = dev.tensor(xs, [rows, d]);
    using y = dev.empty([rows, d]);
    const cfg = new LaunchConfig({ grid: rows, block: 1024, sharedBytes: 2 * 32 * 4 });
    const cells: string[] = [];
    for (const [tag, k] of [["wide", normKernel(dev, "nk_ln_wide_f32_f32_f32", NORM_FWD_ARGS)], ["w3u4", mod.kernel("kx_ln_wide3u4_f32", NORM_FWD_ARGS)]] as [string, Kernel][]) {
      y.buffer.fill(0xff);
      k.launch(dev.stream, cfg, [x, y, null, null, null, null, rows, d, d, d, 1e-5, 1024, 0, 0] as never);
      const err = relErr(y.readSync(), want);
      out.push({ mode: "wide3-hard", variant: tag, err });
      cells.push(`${tag} ${err.toExponential(2)}`);
    }
    console.log(`hard LN f32 D=${d} (mean 1e4, std 1e-2, x0 100 std off), max |y-y64|/(1+|y64|): ${cells.join(" ")}`);
  }
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify({ copyGBs, device: dev.info.name, date: new Date().toISOString(), results: out }, null, 1));
  process.exit(0);
}
try {
for (const d of DS) {
  for (const dtype of ["f32", "bf16"] as DType[]) {
    using c = longRowCase(d, dtype);
    const { b, rows, x, y, ref, w, bias } = c;
    for (const kind of ["layer", "rms"] as const) {
      const r = planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, limits);
      const p = (r as { plan: LaunchPlan }).plan;
      // The last argument: the plan's prefetch distance (the production kernel as the plan launches it; v7-v9 set
      // their own; the other kx_ variants ignore it).
      const argsFor = (o: typeof y) => [x, o, w, kind === "layer" ? bias : null, null, null, rows, d, d, d, 1e-5, p.tpr, p.nv, p.prefetch];
      const gbs = (ms: number) => (2 * rows * d * b) / (ms * 1e6);
      // The kernel and launch the op makes (PlannedLaunch): for `cluster`, as many clusters as are resident at once, not
      // the plan's one cluster per row (timing the latter made "prod" read up to 14 points off the benchmark, 2026-12-01).
      // The buffers are fresh and unpadded, so LayerNorm's D (a multiple of the chunk here) takes its vector-only kernel.
      const planned = new PlannedLaunch(p), full = fwdFull(d, dtype, dtype, x.ptr, d, ref.ptr, d, w.ptr, bias.ptr);
      const prod = planned.kernel(dev, full), cfg = planned.configFor(full), prodGrid = cfg.grid[0];
      ref.buffer.fill(0xff);
      const prodMs = timeIt(() => prod.launch(dev.stream, cfg, argsFor(ref)));
      const refHead = new Uint8Array(2 ** 24), refTail = new Uint8Array(2 ** 24);
      ref.buffer.read(refHead);
      ref.buffer.read(refTail, { offset: ref.buffer.byteLength - 2 ** 24 });
      const line: string[] = [`${kind.padEnd(5)} ${dtype.padEnd(4)} D=${String(d).padStart(6)} ${p.mapping}${p.cluster > 1 ? "x" + p.cluster : ""} t${p.tpr} nv${p.nv}: prod ${(100 * gbs(prodMs) / copyGBs).toFixed(1)}`];
      const rec: Record<string, unknown> = { kind, dtype, d, rows, mapping: p.mapping, cluster: p.cluster, tpr: p.tpr, nv: p.nv, prod: gbs(prodMs), prodGrid, prodKernel: prod.name };
      const short = p.kernel.split("_")[0] + "_" + p.kernel.split("_")[1];
      for (const v of VARIANTS) {
        if (process.env.KX_VARIANTS && !process.env.KX_VARIANTS.split(",").includes(String(v))) continue;
        const name = `kx_${short.slice(3)}_${p.mapping}_${dtype}_v${v}`;
        let k: Kernel;
        try {
          k = mod.kernel(name, NORM_FWD_ARGS);
        } catch {
          continue; // no such variant (wide mapping)
        }
        // v40/v41 split 128 KB rows between registers and shared memory at 512 threads, v42-v46 stage weight/bias in
        // shared memory (bench/kexp.cu, staged chunks per thread WSMEM_NW): only where the plan gives such a row one
        // 1024-thread block.
        const WSMEM_NW: Record<number, number> = { 42: 6, 43: 4, 44: 4, 45: 7, 46: 6, 47: 4, 48: 4, 49: 7, 50: 4 };
        const split = v === 40 || v === 41, wsmem = v in WSMEM_NW;
        if ((split || wsmem) && !(p.mapping === "block" && p.block[0] === 1024)) continue;
        // v51/v52: the split at 1024 threads, one block per SM, for cluster rows of 1024 x 9..16 chunks.
        const HYBRID_NR: Record<number, number> = { 51: 8, 52: 8, 53: 6, 54: 4, 55: 8 };
        const hnv = d / (16 / b) / 1024, hybrid = v in HYBRID_NR;
        if (hybrid && !((p.mapping === "cluster" || p.mapping === "stash") && Number.isInteger(hnv) && hnv > 8 && hnv <= 16)) continue;
        // v6 stages weight/bias in shared memory once per CTA: its own shared size, and a persistent grid too.
        const smem = hybrid ? 256 + 1024 * (hnv - HYBRID_NR[v]) * 16 : split ? 256 + 512 * 8 * 16 : wsmem ? 256 + 1024 * WSMEM_NW[v] * 32 : v === 6 ? v6Shared(p.sharedBytes, kind, d, b) : p.sharedBytes;
        const grids = hybrid ? [rows, dev.info.multiprocessors] : p.mapping === "cluster"
          ? [p.grid[0], ...[1, 2].map((m) => m * residency(name, p.block[0], p.sharedBytes, p.cluster).clusters * p.cluster)]
          : v === 6
          ? [...new Set([p.grid[0], Math.min(p.grid[0], k.occupancy(p.block[0], smem) * dev.info.multiprocessors)])]
          : split || wsmem ? [p.grid[0]]
          : v >= 20 ? [p.grid[0], 4 * p.grid[0]] // the tile (v20-v24): also about a CTA per 32 rows, as Triton launches
          : [p.grid[0]];
        for (const g of grids) {
          y.buffer.fill(0xff);
          const c = hybrid
            ? new LaunchConfig({ grid: [g], block: [1024, 1, 1], sharedBytes: smem })
            : new LaunchConfig({ grid: [g], block: split ? [512, 1, 1] : p.block, sharedBytes: smem, cluster: p.cluster });
          const args = argsFor(y);
          if (split) args[11] = 512, args[12] = (p.nv * p.block[0]) / 512;
          if (hybrid) args[11] = 1024, args[12] = hnv, args[13] = 0;
          const ms = timeIt(() => k.launch(dev.stream, c, args));
          const head = new Uint8Array(2 ** 24), tail = new Uint8Array(2 ** 24);
          y.buffer.read(head);
          y.buffer.read(tail, { offset: y.buffer.byteLength - 2 ** 24 });
          const same = Buffer.compare(head, refHead) === 0 && Buffer.compare(tail, refTail) === 0;
          const tag = hybrid ? `v${v}@${g}` : `v${v}${g === p.grid[0] && grids.indexOf(g) === 0 ? "" : "@" + g / p.cluster}`;
          // Where the bits differ: the largest |y - prod| / (1 + |prod|) over the first and last 16 MiB.
          const err = same ? 0 : maxRelDiff(y, ref, dtype);
          line.push(`${tag} ${(100 * gbs(ms) / copyGBs).toFixed(1)}${same ? "" : `(DIFF ${err.toExponential(1)})`}`);
          rec[tag] = gbs(ms);
          if (!same) rec[tag + "_diff"] = true, rec[tag + "_err"] = err;
        }
        if (v === 0) rec.regs = k.attribute("registers");
      }
      // v7 / v8 (rows, block): an L2 prefetch pd rows ahead, the production grid. pd in fractions of the rows resident on
      // the device at once (R): a row pd ahead starts about pd / R of a CTA's lifetime later.
      // KX_PD: the fractions of R to try (default 0,1/8,1/4,1/2,1); cluster: R = resident clusters.
      const fracs = (process.env.KX_PD ?? "0,0.125,0.25,0.5,1").split(",").map(Number);
      if (p.mapping !== "wide" && (!process.env.KX_VARIANTS || process.env.KX_VARIANTS.split(",").includes("7"))) {
        for (const v of p.mapping === "rows" ? [7, 8, 9] : [7]) {
          const name = `kx_${short.slice(3)}_${p.mapping}_${dtype}_v${v}`;
          const k = mod.kernel(name, NORM_FWD_ARGS);
          const smem = v === 8 ? v6Shared(0, kind, d, b) : p.sharedBytes;
          const R = p.mapping === "cluster"
            ? residency(name, p.block[0], smem, p.cluster).clusters
            : k.occupancy(p.block[0], smem) * dev.info.multiprocessors * (p.mapping === "rows" ? 256 / p.tpr : 1);
          for (const f of fracs) {
            const pd = Math.round(R * f);
            y.buffer.fill(0xff);
            const a = argsFor(y);
            a[13] = pd;
            const c = new LaunchConfig({ grid: p.grid, block: p.block, sharedBytes: smem, cluster: p.cluster });
            const ms = timeIt(() => k.launch(dev.stream, c, a as never));
            const head = new Uint8Array(2 ** 24), tail = new Uint8Array(2 ** 24);
            y.buffer.read(head);
            y.buffer.read(tail, { offset: y.buffer.byteLength - 2 ** 24 });
            const same = Buffer.compare(head, refHead) === 0 && Buffer.compare(tail, refTail) === 0;
            const tag = `v${v}pd${pd}`;
            line.push(`${tag} ${(100 * gbs(ms) / copyGBs).toFixed(1)}${same ? "" : "(DIFF)"}`);
            rec[tag] = gbs(ms);
            rec[`v${v}R`] = R;
          }
        }
      }
      // The staged experiment (rows too long for one block's registers): every (NVS, cluster, stages) that fits.
      if (process.env.KX_STAGED && (p.mapping === "cluster" || (p.mapping === "block" && d >= 16384))) {
        const chunks = d / (16 / b);
        for (const nvs of [4, 8]) {
          let k: Kernel;
          try {
            k = mod.kernel(`kx_${short.slice(3)}_staged${nvs}_${dtype}`, NORM_FWD_ARGS);
          } catch {
            continue;
          }
          for (const cl of [1, 2, 4, 8]) {
            const cpc = Math.ceil(chunks / cl);
            const T = Math.ceil(cpc / nvs / 32) * 32;
            if (T > (nvs === 4 ? 1024 : 512)) continue;
            for (const S of [2, 3, 4]) {
              const head = ((2 * (T / 32) + 2 + S + 3) & ~3) * 4;
              const smem = head + S * cpc * 16;
              if (smem > 232448) continue;
              const { occ, clusters } = residency(`kx_${short.slice(3)}_staged${nvs}_${dtype}`, T, smem, cl);
              if (occ < 1 || clusters < 1) continue;
              const ncl = Math.min(rows, clusters);
              const c = new LaunchConfig({ grid: [ncl * cl], block: [T], sharedBytes: smem, cluster: cl });
              y.buffer.fill(0xff);
              const a = argsFor(y);
              a[11] = T, a[12] = S;
              const ms = timeIt(() => k.launch(dev.stream, c, a));
              const err = maxRelDiff(y, ref, dtype);
              const tag = `st${nvs}c${cl}s${S}o${occ}n${ncl}`;
              line.push(`${tag} ${(100 * gbs(ms) / copyGBs).toFixed(1)}${err > (dtype === "f32" ? 1e-5 : 1e-2) ? `(ERR ${err.toExponential(1)})` : ""}`);
              rec[tag] = gbs(ms);
              rec[tag + "_err"] = err;
            }
          }
        }
      }
      // The wide2 experiment: one CTA per row streaming the row U chunks per thread at a time.
      if (d >= 16384 && process.env.KX_WIDE2 !== "0") {
        for (const u of [2, 4]) {
          const name = `kx_${short.slice(3)}_wide2u${u}_${dtype}`;
          const k = mod.kernel(name, NORM_FWD_ARGS);
          for (const T of [256, 512, 1024]) {
            const smem = 2 * (T / 32) * 4;
            const { occ } = residency(name, T, smem, 1);
            for (const g of [rows, occ * dev.info.multiprocessors]) {
              const c = new LaunchConfig({ grid: [g], block: [T], sharedBytes: smem });
              y.buffer.fill(0xff);
              const a = argsFor(y);
              a[11] = T;
              const ms = timeIt(() => k.launch(dev.stream, c, a));
              const err = maxRelDiff(y, ref, dtype);
              const tag = `w${u}t${T}${g === rows ? "" : "p" + occ}`;
              line.push(`${tag} ${(100 * gbs(ms) / copyGBs).toFixed(1)}${err > (dtype === "f32" ? 1e-5 : 1e-2) ? `(ERR ${err.toExponential(1)})` : ""}`);
              rec[tag] = gbs(ms);
            }
          }
        }
      }
      // `wide` with an L2 prefetch of the row `pd` rows ahead (pd = the grid: the CTA's own next row), one 1024-thread
      // CTA per SM: kx_ln_wide3u4 (the production LayerNorm `wide`), kx_rms_wide2u4 (RMSNorm's).
      if (p.mapping === "wide" && process.env.KX_WIDE_PF) {
        const k = mod.kernel(kind === "layer" ? `kx_ln_wide3u4_${dtype}` : `kx_rms_wide2u4_${dtype}`, NORM_FWD_ARGS);
        const g = Math.min(rows, dev.info.multiprocessors);
        for (const pd of [0, g >> 1, g, 2 * g]) {
          const c = new LaunchConfig({ grid: [g], block: [1024], sharedBytes: 2 * 32 * 4 });
          y.buffer.fill(0xff);
          const a = argsFor(y);
          a[11] = 1024, a[13] = pd;
          const ms = timeIt(() => k.launch(dev.stream, c, a as never));
          const err = maxRelDiff(y, ref, dtype);
          line.push(`wpf${pd} ${(100 * gbs(ms) / copyGBs).toFixed(1)}${err > (dtype === "f32" ? 1e-5 : 1e-2) ? `(ERR ${err.toExponential(1)})` : ""}`);
          rec[`wpf${pd}`] = gbs(ms);
        }
      }
      // KX_GRIDDIV=1, rows and block mappings: the production kernel (the plan's geometry and prefetch) on a grid k times
      // smaller, each CTA looping over k row groups: what the prologue per CTA costs.
      if ((p.mapping === "rows" || p.mapping === "block") && process.env.KX_GRIDDIV) {
        for (const k of [2, 4, 8, 32]) {
          const c = new LaunchConfig({ grid: [Math.ceil(p.grid[0] / k)], block: p.block, sharedBytes: p.sharedBytes });
          y.buffer.fill(0xff);
          const ms = timeIt(() => prod.launch(dev.stream, c, argsFor(y) as never));
          line.push(`g/${k} ${(100 * gbs(ms) / copyGBs).toFixed(1)}`);
          rec[`grid/${k}`] = gbs(ms);
        }
      }
      // The rows mapping: the production kernel at other lane counts per row.
      if (p.mapping === "rows") {
        const chunks = Math.ceil(d / (16 / b));
        for (let tpr = 1; tpr <= 32; tpr *= 2) {
          const nv = Math.ceil(chunks / tpr);
          if (nv > 8 || tpr === p.tpr) continue;
          const c = new LaunchConfig({ grid: [Math.ceil(rows / (256 / tpr))], block: [256] });
          const a = argsFor(y);
          a[11] = tpr, a[12] = nv;
          const ms = timeIt(() => prod.launch(dev.stream, c, a));
          line.push(`t${tpr} ${(100 * gbs(ms) / copyGBs).toFixed(1)}`);
          rec[`t${tpr}`] = gbs(ms);
          if (!process.env.KX_VARIANTS || process.env.KX_VARIANTS.split(",").includes("6")) {
            const k6 = mod.kernel(`kx_${short.slice(3)}_rows_${dtype}_v6`, NORM_FWD_ARGS);
            const smem = v6Shared(0, kind, d, b);
            const g = Math.min(Math.ceil(rows / (256 / tpr)), k6.occupancy(256, smem) * dev.info.multiprocessors);
            y.buffer.fill(0xff);
            const ms6 = timeIt(() => k6.launch(dev.stream, new LaunchConfig({ grid: [g], block: [256], sharedBytes: smem }), a));
            line.push(`v6t${tpr}@${g} ${(100 * gbs(ms6) / copyGBs).toFixed(1)}`);
            rec[`v6t${tpr}`] = gbs(ms6);
          }
        }
      }
      console.log(line.join(" "));
      out.push(rec);
    }
  }
}
} catch (e) {
  const err = e as { error?: unknown; suppressed?: unknown; stack?: string };
  console.log("FAILED:", err.stack ?? String(e), "| error:", String(err.error), "| suppressed:", String(err.suppressed));
}
if (jsonPath) writeFileSync(jsonPath, JSON.stringify({ copyGBs, device: dev.info.name, date: new Date().toISOString(), results: out }, null, 1));
