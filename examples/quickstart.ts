/**
 * Quickstart: normalize a random batch on whatever Device.open() finds (CUDA, else the CPU), check it
 * against the float64 reference and print backend, shape, time and max error.
 *
 *   deno run --allow-ffi --allow-env --allow-read examples/quickstart.ts
 *   bun examples/quickstart.ts
 */
import { cpuNormForward, Device, layerNorm, loadKernels } from "../mod.ts";

const rows = 4096, d = 1024, eps = 1e-5;

// Deterministic random inputs (never zeros): a small LCG, values in [-2, 2) plus a per-row offset.
let seed = 12345;
const rand = (): number => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 4 - 2;
const xs = Float32Array.from({ length: rows * d }, (_, i) => rand() + (i / d | 0) % 7);
const ws = Float32Array.from({ length: d }, () => 1 + rand() / 4);
const bs = Float32Array.from({ length: d }, () => rand() / 4);

using dev = Device.open();
await loadKernels(dev);
console.log(`backend: ${dev.backend} (${dev.name})${dev.fallbackReason ? ` — fell back: ${dev.fallbackReason}` : ""}`);
using x = dev.tensor(xs, [rows, d]);
using weight = dev.tensor(ws, [d]);
using bias = dev.tensor(bs, [d]);

layerNorm(x, { weight, bias, eps }).close(); // warm-up: module load, first launch
using start = dev.createEvent(), end = dev.createEvent();
start.record();
using y = layerNorm(x, { weight, bias, eps });
end.record();
const out = await y.toArray();
const ms = end.elapsedSince(start);

const ref = cpuNormForward({ kind: "layer", rows, d, x: xs, xStride: d, weight: ws, bias: bs, eps });
let maxErr = 0;
for (let i = 0; i < out.length; i++) {
  const e = Math.abs(out[i] - ref.y[i]);
  if (!(e <= maxErr)) maxErr = Number.isNaN(e) ? Infinity : e;
}
console.log(`shape: [${rows}, ${d}] f32   layerNorm time: ${(ms * 1000).toFixed(1)} µs   max abs error vs float64: ${maxErr.toExponential(2)}`);
if (!(maxErr < 1e-4)) {
  console.error("FAILED: error above 1e-4");
  // deno-lint-ignore no-explicit-any
  (globalThis as any).process?.exit?.(1) ?? (globalThis as any).Deno?.exit(1);
}
