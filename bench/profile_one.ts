/**
 * One forward case, launched a few times, for a profiler (ncu) to pick a launch from:
 *   ncu --clock-control none -k regex:nk_ --launch-skip 2 --launch-count 1 deno run -A bench/profile_one.ts layer bf16 4096
 */
import process from "node:process";
import { Device, type DType, layerNorm, rmsNorm } from "../mod.ts";

const [kind = "layer", dtype = "bf16", dArg = "4096"] = process.argv.slice(2);
const d = Number(dArg);
const rows = Math.ceil(2 ** 30 / (2 * d * (dtype === "f32" ? 4 : 2)));
using dev = Device.open({ backend: "cuda" });
using x = dev.empty([rows, d], { dtype: dtype as DType });
using y = dev.empty([rows, d], { dtype: dtype as DType });
x.buffer.fill32(0x3f803f80); // 1.0039 as bf16 pairs / a finite f16 pair / ~1.0 as f32: not zeros
const w = dev.tensor(Float32Array.from({ length: d }, (_, i) => 1 + i / d), [d], { dtype: dtype as DType });
const b = dev.tensor(Float32Array.from({ length: d }, (_, i) => i / d), [d], { dtype: dtype as DType });
for (let i = 0; i < 4; i++) {
  if (kind === "layer") layerNorm(x, { weight: w, bias: b, out: y });
  else rmsNorm(x, { weight: w, out: y });
}
dev.synchronize();
console.log(`profiled ${kind} ${dtype} D=${d} rows=${rows}`);
