/**
 * The backward with 16-bit x and dy: 16-bit weights (the grid's case) against f32 weights (the modules' master copy),
 * in one process, per case (bench/bwd_case.ts's 1 GiB, the copy ceiling measured in the same run). Measures whether
 * converting the weights once per call, outside the row loop, would pay (the kernels unpack 16-bit weights in both
 * passes). The plan picks each call's kernel as for any call.
 *   bun bench/wdtype_ab.ts [--ds 2048,65536] [--kinds layer,rms] [--dtypes bf16,f16]
 */
import process from "node:process";
import { Device, type DType, layerNorm, layerNormBackward, rmsNorm, rmsNormBackward, loadKernels } from "../mod.ts";
import { bwdCase, lcg } from "./bwd_case.ts";
import { copyCeilingGBs, deviceTimer } from "./device_timer.ts";

const args = process.argv.slice(2);
const opt = (k: string) => (args.includes(k) ? args[args.indexOf(k) + 1] : undefined);
const DS = (opt("--ds") ?? "2048,4096,8192,12288,16384,32768,65536,131072").split(",").map(Number);
const KINDS = (opt("--kinds") ?? "layer,rms").split(",") as ("layer" | "rms")[];
const DTYPES = (opt("--dtypes") ?? "bf16").split(",") as DType[];

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
using timer = deviceTimer(dev, 20);
const copyGBs = copyCeilingGBs(dev, timer);
console.log(`# ${dev.info.name}, copy ${copyGBs.toFixed(0)} GB/s, ${new Date().toISOString()}`);
for (const d of DS) {
  for (const dt of DTYPES) {
    using c = bwdCase(dev, d, dt, lcg(d));
    using w32 = dev.tensor(c.w.readSync(), [d], { dtype: "f32" }), b32 = dev.tensor(c.bias.readSync(), [d], { dtype: "f32" });
    using dw32 = dev.empty([d], { dtype: "f32" }), db32 = dev.empty([d], { dtype: "f32" });
    for (const kind of KINDS) {
      const line: string[] = [];
      for (const [label, w, b, dw, db] of [[dt, c.w, c.bias, c.dw, c.db], ["f32", w32, b32, dw32, db32]] as const) {
        const f = kind === "layer" ? layerNorm(c.x, { weight: w, bias: b, stats: true }) : rmsNorm(c.x, { weight: w, stats: true });
        using _y = f.y, _m = f.mean, rstd = f.rstd!;
        const ms = timer.time(() =>
          kind === "layer"
            ? void layerNormBackward(c.dy, c.x, { mean: f.mean!, rstd, weight: w, bias: b, dx: c.dx, dweight: dw, dbias: db })
            : void rmsNormBackward(c.dy, c.x, { rstd, weight: w, dx: c.dx, dweight: dw }));
        line.push(`w ${label} ${((100 * c.bytes(kind)) / (ms * 1e6) / copyGBs).toFixed(1)}`);
      }
      console.log(`${kind.padEnd(5)} ${dt.padEnd(4)} ${String(d).padStart(6)} | ${line.join(" | ")}`);
    }
  }
}
