/**
 * The forward launch plan: a pure function from the problem (norm kind, D, rows, dtypes) and the device's limits to a
 * kernel and its launch geometry. No I/O, no driver.
 *
 * A row is cut into 16-byte chunks (VEC = 4 f32 or 8 16-bit elements), held in registers (kernels/norm_fwd.cuh).
 * MAPPING_RULES picks the mapping, the first row whose thresholds hold; the mapping's geometry sizes the launch;
 * VARIANTS and PREFETCH_RULES pick the kernel variants and the L2 prefetch. Each table row has a stable id; the
 * measurements behind it are listed under that id in bench/README.md ("Decisions").
 */
import { type DType, dtypeBytes, isDType } from "../runtime/dtype.ts";

export type NormKind = "layer" | "rms";
export type Mapping = "rows" | "block" | "cluster" | "wide" | "latency" | "stash";

export interface PlanInput {
  kind: NormKind;
  rows: number;
  d: number;
  inputDtype: DType;
  outputDtype: DType;
  /** dtype of weight/bias when present (f32 or the input dtype) */
  paramDtype?: DType;
}

/** The device limits a plan depends on. */
export interface PlanLimits {
  maxGridX: number;
  maxThreadsPerBlock: number;
  warpSize: number;
  /** Compute capability major (clusters need 9+). */
  ccMajor: number;
  /** Streaming multiprocessors (CUs on AMD): the `wide` mapping launches one block on each. */
  multiprocessors: number;
}

export interface LaunchPlan {
  kernel: string;
  mapping: Mapping;
  /** `cluster`: C CTAs per row, at most; the op launches as many clusters as are resident (PlannedLaunch). */
  grid: [number, number, number];
  block: [number, number, number];
  sharedBytes: number;
  /** Thread-block cluster size (1 = none). */
  cluster: number;
  /** Threads per row (rows mapping) or per block (the others): the kernel's `tpr`. */
  tpr: number;
  /** 16-byte chunks per thread: the kernel's `nv`. */
  nv: number;
  /** Rows ahead whose x the kernel asks L2 for (the kernel's `prefetch`; 0: none). See prefetchRows. */
  prefetch: number;
  /**
   * The kernel with only the vector path, for calls whose rows all qualify (fwdFull); null where there is none (see
   * VARIANTS). Same block and shared memory as `kernel`, grid `fullGridX`.
   */
  fullKernel: string | null;
  /** grid.x of fullKernel: `grid[0]`, except for the `rows` tile (tileGrid). A cluster plan's op grid: PlannedLaunch. */
  fullGridX: number;
}

/** A plan, or why there is none (a sentence naming the unsupported part). */
export type PlanResult = { plan: LaunchPlan } | { unsupported: string };

/** Register-cache capacity per thread, in 16-byte chunks (NK_MAXV_ROWS / NK_MAXV_BLOCK in the kernels). */
export const MAXV_ROWS = 8;
export const MAXV_BLOCK = 8;
/** Chunks per thread of the `latency` mapping, at most (NK_MAXV_LATENCY in the kernels). */
export const MAXV_LATENCY = 4;
/** Rows per SM up to which a launch takes the `latency` mapping (MAPPING_RULES). */
export const LATENCY_ROWS_PER_SM = 2;
/** Threads of a `latency` block at least, where the row has that many chunks (fwd.latency-threads). */
const LATENCY_MIN_THREADS = 128;
/** Threads per CTA of the block and cluster mappings, at most (their launch bounds: 64 registers a thread). */
export const MAX_BLOCK_THREADS = 512;
/** Threads of a `block` CTA at most on compute capability 9 (its launch bound), for rows past 512 × 8 chunks. */
export const BIG_BLOCK_THREADS = 1024;
/** Threads per block of the rows mapping, and threads per row there at most. */
export const ROWS_BLOCK = 256;
export const ROWS_MAX_TPR = 32;
/**
 * Chunks per thread the geometries aim for: registers are allocated for MAXV chunks whatever nv is, so fewer threads
 * with full caches put the most bytes in flight per SM.
 */
const TARGET_NV = 8;
/** The longest row (bytes of x) that `wide` takes rather than a cluster: its re-read still hits L2. */
export const WIDE_MAX_ROW_BYTES = 128 * 1024;

/**
 * LayerNorm's staged 1024-thread-class blocks (nk_ln_blockfull_*, sm_90) copy weight/bias into shared memory with
 * cp.async while x loads: STAGE_OFFSET_BYTES + STAGE_THREAD_BYTES per thread (NK_STAGE_* in kernels/norm_fwd.cuh).
 */
export const STAGE_OFFSET_BYTES = 256;
export const STAGE_THREAD_BYTES = 128;
export const stagedShared = (threads: number): number => STAGE_OFFSET_BYTES + STAGE_THREAD_BYTES * threads;
/** Whether the staged variant exists for these x and weight dtypes: weights as wide as x (16-bit x, f32 weights spilled). */
export function stagesParams(inputDtype: DType, paramDtype: DType): boolean {
  return paramDtype === inputDtype;
}

/**
 * The `stash` mapping (nk_fwd_stash): one block per row, STASH_REG_CHUNKS chunks per thread in registers and the rest
 * (nv − 8, an even count, nv ≤ STASH_MAX_CHUNKS) in the thread's shared-memory slots, filled by cp.async.
 */
export const STASH_REG_CHUNKS = 8;
export const STASH_MAX_CHUNKS = 16;
/** Dynamic shared memory of a `stash` launch: the block reduction's buffers, then (nv − 8) × threads 16-byte slots. */
export const stashShared = (threads: number, nv: number): number =>
  STAGE_OFFSET_BYTES + (nv - STASH_REG_CHUNKS) * threads * 16;
/**
 * The (x, y, weight) dtype triples whose `stash` kernel holds the stash loop (nk_stash_built in kernels/norm_fwd.cuh;
 * the others trap, and the plan keeps their rows in a cluster). A stash kernel is 12–41 KB of sm_90 SASS, so only
 * weights of x's dtype with y in x's dtype or f32 are built; 16-bit x with f32 weights also spilled.
 */
export const STASH_BUILT: readonly string[] = [
  "f32_f32_f32",
  "f16_f32_f16",
  "f16_f16_f16",
  "bf16_f32_bf16",
  "bf16_bf16_bf16",
];
export function stashBuilt(inputDtype: DType, outputDtype: DType, paramDtype: DType): boolean {
  return STASH_BUILT.includes(`${inputDtype}_${outputDtype}_${paramDtype}`);
}
/**
 * The `stash` geometry for a row of d elements, or null where it does not apply: whole chunks, a built triple, and nv
 * chunks per thread (8 < nv ≤ 16, nv − 8 even) times whole warps (≤ maxThreads) equal to the row's chunks. The smallest
 * such nv: the most threads, the least shared memory.
 */
export function stashGeometry(
  d: number,
  inputDtype: DType,
  outputDtype: DType,
  paramDtype: DType,
  maxThreads: number,
  warp: number,
): { threads: number; nv: number } | null {
  const vec = 16 / dtypeBytes(inputDtype);
  if (!stashBuilt(inputDtype, outputDtype, paramDtype) || d % vec !== 0) return null;
  const chunks = d / vec;
  for (let nv = STASH_REG_CHUNKS + 2; nv <= STASH_MAX_CHUNKS; nv += 2) {
    const threads = chunks / nv;
    if (Number.isInteger(threads) && threads % warp === 0 && threads <= maxThreads) return { threads, nv };
  }
  return null;
}

/**
 * Shared memory of the cluster exchange (NK_CLUSTER_SUM_BYTES: two mbarriers and 2 × 16 ranks × 2 floats of slots),
 * after the block reductions' buffers in the forward's and the backward's `cluster`.
 */
export const CLUSTER_SUM_BYTES = 16 + 2 * 16 * 2 * 4;

/** What the rules look at: the problem and the device, reduced. */
interface Shape {
  p: PlanInput;
  tw: DType;
  chunks: number;
  rowBytes: number;
  limits: PlanLimits;
  /** Threads of a register-cached block at most: MAX_BLOCK_THREADS ("cta") or BIG_BLOCK_THREADS ("big"), within the device's. */
  cta: number;
  big: number;
  /** The row count the rules' thresholds read: p.rows, or INVARIANT_RULE_ROWS (planNormInvariant). */
  ruleRows: number;
}

interface MappingRule {
  id: string;
  mapping: Mapping;
  /** Compute capability majors it is taken on: exactly 9 (measured there only) or 9 and later (clusters). Absent: any. */
  cc?: "9" | "9+";
  /** At most this many rows per SM. */
  maxRowsPerSM?: number;
  /** At least this many rows per SM, per kind (a kind not named: any row count). */
  minRowsPerSM?: Partial<Record<NormKind, number>>;
  /** At most threads × chunks-per-thread chunks per row; "cta" / "big": see Shape (also the block's thread cap). */
  maxChunks?: readonly [threads: "cta" | "big" | number, perThread: number];
  /** At most this many bytes of x per row. */
  maxRowBytes?: number;
  why: string;
}

/** The mapping: the first row whose thresholds hold and whose geometry (GEOMETRY) fits. */
// deno-fmt-ignore
export const MAPPING_RULES: readonly MappingRule[] = [
  { id: "fwd.latency", mapping: "latency", maxRowsPerSM: LATENCY_ROWS_PER_SM, maxChunks: ["cta", MAXV_LATENCY], why: "a few rows are latency-bound: a row per block (an SM each), few chunks per thread" },
  { id: "fwd.rows", mapping: "rows", maxChunks: [ROWS_MAX_TPR, MAXV_ROWS], why: "short rows: a sub-warp per row, several rows per 256-thread block" },
  { id: "fwd.block", mapping: "block", maxChunks: ["cta", MAXV_BLOCK], why: "mid rows: a block per row, the row in registers, read once" },
  { id: "fwd.block-1024", mapping: "block", cc: "9", minRowsPerSM: { layer: 1 }, maxChunks: ["big", MAXV_BLOCK], why: "rows to 128 KB in registers of 1024 threads, read once where `wide` reads twice" },
  { id: "fwd.stash", mapping: "stash", cc: "9", minRowsPerSM: { layer: 1, rms: 1 }, why: "rows to 256 KB, past the registers into shared memory: read once, no cluster exchange" },
  { id: "fwd.wide-l2", mapping: "wide", minRowsPerSM: { layer: 1 }, maxRowBytes: WIDE_MAX_ROW_BYTES, why: "rows to 128 KB: the re-read hits L2 with a row per SM in flight" },
  { id: "fwd.cluster", mapping: "cluster", cc: "9+", why: "longer rows (and LayerNorm with fewer rows than SMs): a row spread over SMs" },
  { id: "fwd.wide", mapping: "wide", why: "rows no cluster holds, or no clusters: a block per SM streams each row" },
];

/** The cluster geometry: the first size whose CTAs of at most `maxThreads` (and MAX_BLOCK_THREADS) hold the row. */
// deno-fmt-ignore
export const CLUSTER_GEOMETRIES: readonly { id: string; ctas: number; maxThreads: number; why: string }[] = [
  { id: "fwd.cluster-2", ctas: 2, maxThreads: 256, why: "several small CTAs per SM overlap one CTA's exchange with another's loads" },
  { id: "fwd.cluster-4", ctas: 4, maxThreads: 256, why: "as above" },
  { id: "fwd.cluster-8", ctas: 8, maxThreads: MAX_BLOCK_THREADS, why: "8 is the portable maximum: its CTAs take up to 512 threads" },
];

/** Lanes per row of the `rows` mapping: aim for `nv` chunks a lane, up to `maxTpr` lanes, never fewer than at 8 chunks. */
// deno-fmt-ignore
export const ROWS_LANES: Readonly<Record<NormKind, { id: string; nv: number; maxTpr: number; why: string }>> = {
  layer: { id: "fwd.rows-lanes-ln", nv: TARGET_NV, maxTpr: ROWS_MAX_TPR, why: "two reductions: full register caches" },
  rms: { id: "fwd.rows-lanes-rms", nv: 4, maxTpr: 16, why: "one cheap reduction: twice the lanes coalesce the loads better" },
};

interface Geometry {
  threads: number;
  tpr: number;
  nv: number;
  gridX: number;
  cluster?: number;
}

const nextPow2 = (n: number): number => 2 ** Math.ceil(Math.log2(Math.max(1, n)));
const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, v));
const roundWarp = (s: Shape, n: number): number => Math.ceil(n / s.limits.warpSize) * s.limits.warpSize;
/** Whole warps for `chunks` at TARGET_NV each, within `cap` threads. */
const blockThreads = (s: Shape, chunks: number, cap: number): number =>
  clamp(roundWarp(s, Math.ceil(chunks / TARGET_NV)), s.limits.warpSize, cap);
const threadCap = (s: Shape, t: "cta" | "big" | number): number => (t === "cta" ? s.cta : t === "big" ? s.big : t);
const blockGrid = (s: Shape): number => Math.min(s.p.rows, s.limits.maxGridX);

/** Each mapping's launch geometry, or null where the mapping does not fit (the next rule is tried). */
const GEOMETRY: Readonly<Record<Mapping, (s: Shape, rule: MappingRule) => Geometry | null>> = {
  // At least LATENCY_MIN_THREADS threads, never more than the row's chunks (whole warps).
  latency: (s) => {
    const t = Math.min(
      roundWarp(s, s.chunks),
      clamp(roundWarp(s, Math.ceil(s.chunks / MAXV_LATENCY)), LATENCY_MIN_THREADS, s.cta),
    );
    return { threads: t, tpr: t, nv: Math.ceil(s.chunks / t), gridX: s.p.rows };
  },
  // The rows kernel reduces with xor shuffles inside 32-lane groups, whatever the wave size.
  rows: (s) => {
    if (ROWS_BLOCK > s.limits.maxThreadsPerBlock) return null;
    const aim = ROWS_LANES[s.p.kind], full = nextPow2(Math.ceil(s.chunks / TARGET_NV));
    const tpr = clamp(Math.max(full, Math.min(aim.maxTpr, nextPow2(Math.ceil(s.chunks / aim.nv)))), 1, ROWS_MAX_TPR);
    return {
      threads: ROWS_BLOCK,
      tpr,
      nv: Math.ceil(s.chunks / tpr),
      gridX: Math.min(Math.ceil(s.p.rows / (ROWS_BLOCK / tpr)), s.limits.maxGridX),
    };
  },
  // Any whole number of warps (D = 5120 f32: 160 × 8 rather than 256 × 5, more rows in flight per SM).
  block: (s, rule) => {
    const t = blockThreads(s, s.chunks, threadCap(s, rule.maxChunks![0]));
    return { threads: t, tpr: t, nv: Math.ceil(s.chunks / t), gridX: blockGrid(s) };
  },
  stash: (s) => {
    const g = stashGeometry(s.p.d, s.p.inputDtype, s.p.outputDtype, s.tw, s.big, s.limits.warpSize);
    return g && { threads: g.threads, tpr: g.threads, nv: g.nv, gridX: blockGrid(s) };
  },
  // A grid limit below the cluster size leaves no whole cluster to launch: the next rule then.
  cluster: (s) => {
    for (const c of CLUSTER_GEOMETRIES) {
      const per = Math.ceil(s.chunks / c.ctas);
      if (c.ctas > s.limits.maxGridX || per > Math.min(c.maxThreads, s.cta) * MAXV_BLOCK) continue;
      const t = blockThreads(s, per, s.cta);
      return {
        threads: t,
        tpr: t,
        nv: Math.ceil(per / t),
        gridX: Math.min(s.p.rows, Math.floor(s.limits.maxGridX / c.ctas)) * c.ctas,
        cluster: c.ctas,
      };
    }
    return null;
  },
  // One block of the device's most threads per SM (64 registers each: it fills the SM).
  wide: (s) => {
    const t = s.limits.maxThreadsPerBlock;
    return {
      threads: t,
      tpr: t,
      nv: 0,
      gridX: Math.min(s.p.rows, s.limits.maxGridX, Math.max(1, s.limits.multiprocessors)),
    };
  },
};

function applies(r: MappingRule, s: Shape): boolean {
  const { ccMajor, multiprocessors: sms } = s.limits, minRows = r.minRowsPerSM?.[s.p.kind];
  return (r.cc === undefined || (r.cc === "9" ? ccMajor === 9 : ccMajor >= 9)) &&
    (r.maxRowsPerSM === undefined || s.ruleRows <= r.maxRowsPerSM * sms) &&
    (minRows === undefined || s.ruleRows >= minRows * sms) &&
    (r.maxChunks === undefined || s.chunks <= threadCap(s, r.maxChunks[0]) * r.maxChunks[1]) &&
    (r.maxRowBytes === undefined || s.rowBytes <= r.maxRowBytes);
}

/** LayerNorm `rows` plans of at most this many lanes per row take the two-pass kernel (VARIANTS). */
export const TWO_PASS_MAX_TPR = 2;

interface Variant {
  id: string;
  mapping: Mapping;
  kind?: NormKind;
  /** At most this many threads per row. */
  maxTpr?: number;
  /** More than this many threads per block. */
  minThreadsAbove?: number;
  /** tileRows holds. */
  tile?: true;
  /** Weights of x's dtype (stagesParams). */
  paramsOfX?: true;
  /** The kernel in place of the mapping's: nk_{ln|rms}_<kernel>_*. */
  kernel?: string;
  /** The plan's fullKernel: nk_{ln|rms}_<full>_*. */
  full?: string;
  /** Shared memory for the weight/bias staging slots (stagedShared). */
  staged?: true;
  why: string;
}

/** The kernel variants: every row that holds applies. Kernels without a row here have no fullKernel (they spill nowhere). */
// deno-fmt-ignore
export const VARIANTS: readonly Variant[] = [
  { id: "fwd.ln-rows-two-pass", mapping: "rows", kind: "layer", maxTpr: TWO_PASS_MAX_TPR, kernel: "rowstwopass", why: "1–2 lanes a row: one-pass statistics compiled in slowed the loop; mean, then the centred variance" },
  { id: "fwd.rows-tile", mapping: "rows", tile: true, full: "rowstile", why: "rows of a few chunks: a 32-lane group loads several rows at once, 512 contiguous bytes" },
  { id: "fwd.ln-block-full", mapping: "block", kind: "layer", full: "blockfull", why: "beside the masked path ptxas spills the vector path's registers" },
  { id: "fwd.ln-cluster-full", mapping: "cluster", kind: "layer", full: "clusterfull", why: "as above (16-bit clusters spill)" },
  { id: "fwd.ln-block-staged", mapping: "block", kind: "layer", minThreadsAbove: MAX_BLOCK_THREADS, paramsOfX: true, staged: true, why: "weight/bias copied to shared memory under the x loads; one block per SM already, so free" },
];

/**
 * Whether the `rows` plan has the tile kernel nk_{ln|rms}_rowstile_* (nk_fwd_rowstile) as its fullKernel: a
 * power-of-two count n = D / VEC of whole chunks, D ≤ TILE_MAX_D[kind]. A 32-lane group loads 32 / n back-to-back rows
 * at once and holds its weight/bias chunk for all of them. (nk_fwd_rowstile's LayerNorm numerics rely on D being a
 * power of two.)
 */
export function tileRows(kind: NormKind, d: number, inputDtype: DType): boolean {
  const vec = 16 / dtypeBytes(inputDtype), n = d / vec;
  return d <= TILE_MAX_D[kind] && Number.isInteger(n) && n >= 1 && (n & (n - 1)) === 0;
}
/** The longest rows of the tile, per kind (fwd.tile-max-d-ln, fwd.tile-max-d-rms): past them the `rows` kernel is faster. */
export const TILE_MAX_D: Record<NormKind, number> = { layer: 128, rms: 64 };
/** Rows per 32-lane group and load step of the tile: 32 / n rows per load, TILE_LOADS loads (NK_TILE_M in the kernel). */
export const TILE_LOADS = 4;
/** Steps each CTA of the tile takes, about (fwd.tile-steps): its grid is rows / (steps × rows per CTA step). */
export const TILE_STEPS = 2;
/** The tile's grid for `rows` rows of D (tileRows holds), 256-thread CTAs: TILE_STEPS steps each. */
export function tileGrid(rows: number, d: number, inputDtype: DType, block: number, maxGridX: number): number {
  const n = d / (16 / dtypeBytes(inputDtype));
  const rowsPerStep = (block / 32) * (32 / n) * TILE_LOADS;
  return Math.max(1, Math.min(maxGridX, Math.ceil(rows / (rowsPerStep * TILE_STEPS))));
}

/** How far ahead of the rows being loaded the kernel asks L2 for x, in bytes of x. */
export const PREFETCH_AHEAD_BYTES = 2 * 1024 * 1024;
/** Rows shorter than this (bytes of x) get no prefetch. */
export const PREFETCH_MIN_ROW_BYTES = 512;

interface PrefetchQuery {
  mapping: Mapping;
  rowBytes: number;
  ccMajor: number;
  kind: NormKind;
  blockThreads: number;
}
/** The L2 prefetch (nk_prefetch_ahead): the first row that holds gives the bytes ahead (0: none). */
// deno-fmt-ignore
export const PREFETCH_RULES: readonly { id: string; when: (q: PrefetchQuery) => boolean; aheadBytes: number; why: string }[] = [
  { id: "fwd.prefetch-cc9", when: (q) => q.ccMajor !== 9, aheadBytes: 0, why: "measured on 9.x only; sm_80 SASS drops the hint, later GPUs would JIT it untimed" },
  { id: "fwd.prefetch-mappings", when: (q) => q.mapping !== "rows" && q.mapping !== "block", aheadBytes: 0, why: "clusters gained nothing, `wide` (re-reads from L2) lost, `latency` has no rows ahead" },
  { id: "fwd.prefetch-short-rows", when: (q) => q.rowBytes < PREFETCH_MIN_ROW_BYTES, aheadBytes: 0, why: "256-byte rows lost" },
  { id: "fwd.prefetch-rms-1024", when: (q) => q.kind === "rms" && q.mapping === "block" && q.blockThreads > MAX_BLOCK_THREADS, aheadBytes: 0, why: "RMSNorm's 1024-thread blocks lost with it" },
  { id: "fwd.prefetch", when: () => true, aheadBytes: PREFETCH_AHEAD_BYTES, why: "2 MiB ahead: on the plateau of 1/32 to 1/4 of the resident rows; 8 MB lost" },
];

/** Rows ahead for the kernel's L2 prefetch: PREFETCH_RULES' bytes ahead in rows (at least the next row); 0: none. */
export function prefetchRows(
  mapping: Mapping,
  rowBytes: number,
  ccMajor: number,
  kind: NormKind = "layer",
  blockThreads = 0,
): number {
  const q = { mapping, rowBytes, ccMajor, kind, blockThreads };
  const ahead = PREFETCH_RULES.find((r) => r.when(q))!.aheadBytes;
  return ahead === 0 ? 0 : Math.ceil(ahead / rowBytes);
}

/**
 * Whether every row of a call takes the vector path (nk_fwd_full): D a multiple of the chunk, x, weight and bias 16-byte
 * aligned, y aligned to its chunk (16 bytes, or 8 for f32 input to a 16-bit output), and the row strides keeping every
 * row start so. Addresses in bytes (0n: no weight / bias); strides in elements. Picks a plan's `kernel` or `fullKernel`.
 */
export function fwdFull(
  d: number,
  inputDtype: DType,
  outputDtype: DType,
  x: bigint,
  xStride: number,
  y: bigint,
  yStride: number,
  weight: bigint,
  bias: bigint,
): boolean {
  const xb = dtypeBytes(inputDtype), yb = dtypeBytes(outputDtype);
  const vec = 16 / xb, ya = Math.min(vec * yb, 16);
  return d % vec === 0 && (x & 15n) === 0n && (xStride * xb) % 16 === 0 && (y & BigInt(ya - 1)) === 0n &&
    (yStride * yb) % ya === 0 && (weight & 15n) === 0n && (bias & 15n) === 0n;
}

function variantHolds(v: Variant, s: Shape, mapping: Mapping, g: Geometry): boolean {
  return v.mapping === mapping && (v.kind === undefined || v.kind === s.p.kind) &&
    (v.maxTpr === undefined || g.tpr <= v.maxTpr) &&
    (v.minThreadsAbove === undefined || g.threads > v.minThreadsAbove) &&
    (!v.tile || tileRows(s.p.kind, s.p.d, s.p.inputDtype)) && (!v.paramsOfX || stagesParams(s.p.inputDtype, s.tw));
}

export function planNorm(p: PlanInput, limits: PlanLimits): PlanResult {
  return planAt(p, limits, p.rows);
}

/**
 * Rows the mapping rules see in planNormInvariant: past every row-count threshold of MAPPING_RULES on any device (they
 * are at most a few rows per SM), so the rules pick the prefill mapping at every row count.
 */
export const INVARIANT_RULE_ROWS = 2 ** 31 - 1;

/**
 * The tuned plan of `batchInvariant: true` on a plain norm: the mapping the rules pick for prefill (their row-count
 * thresholds read at INVARIANT_RULE_ROWS), the grid sized for p.rows. Its `rows` and `block` kernels give every row the
 * same chunks per thread and threads per row whatever the row count (the grid only strides over rows), so a row's y,
 * mean and rstd are the same bits in every call on the same path (scripts/reduction_geometry.ts,
 * tests/unit/plan_invariant.test.ts). RMSNorm sums alike on the vector and the masked path; LayerNorm takes one-pass
 * statistics on the vector path and centred ones on the masked path, so a LayerNorm row is invariant among the calls
 * of its path (for a contiguous tensor the path is fixed by D: fwdFull). LayerNorm rows of fewer lanes than a warp take
 * the two-pass `rows` kernel (nk_ln_rowstwopass_*) in the prefill geometry. Null where a row's order still depends on
 * the batch: the `rows` tile (vector-only, its own order), `stash`, `cluster` and `wide` (their own orders per path or
 * per CTA count). The op then runs the fused kernels (ops/plan_fused.ts), invariant by construction.
 */
export function planNormInvariant(p: PlanInput, limits: PlanLimits): PlanResult | null {
  const r = planAt(p, limits, INVARIANT_RULE_ROWS);
  if (!("plan" in r)) return r;
  const { mapping, fullKernel, kernel, tpr } = r.plan;
  if (mapping === "block") return r;
  if (mapping !== "rows" || fullKernel !== null) return null;
  if (p.kind === "rms" || tpr >= limits.warpSize) return r;
  // LayerNorm rows of fewer lanes than a warp: the one-pass kernel decides the pass for the warp's rows together; the
  // two-pass kernel, in the same geometry, decides nothing.
  return { plan: { ...r.plan, kernel: kernel.replace(/^nk_ln_rows_/, "nk_ln_rowstwopass_") } };
}

function planAt(p: PlanInput, limits: PlanLimits, ruleRows: number): PlanResult {
  const tin = p.inputDtype, tw = p.paramDtype ?? "f32";
  // The norm kernels compute in float dtypes; 1-byte dtypes are outputs of the fused quantizing kernels only.
  if (!isDType(tin) || !isDType(p.outputDtype) || !isDType(tw)) {
    return { unsupported: `the norm kernels take f32, f16 or bf16 (x ${tin}, y ${p.outputDtype}, weight ${tw})` };
  }
  if (tw !== "f32" && tw !== tin) {
    return { unsupported: `weight/bias must be f32 or the input dtype (${tin}), not ${tw}` };
  }
  if (p.rows < 1 || p.d < 1) return { unsupported: "rows and d must be ≥ 1 to launch" };
  const s: Shape = {
    p,
    tw,
    limits,
    chunks: Math.ceil(p.d / (16 / dtypeBytes(tin))),
    rowBytes: p.d * dtypeBytes(tin),
    cta: Math.min(MAX_BLOCK_THREADS, limits.maxThreadsPerBlock),
    big: Math.min(BIG_BLOCK_THREADS, limits.maxThreadsPerBlock),
    ruleRows,
  };
  for (const rule of MAPPING_RULES) {
    const g = applies(rule, s) ? GEOMETRY[rule.mapping](s, rule) : null;
    if (g) return { plan: launchPlan(s, rule.mapping, g) };
  }
  throw new Error("unreachable: the last mapping rule always applies");
}

function launchPlan(s: Shape, mapping: Mapping, g: Geometry): LaunchPlan {
  const { p, limits } = s;
  const name = (m: string): string =>
    `nk_${p.kind === "layer" ? "ln" : "rms"}_${m}_${p.inputDtype}_${p.outputDtype}_${s.tw}`;
  let kernel = mapping as string, full: string | null = null, staged = false;
  for (const v of VARIANTS) {
    if (!variantHolds(v, s, mapping, g)) continue;
    kernel = v.kernel ?? kernel;
    full = v.full ?? full;
    staged ||= v.staged === true;
  }
  const cluster = g.cluster ?? 1;
  const reduceShared = 2 * Math.ceil(g.threads / limits.warpSize) * 4;
  return {
    kernel: name(kernel),
    mapping,
    grid: [g.gridX, 1, 1],
    block: [g.threads, 1, 1],
    sharedBytes: mapping === "rows"
      ? 0
      : mapping === "stash"
      ? stashShared(g.threads, g.nv)
      : staged
      ? stagedShared(g.threads)
      : reduceShared + (mapping === "cluster" ? CLUSTER_SUM_BYTES : 0),
    cluster,
    tpr: g.tpr,
    nv: g.nv,
    prefetch: prefetchRows(mapping, s.rowBytes, limits.ccMajor, p.kind, g.threads),
    fullKernel: full === null ? null : name(full),
    fullGridX: full === "rowstile" ? tileGrid(p.rows, p.d, p.inputDtype, g.threads, limits.maxGridX) : g.gridX,
  };
}
