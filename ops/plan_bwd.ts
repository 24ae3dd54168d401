/**
 * The backward launch plan: one pure function from (kind, D, dtypes, whether parameter gradients are
 * wanted, device limits) to the dx kernel, its block, shared memory and rows per block. The grid is
 * persistent: the caller sizes it from the kernel's occupancy (a driver fact), at most one block per
 * RPB rows. Contracts: kernels/norm_bwd.cuh.
 *
 * A chunk is 16 bytes of the wider of x and dy (VEC = 4 elements if either is f32, else 8); a thread
 * caches up to maxvBwd() chunks of x and dy, and their columns' parameter sums, in registers (`cached`;
 * LayerNorm's dbias sums in shared memory when VEC = 8, and in the staged kernels: smemDbias), or re-reads them (`wide`).
 */
import type { DType } from "../runtime/dtype.ts";
import { CLUSTER_SUM_BYTES, type NormKind } from "./plan.ts";

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
/**
 * Cluster sizes tried, smallest first, up to BwdLimits.maxCluster. 8 is the portable maximum; 16 (non-portable:
 * the kernel opts in at launch, runtime/module.ts) takes rows past 8 CTAs' registers, up to 16 × 512 × maxvBwd
 * chunks (LN f32 D ≤ 131072, RMS f32 ≤ 196608, 16-bit ≤ 262144), which otherwise take `split` (5 row-sized
 * transfers: H200, LN / RMS f32 D=131072 32.4 / 41.5% of copy, bench/RESULTS.md 2026-11-30) or `wide`.
 */
const CLUSTER_SIZES = [2, 4, 8, 16];
/**
 * Chunks per thread at most in the several-rows layout: at more, one row per block with fewer chunks per
 * thread measured faster (H200, bench/bwd_plans.ts: RMS f32 D=768 rows of 32 lanes × 6 chunks 78.9% of copy,
 * a 64-thread block × 3 chunks 91.5%).
 */
const ROWS_MAX_NV = 4;
/** Chunks per thread aimed for with one row per block when the row has fewer than 512 chunks (as above). */
const SMALL_ROW_NV = 3;

/**
 * Whether a block asks L2 for its next row ahead (one row per block or cluster; sm_90 only, a no-op
 * elsewhere). From an A/B on the H200 with everything else fixed (bench/bwd_plans.ts, 2026-11-30; the
 * effect is shape-specific but repeats run to run within ~1 point):
 * - 16-bit x: on. It gained 3–12 points of copy for every one-row block measured (D = 1024–16384), except,
 *   since the weight is known at compile time (a8f365f; bench/results/2026-11-30-h200-bwd-plans-wk.*), for
 *   RMSNorm blocks of ≤ 256 threads on rows of ≥ 512 chunks: off there (D = 4096: 90.9 off vs 83.2 on, 8192:
 *   88.7 vs 85.5, bf16; 5120 within a point), while RMS D = 2048 (96 threads, 92.5 vs 81.3) and 12288–16384
 *   (384–512 threads, +5 to +10) keep it.
 * - clusters of 2 and 4: on (+1 to +11). Clusters of 8: off (f32 D=65536: LN 56.4 off vs 45.0 on); of 16 too
 *   (not measured).
 * - f32 x, one row per block: on for rows under 512 chunks (D = 768, 1024: +5 to +12) and for LayerNorm
 *   blocks above 256 threads (D = 5120 +13, 8192 +5); off otherwise (D = 2048 −8, LN 4096 −4.5,
 *   RMS 5120 −9, RMS 12288 −11; it would gain at RMS 4096 +2 and 8192 +7, which the rule gives up).
 */
export function prefetchNextRow(
  kind: NormKind, x: DType, mapping: "cached" | "cluster", block: number, chunks: number, cluster = 1,
): boolean {
  if (mapping === "cluster") return cluster < 8;
  if (size(x) === 2) return !(kind === "rms" && block <= 256 && chunks >= 512);
  return chunks < 512 || (kind === "layer" && block > 256);
}
/**
 * Shared memory the several-rows layout may spend on the slots where its row groups add up their
 * parameter sums at the end (R · nacc · D floats): halving the row groups below this keeps two or more
 * blocks resident per SM.
 */
const ROWS_SLOT_BUDGET = 64 * 1024;

const size = (t: DType): number => (t === "f32" ? 4 : 2);

/**
 * Whether `cached` / `cluster` keep LayerNorm's dbias sums in shared memory rather than registers
 * (nk_bwd_smem_dbias): with 16-bit x and dy (8-element chunks), and in the bulk-staged kernels (`staged`). With 16-bit
 * x it let LN cache 4 chunks per thread instead of 3 (H200, 2026-11-30: +8 to +25 points of copy at D = 128–1024, 8192
 * and ≥ 16384, about −5 at 2048 and 12288); the register kernels of f32 LN lost 2–8 points with them in shared memory
 * and keep them in registers. The staged f32 ones cache 6 chunks instead of 4 that way (see lnF32Staged).
 */
export function smemDbias(kind: NormKind, x: DType, dy: DType, staged = false): boolean {
  return kind === "layer" && ((size(x) === 2 && size(dy) === 2) || staged);
}

/**
 * Chunks one `cached` thread holds (nk_bwd_maxv): per chunk it keeps the raw words of x and dy and the
 * chunk's parameter sums in registers (VEC floats, 2·VEC for LayerNorm unless smemDbias), within
 * BWD_REG_BUDGET registers.
 */
export function maxvBwd(kind: NormKind, x: DType, dy: DType, staged = false): number {
  const vec = 16 / Math.max(size(x), size(dy));
  const sums = kind === "layer" && !smemDbias(kind, x, dy, staged) ? 2 : 1;
  const per = (vec * size(x)) / 4 + (vec * size(dy)) / 4 + vec * sums;
  return Math.min(MAXV_BWD, Math.floor(BWD_REG_BUDGET / per));
}

/**
 * Dynamic shared memory of a `cached` / `cluster` block (kernels/norm_bwd.cuh, nk_bwd_cached): the two row
 * sums' block reductions (4 floats per warp); a cluster's exchange (CLUSTER_SUM_BYTES); then, with
 * parameter gradients, the row groups' slots (rpb > 1: rpb · nacc · D floats) or, with smemDbias, the block's
 * dbias sums (one float per column it owns: `columns`, the CTA's share of the row with clusters).
 */
export function cachedShared(
  smemDbias: boolean, block: number, warp: number, rpb: number, nacc: number, d: number, columns = d, cluster = 1,
): number {
  const slots = nacc === 0 ? 0 : rpb > 1 ? rpb * nacc * d : smemDbias ? columns : 0;
  return 16 * Math.ceil(block / warp) + (cluster > 1 ? CLUSTER_SUM_BYTES : 0) + 4 * slots;
}

/**
 * Rows a staged CTA keeps in flight (0: no staged variant; nor where the layout does not fit in shared memory, e.g.
 * LN bf16 D=16384 with f32 weights: 262432 bytes): 2 where bulk-staged rows measured faster (H200, Bun,
 * bench/bwd_staged_ab.ts, 2026-12-03, f32 and bf16, % of copy unstaged → 2 rows; bench/RESULTS.md). One row lost
 * everywhere (its copy waits on the row just before it); three matched two or lost.
 * - `cluster` of 4 or more CTAs: always (LN f32 D=32768–131072 +5.6 to +12.4, RMS f32 +19.8 to +21.3, LN bf16 +7.6 to
 *   +11.7, RMS bf16 65536–131072 +2.9 and +9.0); of 2: with blocks under 512 threads (LN f32 D=12288 82.6 → 91.1, RMS
 *   f32 D=16384 85.8 → 94.6), not at 512 (RMS bf16 D=32768 81.6 → 76.0, LN f32 D=16384 84.4 → 78.2; LN bf16 D=32768
 *   67.9 → 71.3 is given up).
 * - one-row `cached` blocks: LayerNorm with 384 threads or more (LN bf16 D=12288 72.4 → 83.5, 16384 74.9 → 81.9, LN f32
 *   D=8192 87.9 → 91.5); not RMSNorm (−0.6 to −5 at D = 2048–16384) nor smaller LayerNorm blocks (LN f32 D=2048 and
 *   4096 −0.5 to −1.3, LN bf16 D=2048 −5.6; bf16 D=4096/8192 +2.3/+0.8 given up).
 */
export function bwdStages(kind: NormKind, mapping: "cached" | "cluster", block: number, cluster = 1): number {
  if (mapping === "cluster") return cluster >= 4 || block < 512 ? 2 : 0;
  return kind === "layer" && block >= 384 ? 2 : 0;
}

/**
 * Whether a staged call of a row that takes clusters of 512-thread CTAs runs in more CTAs of at most
 * SMALL_STAGED_BLOCK threads instead (up to 16): RMSNorm 16-bit. With staged rows a CTA no longer holds its row through
 * registers alone, and four such CTAs share an SM (H200, bench/bwd_staged_ab.ts --geometries, 2026-12-03, % of copy,
 * the plan's geometry → 128-thread CTAs, both staged unless noted): RMS bf16 D=32768 2 × 512 unstaged 82.2 → 8 × 128
 * 85.7, 65536 4 × 512 72.6 → 16 × 128 83.3. LayerNorm 16-bit lost that way (its dbias slots fill shared memory: D =
 * 16384–65536 −7 to −9), RMS f32's 352-thread CTAs already ran at 85–95, and LayerNorm f32 takes lnF32Staged.
 */
export function smallStagedCtas(kind: NormKind, x: DType): boolean {
  return kind === "rms" && size(x) === 2;
}
/** Threads of the CTAs smallStagedCtas picks. */
export const SMALL_STAGED_BLOCK = 128;

/**
 * LayerNorm f32's staged geometry for rows that take clusters of 512-thread CTAs: its staged kernels keep the dbias
 * sums in shared memory (smemDbias `staged`), so a thread caches up to 6 chunks; the plan aims for LN_F32_STAGED_NV of
 * them in CTAs of at most LN_F32_STAGED_BLOCK threads, in the smallest cluster that holds the row. H200,
 * bench/bwd_staged_ab.ts --geometries, 2026-12-03 (stop 31), % of copy, 2 staged rows, the best geometry before → 5
 * chunks per thread: D=16384 8 × 128 87.5 → 2 × 416 90.3; 32768 16 × 128 84.4 → 4 × 416 90.3; 65536 8 × 512 75.8 →
 * 8 × 416 90.3–90.6; 131072 16 × 512 71.0 → 16 × 416 84.1–84.4. Six chunks (352 threads) ran 0–4 points slower, four
 * in 512-thread CTAs 10–15 slower. Not for smaller CTAs: D=12288 (2 × 384 × 4, staged 90.5–90.6) fell to 78.6 in 2 × 320
 * × 5, and the one-row D=8192 (512 × 4, staged 90.0–91.1) to 89.3–89.5 in 416 × 5 (same call).
 */
export const LN_F32_STAGED_NV = 5;
export const LN_F32_STAGED_BLOCK = 416;
export function lnF32Staged(kind: NormKind, x: DType): boolean {
  return kind === "layer" && size(x) === 4;
}

/**
 * The staged variant of a one-row `cached` or a `cluster` plan (geometry `block` × `cluster`, `columns` per CTA), where
 * bwdStages asks for one and it can run.
 */
function stagedVariant(
  kind: NormKind, x: DType, dy: DType, w: DType, block: number, columns: number, limits: BwdLimits, kernel: string,
  cluster: number, nv: number, nacc: number,
): BwdStaged | undefined {
  const mapping = cluster > 1 ? "cluster" : "cached";
  const stages = bwdStages(kind, mapping, block, cluster);
  // Bulk copies: sm_90; kernels for x and dy of one dtype (16-byte chunks of both: nk_bwd_tma_ok; kernels/norm.cu's
  // NK_BWD_STAGED_DTYPES).
  // Compute capability 9.x only: measured there (sm_90 SASS); newer GPUs would run the compute_90 PTX, untimed.
  if (stages === 0 || limits.ccMajor !== 9 || x !== dy || nv > maxvBwd(kind, x, dy, true)) return undefined;
  // The staged kernels' own layout (their dbias sums in shared memory: smemDbias `staged`), then the stages.
  const base = cachedShared(smemDbias(kind, x, dy, true), block, limits.warpSize, 1, nacc, columns, columns, cluster);
  const sharedBytes = stagedShared(base, stages, columns, x, dy, w);
  return sharedBytes <= limits.maxSharedPerBlockOptin ? { kernel, stages, sharedBytes, block, nv, cluster } : undefined;
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
  /** CTAs per cluster at most: 8 (portable; the default) or 16 (sm_90's non-portable clusters). */
  maxCluster?: number;
  /**
   * false: staged variants keep the plan's own geometry (no smallStagedCtas, no lnF32Staged), e.g. where the GPU holds
   * none of the clusters of their own geometry (devicePlanBackward). Default true.
   */
  smallStagedCtas?: boolean;
}

/**
 * The bulk-staged variant of a `cached` (one row per block) or `cluster` plan (kernels/norm_bwd.cuh, nk_bwd_cached's
 * TM): its kernel (nk_{ln|rms}_bwd_{cached|cluster}staged_*, the FULL path alone), the rows each CTA keeps in flight in
 * shared memory (flags bits 4..7), and the block's shared memory with them. Taken for calls that qualify (bwdFull).
 */
export interface BwdStaged {
  kernel: string;
  stages: number;
  sharedBytes: number;
  /** Its geometry (tpr = block; one row per CTA or cluster): the plan's, or its own (smallStagedCtas, lnF32Staged). */
  block: number;
  nv: number;
  cluster: number;
}

/** Rows in flight at most (NK_BWD_MAX_STAGES). */
export const MAX_BWD_STAGES = 4;

/**
 * Whether a call's every row can take the FULL path (kernels/norm_bwd.cuh, nk_bwd_full): D a multiple of the
 * chunk, x, dx, dy and the weight aligned to their chunk, and the strides keeping every row so. Addresses in bytes.
 */
export function bwdFull(
  d: number, x: DType, dy: DType, w: DType, xPtr: bigint, xStride: number, dxPtr: bigint, dxStride: number,
  dyPtr: bigint, dyStride: number, wPtr: bigint,
): boolean {
  const vec = 16 / Math.max(size(x), size(dy));
  const align = (t: DType) => Math.min(vec * size(t), 16);
  const ok = (p: bigint, t: DType) => (p & BigInt(align(t) - 1)) === 0n;
  return d % vec === 0 && ok(xPtr, x) && ok(dxPtr, x) && ok(dyPtr, dy) && ok(wPtr, w) &&
    (xStride * size(x)) % align(x) === 0 && (dxStride * size(x)) % align(x) === 0 && (dyStride * size(dy)) % align(dy) === 0;
}

/**
 * Dynamic shared memory of a staged block: the unstaged block's (`base`, cachedShared), then S + 1 mbarriers (rounded up
 * to 16 bytes), the CTA's weight slice (`columns` elements of the weight dtype, rounded up to 16 bytes) and S stages of
 * the x and dy slices (kernels/norm_bwd.cuh, nk_bwd_cached's TM layout).
 */
export function stagedShared(base: number, stages: number, columns: number, x: DType, dy: DType, w: DType): number {
  const up16 = (n: number) => Math.ceil(n / 16) * 16;
  return base + up16(8 * (stages + 1)) + up16(columns * size(w)) + stages * columns * (size(x) + size(dy));
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
  /** `cached` (one row per block) and `cluster`: ask L2 for each block's next row ahead (kernel flag bit 0). */
  prefetch: boolean;
  block: number;
  sharedBytes: number;
  tpr: number;
  nv: number;
  /** Rows one block handles at once (row groups per block). */
  rowsPerBlock: number;
  /** Parameter-sum arrays per block row of `part`: 2 (LN: dweight, dbias), 1 (RMS) or 0. */
  nacc: number;
  /** `cached` / `cluster`: the bulk-staged variant for calls that qualify (bwdFull), where the plan has one. */
  staged?: BwdStaged;
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
  const name = (m: "cached" | "cluster" | "wide" | "rowsum" | "tile" | "cachedstaged" | "clusterstaged") => `nk_${p.kind === "layer" ? "ln" : "rms"}_bwd_${m}_${tx}_${tdy}_${tw}`;
  const maxThreads = Math.min(BWD_MAX_THREADS, limits.maxThreadsPerBlock);
  const clusterSizes = CLUSTER_SIZES.filter((c) => c <= (limits.maxCluster ?? 8));
  const staged = (block: number, cluster: number, nv: number) =>
    stagedVariant(p.kind, tx, tdy, tw, block, Math.ceil(chunks / cluster) * vec, limits, name(cluster > 1 ? "clusterstaged" : "cachedstaged"), cluster, nv, nacc);
  // lnF32Staged's geometry: the smallest cluster whose CTAs of ≤ LN_F32_STAGED_BLOCK threads hold the row at
  // LN_F32_STAGED_NV chunks each.
  const lnF32Geometry = (): BwdStaged | undefined => {
    if (!lnF32Staged(p.kind, tx) || limits.smallStagedCtas === false) return undefined;
    for (const c of clusterSizes) {
      const per = Math.ceil(chunks / c), block = Math.max(warp, Math.ceil(Math.ceil(per / LN_F32_STAGED_NV) / warp) * warp);
      if (block <= Math.min(LN_F32_STAGED_BLOCK, maxThreads)) return staged(block, c, Math.ceil(per / block));
    }
    return undefined;
  };
  // `wide` and `rowsum`: their block reductions' 2 · warps floats, rounded up to 16 bytes (slots start there).
  const reduceBytes = (block: number) => 4 * ((2 * Math.ceil(block / warp) + 3) & ~3);

  // Chunks per thread: as many as the registers hold (few lanes per row, deep caches, as in the forward).
  const maxv = maxvBwd(p.kind, tx, tdy), sdb = smemDbias(p.kind, tx, tdy);
  // Several rows per block: tpr lanes per row (a power of two ≤ 32), R = block / tpr row groups.
  if (chunks <= 32 * Math.min(maxv, ROWS_MAX_NV) && BWD_ROWS_BLOCK <= maxThreads) {
    const tpr = Math.min(32, nextPow2(Math.ceil(chunks / maxv)));
    let block = BWD_ROWS_BLOCK;
    // Fewer row groups while their slots exceed the budget, keeping whole warps.
    while (block > Math.max(tpr, warp) && (block / tpr) * slotBytes > ROWS_SLOT_BUDGET) block /= 2;
    const rpb = block / tpr;
    const shared = cachedShared(sdb, block, warp, rpb, nacc, p.d);
    if (shared <= limits.maxSharedPerBlockOptin) {
      return { plan: { kernel: name("cached"), mapping: "cached", cluster: 1, prefetch: false, block, sharedBytes: shared, tpr, nv: Math.ceil(chunks / tpr), rowsPerBlock: rpb, nacc } };
    }
  }
  // One row per block, cached in registers, when it fits (its sums go straight to `part`).
  if (chunks <= maxThreads * maxv) {
    const nvAim = chunks < 512 ? Math.min(maxv, SMALL_ROW_NV) : maxv;
    const block = Math.min(maxThreads, Math.max(warp, Math.ceil(Math.ceil(chunks / nvAim) / warp) * warp));
    const shared = cachedShared(sdb, block, warp, 1, nacc, p.d);
    if (shared <= limits.maxSharedPerBlockOptin) {
      const nv = Math.ceil(chunks / block);
      const st = staged(block, 1, nv);
      return { plan: { kernel: name("cached"), mapping: "cached", cluster: 1, prefetch: prefetchNextRow(p.kind, tx, "cached", block, chunks), block, sharedBytes: shared, tpr: block, nv, rowsPerBlock: 1, nacc, ...(st ? { staged: st } : {}) } };
    }
  }
  // Rows past one block's registers, on Hopper: split over a cluster of CTAs, each caching its slice in
  // registers as above (row sums over DSMEM). The smallest cluster that holds the row: fewer, larger CTAs
  // measured faster at every size tried (bench/bwd_plans.ts, H200: LN f32 D=32768 4 × 512 threads 63.5% of
  // copy, 8 × 256 46.7%; RMS bf16 D=65536 4 × 512 60.5%, 8 × 256 46.0%).
  // A cluster CTA's threads for `per` chunks at maxv each, whole warps.
  const ctaBlock = (per: number) => Math.max(warp, Math.ceil(Math.ceil(per / maxv) / warp) * warp);
  // The staged geometry of smallStagedCtas: the smallest cluster whose CTAs of SMALL_STAGED_BLOCK threads hold the row.
  const smallStaged = (): BwdStaged | undefined => {
    const c = clusterSizes.find((c) => Math.ceil(chunks / c) <= SMALL_STAGED_BLOCK * maxv);
    if (c === undefined) return undefined;
    const per = Math.ceil(chunks / c), block = ctaBlock(per);
    return staged(block, c, Math.ceil(per / block));
  };
  if ((limits.ccMajor ?? 0) >= 9) {
    for (const c of clusterSizes) {
      const per = Math.ceil(chunks / c);
      if (per <= maxThreads * maxv) {
        const block = ctaBlock(per);
        const shared = cachedShared(sdb, block, warp, 1, nacc, p.d, per * vec, c);
        if (shared > limits.maxSharedPerBlockOptin) break;
        const small = block === maxThreads && smallStagedCtas(p.kind, tx) && limits.smallStagedCtas !== false;
        const st = (block === maxThreads ? lnF32Geometry() : undefined) ?? (small ? smallStaged() : undefined) ?? staged(block, c, Math.ceil(per / block));
        return { plan: { kernel: name("cluster"), mapping: "cluster", cluster: c, prefetch: prefetchNextRow(p.kind, tx, "cluster", block, chunks, c), block, sharedBytes: shared, tpr: block, nv: Math.ceil(per / block), rowsPerBlock: 1, nacc, ...(st ? { staged: st } : {}) } };
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
        kernel: name("tile"), mapping: "split", cluster: 1, prefetch: false, block: TILE_THREADS, sharedBytes: 0, tpr: TILE_THREADS, nv: 0,
        rowsPerBlock: 1, nacc, rowsumKernel: name("rowsum"), rowsumBlock: block, rowsumShared: reduceBytes(block),
        tileColumns: TILE_THREADS * 16,
      },
    };
  }
  const shared = reduceBytes(block) + (inShared ? slotBytes : 0);
  return { plan: { kernel: name("wide"), mapping: "wide", cluster: 1, prefetch: false, block, sharedBytes: shared, tpr: block, nv: inShared ? 1 : 0, rowsPerBlock: 1, nacc } };
}
