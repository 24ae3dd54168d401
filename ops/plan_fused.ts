/**
 * The fused kernels' plan (nk_fused_{ln|rms}_{ti}_{to}_{tw} in kernels/fused.cu): residual add, norm and optional
 * quantized output in one launch. Pure: no I/O, no driver.
 *
 * A row's sums follow one tree per row length: its 16-byte chunks, padded with zeros to N = a power of two (the tree's
 * `leaves`, a function of D and x's dtype alone), are added c and c + N/2 first, then c and c + N/4, and so on
 * (kernels/fused.cuh, nk_fused_red). A launch splits the N leaves over `tpr` threads per row with `nv` chunks each
 * (both powers of two, tpr × nv = N, or more threads, of zeros, where a block's whole warps exceed N); every split
 * adds in that same tree, so every output bit of a row is the same in every call, whatever the batch. That leaves the
 * split free to follow the row count: few rows take 256 threads a row (short per-thread chains: latency), as do short
 * rows while a chunk a lane fits one wave; many rows take 4 chunks a thread up to 256 threads a row on CUDA (the `_nv4`
 * kernels' block: bandwidth), 8 past it, on HIP and for RMSNorm rows that fill at most 5/8 of their tree.
 * The row count also sizes the grid (fusedLaunch); the kernel grid-strides. Each table row has a stable `fused.*` id.
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
/** Threads per row at most in the block-per-row layout (the kernel's launch bound, NK_FUSED_MAX_THREADS). */
export const FUSED_MAX_THREADS = 1024;

/** The device limits the plan reads. */
export type FusedLimits = Pick<PlanLimits, "maxThreadsPerBlock" | "warpSize" | "multiprocessors">;

/** The GPU backends the fused kernels are built for. */
export type FusedBackend = "cuda" | "hip";
/** Where a geometry runs: a GPU backend, or the CPU backend (the float64 reference: the geometry only validates). */
export type FusedPlace = FusedBackend | "cpu";

/** A row's geometry: the kernel's `tpr` and `nv`, its block, and the rows one block holds. */
export interface FusedGeometry {
  tpr: number;
  nv: number;
  /** The tree's leaves (fusedTree), the same for every row count: tpr × nv, or fewer where a block's whole warps
   * hold more (zero leaves change no sum). */
  leaves: number;
  /** blockDim.x: tpr for a block per row, FUSED_ROWS_BLOCK for sub-warp rows. */
  block: number;
  rowsPerBlock: number;
  /** The FUSED_SPLITS row that gave it. */
  rule: string;
}
export type FusedGeometryResult = FusedGeometry | { unsupported: string };

/** The few-chunk kernels' block bound (NK_FUSED_FEW_THREADS in kernels/fused.cuh); their chunk bounds are the
 * FUSED_VARIANTS rows' `maxv`. */
export const FUSED_FEW_THREADS = 256;

/** Threads a row in the latency split (more where a row has more than 8 chunks a thread for them: FUSED_MAXV). In the
 * H200 split sweep 256 was the fastest split or within 0.2 µs of it at 1 and 8 rows, D 2048 to 8192; 1024 was up to
 * 3.6 µs slower (each level of the cross-warp tree past 256 threads costs a barrier). */
export const FUSED_LATENCY_THREADS = 256;

/** The `fused.wave` rule's measure of one wave, in threads an SM: the 8-chunk kernels hold 1024 (64 registers a thread
 * under their launch bound of 1024); the `_nv2` kernels that CUDA launches for those rows hold 768 to 1280 (48 to 80
 * registers, blocks of 256). */
export const FUSED_SM_THREADS = 1024;

/** What a split rule sees: the norm, the row count, the tree's leaves and the row's chunks (≤ leaves), the device. */
export interface FusedSplitQuery {
  kind: NormKind;
  rows: number;
  leaves: number;
  chunks: number;
  limits: FusedLimits;
  place: FusedPlace;
}

/**
 * How the N leaves are split, the first row whose `when` holds: `nv` chunks a thread for this kind and N (at least
 * N / the most threads a row may have). Set from the split sweeps (lab/fused_geometry/sweep.ts, figures in
 * docs/fused.md): at 1 and 8 rows, 256 threads a row was the fastest split or within 0.2 µs of it at D 2048 to 8192
 * (H200); at thousands of rows, 4 chunks a thread on the `_nv4` kernels was faster than 8 at D 512 to 8192 in 18 of
 * 20 cases, by up to 12 points of copy (H100; `fused.few`; add + RMSNorm at D 1024 and 8192: 0.6 and 1.5 points
 * slower). Rows of at most 32 chunks (H100, D 128 and 256 bf16): a chunk a lane was the fastest at 40 and 320 rows
 * (`fused.wave`), 4 chunks a lane the fastest or within 0.6 points of copy at 262,144 and 524,288 rows (`fused.short`).
 */
// deno-fmt-ignore
export const FUSED_SPLITS: readonly {
  id: string;
  when: (q: FusedSplitQuery) => boolean;
  nv: (kind: NormKind, leaves: number) => number;
  why: string;
}[] = [
  { id: "fused.latency", when: (q) => q.rows <= q.limits.multiprocessors, nv: (_k, n) => Math.max(1, n / FUSED_LATENCY_THREADS), why: "a row or fewer per SM: FUSED_LATENCY_THREADS threads a row (more for rows past 8 chunks a thread): a short chain of loads, reductions and stores per thread, 4 barriers per sum" },
  { id: "fused.wave", when: (q) => q.leaves <= FUSED_LANES_MAX && q.rows * q.leaves <= q.limits.multiprocessors * FUSED_SM_THREADS, nv: () => 1, why: "short rows (a warp or less at a chunk a lane: QK-norm's heads) whose lanes at one chunk each fit one wave of the GPU: the latency split's one load, shuffles and one store per lane, on more SMs than one row per SM allows (8 tokens of 40 heads took 8.3 µs at 8 chunks a lane, 1 token 2.6 µs at one: H100)" },
  { id: "fused.short", when: (q) => q.leaves <= FUSED_LANES_MAX, nv: () => 4, why: "rows of at most 32 chunks past one wave (QK-norm's heads at prefill): 4 chunks a lane, 32 to 256 rows a block (H100, D 128 and 256 bf16: 53-91 % of copy, against 28-62 % at 8 chunks a lane and 26-54 % at one)" },
  { id: "fused.padded", when: (q) => q.kind === "rms" && q.leaves > 4 * FUSED_LANES_MAX && q.chunks * 8 <= q.leaves * 5 && fewKernelHolds(q.place, q.leaves, 4), nv: () => 8, why: "RMSNorm rows of a block each at 4 chunks a thread (past 128 leaves) that fill at most 5/8 of their tree (D 5120 in 16-bit: 640 chunks, 1024 leaves) at many rows: 8 chunks a thread, 5 of them data, on the 8-chunk kernel (64 registers: 8 blocks of 128 threads an SM), against 2 or 3 of 4 in blocks of 256 on the _nv4 kernel. H100, D 5120 bf16, % of copy at 8 / 4 chunks a thread: add + RMSNorm 94.1 / 88.5, → fp8 72.4 / 60.8 (bench/results/h100-fused-splits-5120-deno.txt and h100-fused-ab-min4-onepass-quot-deno.txt, one run). LayerNorm keeps 4 chunks: add + LayerNorm 85.7 at 8 against 96.1 at 4, where its statistics take one pass (fused.nv4)" },
  { id: "fused.few", when: (q) => fewKernelHolds(q.place, q.leaves, 4), nv: () => 4, why: "rows of 33 to 1024 chunks at many rows (D 257 to 8192 in 16-bit) where the backend has the _nv4 kernels (CUDA): 4 chunks a thread, a group of lanes per row to 32 (256 / tpr rows a block, no barrier), a block per row past it, on the _nv4 kernels (launch bound 256; spill stores of at most 44 bytes on sm_90). H100, bf16, % of copy at 4 / 8 chunks a thread, the _nv4 kernels as they were before their bound of 4 blocks an SM, one-pass LayerNorm and the division-free quotient (which add up to 8 points: fused.nv4) (add + RMSNorm, → fp8, add + LayerNorm, → fp8): D 512 93.3 / 88.3, 78.4 / 69.7, 89.9 / 81.3, 67.2 / 54.9; D 4096 95.1 / 93.2, 79.0 / 72.2, 93.2 / 85.9, 65.7 / 60.5; D 8192 91.2 / 92.7, 77.0 / 73.6, 89.7 / 85.9, 63.8 / 61.9 (bench/results/h100-fused-splits-prefill-deno.txt). Without them (HIP) such rows stay at 8 chunks on the one kernel: in the H200 sweep of one kernel for every split, 4 chunks ran below 8 (bench/results/h200-fused-splits-deno.txt)" },
  { id: "fused.block", when: () => true, nv: () => 8, why: "the other rows at many rows (past 1024 chunks; past 32 where the backend has no _nv4 kernels): 8 chunks a thread (fewest threads, most bytes in flight per thread), a group of lanes per row to 32, a block of whole warps per row past it" },
];

/** Whether `place` has a few-chunk kernel (a FUSED_VARIANTS row below FUSED_MAXV) that holds `leaves` at `nv` chunks a
 * thread. */
function fewKernelHolds(place: FusedPlace, leaves: number, nv: number): boolean {
  return place !== "cpu" &&
    FUSED_VARIANTS.some((v) =>
      v.maxv < FUSED_MAXV && v.backends.includes(place) && nv <= v.maxv && leaves / nv <= v.maxThreads
    );
}

const nextPow2 = (n: number): number => 2 ** Math.ceil(Math.log2(Math.max(1, n)));
/** Elements of x in one 16-byte chunk. */
const chunkElems = (t: FusedInput): number => (t === "f32" ? 4 : 8);
const isInput = (t: string): t is FusedInput => t === "f32" || t === "f16" || t === "bf16";

/** The most threads a row may have on these limits: a power of two of whole warps (and 32-lane groups), ≤ 1024. */
function maxRowThreads(limits: Pick<PlanLimits, "maxThreadsPerBlock" | "warpSize">): number {
  const most = Math.min(FUSED_MAX_THREADS, limits.maxThreadsPerBlock);
  const warp = Math.max(FUSED_LANES_MAX, limits.warpSize);
  const t = 2 ** Math.floor(Math.log2(Math.max(1, most)));
  return t >= warp ? t : 0;
}

/**
 * The row's reduction tree: its 16-byte chunks and its leaves N (the chunks padded to a power of two), or a sentence
 * saying why the fused kernels take no such row. Depends on (kind, d, inputDtype, limits) only: this is what fixes a
 * row's bits.
 */
export function fusedTree(
  kind: NormKind,
  d: number,
  inputDtype: string,
  limits: Pick<PlanLimits, "maxThreadsPerBlock" | "warpSize">,
): { leaves: number; chunks: number } | { unsupported: string } {
  if (kind !== "layer" && kind !== "rms") return { unsupported: `kind must be "layer" or "rms", not ${String(kind)}` };
  if (!isInput(inputDtype)) {
    return { unsupported: `the fused kernels take x in f32, f16 or bf16, not ${String(inputDtype)}` };
  }
  if (!Number.isInteger(d) || d < 1) return { unsupported: `d must be a whole number ≥ 1, not ${d}` };
  const vec = chunkElems(inputDtype), chunks = Math.ceil(d / vec), leaves = nextPow2(chunks);
  const threads = maxRowThreads(limits);
  if (leaves > threads * FUSED_MAXV) {
    const most = threads * FUSED_MAXV * vec;
    return {
      unsupported: `the fused kernels take rows of at most ${most} ${inputDtype} elements ` +
        `(${threads} threads × ${FUSED_MAXV} chunks of ${vec}), not d = ${d}`,
    };
  }
  return { leaves, chunks };
}

/**
 * The row geometry of the fused kernels for `rows` rows of `d` elements of `inputDtype`, or a sentence saying why there
 * is none. The tree (fusedTree) does not depend on `rows`; the split of its leaves over threads does, and on `place`
 * (which kernels its backend has: FUSED_VARIANTS).
 */
export function fusedGeometry(
  kind: NormKind,
  d: number,
  inputDtype: string,
  limits: FusedLimits,
  rows: number,
  place: FusedPlace,
): FusedGeometryResult {
  const tree = fusedTree(kind, d, inputDtype, limits);
  if ("unsupported" in tree) return tree;
  const { leaves: n, chunks } = tree, threads = maxRowThreads(limits);
  const query: FusedSplitQuery = { kind, rows, leaves: n, chunks, limits, place };
  const rule = FUSED_SPLITS.find((r) => r.when(query))!;
  // nv: the rule's, within [n / threads, MAXV] and ≤ n; a power of two, as n is.
  const nv = Math.min(n, Math.max(rule.nv(kind, n), n / threads, 1), FUSED_MAXV);
  return { ...fusedSplit(n, nv, limits), rule: rule.id };
}

/**
 * The layout of `leaves` (a power of two) split at `nv` chunks a thread: sub-warp rows of tpr lanes in blocks of
 * FUSED_ROWS_BLOCK, or a block per row of whole warps of the device (past `leaves`, threads of zeros: the same tree).
 */
export function fusedSplit(
  leaves: number,
  nv: number,
  limits: Pick<PlanLimits, "maxThreadsPerBlock" | "warpSize">,
): Omit<FusedGeometry, "rule"> {
  const tpr = leaves / nv;
  if (tpr <= FUSED_LANES_MAX && FUSED_ROWS_BLOCK <= limits.maxThreadsPerBlock) {
    return { tpr, nv, leaves, block: FUSED_ROWS_BLOCK, rowsPerBlock: FUSED_ROWS_BLOCK / tpr };
  }
  const t = Math.max(tpr, FUSED_LANES_MAX, limits.warpSize);
  return { tpr: t, nv: Math.max(1, leaves / t), leaves, block: t, rowsPerBlock: 1 };
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

/**
 * Which of a dtype triple's kernels a geometry launches: the first row that holds at most `maxv` chunks a thread in
 * blocks of at most `maxThreads`, on a backend in `backends`. All give the same bits for the same launch (the same
 * tree, the same arithmetic); the few-chunk kernels are compiled for their launches alone, in the CUDA images only
 * (kernels/fused.cu: not measured on AMD, and the AMD code objects would pass @normkit/hip's budget). Figures: H100,
 * graph µs per op of one bf16 row, add + RMSNorm → fp8 dynamic where no other case is named
 * (bench/results/h100-fused-ab-nv2-deno.txt,
 * bench/results/h100-fused-ab-nv4-deno.txt, bench/results/h100-fused-ab-nv4-onekernel-deno.txt).
 */
// deno-fmt-ignore
export const FUSED_VARIANTS: readonly {
  id: string;
  suffix: string;
  maxv: number;
  maxThreads: number;
  backends: readonly FusedBackend[];
  why: string;
}[] = [
  { id: "fused.nv2", suffix: "_nv2", maxv: 2, maxThreads: FUSED_FEW_THREADS, backends: ["cuda"], why: "at most 2 chunks a thread in blocks of at most 256 (decode to D 4096 in 16-bit; short rows in one wave): weights and bias loaded with x and residual, the dynamic scale's y kept in registers, under a launch bound of 256 (48 to 80 registers): 3.58 µs against 5.66 for the 8-chunk kernel at D 2048, 4.16 against 6.48 at D 4096; the 4-chunk kernel took 4.02 and 4.63" },
  { id: "fused.nv4", suffix: "_nv4", maxv: 4, maxThreads: FUSED_FEW_THREADS, backends: ["cuda"], why: "3 to 4 chunks a thread in blocks of at most 256 (decode at D 8192 in 16-bit; prefill rows of up to 1024 chunks, 4 chunks a thread: fused.short, fused.few): as _nv2 with room for 4 chunks (64 to 118 registers: 64 with at least 4 blocks an SM for a float y, 80 with at least 3 for RMSNorm's quantized y, LayerNorm's quantized y computed again in the output loop, not kept; spill stores of at most 44 bytes on sm_90, 48 on sm_80; at 64 registers add + RMSNorm at D 8192 ran 95.9 % of copy against 91.3, add + LayerNorm 94.6 against 89.5, bench/results/h100-fused-ab-min4-onepass-quot-deno.txt): at D 8192 5.70 µs against 7.91 for the 8-chunk kernel (add + RMSNorm 4.10 against 5.47, add + LayerNorm 5.98 against 7.18); at D 128 and 524,288 rows, add + RMSNorm → fp8 75 % of copy against 65, add + RMSNorm 72 against 81, QK-norm of 16,384 tokens 2592 GB/s (the 8-chunk kernel: 2584 GB/s in an earlier run)" },
  { id: "fused.nv8", suffix: "", maxv: FUSED_MAXV, maxThreads: FUSED_MAX_THREADS, backends: ["cuda", "hip"], why: "up to 8 chunks a thread in blocks of up to 1024: the row in 32 registers a thread, weights loaded where they are used (64 registers a thread)" },
];

/** The kernel's name (whether it is built: fusedKernelFor); `variant`: a FUSED_VARIANTS suffix. */
export function fusedKernelName(kind: NormKind, ti: string, to: string, tw: string, variant = ""): string {
  return `nk_fused_${kind === "layer" ? "ln" : "rms"}_${ti}_${to}_${tw}${variant}`;
}

/**
 * The built (ti, to, tw) triples, per kind: x in f32, f16 or bf16; y in x's dtype or quantized to 1 byte; weights in
 * f32 or x's dtype (f32 x: f32 only). 4 + 8 + 8 = 20 per kind, each in every FUSED_VARIANTS row of its backend.
 */
// deno-fmt-ignore
export const FUSED_TRIPLES: readonly { id: string; ti: FusedInput; to: readonly FusedOutput[]; tw: readonly DType[]; why: string }[] = [
  { id: "fused.types-f32", ti: "f32", to: ["f32", ...QUANT_DTYPES], tw: ["f32"], why: "f32 weights only: no narrower weights for f32 rows" },
  { id: "fused.types-f16", ti: "f16", to: ["f16", ...QUANT_DTYPES], tw: ["f32", "f16"], why: "weights as the tuned kernels take them" },
  { id: "fused.types-bf16", ti: "bf16", to: ["bf16", ...QUANT_DTYPES], tw: ["f32", "bf16"], why: "as above" },
];

/** One kernel name per built triple of both kinds (40): the AMD code objects' fused norm kernels. */
export const FUSED_TRIPLE_KERNELS: readonly string[] = (["layer", "rms"] as const).flatMap((k) =>
  FUSED_TRIPLES.flatMap((r) => r.to.flatMap((to) => r.tw.map((tw) => fusedKernelName(k, r.ti, to, tw))))
);

/** Every fused norm kernel name in the CUDA images (120): each triple's kernel, then its few-chunk kernels. */
export const FUSED_KERNELS: readonly string[] = FUSED_TRIPLE_KERNELS.flatMap((k) =>
  FUSED_VARIANTS.filter((v) => v.backends.includes("cuda")).map((v) => k + v.suffix).sort()
);

/** The fused kernel for these dtypes, this geometry and backend (its FUSED_VARIANTS row), or a sentence naming the
 * dtype it does not take. */
export function fusedKernelFor(
  kind: NormKind,
  ti: string,
  to: string,
  tw: string,
  geometry: Pick<FusedGeometry, "nv" | "block">,
  backend: FusedBackend,
): { kernel: string; variant: string } | { unsupported: string } {
  const row = FUSED_TRIPLES.find((r) => r.ti === ti);
  if (!row) return { unsupported: `the fused kernels take x in f32, f16 or bf16, not ${ti}` };
  if (!row.to.includes(to as FusedOutput)) {
    return { unsupported: `the fused kernels write ${ti} x's output as ${row.to.join(", ")}, not ${to}` };
  }
  if (!row.tw.includes(tw as DType)) {
    return { unsupported: `the fused kernels take ${ti} x's weights as ${row.tw.join(" or ")}, not ${tw}` };
  }
  const v = FUSED_VARIANTS.find((r) =>
    r.backends.includes(backend) && geometry.nv <= r.maxv && geometry.block <= r.maxThreads
  )!;
  return { kernel: fusedKernelName(kind, ti, to, tw, v.suffix), variant: v.id };
}
