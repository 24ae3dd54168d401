/**
 * Does capping the fused kernels' grid pay at prefill? The plan launches a block per `rowsPerBlock` rows (fusedLaunch),
 * so a block-per-row split pays each block's launch checks, alignment tests and index divisions once per row; the
 * kernels grid-stride, so a grid of a few blocks per SM takes every row with the same bits (a row's sums do not depend
 * on which block computes it). Each case runs the op's split and, where it differs, a chunk a thread (the few-chunk
 * kernel that keeps LayerNorm's quantized y in registers), at grids of SMs × {2, 4, 8, 16, 32} blocks and uncapped:
 * % of a device-to-device copy in the same run (bytes as bench/fused.ts counts them), h, y and scales equal to the
 * op's bit for bit.
 *
 *   deno run -A lab/fused_geometry/grid.ts [--ds 1024,4096,8192] [--variants add+ln+fp8,add+ln] [--caps 4,8,16]
 *     [--json out.json]
 */
import { writeFileSync } from "node:fs";
import { fusedKernel } from "../../ops/fused_module.ts";
import { type FusedGeometry, fusedGeometry, fusedKernelFor, fusedSplit, fusedTree } from "../../ops/plan_fused.ts";
import {
  agrees,
  bitsOf,
  caseBytes,
  caseKey,
  caseTensors,
  measureCase,
  openLab,
  option,
  poison,
  VARIANTS,
  viaKernel,
  viaOp,
  wholeNumbers,
  yDtype,
} from "./cases.ts";

const jsonPath = option("--json");
const ds = wholeNumbers(option("--ds"), [1024, 4096, 8192]);
const names = option("--variants")?.split(",") ?? VARIANTS.slice(0, 4).map((v) => v.name);
const variants = VARIANTS.filter((v) => names.includes(v.name));
if (variants.length !== names.length) throw new Error(`--variants takes ${VARIANTS.map((v) => v.name).join(", ")}`);
const caps = [...wholeNumbers(option("--caps"), [2, 4, 8, 16, 32], "--caps"), 0];
using lab = await openLab("lab/fused_geometry/grid.ts");
const { dev, timer, copyGBs, limits, tile } = lab;
const sms = limits.multiprocessors;
console.log(`# ${dev.info.name}, copy ${copyGBs.toFixed(0)} GB/s, ${sms} SMs`);
const results: Record<string, unknown>[] = [];

for (const d of ds) {
  const rows = Math.ceil(2 ** 29 / (d * 8));
  for (const v of variants) {
    using held = new DisposableStack();
    const t = caseTensors(dev, held, tile, rows, d);
    const bytes = caseBytes(rows, d, v);
    const op = fusedGeometry(v.kind, d, "bf16", limits, rows, "cuda");
    const tree = fusedTree(v.kind, d, "bf16", limits);
    if ("unsupported" in op || "unsupported" in tree) throw new Error(`D ${d}: no fused plan`);
    const splits: FusedGeometry[] = [op];
    if (op.nv !== 1 && tree.leaves <= 256) splits.push({ ...fusedSplit(tree.leaves, 1, limits), rule: "nv 1" });
    viaOp(t, v);
    dev.synchronize();
    const want = bitsOf(t, v);
    const lines = [`prefill ${v.name} D=${d} rows=${rows}`];
    for (const g of splits) {
      const c = fusedKernelFor(v.kind, "bf16", yDtype(v, "bf16"), "bf16", g, "cuda");
      if ("unsupported" in c) throw new Error(c.unsupported);
      const k = fusedKernel(dev, c.kernel);
      const cells: string[] = [];
      for (const cap of caps) {
        const maxGridX = cap === 0 ? limits.maxGridX : cap * sms;
        poison(t);
        viaKernel(k, t, v, rows, d, g, maxGridX, dev.stream);
        dev.synchronize();
        const check = agrees(t, v, want);
        const value = check === "ok"
          ? measureCase(dev, timer, copyGBs, "prefill", bytes, (s) => viaKernel(k, t, v, rows, d, g, maxGridX, s))
          : NaN;
        results.push({ ...caseKey("prefill", v, d, rows, g), kernel: c.variant, cap, value, unit: "%copy", check });
        cells.push(`${cap === 0 ? "rows" : `${cap}×SMs`} ${check === "ok" ? value.toFixed(1) : check}`);
      }
      lines.push(`  tpr ${String(g.tpr).padStart(4)} nv ${g.nv} ${c.variant} (${g.rule}): ${cells.join(", ")}`);
    }
    console.log(lines.join("\n"));
    if (jsonPath) writeFileSync(jsonPath, JSON.stringify({ device: dev.info.name, copyGBs, results }, null, 1));
  }
}
