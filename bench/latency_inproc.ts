/**
 * TS against C launches in ONE process (the target: eager launches within 1.1× of C), batch against batch.
 *
 * bench/latency.ts and bench/latency_c.c run in two processes; on a virtualized host one program's median launch cost
 * moves by up to 1 µs between processes (C: 2.5 ↔ 3.7 µs), ten times the 10% the target allows. Here C code
 * (bench/launch_shim.c, loaded over the runtime's FFI) makes the same launches (kernel, grid, block, shared
 * memory, argument values, dependent-launch attribute) on the same thread, context, stream and buffers, and
 * the two alternate: PAIRS pairs of one TS batch (BATCH `rmsNorm`/`layerNorm(x, {weight, out})` calls timed
 * as one interval in JS) and one C batch (BATCH `cuLaunchKernel(Ex)` calls timed in C), their order
 * swapped every pair; the stream is synchronized every 256 launches outside the timed intervals. Reported
 * per case: the median µs per call of each side, their ratio, and the median of the per-pair ratios.
 * The whole case list runs --passes times (default 2) in the process; the JSON's `results` are the last pass
 * (steady state: the JS engine has compiled the hot path by then), the earlier ones are in `earlier_passes`.
 * --layers L (default 1): a model's sequence instead of one call repeated. Each case gets L weights (and biases),
 * and consecutive calls take them in turn, x and out staying the same (a decoder's layers over static buffers);
 * the C side takes the same pointers in the same order (nk_shim_layers).
 *
 *   bash bench/build-c.sh
 *   deno run -A bench/latency_inproc.ts [--shim bench/liblaunch_shim.so] [--pdl on|off] [--passes 2] [--layers 1] [--json out.json]
 *   bun bench/latency_inproc.ts ...
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { setDependentLaunch, type Tensor, loadKernels } from "../mod.ts";
import { openCuda } from "./open_cuda.ts";
import type { Stream } from "../gpu.ts";
import { gridCases, normOp } from "./latency_grid.ts";
import { randoms } from "../tests/fixtures/random.ts";
import { ffi } from "../ffi/runtime.ts";
import { planLimits } from "../ops/kernels.ts";
import { planNorm } from "../ops/plan.ts";
import { kernelImage } from "../ops/images.ts";


const BATCH = 16, PAIRS = 400, SYNC_PAIRS = 8, WARMUP = 500; // SYNC_PAIRS * 2 * BATCH = 256 launches per sync
const runtime = "Deno" in globalThis ? "deno" : "bun";
const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const median = (a: Float64Array): number => Float64Array.from(a).sort()[Math.floor(a.length / 2)];
const nowUs = (): number => Number(process.hrtime.bigint()) / 1000;

if (!ffi) throw new Error("latency_inproc: needs Deno or Bun (FFI)");
const SHIM = {
  nk_shim_load: { parameters: ["buffer"], result: "i32" },
  nk_shim_unload: { parameters: [], result: "i32" },
  nk_shim_error: { parameters: [], result: "i32" },
  nk_shim_prepare: {
    parameters: ["buffer", "u32", "u32", "u32", "u64", "i32", "u64", "u64", "u64", "u64", "i32", "i32", "i32", "i32", "i32", "i32"],
    result: "i32",
  },
  nk_shim_layers: { parameters: ["buffer", "buffer", "i32"], result: "i32" },
  nk_shim_batch: { parameters: ["i32"], result: "f64" },
} as const;

using dev = openCuda("bench/latency_inproc.ts");
await loadKernels(dev);
const dependent = setDependentLaunch(dev, (arg("--pdl") ?? "on") === "on");
using stream = dev.createStream(); // creating it makes normkit's context current on this thread, for the shim
const shim = ffi.open(arg("--shim") ?? fileURLToPath(new URL("./liblaunch_shim.so", import.meta.url)), SHIM);
const image = await kernelImage(dev); // kept reachable while the module is loaded
const loaded = shim.symbols.nk_shim_load(image);
if (loaded !== 0) throw new Error(`nk_shim_load failed: CUresult ${loaded}`);
console.log(`# ${runtime}, ${dev.name}, dependent launch ${dependent ? "on" : "off"}, ${new Date().toISOString()}`);
console.log(`# ${PAIRS} pairs of one TS batch and one C batch of ${BATCH} calls each, same process, stream and buffers`);

const PASSES = Number(arg("--passes") ?? 2);
if (!Number.isInteger(PASSES) || PASSES < 1) throw new Error(`--passes: a positive integer, not ${arg("--passes")}`);
const LAYERS = Number(arg("--layers") ?? 1);
if (!Number.isInteger(LAYERS) || LAYERS < 1 || LAYERS > 64) throw new Error(`--layers: an integer in 1..64, not ${arg("--layers")}`);
if (LAYERS > 1) console.log(`# ${LAYERS} layers: consecutive calls take the next layer's weight (and bias), x and out the same`);
const earlier: Record<string, unknown>[][] = [];
/** One call after the other of `ops`, round and round (a model's layers). */
function inTurn(ops: ((s: Stream) => Tensor)[]): (s: Stream) => Tensor {
  let next = 0;
  return (s) => {
    const r = ops[next](s);
    if (++next === ops.length) next = 0;
    return r;
  };
}
/** One pass over every case: TS and C batches alternating, per case. */
function runPass(pass: number): Record<string, unknown>[] {
  const results: Record<string, unknown>[] = [];
  for (const { kind, d, rows, x, w, b, y, op: first } of gridCases(dev)) {
    // Layers 2..L: weights and biases of their own (freed when the case ends), then the calls in turn.
    using params = new DisposableStack();
    const ws = [w], bs = [b];
    for (let l = 1; l < LAYERS; l++) {
      ws.push(params.use(dev.tensor(randoms(d, 10 + l, 0.5, 1.5), [d], { dtype: "bf16" })));
      bs.push(params.use(dev.tensor(randoms(d, 100 + l, -1, 1), [d], { dtype: "bf16" })));
    }
    const op = LAYERS === 1 ? first : inTurn(ws.map((wl, l) => normOp(kind, x, wl, bs[l], y)));
    const p = planNorm({ kind, rows, d, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "bf16" }, planLimits(dev));
    if (!("plan" in p)) throw new Error(p.unsupported);
    const q = p.plan;
    if (q.cluster !== 1) throw new Error(`${q.kernel}: cluster launches are not in the shim`);
    const name = new TextEncoder().encode(q.kernel + "\0");
    const prepared = shim.symbols.nk_shim_prepare(
      name, q.grid[0], q.block[0], q.sharedBytes, stream.handle, dependent ? 1 : 0,
      x.ptr, y.ptr, w.ptr, kind === "layer" ? b.ptr : 0n, rows, d, q.tpr, q.nv, q.prefetch, kind === "layer" ? 1 : 0,
    );
    if (prepared !== 0) throw new Error(`nk_shim_prepare(${q.kernel}) failed: CUresult ${prepared}`);
    if (LAYERS > 1) {
      const layered = shim.symbols.nk_shim_layers(
        BigUint64Array.from(ws, (t) => t.ptr), BigUint64Array.from(bs, (t) => (kind === "layer" ? t.ptr : 0n)), LAYERS,
      );
      if (layered !== 0) throw new Error(`nk_shim_layers failed: CUresult ${layered}`);
    }
    const cBatch = (n: number): number => {
      const us = shim.symbols.nk_shim_batch(n);
      if (us < 0) throw new Error(`launch from the shim failed: CUresult ${shim.symbols.nk_shim_error()}`);
      return us;
    };
    for (let i = 0; i < WARMUP; i++) op(stream);
    stream.synchronize();
    cBatch(WARMUP);
    stream.synchronize();

    const ts = new Float64Array(PAIRS), c = new Float64Array(PAIRS), ratio = new Float64Array(PAIRS);
    const tsBatch = (): number => {
      const t0 = nowUs();
      for (let j = 0; j < BATCH; j++) op(stream);
      return (nowUs() - t0) / BATCH;
    };
    for (let i = 0; i < PAIRS; i++) {
      if (i % 2 === 0) {
        ts[i] = tsBatch();
        c[i] = cBatch(BATCH) / BATCH;
      } else {
        c[i] = cBatch(BATCH) / BATCH;
        ts[i] = tsBatch();
      }
      ratio[i] = ts[i] / c[i];
      if ((i + 1) % SYNC_PAIRS === 0) stream.synchronize();
    }
    stream.synchronize();
    const r = {
      runtime, pass, kind, rows, d, dtype: "bf16", dependent_launch: dependent, layers: LAYERS, kernel: q.kernel,
      ts_us: median(ts), c_us: median(c), ratio_of_medians: median(ts) / median(c), median_pair_ratio: median(ratio),
    };
    results.push(r);
    console.log(
      `pass ${pass} ${kind.padEnd(5)} rows=${String(rows).padStart(2)} d=${d}: TS ${r.ts_us.toFixed(3)} µs/call, C ${r.c_us.toFixed(3)} µs/call, ` +
        `ratio ${r.ratio_of_medians.toFixed(3)} (median pair ratio ${r.median_pair_ratio.toFixed(3)})`,
    );
  }
  return results;
}
for (let pass = 1; pass < PASSES; pass++) earlier.push(runPass(pass));
const results = runPass(PASSES);
const unloaded = shim.symbols.nk_shim_unload();
if (unloaded !== 0) throw new Error(`nk_shim_unload failed: CUresult ${unloaded}`);
shim.close();
const summary = (rs: Record<string, unknown>[], pass: number): void => {
  const ratios = rs.map((r) => r.ratio_of_medians as number);
  console.log(
    `# ${runtime}, dependent launch ${dependent ? "on" : "off"}, ${LAYERS} layer(s), pass ${pass} of ${PASSES}: TS/C ${Math.min(...ratios).toFixed(3)}–` +
      `${Math.max(...ratios).toFixed(3)}, ${ratios.filter((r) => r <= 1.1).length} of ${rs.length} cases within 1.1×`,
  );
};
earlier.forEach((rs, i) => summary(rs, i + 1));
summary(results, PASSES);
const json = arg("--json");
if (json) writeFileSync(json, JSON.stringify({ runtime, device: dev.name, dependent_launch: dependent, layers: LAYERS, results, earlier_passes: earlier }, null, 1));
