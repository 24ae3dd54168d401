/**
 * Which split of a row's tree (threads per row `tpr`, 16-byte chunks per thread `nv`) serves decode latency, and which
 * prefill bandwidth? Launches the shipped fused kernels directly (Kernel.launch, arguments packed by fusedArgs as the
 * op packs them) with every split per D, next to the op itself (its FUSED_SPLITS choice):
 *
 * - decode: 1 and 8 bf16 rows, D 2048 / 4096 / 8192, captured 100 times in a CUDA graph: device µs per op, for
 *   add + RMSNorm → bf16, add + RMSNorm → fp8e4m3 (dynamic per row), add + LayerNorm → bf16;
 * - prefill: rows moving ≥ 512 MiB, D 512 … 8192, the same three and add + LayerNorm → fp8e4m3: % of a
 *   device-to-device copy measured in the same run (bytes as bench/fused.ts counts them).
 *
 * Each split's h, y and dynamic scales must equal the op's bit for bit (every split adds in the row's one tree): a
 * broken split shows as a mismatch, not a fast number.
 *
 *   deno run -A lab/fused_geometry/sweep.ts [--json out.json]
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import { type DType, layerNorm, loadKernels, rmsNorm } from "../../mod.ts";
import { LaunchConfig, type Stream } from "../../gpu.ts";
import { fusedKernel } from "../../ops/fused_module.ts";
import { fusedArgs } from "../../ops/fused_abi.ts";
import { type FusedGeometry, fusedGeometry, fusedKernelName, fusedSplit, fusedTree } from "../../ops/plan_fused.ts";
import { planLimits } from "../../ops/kernels.ts";
import { fillFromTile, randomTile } from "../../bench/tile.ts";
import { copyCeilingGBs, deviceTimer, graphUs } from "../../bench/device_timer.ts";
import { openCuda } from "../../bench/open_cuda.ts";

const args = process.argv.slice(2);
const jsonPath = args.includes("--json") ? args[args.indexOf("--json") + 1] : undefined;
using dev = openCuda("lab/fused_geometry/sweep.ts");
await loadKernels(dev, { fused: true });
using timer = deviceTimer(dev, 10);
const copyGBs = copyCeilingGBs(dev, timer);
const limits = planLimits(dev);
const tile = randomTile(3);
console.log(`# ${dev.info.name}, copy ${copyGBs.toFixed(0)} GB/s`);
const results: Record<string, unknown>[] = [];
const EPS = 1e-6; // passed to the op and to the direct launches alike

type Variant = { name: string; kind: "rms" | "layer"; to: DType | "fp8e4m3" };
const VARIANTS: Variant[] = [
  { name: "add+rms", kind: "rms", to: "bf16" },
  { name: "add+rms+fp8", kind: "rms", to: "fp8e4m3" },
  { name: "add+ln", kind: "layer", to: "bf16" },
  { name: "add+ln+fp8", kind: "layer", to: "fp8e4m3" },
];

/** Every split of the row's tree for bf16 rows of d (fusedTree's leaves at 1, 2, 4, 8 chunks a thread), laid out as the
 * plan lays it out (fusedSplit). */
function geometries(d: number): FusedGeometry[] {
  const tree = fusedTree("rms", d, "bf16", limits);
  if ("unsupported" in tree) return [];
  return [1, 2, 4, 8].filter((nv) => nv <= tree.leaves && tree.leaves / nv <= 1024)
    .map((nv) => ({ ...fusedSplit(tree.leaves, nv, limits), rule: `nv ${nv}` }));
}

function tensors(held: DisposableStack, rows: number, d: number) {
  const make = (dtype: string, fill: boolean, shape = [rows, d]) => {
    const t = held.use(dev.empty(shape, { dtype: dtype as DType }));
    if (fill) fillFromTile(t, tile);
    return t;
  };
  return {
    x: make("bf16", true),
    r: make("bf16", true),
    h: make("bf16", false),
    y16: make("bf16", false),
    y8: make("fp8e4m3", false),
    scale: make("f32", false, [rows]),
    w: held.use(dev.tensor(tile.subarray(0, d).map((v) => 1 + v / 8), [d], { dtype: "bf16" })),
    b: held.use(dev.tensor(tile.subarray(d, 2 * d), [d], { dtype: "bf16" })),
  };
}
type T = ReturnType<typeof tensors>;

/** The op itself (today's table): residual out of place, dynamic scales for fp8. */
function viaOp(t: T, v: Variant, stream?: Stream): void {
  const quant = v.to === "fp8e4m3" ? { quant: { dtype: "fp8e4m3" as const, scaleOut: t.scale } } : {};
  const o = { weight: t.w, residual: t.r, residualOut: t.h, out: v.to === "bf16" ? t.y16 : t.y8, eps: EPS, ...quant };
  if (v.kind === "rms") rmsNorm(t.x, { ...o, ...(stream ? { stream } : {}) } as never);
  else layerNorm(t.x, { ...o, bias: t.b, ...(stream ? { stream } : {}) } as never);
}

/** The same call with geometry g, launched directly. */
function viaKernel(t: T, v: Variant, rows: number, d: number, g: FusedGeometry, stream: Stream) {
  const k = fusedKernel(dev, fusedKernelName(v.kind, "bf16", v.to, "bf16"));
  const grid = Math.min(Math.ceil(rows / g.rowsPerBlock), limits.maxGridX);
  const y = v.to === "bf16" ? t.y16 : t.y8, q = v.to === "bf16" ? 0 : 2;
  const rowsOf = [d, 0] as const; // one level of rows (n0 = rows, n1 = 1), d apart
  k.launch(
    stream,
    new LaunchConfig({ grid: [grid], block: [g.block] }),
    fusedArgs({
      x: t.x.ptr,
      residual: t.r.ptr,
      h: t.h.ptr,
      y: y.ptr,
      weight: t.w.ptr,
      bias: v.kind === "layer" ? t.b.ptr : 0n,
      weight2: 0n,
      mean: 0n,
      rstd: 0n,
      scale: q ? t.scale.ptr : 0n,
      n0: rows,
      n1: 1,
      d,
      xStrides: rowsOf,
      rStrides: rowsOf,
      hStrides: rowsOf,
      yStrides: rowsOf,
      eps: EPS,
      scaleValue: 1,
      scaleUpperBound: Infinity,
      quant: q,
      split: 1,
      tpr: g.tpr,
      nv: g.nv,
    }),
  );
}

type Bits = { h: ArrayLike<number>; y: ArrayLike<number>; scale: ArrayLike<number> };
const bitsOf = (t: T, v: Variant): Bits => ({
  h: t.h.readBitsSync(),
  y: (v.to === "bf16" ? t.y16 : t.y8).readBitsSync(),
  scale: t.scale.readBitsSync(),
});
/** h, y and (fp8) the scales bit for bit against the op's (run just before): every split adds in the same tree. */
function agrees(t: T, v: Variant, want: Bits): string {
  const got = bitsOf(t, v);
  const keys: (keyof Bits)[] = v.to === "fp8e4m3" ? ["h", "y", "scale"] : ["h", "y"];
  for (const k of keys) {
    for (let i = 0; i < want[k].length; i++) if (got[k][i] !== want[k][i]) return `${k}[${i}] differs`;
  }
  return "ok";
}

function run(mode: "decode" | "prefill", rows: number, d: number, v: Variant) {
  using held = new DisposableStack();
  const t = tensors(held, rows, d);
  const bytes = rows * d * (3 * 2 + (v.to === "bf16" ? 2 : 1)) + (v.to === "bf16" ? 0 : 4 * rows);
  const measure = (op: (s: Stream) => void): number =>
    mode === "decode" ? graphUs(dev, op) : (100 * (bytes / (timer.time(() => op(dev.stream)) * 1e6))) / copyGBs;
  const unit = mode === "decode" ? "µs/op" : "%copy";
  const table = fusedGeometry(v.kind, d, "bf16", limits, rows);
  const tableNote = "tpr" in table ? `tpr ${table.tpr} nv ${table.nv}` : table.unsupported;
  const opValue = measure((s) => viaOp(t, v, s));
  viaOp(t, v);
  dev.synchronize();
  const want = bitsOf(t, v);
  const line = [`${mode} ${v.name} D=${d} rows=${rows}: op (${tableNote}) ${opValue.toFixed(2)} ${unit}`];
  for (const g of geometries(d)) {
    for (const p of [t.h, t.y16, t.y8, t.scale]) p.buffer.fill(0xff);
    viaKernel(t, v, rows, d, g, dev.stream);
    dev.synchronize();
    const check = agrees(t, v, want);
    const value = check === "ok" ? measure((s) => viaKernel(t, v, rows, d, g, s)) : NaN;
    results.push({ mode, variant: v.name, d, rows, tpr: g.tpr, nv: g.nv, value, unit, check, op: opValue });
    line.push(`  tpr ${String(g.tpr).padStart(4)} nv ${g.nv}: ${check === "ok" ? value.toFixed(2) : check}`);
  }
  console.log(line.join("\n"));
}

for (const d of [2048, 4096, 8192]) {
  for (const rows of [1, 8]) for (const v of VARIANTS.slice(0, 3)) run("decode", rows, d, v);
}
for (const d of [512, 1024, 2048, 4096, 8192]) {
  const rows = Math.ceil(2 ** 29 / (d * 8));
  for (const v of VARIANTS) run("prefill", rows, d, v);
}
if (jsonPath) writeFileSync(jsonPath, JSON.stringify({ device: dev.info.name, copyGBs, results }, null, 1));
