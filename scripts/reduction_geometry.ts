/**
 * What fixes the order in which the tuned forward kernels (kernels/fwd_*.cuh) sum a row: a pure function of a plan,
 * for the batch-invariance audit (scripts/batch-invariance.ts, docs/batch-invariance.md). Two calls give a row the
 * same bits where their geometries have the same `stats` and `order` (and the row has no neighbours that decide for
 * it: `sharedDecision`).
 *
 * From the kernels' source:
 * - every register-cached mapping (`rows`, `block`, `latency`, `stash`, `cluster` per CTA) and `wide` give thread t
 *   of T the row's chunks t, t + T, t + 2T, … in that order; a cluster's CTA r takes the r-th slice of ceil(chunks / C)
 *   chunks and sums it so, then the C CTA totals are added in rank order;
 * - `rows` adds its lanes with an xor tree (nk_red_lanes); the block mappings add each warp with an xor tree, then the
 *   warp totals, zero-padded to 32 lanes, with another (nk_block_sum);
 * - a thread folds its elements one at a time (RMSNorm's q += v·v, an FMA; LayerNorm's masked path), or chunk by chunk
 *   (LayerNorm's vector path, and the `stash` loop for both kinds: each chunk's sum first, nk_chunk_sums);
 * - the chunk cap (MAXV 4 for `latency`, 8 for `block`) and the early weight loads change nothing: chunks past the row
 *   load as zero and add nothing; nor does the staged `block` loop (nk_chunk_sums: the vector path's order);
 * - LayerNorm's statistics: one pass over the registers (E[t²] − E[t]², centred where ill-conditioned) on the vector
 *   path, mean then centred sum on the masked path and in the two-pass `rows` kernel, Chan's update in `wide`, and
 *   the `rows` tile's two passes without the shift for 16-bit x.
 * `order` is an exact fingerprint of the summation tree over the row's elements (a 64-bit hash of the canonical tree:
 * additions commute, zeros dropped), so geometries that differ in name but add in the same order compare equal.
 */
import { dtypeBytes } from "../runtime/dtype.ts";
import type { LaunchPlan, NormKind, PlanInput } from "../ops/plan.ts";
import type { BwdPlan } from "../ops/plan_bwd.ts";

export type ReductionFamily = "lanes" | "tile" | "block" | "stash" | "cluster" | "wide";
export type LnStats = "one-pass" | "centred" | "chan" | "tile-shift" | "tile-no-shift";

export interface ReductionGeometry {
  family: ReductionFamily;
  /** Threads summing one row (per CTA for a cluster). */
  threads: number;
  /** CTAs per row (1: none). */
  cluster: number;
  /** How a thread folds its elements: one at a time, or each chunk's sum first. */
  fold: "element" | "chunk" | "chan";
  /** RMSNorm: "rms"; LayerNorm: how the statistics are formed. */
  stats: "rms" | LnStats;
  /**
   * Rows whose one-pass/centred choice is made together (nk_any over a warp): 32 / tpr for LayerNorm's one-pass `rows`
   * kernel, where a row's bits then depend on its warp neighbours' values; 1 elsewhere.
   */
  sharedDecision: number;
  /** Fingerprint of the summation tree (16 hex digits). */
  order: string;
}

/** The kernel variant of a kernel name nk_{ln|rms}_<variant>_<ti>_<to>_<tw>. */
const variantOf = (kernel: string): string => kernel.split("_")[2];

/**
 * The reduction geometry of `plan` (made by planNorm for `input`) for a call that takes the vector path (`full`: fwdFull
 * holds) or not. The kernel is the plan's fullKernel where `full` and there is one.
 */
export function reductionGeometry(input: PlanInput, plan: LaunchPlan, full: boolean): ReductionGeometry {
  const { kind, d, inputDtype } = input;
  const vec = 16 / dtypeBytes(inputDtype), chunks = Math.ceil(d / vec);
  const variant = variantOf(full && plan.fullKernel ? plan.fullKernel : plan.kernel);
  const ln = kind === "layer";
  const base = { cluster: 1, sharedDecision: 1 };
  let g: Omit<ReductionGeometry, "order">;
  switch (variant) {
    case "rows":
    case "rowstwopass": {
      const onePass = ln && full && variant === "rows";
      g = {
        ...base,
        family: "lanes",
        threads: plan.tpr,
        fold: ln && full ? "chunk" : "element",
        stats: ln ? (onePass ? "one-pass" : "centred") : "rms",
        sharedDecision: onePass && plan.tpr < 32 ? 32 / plan.tpr : 1,
      };
      break;
    }
    case "rowstile":
      g = {
        ...base,
        family: "tile",
        threads: chunks,
        fold: "element",
        stats: ln ? (inputDtype === "f32" ? "tile-shift" : "tile-no-shift") : "rms",
      };
      break;
    case "block":
    case "blockfull":
    case "latency":
      g = {
        ...base,
        family: "block",
        threads: plan.tpr,
        fold: ln && full ? "chunk" : "element",
        stats: ln ? (full ? "one-pass" : "centred") : "rms",
      };
      break;
    case "cluster":
    case "clusterfull":
      g = {
        ...base,
        family: "cluster",
        threads: plan.tpr,
        cluster: plan.cluster,
        fold: ln && full ? "chunk" : "element",
        stats: ln ? (full ? "one-pass" : "centred") : "rms",
      };
      break;
    case "stash":
      // The stash loop takes vector-path calls; the others run `wide`'s masked loop on the same launch.
      g = full
        ? { ...base, family: "stash", threads: plan.tpr, fold: "chunk", stats: ln ? "one-pass" : "rms" }
        : { ...base, family: "wide", threads: plan.tpr, fold: ln ? "chan" : "element", stats: ln ? "chan" : "rms" };
      break;
    case "wide":
      g = { ...base, family: "wide", threads: plan.tpr, fold: ln ? "chan" : "element", stats: ln ? "chan" : "rms" };
      break;
    default:
      throw new Error(`reductionGeometry: unknown kernel variant ${variant} (${plan.kernel})`);
  }
  return { ...g, order: orderFingerprint(g, kind, d, vec) };
}

/** Whether two geometries give a row the same bits (same statistics formula, same summation tree). */
export function sameReduction(a: ReductionGeometry, b: ReductionGeometry): boolean {
  return a.stats === b.stats && a.order === b.order;
}

// ---------------------------------------------------------------- the summation tree's fingerprint
// A node is a 64-bit hash [hi, lo]; ZERO is the empty sum. add() commutes (IEEE addition does), x + 0 = x.
type Node = readonly [number, number] | null;
const ZERO: Node = null;
function mix(h: number, v: number): number {
  h = Math.imul(h ^ v, 0x9e3779b1);
  h ^= h >>> 15;
  h = Math.imul(h, 0x85ebca77);
  return (h ^ (h >>> 13)) >>> 0;
}
function node(tag: number, ...parts: number[]): Node {
  let a = mix(0x1234567, tag), b = mix(0x7654321, tag ^ 0x5bd1e995);
  for (const p of parts) a = mix(a, p), b = mix(b, p ^ 0x27d4eb2f);
  return [a, b];
}
const less = (x: readonly [number, number], y: readonly [number, number]) =>
  x[0] < y[0] || (x[0] === y[0] && x[1] < y[1]);
function add(x: Node, y: Node): Node {
  if (x === null) return y;
  if (y === null) return x;
  const [p, q] = less(x, y) ? [x, y] : [y, x];
  return node(1, p[0], p[1], q[0], q[1]);
}
/** Element e's term: x_e − k (LayerNorm) or x_e² (RMSNorm, rounded). */
const leaf = (e: number): Node => node(2, e);
/** acc + x_e² with the product unrounded (the FMA of q += v·v). acc = 0: the rounded square. */
const fma = (acc: Node, e: number): Node => (acc === null ? leaf(e) : node(3, acc[0], acc[1], e));

/** The per-thread partial of the chunks `owned` (in order), folded as `fold`. */
function threadPartial(owned: number[], fold: ReductionGeometry["fold"], rms: boolean, d: number, vec: number): Node {
  const elems = (c: number): number[] => {
    const out: number[] = [];
    for (let e = c * vec; e < Math.min(d, (c + 1) * vec); e++) out.push(e);
    return out;
  };
  const foldElems = (acc: Node, es: number[]): Node => {
    for (const e of es) acc = rms ? fma(acc, e) : add(acc, leaf(e));
    return acc;
  };
  if (fold === "chan") return owned.length ? node(4, ...owned) : ZERO;
  let acc: Node = ZERO;
  for (const c of owned) acc = fold === "element" ? foldElems(acc, elems(c)) : add(acc, foldElems(ZERO, elems(c)));
  return acc;
}

/** xor tree over the first `width` lanes (a power of two ≤ 32): lane 0's total (every lane's, bit for bit). */
function xorTree(lanes: Node[], width: number): Node {
  let v = lanes.slice(0, width);
  for (let m = 16; m > 0; m >>= 1) if (m < width) v = v.map((x, l) => add(x, v[l ^ m]));
  return v[0];
}
/** nk_block_sum: each warp's xor tree, then the warp totals (zero-padded to 32 lanes) by another. */
function blockTree(parts: Node[]): Node {
  const warps: Node[] = [];
  for (let w = 0; w < parts.length; w += 32) warps.push(xorTree(parts.slice(w, w + 32), 32));
  while (warps.length < 32) warps.push(ZERO);
  return xorTree(warps, 32);
}

function orderFingerprint(g: Omit<ReductionGeometry, "order">, kind: NormKind, d: number, vec: number): string {
  const chunks = Math.ceil(d / vec), rms = kind === "rms";
  // Thread t of T over chunks [first, end): first + t, first + t + T, …
  const partials = (first: number, end: number, T: number): Node[] =>
    Array.from({ length: T }, (_, t) => {
      const owned: number[] = [];
      for (let c = first + t; c < end; c += T) owned.push(c);
      return threadPartial(owned, g.fold, rms, d, vec);
    });
  let total: Node;
  if (g.family === "lanes" || g.family === "tile") {
    total = xorTree(partials(0, chunks, g.threads), g.threads);
  } else if (g.family === "cluster") {
    const cpc = Math.ceil(chunks / g.cluster);
    total = ZERO;
    for (let r = 0; r < g.cluster; r++) {
      total = add(total, blockTree(partials(r * cpc, Math.min(chunks, (r + 1) * cpc), g.threads)));
    }
  } else {
    total = blockTree(partials(0, chunks, g.threads));
  }
  const hex = (n: number) => n.toString(16).padStart(8, "0");
  return total === null ? "0".repeat(16) : hex(total[0]) + hex(total[1]);
}

/**
 * The backward's counterpart: what fixes the order of a row's two sums (Σ dy·w·x̂ and Σ dy·w) in the dx kernel of
 * `plan` (ops/plan_bwd.ts) for a call that takes the staged variant (`staged`: bwdFull holds and the plan has one) or
 * not. planNormBackward takes no row count, and the op picks between the two by alignment alone, so a row's dx is
 * summed in one order at every row count. (dweight and dbias are sums over rows: their order follows the persistent
 * grid, which the op sizes from the row count.)
 */
export function bwdReductionGeometry(
  plan: BwdPlan,
  staged: boolean,
): { mapping: BwdPlan["mapping"]; threads: number; tpr: number; cluster: number } {
  const s = staged && plan.rowsPerBlock === 1 ? plan.staged : undefined;
  if (s) return { mapping: plan.mapping, threads: s.block, tpr: s.block, cluster: s.cluster };
  // `split`: the row sums come from the rowsum kernel, a block of rowsumBlock threads per row.
  const threads = plan.mapping === "split" ? plan.rowsumBlock! : plan.tpr;
  return { mapping: plan.mapping, threads, tpr: threads, cluster: plan.cluster };
}
