/**
 * One launch of each kernel that ncu should compare (lab/fused_geometry/profile.sh): RMSNorm, then LayerNorm, bf16,
 * D = 4096, 16384 rows, with the tuned plan, on the fused kernel without a residual (the op's fused plan, as
 * `batchInvariant: true` runs it where there is no invariant tuned plan), add + norm, and add + norm → fp8e4m3 dynamic:
 * eight launches, each run once (ncu flushes the caches before each launch it profiles).
 * `--decode`: one row of D = 4096 instead (RMSNorm's four, and QK-norm of one token, 32 + 8 heads of 128, for a kernel
 * of the same launch with short rows), each run 3 times in a row: profile.sh profiles them with warm caches, as a
 * decode step in a graph finds its residual and weights in L2.
 *
 *   deno run -A lab/fused_geometry/profile.ts [--decode]      # bun lab/fused_geometry/profile.ts [--decode]
 */
import process from "node:process";
import { Device, layerNorm, loadKernels, rmsNorm, type RMSNormOptions, type Tensor } from "../../mod.ts";
import { viaFusedPlan } from "./cases.ts";

const decode = process.argv.slice(2).includes("--decode");
const D = 4096, ROWS = decode ? 1 : 16384, REPEAT = decode ? 3 : 1;
using dev = Device.open({ backend: "cuda", sanityCheck: false });
await loadKernels(dev, { quant: true });
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
const bias = held.use(dev.tensor(random(D), [D], { dtype: "bf16" }));
type Norm = (x: Tensor, o: RMSNormOptions) => Tensor;
const rms = rmsNorm as Norm;
const ln: Norm = (x, o) =>
  (layerNorm as (x: Tensor, o: RMSNormOptions & { bias: Tensor }) => Tensor)(x, { ...o, bias });
// [name, options, input (default x)]
const fused: [string, RMSNormOptions, Tensor?][] = [
  ["add", { weight, residual, residualOut: h, out: y }],
  ["add+fp8", { weight, residual, residualOut: h, out: q, quant: { dtype: "fp8e4m3", scaleOut: scale } }],
];
const qkCase = (): [string, RMSNormOptions, Tensor] => {
  const qkv = make("bf16", [1, 48 * 128]), qw = make("bf16", [128]), kw = make("bf16", [128]);
  const qk = qkv.view([1, 40, 128], { strides: [48 * 128, 128, 1] });
  return ["qk", { weight: qw, weight2: kw, split: 32, out: qk }, qk];
};
const tuned: [string, RMSNormOptions] = ["tuned", { weight, out: y }];
const cases: [string, RMSNormOptions, Tensor?][] = decode ? [tuned, qkCase(), ...fused] : [tuned, ...fused];
const kinds: [string, Norm][] = decode ? [["rms", rms]] : [["rms", rms], ["layer", ln]];
const onFusedPlan = (kind: "rms" | "layer") =>
  viaFusedPlan({ x, r: residual, h, y16: y, y8: q, scale, w: weight, b: bias }, {
    name: "fused",
    kind,
    to: "x",
    residual: false,
  }, dev.stream);
for (const [kind, norm] of kinds) {
  for (const [name, o, input] of cases) {
    if (kind === "layer" && input) continue; // QK-norm: RMSNorm only
    for (let i = 0; i < REPEAT; i++) norm(input ?? x, o);
    dev.synchronize();
    console.log(`launched ${kind} ${name} ×${REPEAT}`);
    if (name !== "tuned") continue;
    for (let i = 0; i < REPEAT; i++) onFusedPlan(kind as "rms" | "layer");
    dev.synchronize();
    console.log(`launched ${kind} fused ×${REPEAT}`);
  }
}
