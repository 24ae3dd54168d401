/**
 * A/B of the two mappings for very large rows on Hopper: `cluster` (the row split over a CTA cluster,
 * in registers) against `wide` (one CTA per row, the row re-read from L2), same data, same timing
 * method as bench/bench.ts. Informs the plan's choice; not part of the product.
 *   deno run -A bench/mapping_ab.ts
 */
import { Device, type DType } from "../mod.ts";
import { NORM_FWD_ARGS, normKernel } from "../ops/kernels.ts";
import { type LaunchPlan, planNorm } from "../ops/plan.ts";
import { LaunchConfig } from "../runtime/module.ts";

using dev = Device.open({ backend: "cuda" });
const info = dev.info;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1];
for (const dtype of ["f32", "bf16"] as DType[]) {
  for (const d of [16384, 32768, 65536, 131072]) {
    const b = dtype === "f32" ? 4 : 2;
    const rows = Math.ceil(2 ** 30 / (2 * d * b));
    using x = dev.empty([rows, d], { dtype }), y = dev.empty([rows, d], { dtype });
    x.buffer.fill32(0x3f813f80);
    const line: string[] = [`${dtype} D=${d}`];
    for (const cc of [9, 8]) {
      for (const kind of ["layer", "rms"] as const) {
        const r = planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype }, {
          maxGridX: info.maxGridDim[0], maxThreadsPerBlock: info.maxThreadsPerBlock, warpSize: 32, ccMajor: cc, multiprocessors: info.multiprocessors,
        });
        const p = (r as { plan: LaunchPlan }).plan;
        const k = normKernel(dev, p.kernel, NORM_FWD_ARGS);
        const cfg = new LaunchConfig(p);
        const run = () => k.launch(dev.stream, cfg, [x, y, null, null, null, null, rows, d, d, d, 1e-5, p.tpr, p.nv]);
        for (let i = 0; i < 3; i++) run();
        using e0 = dev.createEvent(), e1 = dev.createEvent();
        const ts: number[] = [];
        for (let i = 0; i < 20; i++) {
          e0.record();
          run();
          e1.record();
          e1.synchronize();
          ts.push(e1.elapsedSince(e0));
        }
        line.push(`${kind} ${p.mapping}${p.cluster > 1 ? `x${p.cluster}` : ""}/${p.tpr}: ${(2 * rows * d * b / (median(ts) * 1e6)).toFixed(0)} GB/s`);
      }
    }
    console.log(line.join("  "));
  }
}
