/**
 * The launch plan: one pure function from the problem (norm kind, D, rows, dtypes) and the device's limits
 * to a kernel name and launch geometry. No I/O, no driver: unit-tested in CI.
 *
 * The row is cut into 16-byte chunks (VEC = 4 f32 or 8 f16/bf16 elements) and held in registers, at most
 * MAXV chunks per thread (kernels/norm_fwd.cuh). The mapping is chosen by the number of chunks: several rows per
 * 256-thread block for small D, one block per row for mid D (up to 512 threads; on Hopper up to 1024 for rows up
 * to 128 KB, BIG_BLOCK_THREADS), and past the register cache a block per SM that streams each row (`wide`, the
 * re-reads from L2) for rows up to WIDE_MAX_ROW_BYTES (LayerNorm: once the launch has a row per SM) where the big
 * blocks are not used. Longer rows get a thread-block cluster per row (Hopper), and `wide` again where clusters
 * are not available or too small. Launches of a few
 * rows (decoding: latency, not bandwidth) take the `latency` mapping first: one row per block, few chunks per
 * thread, weight/bias loaded with x. LayerNorm's `block` and `cluster` plans, and both kinds' `rows` plans for
 * short rows (tileRows: LayerNorm D ≤ 128, RMSNorm D ≤ 64), also name a vector-only kernel (`fullKernel`) that the
 * op launches when every row of a call qualifies (fwdFull).
 */
import { type DType, dtypeBytes } from "../runtime/dtype.ts";

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
  /** Threads per row (rows mapping) or per block (block/cluster/wide mappings): the kernel's `tpr`. */
  tpr: number;
  /** 16-byte chunks per thread: the kernel's `nv`. */
  nv: number;
  /** Rows ahead whose x the kernel asks L2 for (the kernel's `prefetch`; 0: none). See prefetchRows. */
  prefetch: number;
  /**
   * The kernel that holds only the vector path, for calls whose rows all qualify (fwdFull); null otherwise. The same
   * block and shared memory as `kernel`, and the grid `fullGridX`. LayerNorm's `block` and `cluster`: nk_ln_{block|cluster}full_* (where `kernel` holds the masked
   * path beside it, ptxas spills the vector path's registers in some of them: LN 16-bit clusters); LayerNorm's
   * `rows` where tileRows holds, either kind: nk_{ln|rms}_rowstile_*, a transposed warp tile (its own thread mapping;
   * it ignores tpr and nv). RMSNorm's other kernels spill nowhere and have none (kernels/norm.cu).
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
/**
 * Rows per SM up to which a launch takes the `latency` mapping (when the row fits it). H200, bf16, graph replay
 * per op (bench/RESULTS.md, issue 5): one row per block with 1–4 chunks per thread beat the bandwidth plans
 * from 1 to 264 rows (2 per SM) at D = 2048–8192; at 528 rows it was mixed (D = 8192 lost 0.1–0.6 µs).
 */
export const LATENCY_ROWS_PER_SM = 2;
/**
 * The `latency` mapping's thread count: enough threads for MAXV_LATENCY chunks each, but at least this many
 * (H200: 128 threads × 2 chunks beat 64 × 4 for a 2048-element bf16 row, 1.7 against 1.9 µs), and never
 * more threads than chunks.
 */
const LATENCY_MIN_THREADS = 128;
/** Threads per CTA of the block and cluster mappings, at most, for rows that fit (their launch bounds cap a thread at 64 registers). */
export const MAX_BLOCK_THREADS = 512;
/**
 * Threads of a `block` CTA at most (its launch bound), used for rows past MAX_BLOCK_THREADS × MAXV_BLOCK chunks: up to
 * 1024 × 8 chunks (f32 D ≤ 32768, 16-bit D ≤ 65536: 128 KB rows), one row per SM, held in registers (read once,
 * where `wide` reads it twice). Compute capability 9.x only, where it was measured (H200, bench/kexp_cluster.ts
 * --block1024, 2026-11-30, % of copy against `wide` in the same run): RMS f32 D=32768 84.2 → 95.6, RMS bf16 D=65536
 * 84.7 → 95.3, LN f32 D=32768 81.2 → 87.1, LN bf16 D=65536 75.9 → 80.0. Below 16384 f32 chunks' rows the 512-thread
 * blocks with 8 chunks each stay faster (LN f32 D=16384: 1024 × 4 ran at 74–86 against 96).
 */
export const BIG_BLOCK_THREADS = 1024;
/**
 * LayerNorm's `block` kernel for FULL calls (nk_ln_blockfull_*, sm_90) copies each thread's weight/bias for its first
 * 4 chunks into shared memory with cp.async while the row's x loads are in flight, where the launch gives it the slots:
 * STAGE_OFFSET_BYTES + STAGE_THREAD_BYTES per thread (kernels/norm_fwd.cuh, NK_STAGE_*; 128 KB at 1024 threads, under
 * the 227 KB an sm_90 block may opt in to), and the call has weight and bias and 8 whole chunks per thread (else it runs
 * its plain loop). The plan gives the slots to its blocks of more than MAX_BLOCK_THREADS, for the dtypes it is compiled
 * for (stagesParams); they cost those blocks nothing (one block per SM already: 64 registers × ≥ 544 threads).
 * H200, % of copy (Deno, 2026-12-03, bench/RESULTS.md): in the same processes the plain loop 89.4–90.1 and 84.9–85.5,
 * the staged one 94.5–94.9 and 92.1–92.4 (LN f32 D=32768 / LN bf16 D=65536, bench/kexp.cu v16 / v50); the grid 87.4 →
 * 94.2, 83.0 → 92.1, LN f16 D=65536 86.9 → 90.4.
 */
export const STAGE_OFFSET_BYTES = 256;
export const STAGE_THREAD_BYTES = 128;
export const stagedShared = (threads: number): number => STAGE_OFFSET_BYTES + STAGE_THREAD_BYTES * threads;
/**
 * Whether LayerNorm's 1024-thread-class blocks get the staging slots for these x and weight dtypes (see above): weights
 * as wide as x (16 bytes of weight per chunk). 16-bit x with f32 weights has no staged variant (ptxas spilled it).
 */
export function stagesParams(inputDtype: DType, paramDtype: DType): boolean {
  return paramDtype === inputDtype;
}
/**
 * Rows of more than 1024 × 8 and up to 1024 × 16 whole chunks (f32 D ≤ 65536, 16-bit D ≤ 131072: 256 KB) on compute
 * capability 9.x, from a row per SM on: one block of up to 1024 threads per row (`stash`, nk_fwd_stash in
 * kernels/norm_fwd.cuh), each thread holding STASH_REG_CHUNKS chunks in registers and the rest (nv − 8, an even count)
 * in its own shared-memory slots, filled by cp.async: read from HBM once, no cluster exchange. Built for the triples of
 * stashBuilt: the others keep the cluster. H200, % of copy, against the cluster of 8 CTAs it replaces in the same process
 * (bench/stash_ab.ts, 2026-12-03, bench/RESULTS.md): LN / RMS f32 D=65536 82.0–82.4 / 87.0–87.9 (cluster 76.7–77.8 /
 * 80.3–80.9), LN / RMS bf16 D=131072 82.4–82.8 / 90.3–91.0 (74.9–75.2 / 79.5–80.4), f16 82.8–83.2 / 89.7–90.2 (76.2–76.4 /
 * 79.5–80.6). Fewer rows than SMs keep the cluster, which spreads a row over SMs.
 */
export const STASH_REG_CHUNKS = 8;
export const STASH_MAX_CHUNKS = 16;
/** Dynamic shared memory of a `stash` launch: the block reduction's buffers, then (nv − 8) × threads 16-byte slots. */
export const stashShared = (threads: number, nv: number): number => STAGE_OFFSET_BYTES + (nv - STASH_REG_CHUNKS) * threads * 16;
/**
 * The dtype triples whose `stash` kernel holds the loop (nk_stash_built in kernels/norm_fwd.cuh; the others trap):
 * weights of x's dtype, y in x's dtype or f32. precompiled/ has no room for all 15 (tests/unit/precompiled.test.ts).
 */
export function stashBuilt(inputDtype: DType, outputDtype: DType, paramDtype: DType): boolean {
  return paramDtype === inputDtype && (outputDtype === inputDtype || outputDtype === "f32");
}
/**
 * The `stash` geometry for a row of d elements, or null where it does not apply: whole chunks, weights of x's dtype,
 * and nv chunks per thread (8 < nv ≤ 16, nv − 8 even) times a whole number of warps, at most maxThreads, equal to the
 * row's chunks. The smallest such nv: the most threads, the least shared memory.
 */
export function stashGeometry(d: number, inputDtype: DType, outputDtype: DType, paramDtype: DType, maxThreads: number, warp: number): { threads: number; nv: number } | null {
  const vec = 16 / dtypeBytes(inputDtype);
  if (!stashBuilt(inputDtype, outputDtype, paramDtype) || d % vec !== 0) return null;
  const chunks = d / vec;
  for (let nv = STASH_REG_CHUNKS + 2; nv <= STASH_MAX_CHUNKS; nv += 2) {
    const threads = chunks / nv;
    if (Number.isInteger(threads) && threads % warp === 0 && threads <= maxThreads) return { threads, nv };
  }
  return null;
}
/** Threads per block of the rows mapping, and at most threads per row there. */
export const ROWS_BLOCK = 256;
export const ROWS_MAX_TPR = 32;
/**
 * Chunks per thread the heuristics aim for. The kernels' registers are allocated for MAXV chunks whatever
 * nv is at run time, so fewer threads per row with full register caches put the most bytes in flight per
 * SM (bench/RESULTS.md has the H200 figures for both choices).
 */
const TARGET_NV = 8;
const CLUSTER_SIZES = [2, 4, 8];
/**
 * Shared memory of the cluster exchange (kernels/norm_fwd.cuh, NK_CLUSTER_SUM_BYTES: two mbarriers and 2 × 16 ranks
 * × 2 floats of slots), after the block reductions' buffers in the forward's and the backward's `cluster`.
 */
export const CLUSTER_SUM_BYTES = 16 + 2 * 16 * 2 * 4;
/**
 * The longest row (bytes of x) that goes to `wide` rather than a cluster (RMSNorm; LayerNorm with a row per SM,
 * below): its re-read still hits L2 with one row per SM in flight (132 × 128 KB = 17 MB of the H200's L2). H200,
 * % of copy, `wide` against the cluster with nk_cluster_sum on a persistent grid (bench/kexp_cluster.ts, Deno,
 * 2026-11-30; the plan's cluster geometry): RMS f32 D=32768 84.8 vs 84.6, bf16 D=65536 84.9 vs 83.1; at 256 KB
 * rows the cluster wins: RMS f32 D=65536 82.0, where `wide` ran at 70 (bench/kexp.ts).
 */
export const WIDE_MAX_ROW_BYTES = 128 * 1024;
/**
 * LayerNorm takes `wide` for rows past a block's register cache up to WIDE_MAX_ROW_BYTES too, once the launch has
 * a row per SM: its statistics come in one pass (Chan's update per chunk), so it reads x twice in all; longer
 * rows go to the cluster. H200, % of the same-run copy, with the cluster exchange of nk_cluster_sum on a
 * persistent cluster grid (bench/kexp_cluster.ts, Deno, 2026-11-30): f32 D = 32768 `wide` 81.0 against the
 * cluster's 75.5, bf16 D = 65536 76.1 vs 75.0; past 128 KB the cluster wins: f32 D = 65536 65.1 vs 68.7, 131072
 * 61.6 vs 62.4, bf16 D = 131072 64.8 vs 69.0. Fewer rows than SMs keep the cluster, which spreads each row over
 * several SMs instead of leaving SMs idle.
 */
const LN_WIDE_MIN_ROWS_PER_SM = 1;
const CLUSTER_CTA = 256;
/** How far ahead of the rows being loaded the `rows` and `block` mappings ask L2 for x, in bytes of x. */
export const PREFETCH_AHEAD_BYTES = 2 * 1024 * 1024;
/** Rows shorter than this (bytes of x) get no prefetch. */
export const PREFETCH_MIN_ROW_BYTES = 512;

/**
 * Rows ahead for the kernel's L2 prefetch (nk_prefetch_ahead in kernels/norm_fwd.cuh): about
 * PREFETCH_AHEAD_BYTES of x, on compute capability 9.x (Hopper: the only GPU it was measured on; the sm_80
 * SASS drops the hint, and later GPUs, which would JIT the fatbin's compute_90 PTX with the prefetch in it,
 * get none until measured), for the `rows` and `block` mappings; 0 elsewhere, and for RMSNorm's blocks of more than
 * MAX_BLOCK_THREADS (the 1024-thread blocks, where it cost 3 to 8 points, see BIG_BLOCK_THREADS). H200, bench/kexp.cu v7/v9
 * against the same kernel without it (2026-11-30, Deno, bench/RESULTS.md): every LN and RMS case from D = 512
 * to 16384 gained 1 to 4.7 points of copy bandwidth (e.g. LN f32 D=4096 94.7 → 97.1, RMS bf16 D=8192
 * 96.1 → 98.5, LN bf16 D=768 83.0 → 87.7), on a plateau from 1/32 to 1/4 of the rows resident at once
 * (0.5–4 MB ahead); from 1/2 (8 MB) on they lost up to 30 points. Rows of 256 bytes (16-bit D = 128) lost 1
 * to 6 points and get none; the cluster mapping gained nothing, and `wide` (which re-reads x from L2) lost
 * 5–24. `latency` launches are a few rows: nothing ahead to fetch.
 */
export function prefetchRows(mapping: Mapping, rowBytes: number, ccMajor: number, kind: NormKind = "layer", blockThreads = 0): number {
  if (ccMajor !== 9 || (mapping !== "rows" && mapping !== "block") || rowBytes < PREFETCH_MIN_ROW_BYTES) return 0;
  if (kind === "rms" && mapping === "block" && blockThreads > MAX_BLOCK_THREADS) return 0;
  return Math.ceil(PREFETCH_AHEAD_BYTES / rowBytes);
}

/**
 * Whether every row of a call takes the vector path (FULL in kernels/norm_fwd.cuh, where nk_fwd_full is this
 * test): D a multiple of the 16-byte chunk, x, weight and bias 16-byte aligned, y aligned to its chunk (16
 * bytes, or 8 for f32 input to a 16-bit output), and the row strides keeping every row start so. Addresses in
 * bytes (0n: no weight / bias); strides in elements. Decides between a plan's `kernel` and `fullKernel`.
 */
export function fwdFull(
  d: number, inputDtype: DType, outputDtype: DType, x: bigint, xStride: number, y: bigint, yStride: number,
  weight: bigint, bias: bigint,
): boolean {
  const xb = dtypeBytes(inputDtype), yb = dtypeBytes(outputDtype);
  const vec = 16 / xb, ya = Math.min(vec * yb, 16);
  return d % vec === 0 && (x & 15n) === 0n && (xStride * xb) % 16 === 0 && (y & BigInt(ya - 1)) === 0n &&
    (yStride * yb) % ya === 0 && (weight & 15n) === 0n && (bias & 15n) === 0n;
}

/**
 * LayerNorm rows of at most this many lanes (`rows` mapping) take nk_ln_rowstwopass_* (mean, then the centred
 * variance) instead of the one-pass statistics of nk_ln_rows_*: H200, LN bf16 D = 128 (2 lanes per row) ran at
 * 85.4–85.7% of copy without one pass compiled in, 76.8–78.2 with it, and 78.0–78.2 with it compiled in but skipped
 * (bench/kexp.cu v10/v14, bench/RESULTS.md); from 4 lanes on (LN bf16 D = 512) one pass gained 1–7 points.
 * Calls whose rows qualify for the tile (tileRows and fwdFull, e.g. aligned 16-bit D = 128) take nk_ln_rowstile_* instead.
 */
export const TWO_PASS_MAX_TPR = 2;

/**
 * Whether the `rows` plan has the vector-only tile kernel nk_{ln|rms}_rowstile_* (kernels/norm_fwd.cuh,
 * nk_fwd_rowstile) as its fullKernel: a power-of-two count n = D / VEC of whole 16-byte chunks (16-bit D = 8, 16, 32,
 * ...; f32 D = 4, 8, ...), D of at most TILE_MAX_D[kind]. A 32-lane group loads 32 / n back-to-back rows at once (512
 * contiguous bytes where the rows are back to back) and holds its weight/bias chunk for all of them. Non-power-of-two D
 * would need the shift back for 16-bit x (nk_fwd_rowstile's LayerNorm numerics rely on D being a power of two).
 */
export function tileRows(kind: NormKind, d: number, inputDtype: DType): boolean {
  const vec = 16 / dtypeBytes(inputDtype), n = d / vec;
  return d <= TILE_MAX_D[kind] && Number.isInteger(n) && n >= 1 && (n & (n - 1)) === 0;
}
/**
 * The longest rows of the tile, per kind. H200, % of copy, the op's forward benchmark (bench/RESULTS.md):
 * - LayerNorm, the `rows` kernel before → the tile: bf16 D = 128 83.7 → 93.2, f32 D = 128 95.2 → 98.4; at 16-bit
 *   D = 256 (n = 32) the tile lost (bench/kexp.ts: 91.4–91.7 against the `rows` kernel's 94.7).
 * - RMSNorm (2026-12-01, one process each): bf16 D = 8 / 16 / 32 / 64 45.8 / 69.4 / 65.4 / 78.6 → 96.9 / 97.3 / 96.9 /
 *   97.2, f32 D = 8 / 16 / 32 / 64 73.8 / 65.4 / 79.2 / 96.4 → 97.3 / 96.8 / 97.3 / 96.8; at D = 128 the tile lost (bf16
 *   97.4 → 97.1, f16 97.9 → 97.0, f32 98.8 → 97.0): the `rows` kernel keeps D = 128. Again with the tile's store-free
 *   loop (2026-12-02, Deno, two processes): `rows` 98.2 / 98.0 / 96.8 against the tile's 97.5 / 96.8 / 97.1 (f32 /
 *   bf16 / f16).
 */
export const TILE_MAX_D: Record<NormKind, number> = { layer: 128, rms: 64 };
/** Rows per 32-lane group and load step of the tile: 32 / n rows per load, TILE_LOADS loads (NK_TILE_M in the kernel). */
export const TILE_LOADS = 4;
/**
 * Steps each CTA of the tile takes, about (its grid: rows / (steps × rows per CTA step)). H200, % of copy against the
 * `rows` plan's grid, whose CTAs take n / (4 × tpr) steps (bench/results/kexp/2026-12-01-run27-*): LN bf16 D = 8
 * (n = 1) 64.2 → 95.8, D = 16 80.5 → 95.3, LN f32 D = 8 85.2 → 97.8, D = 16 97.0 → 98.0; where the plan's grid already
 * gave 2 steps (n ≥ 8) it stays; 4 steps gained up to 1 point at 16-bit D = 64 and 128, lost 0.5 at f32 D = 64 and 11
 * at f32 D = 128.
 */
export const TILE_STEPS = 2;
/** The tile's grid for `rows` rows of D (tileRows holds), 256-thread CTAs: TILE_STEPS steps each. */
export function tileGrid(rows: number, d: number, inputDtype: DType, block: number, maxGridX: number): number {
  const n = d / (16 / dtypeBytes(inputDtype));
  const rowsPerStep = (block / 32) * (32 / n) * TILE_LOADS;
  return Math.max(1, Math.min(maxGridX, Math.ceil(rows / (rowsPerStep * TILE_STEPS))));
}

const nextPow2 = (n: number): number => 2 ** Math.ceil(Math.log2(Math.max(1, n)));
const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, v));

export function planNorm(p: PlanInput, limits: PlanLimits): PlanResult {
  const tin = p.inputDtype, tout = p.outputDtype, tw = p.paramDtype ?? "f32";
  if (tw !== "f32" && tw !== tin) {
    return { unsupported: `weight/bias must be f32 or the input dtype (${tin}), not ${tw}` };
  }
  if (p.rows < 1 || p.d < 1) return { unsupported: "rows and d must be ≥ 1 to launch" };
  const rowBytes = p.d * dtypeBytes(tin); // of x
  const vec = 16 / dtypeBytes(tin);
  const chunks = Math.ceil(p.d / vec);
  const warp = limits.warpSize;
  const maxThreads = limits.maxThreadsPerBlock;
  const name = (m: string): string => `nk_${p.kind === "layer" ? "ln" : "rms"}_${m}_${tin}_${tout}_${tw}`;
  const reduceShared = (threads: number): number => 2 * Math.ceil(threads / warp) * 4;
  const make = (mapping: Mapping, tpr: number, nv: number, blockThreads: number, gridX: number, cluster = 1, staged = false): PlanResult => {
    const tile = mapping === "rows" && tileRows(p.kind, p.d, tin);
    return { plan: {
      // LayerNorm's rows of 1 or 2 lanes: the kernel with two-pass statistics (TWO_PASS_MAX_TPR).
      kernel: name(mapping === "rows" && p.kind === "layer" && tpr <= TWO_PASS_MAX_TPR ? "rowstwopass" : mapping),
      mapping,
      grid: [gridX, 1, 1],
      block: [blockThreads, 1, 1],
      sharedBytes: mapping === "rows" ? 0
        : mapping === "stash" ? stashShared(blockThreads, nv)
        : staged ? stagedShared(blockThreads)
        : reduceShared(blockThreads) + (mapping === "cluster" ? CLUSTER_SUM_BYTES : 0),
      cluster,
      tpr,
      nv,
      prefetch: prefetchRows(mapping, rowBytes, limits.ccMajor, p.kind, blockThreads),
      fullKernel: tile ? name("rowstile")
        : p.kind === "layer" && (mapping === "block" || mapping === "cluster") ? name(`${mapping}full`)
        : null,
      fullGridX: tile ? tileGrid(p.rows, p.d, tin, blockThreads, limits.maxGridX) : gridX,
    } };
  };

  const cta = Math.min(MAX_BLOCK_THREADS, maxThreads);
  const roundWarp = (n: number): number => Math.ceil(n / warp) * warp;
  // A few rows: the time is the row's latency (loads, reductions, the weight/bias round trip), not bandwidth.
  // One row per block, so every row has an SM to itself, with at most MAXV_LATENCY chunks per thread.
  if (p.rows <= LATENCY_ROWS_PER_SM * limits.multiprocessors && chunks <= cta * MAXV_LATENCY) {
    const t = Math.min(roundWarp(chunks), clamp(roundWarp(Math.ceil(chunks / MAXV_LATENCY)), LATENCY_MIN_THREADS, cta));
    return make("latency", t, Math.ceil(chunks / t), t, p.rows);
  }
  // Small rows: a sub-warp (tpr lanes) per row, ROWS_BLOCK / tpr rows per block.
  // The rows kernel reduces with xor shuffles inside 32-lane groups (whatever the wave size).
  if (chunks <= ROWS_MAX_TPR * MAXV_ROWS && ROWS_BLOCK <= maxThreads) {
    // LayerNorm's two reductions favour full register caches. RMSNorm's single reduction is cheap, so
    // for small rows it gains from twice the lanes per row (better coalesced loads), up to 16 lanes
    // (bench/sweep.ts on the H200: bf16 D=128 3192 -> 4116 GB/s; D=768 is faster at 16 lanes than 32).
    const full = nextPow2(Math.ceil(chunks / TARGET_NV));
    const tpr = clamp(p.kind === "rms" ? Math.max(full, Math.min(16, nextPow2(Math.ceil(chunks / 4)))) : full, 1, ROWS_MAX_TPR);
    const nv = Math.ceil(chunks / tpr);
    const rowsPerBlock = ROWS_BLOCK / tpr;
    return make("rows", tpr, nv, ROWS_BLOCK, Math.min(Math.ceil(p.rows / rowsPerBlock), limits.maxGridX));
  }
  // Mid rows: one block per row, the row in registers.
  // Any multiple of the warp works (not only powers of two): D = 5120 f32 gets 160 threads × 8 chunks
  // instead of 256 × 5, the same registers per thread for more rows in flight per SM.
  const blockThreads = (c: number): number => clamp(roundWarp(Math.ceil(c / TARGET_NV)), warp, cta);
  if (chunks <= cta * MAXV_BLOCK) {
    const t = blockThreads(chunks);
    return make("block", t, Math.ceil(chunks / t), t, Math.min(p.rows, limits.maxGridX));
  }
  // Rows of up to 1024 × 8 chunks on Hopper: one block of up to 1024 threads per row (BIG_BLOCK_THREADS). RMSNorm
  // at any row count; LayerNorm from a row per SM (fewer rows keep the cluster, which spreads a row over SMs).
  // LayerNorm keeps the L2 prefetch ahead (2 MiB: 81.2 → 87.1 with it, 79.8 without, LN f32 D=32768); RMSNorm
  // gets none (RMS bf16 D=65536 95.3 without, 87.6–92.5 with 0.5–2 MiB ahead; RMS f32 D=32768 95.6 and 96.6).
  const big = Math.min(BIG_BLOCK_THREADS, maxThreads);
  if (limits.ccMajor === 9 && chunks <= big * MAXV_BLOCK &&
    (p.kind === "rms" || p.rows >= LN_WIDE_MIN_ROWS_PER_SM * limits.multiprocessors)) {
    const t = clamp(roundWarp(Math.ceil(chunks / TARGET_NV)), warp, big);
    const staged = p.kind === "layer" && t > MAX_BLOCK_THREADS && stagesParams(tin, tw);
    return make("block", t, Math.ceil(chunks / t), t, Math.min(p.rows, limits.maxGridX), 1, staged);
  }
  // Rows of up to 1024 × 16 chunks on Hopper, from a row per SM: one block per row, part of it in shared memory
  // (fewer rows keep the cluster, which spreads a row over several SMs).
  const stash = limits.ccMajor === 9 && chunks > big * MAXV_BLOCK && p.rows >= limits.multiprocessors
    ? stashGeometry(p.d, tin, tout, tw, big, warp)
    : null;
  if (stash) {
    return make("stash", stash.threads, stash.nv, stash.threads, Math.min(p.rows, limits.maxGridX));
  }
  // Very large rows: re-read from L2 by one block per SM (`wide`, maxThreads threads: 64 registers each,
  // so one block fills an SM): rows up to WIDE_MAX_ROW_BYTES that the big blocks above did not take (before
  // Hopper; LayerNorm: with a row for every SM); else split over a cluster of CTAs.
  // The smallest cluster whose CTAs need ≤ CLUSTER_CTA threads: several CTAs per SM overlap one CTA's exchange
  // with another's loads (one 512-thread CTA per SM could not), within the portable cluster size of 8.
  const wide = (): PlanResult =>
    make("wide", maxThreads, 0, maxThreads, Math.min(p.rows, limits.maxGridX, Math.max(1, limits.multiprocessors)));
  const streamed = rowBytes <= WIDE_MAX_ROW_BYTES &&
    (p.kind === "rms" || p.rows >= LN_WIDE_MIN_ROWS_PER_SM * limits.multiprocessors);
  if (streamed) return wide();
  // (A grid limit below the cluster size would leave no whole cluster to launch: `wide` then.)
  if (limits.ccMajor >= 9) {
    for (const c of CLUSTER_SIZES.filter((c) => c <= limits.maxGridX)) {
      const per = Math.ceil(chunks / c);
      if (per <= Math.min(CLUSTER_CTA, cta) * MAXV_BLOCK || (c === 8 && per <= cta * MAXV_BLOCK)) {
        const t = blockThreads(per);
        const rowsInFlight = Math.min(p.rows, Math.floor(limits.maxGridX / c));
        return make("cluster", t, Math.ceil(per / t), t, rowsInFlight * c, c);
      }
    }
  }
  return wide();
}
