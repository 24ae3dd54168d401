/**
 * The backward launch plan: a pure function from (kind, D, dtypes, whether parameter gradients are wanted, device
 * limits) to the dx kernel, its block, shared memory and rows per block. The grid is persistent: the caller sizes it
 * from the kernel's occupancy, at most one block per RPB rows. Contracts: kernels/norm_bwd.cuh.
 *
 * A chunk is 16 bytes of the wider of x and dy (VEC = 4 elements if either is f32, else 8); a thread caches up to
 * maxvBwd() chunks of x and dy and their columns' parameter sums in registers (`cached`, `cluster`), or re-reads them
 * (`wide`). BWD_MAPPING_RULES picks the mapping; the smaller tables pick the prefetch, the staged variant and its
 * geometry. Each table row has a stable id; the measurements behind it are listed under that id in bench/README.md
 * ("Decisions").
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
/** Rows in flight at most (NK_BWD_MAX_STAGES). */
export const MAX_BWD_STAGES = 4;
/**
 * Shared memory the several-rows layout may spend on the slots where its row groups add up their parameter sums
 * (R · nacc · D floats): fewer row groups past it keep two or more blocks resident per SM.
 */
const ROWS_SLOT_BUDGET = 64 * 1024;

const size = (t: DType): number => (t === "f32" ? 4 : 2);

type Staging = { kind: NormKind; x: DType; dy: DType; staged: boolean };
/** Where LayerNorm's dbias sums live: shared memory where a row here holds (nk_bwd_smem_dbias), else registers. */
// deno-fmt-ignore
export const SMEM_DBIAS_RULES: readonly { id: string; when: (q: Staging) => boolean; why: string }[] = [
  { id: "bwd.dbias-smem-16bit", when: (q) => size(q.x) === 2 && size(q.dy) === 2, why: "16-bit x and dy: 4 chunks a thread fit instead of 3" },
  { id: "bwd.dbias-smem-staged", when: (q) => q.staged, why: "the staged kernels: 6 chunks a thread instead of 4 (f32); f32 register kernels lost with it" },
];
/** Whether `cached` / `cluster` keep LayerNorm's dbias sums in shared memory rather than registers (SMEM_DBIAS_RULES). */
export function smemDbias(kind: NormKind, x: DType, dy: DType, staged = false): boolean {
  return kind === "layer" && SMEM_DBIAS_RULES.some((r) => r.when({ kind, x, dy, staged }));
}

/**
 * Chunks one `cached` thread holds (nk_bwd_maxv): per chunk the raw words of x and dy and the chunk's parameter sums
 * (VEC floats, 2·VEC for LayerNorm unless smemDbias), within BWD_REG_BUDGET registers.
 */
export function maxvBwd(kind: NormKind, x: DType, dy: DType, staged = false): number {
  const vec = 16 / Math.max(size(x), size(dy));
  const sums = kind === "layer" && !smemDbias(kind, x, dy, staged) ? 2 : 1;
  const per = (vec * size(x)) / 4 + (vec * size(dy)) / 4 + vec * sums;
  return Math.min(MAXV_BWD, Math.floor(BWD_REG_BUDGET / per));
}

/**
 * Dynamic shared memory of a `cached` / `cluster` block (nk_bwd_cached): the two row sums' block reductions (4 floats
 * per warp); a cluster's exchange (CLUSTER_SUM_BYTES); then, with parameter gradients, the row groups' slots (rpb > 1:
 * rpb · nacc · D floats) or, with smemDbias, the block's dbias sums (one float per column it owns: `columns`).
 */
export function cachedShared(
  smemDbias: boolean,
  block: number,
  warp: number,
  rpb: number,
  nacc: number,
  d: number,
  columns = d,
  cluster = 1,
): number {
  const slots = nacc === 0 ? 0 : rpb > 1 ? rpb * nacc * d : smemDbias ? columns : 0;
  return 16 * Math.ceil(block / warp) + (cluster > 1 ? CLUSTER_SUM_BYTES : 0) + 4 * slots;
}

/**
 * Dynamic shared memory of a staged block: the unstaged block's (`base`, cachedShared), then S + 1 mbarriers (rounded
 * up to 16 bytes), the CTA's weight slice (`columns` elements of the weight dtype, rounded up to 16 bytes) and S stages
 * of the x and dy slices (nk_bwd_cached's TM layout).
 */
export function stagedShared(base: number, stages: number, columns: number, x: DType, dy: DType, w: DType): number {
  const up16 = (n: number) => Math.ceil(n / 16) * 16;
  return base + up16(8 * (stages + 1)) + up16(columns * size(w)) + stages * columns * (size(x) + size(dy));
}

type PrefetchQuery = {
  kind: NormKind;
  x: DType;
  mapping: "cached" | "cluster";
  block: number;
  chunks: number;
  cluster: number;
};
/** Whether a one-row block or cluster asks L2 for its next row (sm_90; a no-op elsewhere): the first row that holds. */
// deno-fmt-ignore
export const BWD_PREFETCH_RULES: readonly { id: string; when: (q: PrefetchQuery) => boolean; on: boolean; why: string }[] = [
  { id: "bwd.prefetch-cluster-8", when: (q) => q.mapping === "cluster" && q.cluster >= 8, on: false, why: "clusters of 8 lost with it (16: as 8)" },
  { id: "bwd.prefetch-cluster", when: (q) => q.mapping === "cluster", on: true, why: "clusters of 2 and 4 gained" },
  { id: "bwd.prefetch-rms16-mid", when: (q) => size(q.x) === 2 && q.kind === "rms" && q.block <= 256 && q.chunks >= 512, on: false, why: "16-bit RMSNorm blocks of ≤ 256 threads on rows of ≥ 512 chunks lost" },
  { id: "bwd.prefetch-16bit", when: (q) => size(q.x) === 2, on: true, why: "16-bit x: every other one-row block gained" },
  { id: "bwd.prefetch-f32-short", when: (q) => q.chunks < 512, on: true, why: "f32 rows under 512 chunks gained" },
  { id: "bwd.prefetch-f32-ln-big", when: (q) => q.kind === "layer" && q.block > 256, on: true, why: "f32 LayerNorm blocks above 256 threads gained" },
  { id: "bwd.prefetch-f32", when: () => true, on: false, why: "other f32 blocks lost more often than they gained" },
];
export function prefetchNextRow(
  kind: NormKind,
  x: DType,
  mapping: "cached" | "cluster",
  block: number,
  chunks: number,
  cluster = 1,
): boolean {
  const q = { kind, x, mapping, block, chunks, cluster };
  return BWD_PREFETCH_RULES.find((r) => r.when(q))!.on;
}

type StageQuery = { kind: NormKind; mapping: "cached" | "cluster"; block: number; cluster: number };
/**
 * Rows a staged CTA keeps in flight, the first row that holds (0: no staged variant). Two where bulk-staged rows
 * measured faster; one lost everywhere (its copy waits on the row just before it), three matched two or lost.
 */
// deno-fmt-ignore
export const BWD_STAGE_RULES: readonly { id: string; when: (q: StageQuery) => boolean; stages: number; why: string }[] = [
  { id: "bwd.stages-cluster-4", when: (q) => q.mapping === "cluster" && q.cluster >= 4, stages: 2, why: "clusters of 4 or more CTAs gained at every D" },
  { id: "bwd.stages-cluster-2", when: (q) => q.mapping === "cluster" && q.block < 512, stages: 2, why: "clusters of 2 gained with CTAs under 512 threads" },
  { id: "bwd.stages-cluster-2-512", when: (q) => q.mapping === "cluster", stages: 0, why: "clusters of 2 × 512 threads lost" },
  { id: "bwd.stages-ln-cached", when: (q) => q.kind === "layer" && q.block >= 384, stages: 2, why: "one-row LayerNorm blocks of ≥ 384 threads gained" },
  { id: "bwd.stages-cached", when: () => true, stages: 0, why: "RMSNorm and smaller LayerNorm one-row blocks lost" },
];
export function bwdStages(kind: NormKind, mapping: "cached" | "cluster", block: number, cluster = 1): number {
  const q = { kind, mapping, block, cluster };
  return BWD_STAGE_RULES.find((r) => r.when(q))!.stages;
}

/** Threads of the CTAs smallStagedCtas picks. */
export const SMALL_STAGED_BLOCK = 128;
/** RMSNorm 16-bit stages rows of 512-thread cluster CTAs in more CTAs of SMALL_STAGED_BLOCK threads (STAGED_GEOMETRIES). */
export function smallStagedCtas(kind: NormKind, x: DType): boolean {
  return kind === "rms" && size(x) === 2;
}
/** LayerNorm f32 stages rows of 512-thread cluster CTAs at LN_F32_STAGED_NV chunks in CTAs of ≤ LN_F32_STAGED_BLOCK threads. */
export const LN_F32_STAGED_NV = 5;
export const LN_F32_STAGED_BLOCK = 416;
export function lnF32Staged(kind: NormKind, x: DType): boolean {
  return kind === "layer" && size(x) === 4;
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
 * The bulk-staged variant of a `cached` (one row per block) or `cluster` plan (nk_bwd_cached's TM): its kernel
 * (nk_{ln|rms}_bwd_{cached|cluster}staged_*, the FULL path alone), the rows each CTA keeps in flight in shared memory
 * (flags bits 4..7), and the block's shared memory with them. Taken for calls that qualify (bwdFull).
 */
export interface BwdStaged {
  kernel: string;
  stages: number;
  sharedBytes: number;
  /** Its geometry (tpr = block; one row per CTA or cluster): the plan's, or its own (STAGED_GEOMETRIES). */
  block: number;
  nv: number;
  cluster: number;
}

/**
 * Whether a call's every row can take the FULL path (nk_bwd_full): D a multiple of the chunk, x, dx, dy and the weight
 * aligned to their chunk, and the strides keeping every row so. Addresses in bytes.
 */
export function bwdFull(
  d: number,
  x: DType,
  dy: DType,
  w: DType,
  xPtr: bigint,
  xStride: number,
  dxPtr: bigint,
  dxStride: number,
  dyPtr: bigint,
  dyStride: number,
  wPtr: bigint,
): boolean {
  const vec = 16 / Math.max(size(x), size(dy));
  const align = (t: DType) => Math.min(vec * size(t), 16);
  const ok = (p: bigint, t: DType) => (p & BigInt(align(t) - 1)) === 0n;
  return d % vec === 0 && ok(xPtr, x) && ok(dxPtr, x) && ok(dyPtr, dy) && ok(wPtr, w) &&
    (xStride * size(x)) % align(x) === 0 && (dxStride * size(x)) % align(x) === 0 &&
    (dyStride * size(dy)) % align(dy) === 0;
}

export interface BwdPlan {
  kernel: string;
  /**
   * `split`: the `rowsum` kernel (block `rowsumBlock`), then `kernel` = the `tile` kernel. `cluster`: the `cached`
   * scheme with each row split over a thread-block cluster of `cluster` CTAs (Hopper).
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

/** What the rules look at: the problem and the device, reduced. */
interface Shape {
  p: BwdPlanInput;
  tw: DType;
  limits: BwdLimits;
  vec: number;
  chunks: number;
  warp: number;
  nacc: number;
  /** Bytes of one row group's parameter sums. */
  slotBytes: number;
  /** Threads per block at most: BWD_MAX_THREADS within the device's. */
  maxThreads: number;
  /** Chunks per thread the registers hold (maxvBwd), and whether the dbias sums are in shared memory. */
  maxv: number;
  sdb: boolean;
  clusterSizes: readonly number[];
  name: (m: "cached" | "cluster" | "wide" | "rowsum" | "tile" | "cachedstaged" | "clusterstaged") => string;
}

interface BwdMappingRule {
  id: string;
  mapping: BwdPlan["mapping"];
  /** Rows per block: several ("rows", tpr lanes each) or one. */
  layout?: "rows" | "row";
  /** Compute capability 9 and later (clusters). */
  cc9?: true;
  /** At most threads × min(maxv, perThread) chunks per row; "block": the block's threads at most. */
  maxChunks?: readonly [threads: number | "block", perThread: number];
  /** Rows under `belowChunks` chunks aim for `nv` chunks a thread. */
  aimNv?: { belowChunks: number; nv: number };
  why: string;
}

/** The mapping: the first row whose thresholds hold and whose geometry fits (BWD_GEOMETRY). */
// deno-fmt-ignore
export const BWD_MAPPING_RULES: readonly BwdMappingRule[] = [
  { id: "bwd.rows", mapping: "cached", layout: "rows", maxChunks: [32, 4], why: "short rows: several per block; past 4 chunks a lane, a row per block with fewer chunks was faster" },
  { id: "bwd.cached", mapping: "cached", layout: "row", maxChunks: ["block", MAXV_BWD], aimNv: { belowChunks: 512, nv: 3 }, why: "a row per block in registers; rows under 512 chunks spread to 3 chunks a thread" },
  { id: "bwd.cluster", mapping: "cluster", cc9: true, why: "rows past a block's registers: the smallest cluster that holds the row (fewer, larger CTAs were faster)" },
  { id: "bwd.split", mapping: "split", why: "parameter sums too large for shared memory: row sums, then column tiles with the sums in registers" },
  { id: "bwd.wide", mapping: "wide", why: "long rows re-read from L2, the sums in shared memory where they fit" },
];

/** Cluster sizes tried, smallest first, up to BwdLimits.maxCluster. */
// deno-fmt-ignore
export const BWD_CLUSTER_SIZES: readonly { id: string; ctas: number; why: string }[] = [
  { id: "bwd.cluster-2", ctas: 2, why: "the smallest cluster that holds the row" },
  { id: "bwd.cluster-4", ctas: 4, why: "as above" },
  { id: "bwd.cluster-8", ctas: 8, why: "the portable maximum" },
  { id: "bwd.cluster-16", ctas: 16, why: "sm_90's non-portable size (runtime/module.ts opts in): rows that would take `split` or `wide`" },
];

const nextPow2 = (n: number): number => 2 ** Math.ceil(Math.log2(Math.max(1, n)));
/** Whole warps for `chunks` at `nv` each, at least one warp. */
const warps = (s: Shape, chunks: number, nv: number): number =>
  Math.max(s.warp, Math.ceil(Math.ceil(chunks / nv) / s.warp) * s.warp);
/** `wide` and `rowsum`: their block reductions' 2 · warps floats, rounded up to 16 bytes (slots start there). */
const reduceBytes = (s: Shape, block: number): number => 4 * ((2 * Math.ceil(block / s.warp) + 3) & ~3);
const maxChunks = (s: Shape, r: BwdMappingRule): number =>
  r.maxChunks === undefined
    ? Infinity
    : (r.maxChunks[0] === "block" ? s.maxThreads : r.maxChunks[0]) * Math.min(s.maxv, r.maxChunks[1]);

/**
 * The staged variant of a one-row `cached` or a `cluster` plan (geometry `block` × `cluster`), where BWD_STAGE_RULES
 * asks for one and it can run: sm_90 (measured there), x and dy of one dtype (16-byte chunks of both: nk_bwd_tma_ok),
 * within the staged kernels' registers and the opt-in shared memory.
 */
function stagedVariant(s: Shape, block: number, cluster: number, nv: number): BwdStaged | undefined {
  const { kind } = s.p, x = s.p.xDtype, dy = s.p.dyDtype;
  const stages = bwdStages(kind, cluster > 1 ? "cluster" : "cached", block, cluster);
  if (stages === 0 || s.limits.ccMajor !== 9 || x !== dy || nv > maxvBwd(kind, x, dy, true)) return undefined;
  const columns = Math.ceil(s.chunks / cluster) * s.vec;
  const base = cachedShared(smemDbias(kind, x, dy, true), block, s.warp, 1, s.nacc, columns, columns, cluster);
  const sharedBytes = stagedShared(base, stages, columns, x, dy, s.tw);
  const kernel = s.name(cluster > 1 ? "clusterstaged" : "cachedstaged");
  return sharedBytes <= s.limits.maxSharedPerBlockOptin
    ? { kernel, stages, sharedBytes, block, nv, cluster }
    : undefined;
}

type StagedQuery = { s: Shape; block: number; cluster: number; nv: number };
/**
 * A plan's staged geometry: the first row that holds and gives a variant. Rows of 512-thread cluster CTAs no longer
 * need registers alone once staged, so smaller CTAs can share an SM.
 */
export const STAGED_GEOMETRIES: readonly {
  id: string;
  when: (q: StagedQuery) => boolean;
  variant: (q: StagedQuery) => BwdStaged | undefined;
  why: string;
}[] = [
  {
    id: "bwd.staged-ln-f32",
    why: "LayerNorm f32: 5 chunks a thread in CTAs of ≤ 416 threads, the smallest cluster that holds the row",
    when: (q) =>
      q.cluster > 1 && q.block === q.s.maxThreads && lnF32Staged(q.s.p.kind, q.s.p.xDtype) &&
      q.s.limits.smallStagedCtas !== false,
    variant: ({ s }) => {
      for (const c of s.clusterSizes) {
        const per = Math.ceil(s.chunks / c), block = warps(s, per, LN_F32_STAGED_NV);
        if (block <= Math.min(LN_F32_STAGED_BLOCK, s.maxThreads)) {
          return stagedVariant(s, block, c, Math.ceil(per / block));
        }
      }
      return undefined;
    },
  },
  {
    id: "bwd.staged-rms16-small",
    why: "RMSNorm 16-bit: CTAs of 128 threads, four to an SM (LayerNorm's dbias slots fill shared memory)",
    when: (q) =>
      q.cluster > 1 && q.block === q.s.maxThreads && smallStagedCtas(q.s.p.kind, q.s.p.xDtype) &&
      q.s.limits.smallStagedCtas !== false,
    variant: ({ s }) => {
      const c = s.clusterSizes.find((c) => Math.ceil(s.chunks / c) <= SMALL_STAGED_BLOCK * s.maxv);
      if (c === undefined) return undefined;
      const per = Math.ceil(s.chunks / c), block = warps(s, per, s.maxv);
      return stagedVariant(s, block, c, Math.ceil(per / block));
    },
  },
  {
    id: "bwd.staged-plan",
    why: "otherwise the plan's own geometry",
    when: () => true,
    variant: (q) => stagedVariant(q.s, q.block, q.cluster, q.nv),
  },
];

function staged(s: Shape, block: number, cluster: number, nv: number): { staged: BwdStaged } | Record<string, never> {
  const q = { s, block, cluster, nv };
  for (const g of STAGED_GEOMETRIES) {
    const st = g.when(q) ? g.variant(q) : undefined;
    if (st) return { staged: st };
  }
  return {};
}

/** A `cached` or `cluster` plan, with its staged variant where the layout has one (one row per block or cluster). */
function registerPlan(
  s: Shape,
  g: Omit<BwdPlan, "kernel" | "nacc" | "mapping"> & { mapping: "cached" | "cluster" },
  oneRow = true,
): BwdPlan {
  return { kernel: s.name(g.mapping), ...g, nacc: s.nacc, ...(oneRow ? staged(s, g.block, g.cluster, g.nv) : {}) };
}

/** Each mapping's plan, or null where it does not fit (the next rule is tried). */
const BWD_GEOMETRY: Readonly<Record<BwdMappingRule["mapping"], (s: Shape, r: BwdMappingRule) => BwdPlan | null>> = {
  cached: (s, r) => {
    const { maxThreads, maxv, warp, nacc, chunks } = s, d = s.p.d, optin = s.limits.maxSharedPerBlockOptin;
    if (r.layout === "rows") {
      // tpr lanes per row (a power of two ≤ 32), block / tpr row groups: fewer while their slots pass the budget.
      if (BWD_ROWS_BLOCK > maxThreads) return null;
      const tpr = Math.min(32, nextPow2(Math.ceil(chunks / maxv)));
      let block = BWD_ROWS_BLOCK;
      while (block > Math.max(tpr, warp) && (block / tpr) * s.slotBytes > ROWS_SLOT_BUDGET) block /= 2;
      const rowsPerBlock = block / tpr, sharedBytes = cachedShared(s.sdb, block, warp, rowsPerBlock, nacc, d);
      if (sharedBytes > optin) return null;
      const nv = Math.ceil(chunks / tpr);
      return registerPlan(s, {
        mapping: "cached",
        cluster: 1,
        prefetch: false,
        block,
        sharedBytes,
        tpr,
        nv,
        rowsPerBlock,
      }, false);
    }
    const nvAim = r.aimNv && chunks < r.aimNv.belowChunks ? Math.min(maxv, r.aimNv.nv) : maxv;
    const block = Math.min(maxThreads, warps(s, chunks, nvAim));
    const sharedBytes = cachedShared(s.sdb, block, warp, 1, nacc, d);
    if (sharedBytes > optin) return null;
    const nv = Math.ceil(chunks / block), prefetch = prefetchNextRow(s.p.kind, s.p.xDtype, "cached", block, chunks);
    return registerPlan(s, {
      mapping: "cached",
      cluster: 1,
      prefetch,
      block,
      sharedBytes,
      tpr: block,
      nv,
      rowsPerBlock: 1,
    });
  },
  cluster: (s) => {
    for (const c of s.clusterSizes) {
      const per = Math.ceil(s.chunks / c);
      if (per > s.maxThreads * s.maxv) continue;
      const block = warps(s, per, s.maxv);
      const sharedBytes = cachedShared(s.sdb, block, s.warp, 1, s.nacc, s.p.d, per * s.vec, c);
      if (sharedBytes > s.limits.maxSharedPerBlockOptin) return null;
      const nv = Math.ceil(per / block),
        prefetch = prefetchNextRow(s.p.kind, s.p.xDtype, "cluster", block, s.chunks, c);
      return registerPlan(s, {
        mapping: "cluster",
        cluster: c,
        prefetch,
        block,
        sharedBytes,
        tpr: block,
        nv,
        rowsPerBlock: 1,
      });
    }
    return null;
  },
  split: (s) => {
    const block = s.maxThreads;
    if (s.slotBytes === 0 || reduceBytes(s, block) + s.slotBytes <= s.limits.maxSharedPerBlockOptin) return null;
    return {
      kernel: s.name("tile"),
      mapping: "split",
      cluster: 1,
      prefetch: false,
      block: TILE_THREADS,
      sharedBytes: 0,
      tpr: TILE_THREADS,
      nv: 0,
      rowsPerBlock: 1,
      nacc: s.nacc,
      rowsumKernel: s.name("rowsum"),
      rowsumBlock: block,
      rowsumShared: reduceBytes(s, block),
      tileColumns: TILE_THREADS * 16,
    };
  },
  // The parameter sums in shared memory where they fit (nv = 1), else in the block's row of the partials (nv = 0).
  wide: (s) => {
    const block = s.maxThreads;
    const inShared = s.slotBytes > 0 && reduceBytes(s, block) + s.slotBytes <= s.limits.maxSharedPerBlockOptin;
    const shared = reduceBytes(s, block) + (inShared ? s.slotBytes : 0);
    return {
      kernel: s.name("wide"),
      mapping: "wide",
      cluster: 1,
      prefetch: false,
      block,
      sharedBytes: shared,
      tpr: block,
      nv: inShared ? 1 : 0,
      rowsPerBlock: 1,
      nacc: s.nacc,
    };
  },
};

export function planNormBackward(p: BwdPlanInput, limits: BwdLimits): BwdPlanResult {
  const tx = p.xDtype, tdy = p.dyDtype, tw = p.weightDtype ?? "f32";
  if (tw !== "f32" && tw !== tx) return { unsupported: `weight must be f32 or x's dtype (${tx}), not ${tw}` };
  if (p.d < 1) return { unsupported: "d must be ≥ 1" };
  const vec = 16 / Math.max(size(tx), size(tdy));
  const nacc = p.paramGrads ? (p.kind === "layer" ? 2 : 1) : 0;
  const s: Shape = {
    p,
    tw,
    limits,
    vec,
    nacc,
    chunks: Math.ceil(p.d / vec),
    warp: limits.warpSize,
    slotBytes: nacc * p.d * 4,
    maxThreads: Math.min(BWD_MAX_THREADS, limits.maxThreadsPerBlock),
    maxv: maxvBwd(p.kind, tx, tdy),
    sdb: smemDbias(p.kind, tx, tdy),
    clusterSizes: BWD_CLUSTER_SIZES.map((c) => c.ctas).filter((c) => c <= (limits.maxCluster ?? 8)),
    name: (m) => `nk_${p.kind === "layer" ? "ln" : "rms"}_bwd_${m}_${tx}_${tdy}_${tw}`,
  };
  for (const rule of BWD_MAPPING_RULES) {
    if (rule.cc9 && (limits.ccMajor ?? 0) < 9) continue;
    if (s.chunks > maxChunks(s, rule)) continue;
    const plan = BWD_GEOMETRY[rule.mapping](s, rule);
    if (plan) return { plan };
  }
  throw new Error("unreachable: the last mapping rule always applies");
}
