/**
 * The fused kernels' plan (nk_fused_{ln|rms}_{ti}_{to}_{tw} in kernels/fused.cu): residual add, norm and optional
 * quantized output in one launch. Pure: no I/O, no driver.
 *
 * A row's geometry — threads per row `tpr` and 16-byte chunks per thread `nv` — is a function of (kind, D, x's dtype,
 * the device's limits) only, never of the row count: a row's reduction order (chunk k held by thread k % tpr as its
 * (k / tpr)-th chunk, a fixed shuffle tree, warps in order) is then the same in every call, whatever the batch, so
 * every output bit of a row is too. The row count sizes the grid alone (fusedLaunch); the kernel grid-strides.
 * Each table row has a stable `fused.*` id.
 */
import { type DType, QUANT_DTYPES } from "../runtime/dtype.ts";
import type { NormKind, PlanLimits } from "./plan.ts";

/** x's dtypes (the fused kernels' `ti`). */
export type FusedInput = DType;
/** y's dtypes: a float dtype or a 1-byte quantized one. */
export type FusedOutput = DType;

/** 16-byte chunks per thread at most (NK_FUSED_MAXV in kernels/fused.cu). */
export const FUSED_MAXV = 8;
/** Threads per row at most in the sub-warp layout (a power of two); past it, a block per row. */
export const FUSED_LANES_MAX = 32;
/** Block size of the sub-warp layout: 256 / tpr rows per block. */
export const FUSED_ROWS_BLOCK = 256;
/** Threads per row at most in the block-per-row layout (the kernel's launch bound). */
export const FUSED_MAX_THREADS = 1024;

/** A row's geometry: the kernel's `tpr` and `nv`, its block, and the rows one block holds. */
export interface FusedGeometry {
  tpr: number;
  nv: number;
  /** blockDim.x: tpr for a block per row, FUSED_ROWS_BLOCK for sub-warp rows. */
  block: number;
  rowsPerBlock: number;
  /** The FUSED_GEOMETRY row that gave it. */
  rule: string;
}
export type FusedGeometryResult = FusedGeometry | { unsupported: string };

/**
 * The layout: the first row whose chunk count fits. `aimNv` and `maxTpr` (per kind) shape the sub-warp layout as the
 * tuned `rows` mapping's lanes do (ops/plan.ts ROWS_LANES, measured there): LayerNorm fills 8 chunks a lane,
 * RMSNorm aims for 4 with up to 16 lanes (more lanes coalesce the loads), never more lanes than rows of 8 chunks need
 * once past 16.
 */
// deno-fmt-ignore
export const FUSED_GEOMETRY: readonly {
  id: string;
  layout: "lanes" | "block";
  /** At most this many chunks per row: threads × FUSED_MAXV. */
  maxChunks: number;
  aimNv: Record<NormKind, number>;
  maxTpr: Record<NormKind, number>;
  why: string;
}[] = [
  { id: "fused.lanes", layout: "lanes", maxChunks: FUSED_LANES_MAX * FUSED_MAXV, aimNv: { layer: 8, rms: 4 }, maxTpr: { layer: 32, rms: 16 }, why: "rows to 256 chunks (2048 16-bit / 1024 f32 elements): a power-of-two group of lanes per row, 256 / tpr rows per block, a shuffle tree within the group" },
  { id: "fused.block", layout: "block", maxChunks: FUSED_MAX_THREADS * FUSED_MAXV, aimNv: { layer: 8, rms: 8 }, maxTpr: { layer: FUSED_MAX_THREADS, rms: FUSED_MAX_THREADS }, why: "longer rows to 8192 chunks: a block of whole warps per row at up to 8 chunks a thread (fewest threads, most bytes in flight per thread)" },
];

const nextPow2 = (n: number): number => 2 ** Math.ceil(Math.log2(Math.max(1, n)));
const inputBytes = (t: FusedInput): number => (t === "f32" ? 4 : 2);
const isInput = (t: string): t is FusedInput => t === "f32" || t === "f16" || t === "bf16";

/**
 * The row geometry of the fused kernels for rows of `d` elements of `inputDtype`, or a sentence saying why there is
 * none. Depends on (kind, d, inputDtype, limits) only.
 */
export function fusedGeometry(
  kind: NormKind,
  d: number,
  inputDtype: string,
  limits: Pick<PlanLimits, "maxThreadsPerBlock" | "warpSize">,
): FusedGeometryResult {
  if (kind !== "layer" && kind !== "rms") return { unsupported: `kind must be "layer" or "rms", not ${String(kind)}` };
  if (!isInput(inputDtype)) {
    return { unsupported: `the fused kernels take x in f32, f16 or bf16, not ${String(inputDtype)}` };
  }
  if (!Number.isInteger(d) || d < 1) return { unsupported: `d must be a whole number ≥ 1, not ${d}` };
  const vec = 16 / inputBytes(inputDtype), chunks = Math.ceil(d / vec);
  // Whole warps of the device, and at least whole 32-lane groups (the shuffle tree's width).
  const warp = Math.max(FUSED_LANES_MAX, limits.warpSize);
  const maxThreads = Math.floor(Math.min(FUSED_MAX_THREADS, limits.maxThreadsPerBlock) / warp) * warp;
  for (const rule of FUSED_GEOMETRY) {
    if (chunks > rule.maxChunks) continue;
    if (rule.layout === "lanes") {
      if (FUSED_ROWS_BLOCK > limits.maxThreadsPerBlock) continue;
      const full = nextPow2(Math.ceil(chunks / FUSED_MAXV));
      const aimed = Math.min(rule.maxTpr[kind], nextPow2(Math.ceil(chunks / rule.aimNv[kind])));
      const tpr = Math.min(FUSED_LANES_MAX, Math.max(full, aimed));
      return {
        tpr,
        nv: Math.ceil(chunks / tpr),
        block: FUSED_ROWS_BLOCK,
        rowsPerBlock: FUSED_ROWS_BLOCK / tpr,
        rule: rule.id,
      };
    }
    const tpr = Math.max(warp, Math.ceil(Math.ceil(chunks / rule.aimNv[kind]) / warp) * warp);
    if (tpr > maxThreads) break;
    return { tpr, nv: Math.ceil(chunks / tpr), block: tpr, rowsPerBlock: 1, rule: rule.id };
  }
  const most = maxThreads * FUSED_MAXV * vec;
  return {
    unsupported: `the fused kernels take rows of at most ${most} ${inputDtype} elements ` +
      `(${maxThreads} threads × ${FUSED_MAXV} chunks of ${vec}), not d = ${d}`,
  };
}

/** The launch for `rows` rows: the grid is the only part that depends on the row count (the kernel grid-strides). */
export function fusedLaunch(
  g: FusedGeometry,
  rows: number,
  limits: Pick<PlanLimits, "maxGridX">,
): { grid: [number, number, number]; block: [number, number, number] } {
  const gridX = rows < 1 ? 0 : Math.min(Math.ceil(rows / g.rowsPerBlock), limits.maxGridX);
  return { grid: [gridX, 1, 1], block: [g.block, 1, 1] };
}

/** The kernel's name (whether it is built: fusedKernelFor). */
export function fusedKernelName(kind: NormKind, ti: string, to: string, tw: string): string {
  return `nk_fused_${kind === "layer" ? "ln" : "rms"}_${ti}_${to}_${tw}`;
}

/**
 * The built (ti, to, tw) triples, per kind: x in f32, f16 or bf16; y in x's dtype or quantized to 1 byte; weights in
 * f32 or x's dtype (f32 x: f32 only). 4 + 8 + 8 = 20 per kind.
 */
// deno-fmt-ignore
export const FUSED_TRIPLES: readonly { id: string; ti: FusedInput; to: readonly FusedOutput[]; tw: readonly DType[]; why: string }[] = [
  { id: "fused.types-f32", ti: "f32", to: ["f32", ...QUANT_DTYPES], tw: ["f32"], why: "f32 weights only: no narrower weights for f32 rows" },
  { id: "fused.types-f16", ti: "f16", to: ["f16", ...QUANT_DTYPES], tw: ["f32", "f16"], why: "weights as the tuned kernels take them" },
  { id: "fused.types-bf16", ti: "bf16", to: ["bf16", ...QUANT_DTYPES], tw: ["f32", "bf16"], why: "as above" },
];

/** Every fused kernel name of both kinds (40). */
export const FUSED_KERNELS: readonly string[] = (["layer", "rms"] as const).flatMap((k) =>
  FUSED_TRIPLES.flatMap((r) => r.to.flatMap((to) => r.tw.map((tw) => fusedKernelName(k, r.ti, to, tw))))
);

/** The fused kernel for these dtypes, or a sentence naming the dtype it does not take. */
export function fusedKernelFor(
  kind: NormKind,
  ti: string,
  to: string,
  tw: string,
): { kernel: string } | { unsupported: string } {
  const row = FUSED_TRIPLES.find((r) => r.ti === ti);
  if (!row) return { unsupported: `the fused kernels take x in f32, f16 or bf16, not ${ti}` };
  if (!row.to.includes(to as FusedOutput)) {
    return { unsupported: `the fused kernels write ${ti} x's output as ${row.to.join(", ")}, not ${to}` };
  }
  if (!row.tw.includes(tw as DType)) {
    return { unsupported: `the fused kernels take ${ti} x's weights as ${row.tw.join(" or ")}, not ${tw}` };
  }
  return { kernel: fusedKernelName(kind, ti, to, tw) };
}
