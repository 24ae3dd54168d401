/**
 * One launch of each kernel that ncu should compare (lab/fused_geometry/profile.sh): RMSNorm bf16, D = 4096, 16384
 * rows, with the tuned plan (nk_rms_block_*), batch-invariant (the fused kernel, no residual), add + RMSNorm, and
 * add + RMSNorm → fp8e4m3 dynamic. Each is run once (ncu flushes the caches before each launch it profiles).
 *
 *   deno run -A lab/fused_geometry/profile.ts      # bun lab/fused_geometry/profile.ts
 */
import { Device, loadKernels, rmsNorm, type RMSNormOptions, type Tensor } from "../../mod.ts";

const D = 4096, ROWS = 16384;
using dev = Device.open({ backend: "cuda", sanityCheck: false });
await loadKernels(dev, { fused: true });
using held = new DisposableStack();
const random = (n: number, scale = 1): Float32Array =>
  Float32Array.from({ length: n }, () => (Math.random() - 0.5) * scale);
const make = (dtype: "bf16" | "fp8e4m3" | "f32", shape: number[], fill = true): Tensor =>
  held.use(fill ? dev.tensor(random(shape.reduce((a, b) => a * b), 4), shape, { dtype }) : dev.empty(shape, { dtype }));
const x = make("bf16", [ROWS, D]), residual = make("bf16", [ROWS, D]), h = make("bf16", [ROWS, D], false);
const y = make("bf16", [ROWS, D], false), q = make("fp8e4m3", [ROWS, D], false), scale = make("f32", [ROWS], false);
const weight = held.use(
  dev.tensor(Float32Array.from({ length: D }, (_, i) => 1 + (i % 7) / 8), [D], { dtype: "bf16" }),
);
const norm = rmsNorm as (x: Tensor, o: RMSNormOptions) => Tensor;
const cases: [string, RMSNormOptions][] = [
  ["tuned", { weight, out: y }],
  ["invariant", { weight, out: y, batchInvariant: true }],
  ["add", { weight, residual, residualOut: h, out: y }],
  ["add+fp8", { weight, residual, residualOut: h, out: q, quant: { dtype: "fp8e4m3", scaleOut: scale } }],
];
for (const [name, o] of cases) {
  norm(x, o);
  dev.synchronize();
  console.log(`launched ${name}`);
}
