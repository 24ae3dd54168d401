/**
 * Launch-parameter sweep for the plan table: times candidate (mapping, tpr, nv, cluster) choices for a few
 * shapes with γ/β, the way bench/bench.ts times a case (events, median, 1 GiB per case). Informs
 * ops/plan.ts; not part of the product.   deno run -A bench/sweep.ts
 */
import { Device, type DType, loadKernels } from "../mod.ts";
import { NORM_FWD_ARGS, normKernel } from "../ops/kernels.ts";
import { LaunchConfig } from "../runtime/module.ts";

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1];
type Cand = { mapping: "rows" | "block" | "cluster"; tpr: number; cluster?: number };
const cases: [DType, number, Cand[]][] = [
  ["f32", 128, [4, 8, 16, 32].map((tpr) => ({ mapping: "rows", tpr }))],
  ["bf16", 128, [2, 4, 8, 16].map((tpr) => ({ mapping: "rows", tpr }))],
  ["bf16", 512, [8, 16, 32].map((tpr) => ({ mapping: "rows", tpr }))],
  ["bf16", 768, [{ mapping: "rows", tpr: 16 }, { mapping: "rows", tpr: 32 }, { mapping: "block", tpr: 32 }, { mapping: "block", tpr: 64 }]],
  ["f32", 32768, [[2, 512], [4, 256], [8, 128]].map(([c, t]) => ({ mapping: "cluster", tpr: t, cluster: c }))],
  ["f32", 65536, [[4, 512], [8, 256]].map(([c, t]) => ({ mapping: "cluster", tpr: t, cluster: c }))],
  ["bf16", 65536, [[2, 512], [4, 256], [8, 128]].map(([c, t]) => ({ mapping: "cluster", tpr: t, cluster: c }))],
  ["bf16", 131072, [[4, 512], [8, 256]].map(([c, t]) => ({ mapping: "cluster", tpr: t, cluster: c }))],
];
for (const [dtype, d, cands] of cases) {
  const b = dtype === "f32" ? 4 : 2, vec = 16 / b, chunks = Math.ceil(d / vec);
  const rows = Math.ceil(2 ** 30 / (2 * d * b));
  using x = dev.empty([rows, d], { dtype }), y = dev.empty([rows, d], { dtype });
  using w = dev.tensor(new Float32Array(d).fill(1.25), [d], { dtype }), bias = dev.tensor(new Float32Array(d).fill(0.5), [d], { dtype });
  x.buffer.fill32(0x3f813f80);
  const out: string[] = [`${dtype} D=${d}:`];
  for (const kind of ["layer", "rms"] as const) {
    for (const c of cands) {
      const cl = c.cluster ?? 1;
      const nv = Math.ceil(Math.ceil(chunks / cl) / c.tpr);
      if (nv > 8) continue;
      const block = c.mapping === "rows" ? 256 : c.tpr;
      const grid = c.mapping === "rows" ? Math.ceil(rows / (256 / c.tpr)) : rows * cl;
      const shared = c.mapping === "rows" ? 0 : 2 * (block / 32) * 4 + (c.mapping === "cluster" ? 16 : 0);
      const name = `nk_${kind === "layer" ? "ln" : "rms"}_${c.mapping}_${dtype}_${dtype}_${dtype}`;
      const k = normKernel(dev, name, NORM_FWD_ARGS);
      const cfg = new LaunchConfig({ grid: [grid], block: [block], sharedBytes: shared, cluster: cl });
      const run = () => k.launch(dev.stream, cfg, [x, y, w, kind === "layer" ? bias : null, null, null, rows, d, d, d, 1e-5, c.tpr, nv, 0]); // prefetch 0: the mappings as they were swept
      for (let i = 0; i < 3; i++) run();
      using e0 = dev.createEvent(), e1 = dev.createEvent();
      const ts: number[] = [];
      for (let i = 0; i < 15; i++) {
        e0.record();
        run();
        e1.record();
        e1.synchronize();
        ts.push(e1.elapsedSince(e0));
      }
      out.push(`${kind} ${c.mapping}${cl > 1 ? "x" + cl : ""} tpr=${c.tpr} nv=${nv}: ${(2 * rows * d * b / (median(ts) * 1e6)).toFixed(0)}`);
    }
  }
  console.log(out.join(" | "));
}
