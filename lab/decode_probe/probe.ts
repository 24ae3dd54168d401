/**
 * Where does a fused decode op's time go? Device µs per op in a CUDA graph (100 ops, 200 replays) for variants of
 * one bf16 row: the tuned rmsNorm, the fused kernel alone (batchInvariant), + residual, + dynamic fp8, + static fp8,
 * residual + dynamic fp8 (bench/fused.ts's decode case), that with dependent launch off, and eager.
 *   deno run -A lab/decode_probe/probe.ts
 */
import { loadKernels, rmsNorm, type RMSNormOptions, setDependentLaunch, type Tensor } from "../../mod.ts";
import type { Stream } from "../../gpu.ts";
import { openCuda } from "../../bench/open_cuda.ts";
import { graphUs } from "../../bench/device_timer.ts";

using dev = openCuda("lab/decode_probe/probe.ts");
await loadKernels(dev, { quant: true });
const norm = rmsNorm as (x: Tensor, o: RMSNormOptions) => Tensor;
for (const d of [2048, 8192]) {
  const rows = 1;
  const vals = Float32Array.from({ length: rows * d }, (_, i) => Math.sin(i) * 0.5);
  using x = dev.tensor(vals, [rows, d], { dtype: "bf16" });
  using res = dev.tensor(vals, [rows, d], { dtype: "bf16" });
  using res2 = dev.tensor(vals, [rows, d], { dtype: "bf16" });
  using y16 = dev.empty([rows, d], { dtype: "bf16" });
  using y8 = dev.empty([rows, d], { dtype: "fp8e4m3" });
  using scaleOut = dev.empty([rows]);
  using w = dev.tensor(new Float32Array(d).fill(1), [d], { dtype: "bf16" });
  const variants: [string, (s: Stream) => void][] = [
    ["tuned rmsNorm", (stream) => void norm(x, { weight: w, out: y16, stream })],
    ["fused (batchInvariant)", (stream) => void norm(x, { weight: w, out: y16, batchInvariant: true, stream })],
    [
      "fused + residual (out of place)",
      (stream) => void norm(x, { weight: w, residual: res, residualOut: res2, out: y16, stream }),
    ],
    ["fused + residual in place", (stream) => void norm(x, { weight: w, residual: res, out: y16, stream })],
    [
      "fused + static fp8",
      (stream) => void norm(x, { weight: w, out: y8, quant: { dtype: "fp8e4m3", scale: 1 }, stream }),
    ],
    [
      "fused + dynamic fp8",
      (stream) => void norm(x, { weight: w, out: y8, quant: { dtype: "fp8e4m3", scaleOut }, stream }),
    ],
    [
      "fused + residual + dynamic fp8",
      (stream) => void norm(x, { weight: w, residual: res, out: y8, quant: { dtype: "fp8e4m3", scaleOut }, stream }),
    ],
  ];
  for (const [name, op] of variants) {
    try {
      console.log(`D=${d} ${name}: ${graphUs(dev, op).toFixed(2)} µs/op (graph)`);
    } catch (e) {
      console.log(`D=${d} ${name}: ${(e as Error).message}`);
    }
  }
  setDependentLaunch(dev, false);
  console.log(`D=${d} residual + dynamic fp8, PDL off: ${graphUs(dev, variants[6][1]).toFixed(2)} µs/op (graph)`);
  console.log(`D=${d} tuned rmsNorm, PDL off: ${graphUs(dev, variants[0][1]).toFixed(2)} µs/op (graph)`);
  setDependentLaunch(dev, true);
  // Eager: 2000 back-to-back launches between two events.
  for (const i of [0, 1, 6]) {
    using s = dev.createStream();
    for (let k = 0; k < 50; k++) variants[i][1](s);
    using a = dev.createEvent(), b = dev.createEvent();
    a.record(s);
    for (let k = 0; k < 2000; k++) variants[i][1](s);
    b.record(s);
    b.synchronize();
    console.log(`D=${d} ${variants[i][0]}: ${((b.elapsedSince(a) * 1000) / 2000).toFixed(2)} µs/op (eager)`);
  }
}
