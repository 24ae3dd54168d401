/**
 * The backward launch plan: one pure function from (kind, D, dtypes, whether parameter gradients are
 * wanted, device limits) to the dx kernel, its block, shared memory and rows per block. The grid is
 * persistent: the caller sizes it from the kernel's occupancy (a driver fact), at most one block per
 * RPB rows. Contracts: kernels/norm_bwd.cuh.
 *
 * A chunk is 16 bytes of the wider of x and dy (VEC = 4 elements if either is f32, else 8); a thread
 * caches up to maxvBwd() chunks of x and dy, and their columns' parameter sums, in registers (`cached`),
 * or re-reads them (`wide`).
 */
import type { DType } from "../runtime/dtype.ts";
import type { NormKind } from "./plan.ts";

/** Chunks per thread at most, whatever the dtypes (NK_MAXV_BWD). */
export const MAXV_BWD = 6;
/** Registers a `cached` thread spends on its cache (NK_BWD_REG_BUDGET in kernels/norm_bwd.cuh). */
export const BWD_REG_BUDGET = 72;
/** Threads per block at most (both mappings' launch bound). */
export const BWD_MAX_THREADS = 512;
/** Threads of a `tile` block (its launch bound), each summing 16 columns in registers. */
export const TILE_THREADS = 256;
/** Block size of the several-rows-per-block layout. */
export const BWD_ROWS_BLOCK = 256;
/** Cluster sizes tried, smallest first (8 is the portable maximum), and the CTA size preferred. */
const CLUSTER_SIZES = [2, 4, 8];
const CLUSTER_CTA = 256;
/**
 * Shared memory the several-rows layout may spend on the slots where its row groups add up their
 * parameter sums at the end (R · nacc · D floats): halving the row groups below this keeps two or more
 * blocks resident per SM.
 */
const ROWS_SLOT_BUDGET = 64 * 1024;

const size = (t: DType): number => (t === "f32" ? 4 : 2);

/**
 * Chunks one `cached` thread holds (nk_bwd_maxv): per chunk it keeps the raw words of x and dy and the
 * chunk's parameter sums (VEC floats, 2·VEC for LayerNorm), within BWD_REG_BUDGET registers.
 */
export function maxvBwd(kind: NormKind, x: DType, dy: DType): number {
  const vec = 16 / Math.max(size(x), size(dy));
  const per = (vec * size(x)) / 4 + (vec * size(dy)) / 4 + vec * (kind === "layer" ? 2 : 1);
  return Math.min(MAXV_BWD, Math.floor(BWD_REG_BUDGET / per));
}

export interface BwdPlanInput {
  kind: NormKind;
  d: number;
  xDtype: DType;
  dyDtype: DType;
  /** f32 or x's dtype; f32 when there is no weight. */
  weightDtype?: DType;
  /** Whether dweight / dbias are computed (the kernel then fills per-block parameter sums). */
  paramGrads: boolean;
}

export interface BwdLimits {
  maxThreadsPerBlock: number;
  warpSize: number;
  /** Dynamic shared memory a block may use after opting in. */
  maxSharedPerBlockOptin: number;
  /** Compute capability major on CUDA (thread-block clusters need 9+), 0 elsewhere; absent: 0. */
  ccMajor?: number;
}

export interface BwdPlan {
  kernel: string;
  /**
   * `split`: the `rowsum` kernel (block `rowsumBlock`), then `kernel` = the `tile` kernel. `cluster`: the
   * `cached` scheme with each row split over a thread-block cluster of `cluster` CTAs (Hopper).
   */
  mapping: "cached" | "cluster" | "wide" | "split";
  /** CTAs per thread-block cluster (1 = none). */
  cluster: number;
  block: number;
  sharedBytes: number;
  tpr: number;
  nv: number;
  /** Rows one block handles at once (row groups per block). */
  rowsPerBlock: number;
  /** Parameter-sum arrays per block row of `part`: 2 (LN: dweight, dbias), 1 (RMS) or 0. */
  nacc: number;
  /** `split` only: the row-sums kernel, its block and shared memory, and the columns of one tile. */
  rowsumKernel?: string;
  rowsumBlock?: number;
  rowsumShared?: number;
  tileColumns?: number;
}

export type BwdPlanResult = { plan: BwdPlan } | { unsupported: string };

const nextPow2 = (n: number): number => 2 ** Math.ceil(Math.log2(Math.max(1, n)));

export function planNormBackward(p: BwdPlanInput, limits: BwdLimits): BwdPlanResult {
  const tx = p.xDtype, tdy = p.dyDtype, tw = p.weightDtype ?? "f32";
  if (tw !== "f32" && tw !== tx) return { unsupported: `weight must be f32 or x's dtype (${tx}), not ${tw}` };
  if (p.d < 1) return { unsupported: "d must be ≥ 1" };
  const vec = 16 / Math.max(size(tx), size(tdy));
  const chunks = Math.ceil(p.d / vec);
  const warp = limits.warpSize;
  const nacc = p.paramGrads ? (p.kind === "layer" ? 2 : 1) : 0;
  const slotBytes = nacc * p.d * 4;
  const name = (m: "cached" | "cluster" | "wide" | "rowsum" | "tile") => `nk_${p.kind === "layer" ? "ln" : "rms"}_bwd_${m}_${tx}_${tdy}_${tw}`;
  const maxThreads = Math.min(BWD_MAX_THREADS, limits.maxThreadsPerBlock);
  // The block reductions' 2 · warps floats, rounded up to 16 bytes (the slots start there).
  const reduceBytes = (block: number) => 4 * ((2 * Math.ceil(block / warp) + 3) & ~3);

  // Chunks per thread: as many as the registers hold (few lanes per row, deep caches, as in the forward).
  const maxv = maxvBwd(p.kind, tx, tdy);
  // Several rows per block: tpr lanes per row (a power of two ≤ 32), R = block / tpr row groups.
  if (chunks <= 32 * maxv && BWD_ROWS_BLOCK <= maxThreads) {
    const tpr = Math.min(32, nextPow2(Math.ceil(chunks / maxv)));
    let block = BWD_ROWS_BLOCK;
    // Fewer row groups while their slots exceed the budget, keeping whole warps.
    while (block > Math.max(tpr, warp) && (block / tpr) * slotBytes > ROWS_SLOT_BUDGET) block /= 2;
    const rpb = block / tpr;
    const shared = reduceBytes(block) + (rpb > 1 ? rpb * slotBytes : 0);
    if (shared <= limits.maxSharedPerBlockOptin) {
      return { plan: { kernel: name("cached"), mapping: "cached", cluster: 1, block, sharedBytes: shared, tpr, nv: Math.ceil(chunks / tpr), rowsPerBlock: rpb, nacc } };
    }
  }
  // One row per block, cached in registers, when it fits (its sums go straight to `part`).
  if (chunks <= maxThreads * maxv) {
    const block = Math.min(maxThreads, Math.max(warp, Math.ceil(Math.ceil(chunks / maxv) / warp) * warp));
    const shared = reduceBytes(block);
    if (shared <= limits.maxSharedPerBlockOptin) {
      return { plan: { kernel: name("cached"), mapping: "cached", cluster: 1, block, sharedBytes: shared, tpr: block, nv: Math.ceil(chunks / block), rowsPerBlock: 1, nacc } };
    }
  }
  // Rows past one block's registers, on Hopper: split over a cluster of CTAs, each caching its slice in
  // registers as above (row sums over DSMEM). The smallest cluster whose CTAs need ≤ CLUSTER_CTA threads
  // (two CTAs per SM hide the cluster barriers), else 8 CTAs of up to maxThreads, the portable maximum.
  if ((limits.ccMajor ?? 0) >= 9) {
    for (const c of CLUSTER_SIZES) {
      const per = Math.ceil(chunks / c);
      if (per <= Math.min(CLUSTER_CTA, maxThreads) * maxv || (c === 8 && per <= maxThreads * maxv)) {
        const block = Math.max(warp, Math.ceil(Math.ceil(per / maxv) / warp) * warp);
        // The block reductions, then the cluster reduction's two published CTA totals (16 bytes).
        return { plan: { kernel: name("cluster"), mapping: "cluster", cluster: c, block, sharedBytes: reduceBytes(block) + 16, tpr: block, nv: Math.ceil(per / block), rowsPerBlock: 1, nacc } };
      }
    }
  }
  // Long rows: re-read from L2. The parameter sums live in shared memory when they fit (nv = 1), else
  // in the block's row of the global partials (nv = 0).
  const block = maxThreads;
  const inShared = slotBytes > 0 && reduceBytes(block) + slotBytes <= limits.maxSharedPerBlockOptin;
  if (slotBytes > 0 && !inShared) {
    // Sums too large for shared memory: row sums first, then column tiles with the sums in registers
    // (kernels/norm_bwd.cuh, `rowsum` + `tile`): TILE_THREADS threads × 16 columns per tile.
    return {
      plan: {
        kernel: name("tile"), mapping: "split", cluster: 1, block: TILE_THREADS, sharedBytes: 0, tpr: TILE_THREADS, nv: 0,
        rowsPerBlock: 1, nacc, rowsumKernel: name("rowsum"), rowsumBlock: block, rowsumShared: reduceBytes(block),
        tileColumns: TILE_THREADS * 16,
      },
    };
  }
  const shared = reduceBytes(block) + (inShared ? slotBytes : 0);
  return { plan: { kernel: name("wide"), mapping: "wide", cluster: 1, block, sharedBytes: shared, tpr: block, nv: inShared ? 1 : 0, rowsPerBlock: 1, nacc } };
}
