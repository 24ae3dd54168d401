/**
 * Which split of a row's tree (threads per row `tpr`, 16-byte chunks per thread `nv`) serves decode latency, and which
 * prefill bandwidth? Launches the shipped fused kernels directly (Kernel.launch, arguments packed by fusedArgs as the
 * op packs them) with every split per D, each on the kernel the op takes for it (FUSED_VARIANTS), next to the op
 * itself (its FUSED_SPLITS choice):
 *
 * - decode: 1 and 8 bf16 rows, D 2048 / 4096 / 8192, and 40 and 320 rows of D 128 (QK-norm's heads of 1 and 8
 *   tokens), captured 100 times in a CUDA graph: device µs per op, for add + RMSNorm → bf16, add + RMSNorm → fp8e4m3
 *   (dynamic per row), add + LayerNorm → bf16;
 * - prefill: rows moving ≥ 512 MiB, D 128 … 8192 (128: a QK-norm head), the same three, add + LayerNorm → fp8e4m3 and
 *   the plain RMSNorm and LayerNorm of `batchInvariant: true` (lab/fused_geometry/cases.ts VARIANTS): % of a
 *   device-to-device copy measured in the same run (bytes as bench/fused.ts counts them).
 *
 * Each split's h, y and dynamic scales must equal the op's bit for bit (every split adds in the row's one tree): a
 * broken split shows as a mismatch, not a fast number.
 *
 *   deno run -A lab/fused_geometry/sweep.ts [--json out.json] [--only decode|prefill] [--ds 4096,8192]
 *
 * `--only`: that part alone; `--ds`: the prefill row lengths (default 128 … 8192). The JSON is rewritten after each case,
 * so a run cut short keeps what it measured.
 */
import { writeFileSync } from "node:fs";
import type { Kernel, Stream } from "../../gpu.ts";
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
  type Variant,
  VARIANTS,
  viaKernel,
  viaOp,
  wholeNumbers,
  yDtype,
} from "./cases.ts";

const jsonPath = option("--json");
const only = option("--only");
if (only !== undefined && only !== "decode" && only !== "prefill") {
  throw new Error(`--only takes decode or prefill, not ${only}`);
}
const prefillDs = wholeNumbers(option("--ds"), [128, 256, 512, 1024, 2048, 4096, 8192]);
using lab = await openLab("lab/fused_geometry/sweep.ts");
const { dev, timer, copyGBs, limits, tile } = lab;
console.log(`# ${dev.info.name}, copy ${copyGBs.toFixed(0)} GB/s`);
const results: Record<string, unknown>[] = [];

/** Every split of the row's tree for bf16 rows of d (fusedTree's leaves at 1, 2, 4, 8 chunks a thread), laid out as the
 * plan lays it out (fusedSplit). */
function geometries(d: number): FusedGeometry[] {
  const tree = fusedTree("rms", d, "bf16", limits);
  if ("unsupported" in tree) return [];
  return [1, 2, 4, 8].filter((nv) => nv <= tree.leaves && tree.leaves / nv <= 1024)
    .map((nv) => ({ ...fusedSplit(tree.leaves, nv, limits), rule: `nv ${nv}` }));
}

function run(mode: "decode" | "prefill", rows: number, d: number, v: Variant) {
  using held = new DisposableStack();
  const t = caseTensors(dev, held, tile, rows, d);
  const bytes = caseBytes(rows, d, v);
  // Each split on the kernel the op would launch for it (FUSED_VARIANTS: `_nv2` or `_nv4` for at most 2 or 4 chunks a
  // thread in blocks of at most 256).
  const kernelOf = (g: FusedGeometry) => {
    const c = fusedKernelFor(v.kind, "bf16", yDtype(v, "bf16"), "bf16", g, "cuda");
    if ("unsupported" in c) throw new Error(c.unsupported);
    return { kernel: fusedKernel(dev, c.kernel), variant: c.variant };
  };
  const direct = (k: Kernel, g: FusedGeometry, s: Stream) => viaKernel(k, t, v, rows, d, g, limits.maxGridX, s);
  const measure = (op: (s: Stream) => void) => measureCase(dev, timer, copyGBs, mode, bytes, op);
  const unit = mode === "decode" ? "µs/op" : "%copy";
  const table = fusedGeometry(v.kind, d, "bf16", limits, rows, "cuda");
  const tableNote = "tpr" in table ? `tpr ${table.tpr} nv ${table.nv}` : table.unsupported;
  const opValue = measure((s) => viaOp(t, v, s));
  viaOp(t, v);
  dev.synchronize();
  const want = bitsOf(t, v);
  const line = [`${mode} ${v.name} D=${d} rows=${rows}: op (${tableNote}) ${opValue.toFixed(2)} ${unit}`];
  for (const g of geometries(d)) {
    const { kernel, variant } = kernelOf(g);
    poison(t);
    direct(kernel, g, dev.stream);
    dev.synchronize();
    const check = agrees(t, v, want);
    const value = check === "ok" ? measure((s) => direct(kernel, g, s)) : NaN;
    results.push({
      ...caseKey(mode, v, d, rows, g),
      kernel: variant,
      value,
      unit,
      check,
      op: opValue,
    });
    line.push(`  tpr ${String(g.tpr).padStart(4)} nv ${g.nv} ${variant}: ${check === "ok" ? value.toFixed(2) : check}`);
  }
  console.log(line.join("\n"));
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify({ device: dev.info.name, copyGBs, results }, null, 1));
}

if (only !== "prefill") {
  for (const d of [2048, 4096, 8192]) {
    for (const rows of [1, 8]) for (const v of VARIANTS.slice(0, 3)) run("decode", rows, d, v);
  }
  // Heads of 128 at the row counts of 1 and 8 tokens of 32 + 8 heads (fused.latency, fused.wave).
  for (const rows of [40, 320]) for (const v of VARIANTS.slice(0, 3)) run("decode", rows, 128, v);
}
if (only !== "decode") {
  for (const d of prefillDs) {
    const rows = Math.ceil(2 ** 29 / (d * 8));
    for (const v of VARIANTS) run("prefill", rows, d, v);
  }
}
