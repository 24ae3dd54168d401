/**
 * A/B of the mappings for very large rows on Hopper, timed as bench/bench.ts times a case: device events after
 * a 256 MiB memset (device_timer.ts), median of 30, random data, γ/β in the input dtype, 1 GiB of x + y, % of a
 * copy measured in the same run. Three columns, each labelled with the mapping it ran: the plan's choice; the
 * plan for fewer rows than SMs (where LayerNorm takes a CTA cluster per row), launched over all the rows (the
 * kernels grid-stride); the plan without clusters (`wide` past a block, as on sm_80). Informs ops/plan.ts
 * (WIDE_MAX_ROW_BYTES, LN_WIDE_MIN_ROWS_PER_SM); not part of the product.
 *   deno run -A bench/mapping_ab.ts [--ds 32768,65536,131072] [--json out.json]
 */
import { Device, type DType, loadKernels } from "../mod.ts";
import { NORM_FWD_ARGS, normKernel } from "../ops/kernels.ts";
import { type LaunchPlan, planNorm } from "../ops/plan.ts";
import { LaunchConfig } from "../runtime/module.ts";
import { copyCeilingGBs, deviceTimer } from "./device_timer.ts";
import { fillFromTile, randomTile } from "./tile.ts";

const args = process.argv.slice(2);
const argOf = (name: string): string | undefined => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const DS = (argOf("--ds") ?? "32768,65536,131072").split(",").map(Number);
const jsonPath = argOf("--json");

using dev = Device.open({ backend: "cuda" });
await loadKernels(dev);
const info = dev.info;
using timer = deviceTimer(dev, 30);
const copyGBs = copyCeilingGBs(dev, timer);
console.log(
  `# ${info.name} (${info.multiprocessors} SMs), ${"Deno" in globalThis ? "deno" : "bun"}, ${new Date().toISOString()}`,
);
console.log(`# device-to-device copy: ${copyGBs.toFixed(0)} GB/s; % of copy per mapping (label: mapping/threads)`);
const tile = randomTile(1);
interface Timed {
  mapping: string;
  pct: number;
}
const rows: { kind: string; dtype: DType; d: number; plan: Timed; fewRows: Timed; noClusters: Timed }[] = [];
for (const d of DS) {
  for (const dtype of ["f32", "bf16", "f16"] as DType[]) {
    const b = dtype === "f32" ? 4 : 2, n = Math.ceil(2 ** 30 / (2 * d * b));
    using x = dev.empty([n, d], { dtype }), y = dev.empty([n, d], { dtype });
    fillFromTile(x, tile);
    using w = dev.tensor(tile.subarray(0, d).map((v) => 1 + v / 8), [d], { dtype });
    using bias = dev.tensor(tile.subarray(d, 2 * d), [d], { dtype });
    for (const kind of ["layer", "rms"] as const) {
      // planRows: the row count the plan is made for; ccMajor 8: no clusters. Always launched over all n rows.
      const time = (planRows: number, ccMajor: number): Timed => {
        const r = planNorm({ kind, rows: planRows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, {
          maxGridX: info.maxGridDim[0],
          maxThreadsPerBlock: info.maxThreadsPerBlock,
          warpSize: 32,
          ccMajor,
          multiprocessors: info.multiprocessors,
        });
        let p = (r as { plan: LaunchPlan }).plan;
        // A cluster plan made for fewer rows gets the grid the plan gives all n rows (a cluster per row).
        if (p.cluster > 1) p = { ...p, grid: [Math.min(n, Math.floor(info.maxGridDim[0] / p.cluster)) * p.cluster, 1, 1] };
        const k = normKernel(dev, p.kernel, NORM_FWD_ARGS), cfg = new LaunchConfig(p);
        const argv = [x, y, w, kind === "layer" ? bias : null, null, null, n, d, d, d, 1e-5, p.tpr, p.nv, p.prefetch];
        const ms = timer.time(() => k.launch(dev.stream, cfg, argv));
        const gbs = (2 * n * d * b + d * b * (kind === "layer" ? 2 : 1)) / (ms * 1e6);
        return { mapping: `${p.mapping}${p.cluster > 1 ? `x${p.cluster}` : ""}/${p.tpr}`, pct: (100 * gbs) / copyGBs };
      };
      const cc = info.computeCapability[0];
      const row = {
        kind,
        dtype,
        d,
        plan: time(n, cc),
        fewRows: time(Math.min(n, info.multiprocessors - 1), cc),
        noClusters: time(n, 8),
      };
      rows.push(row);
      const col = (t: Timed): string => `${t.mapping.padEnd(13)} ${t.pct.toFixed(1).padStart(5)}`;
      console.log(
        `${kind.padEnd(5)} ${dtype.padEnd(4)} D=${String(d).padStart(6)}  plan ${col(row.plan)}  few rows ${
          col(row.fewRows)
        }  no clusters ${col(row.noClusters)}`,
      );
    }
  }
}
if (jsonPath) {
  const { writeFileSync } = await import("node:fs");
  writeFileSync(
    jsonPath,
    JSON.stringify({ device: info.name, copyGBs, date: new Date().toISOString(), rows }, null, 1),
  );
}
