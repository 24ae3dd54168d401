/**
 * One forward case (or with a 4th argument `backward`, the backward's dx kernel), launched a few times,
 * for a profiler (ncu) to pick a launch from:
 *   ncu --clock-control none -k regex:nk_ --launch-skip 2 --launch-count 1 deno run -A lab/ncu/profile_one.ts layer bf16 4096
 *   ncu ... -k regex:_bwd_ ... bun lab/ncu/profile_one.ts layer bf16 4096 backward
 * A 5th argument sets the rows (default: 1 GiB moved per call), e.g. a few for compute-sanitizer:
 *   compute-sanitizer --tool racecheck --kernel-name kns=stash bun lab/ncu/profile_one.ts layer f32 65536 forward 137
 */
import process from "node:process";
import { Device, type DType, layerNorm, layerNormBackward, loadKernels, rmsNorm, rmsNormBackward } from "../../mod.ts";

const [kind = "layer", dtype = "bf16", dArg = "4096", pass = "forward", rowsArg] = process.argv.slice(2);
const d = Number(dArg);
const rows = rowsArg ? Number(rowsArg) : Math.ceil(2 ** 30 / (2 * d * (dtype === "f32" ? 4 : 2)));
if (!Number.isInteger(rows) || rows < 1) throw new Error(`rows: a positive integer, not ${rowsArg}`);
using dev = Device.open({ backend: "cuda" });
await loadKernels(dev, { backward: pass !== "forward" });
using x = dev.empty([rows, d], { dtype: dtype as DType });
using y = dev.empty([rows, d], { dtype: dtype as DType });
x.buffer.fill32(0x3f803f80); // 1.0039 as bf16 pairs / a finite f16 pair / ~1.0 as f32: not zeros
const w = dev.tensor(Float32Array.from({ length: d }, (_, i) => 1 + i / d), [d], { dtype: dtype as DType });
const b = dev.tensor(Float32Array.from({ length: d }, (_, i) => i / d), [d], { dtype: dtype as DType });
// The backward's dy, its own buffer (x's bytes as dy would make half the reads hit L2, which skews DRAM-bound
// profiles); declared out here so that it outlives the launches until the synchronize below.
using dy = dev.empty(pass === "backward" ? [rows, d] : [1], { dtype: dtype as DType });
if (pass === "backward") {
  // dx into y: 1.5 GiB moved per call.
  dy.buffer.fill32(0x3f003f00); // bf16 pairs of 0.5, f16 pairs of 1.75, f32 ~0.50: not zeros
  const f = kind === "layer"
    ? layerNorm(x, { weight: w, bias: b, stats: true })
    : rmsNorm(x, { weight: w, stats: true });
  const dw = dev.empty([d], { dtype: dtype as DType }), db = dev.empty([d], { dtype: dtype as DType });
  for (let i = 0; i < 4; i++) {
    if (kind === "layer") {
      layerNormBackward(dy, x, { mean: f.mean!, rstd: f.rstd!, weight: w, bias: b, dx: y, dweight: dw, dbias: db });
    } else rmsNormBackward(dy, x, { rstd: f.rstd!, weight: w, dx: y, dweight: dw });
  }
} else {
  for (let i = 0; i < 4; i++) {
    if (kind === "layer") layerNorm(x, { weight: w, bias: b, out: y });
    else rmsNorm(x, { weight: w, out: y });
  }
}
dev.synchronize();
console.log(`profiled ${kind} ${dtype} D=${d} rows=${rows} ${pass}`);
