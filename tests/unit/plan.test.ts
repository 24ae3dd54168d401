/** The pure launch-plan function (ops/plan.ts): mapping table, geometry invariants, unsupported cases. */
import { test } from "node:test";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";
import {
  CLUSTER_SUM_BYTES,
  fwdFull,
  LATENCY_ROWS_PER_SM,
  type LaunchPlan,
  MAXV_BLOCK,
  MAXV_LATENCY,
  MAXV_ROWS,
  type PlanInput,
  type PlanLimits,
  planNorm,
  type PlanResult,
  PREFETCH_AHEAD_BYTES,
  PREFETCH_MIN_ROW_BYTES,
  prefetchRows,
  STAGE_OFFSET_BYTES,
  STAGE_THREAD_BYTES,
  stagedShared,
  stagesParams,
  STASH_MAX_CHUNKS,
  STASH_REG_CHUNKS,
  stashBuilt,
  stashGeometry,
  stashShared,
  TILE_LOADS,
  TILE_MAX_D,
  tileGrid,
  tileRows,
  TWO_PASS_MAX_TPR,
  WIDE_MAX_ROW_BYTES,
} from "../../ops/plan.ts";
import type { DType } from "../../runtime/dtype.ts";

const H200: PlanLimits = {
  maxGridX: 2147483647,
  maxThreadsPerBlock: 1024,
  warpSize: 32,
  ccMajor: 9,
  multiprocessors: 132,
};
const A100: PlanLimits = { ...H200, ccMajor: 8, multiprocessors: 108 };

function planOf(r: PlanResult): LaunchPlan {
  assert.ok("plan" in r, `expected a plan, got ${JSON.stringify(r)}`);
  return r.plan;
}
const plan = (
  d: number,
  dtype: DType = "f32",
  rows = 1000,
  limits = H200,
  kind: "layer" | "rms" = "layer",
): LaunchPlan => planOf(planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype }, limits));

test("kernel names encode kind, mapping and the dtype triple (weight dtype defaults to f32)", () => {
  assert.equal(plan(768).kernel, "nk_ln_rows_f32_f32_f32");
  assert.equal(plan(8192, "bf16", 1000, H200, "rms").kernel, "nk_rms_block_bf16_bf16_f32");
  const p = planOf(
    planNorm({ kind: "layer", rows: 3, d: 4096, inputDtype: "f16", outputDtype: "f32", paramDtype: "f16" }, H200),
  );
  assert.equal(p.kernel, "nk_ln_latency_f16_f32_f16");
  // LayerNorm rows of 1–2 lanes: the two-pass kernel (TWO_PASS_MAX_TPR); RMSNorm has none.
  assert.deepEqual([plan(128, "bf16").kernel, plan(128, "bf16").tpr], ["nk_ln_rowstwopass_bf16_bf16_f32", 2]);
  assert.equal(plan(3, "f32").kernel, "nk_ln_rowstwopass_f32_f32_f32");
  assert.deepEqual([plan(128, "f32").kernel, plan(128, "f32").tpr], ["nk_ln_rows_f32_f32_f32", 4]);
  assert.equal(plan(128, "bf16", 1000, H200, "rms").kernel, "nk_rms_rows_bf16_bf16_f32");
});

test("the mapping follows D: rows for small, block for mid, cluster for huge (Hopper), wide without clusters", () => {
  assert.deepEqual([plan(128, "bf16").mapping, plan(128, "bf16").tpr, plan(128, "bf16").nv], ["rows", 2, 8]);
  assert.deepEqual([plan(1024).mapping, plan(1024).tpr, plan(1024).nv], ["rows", 32, 8]);
  const rms128 = plan(128, "bf16", 1000, H200, "rms");
  assert.deepEqual([rms128.mapping, rms128.tpr, rms128.nv], ["rows", 4, 4], "RMSNorm: twice the lanes per row");
  const rms768 = plan(768, "bf16", 1000, H200, "rms");
  assert.deepEqual([rms768.tpr, rms768.nv], [16, 6], "RMSNorm: at most 16 lanes per row");
  assert.deepEqual([plan(1024, "f32", 1000, H200, "rms").tpr, plan(1024, "f32", 1000, H200, "rms").nv], [32, 8]);
  assert.deepEqual([plan(4096, "bf16").mapping, plan(4096, "bf16").tpr, plan(4096, "bf16").nv], ["block", 64, 8]);
  assert.deepEqual([plan(16384).mapping, plan(16384).tpr, plan(16384).nv], ["block", 512, 8]);
  const rms = (d: number, dtype: DType = "f32", rows = 1000) => plan(d, dtype, rows, H200, "rms");
  // Rows of 64–128 KB on Hopper: a block of up to 1024 threads per row (8 chunks each), RMSNorm without the prefetch.
  assert.deepEqual([rms(32768).mapping, rms(32768).tpr, rms(32768).nv, rms(32768).grid[0], rms(32768).prefetch], [
    "block",
    1024,
    8,
    1000,
    0,
  ]);
  assert.deepEqual([rms(65536, "bf16").mapping, rms(65536, "bf16").tpr, rms(20000).tpr, rms(20000).nv], [
    "block",
    1024,
    640,
    8,
  ]);
  assert.deepEqual([plan(32768, "f32", 1000, A100, "rms").mapping, plan(32768, "f32", 1000, A100, "rms").grid[0]], [
    "wide",
    108,
  ], "not measured before sm_90: wide");
  assert.equal(rms(65537, "bf16").mapping, "cluster", "past 128 KB: a cluster per row");
  assert.deepEqual(rms(32768, "f32", 10).grid, [10, 1, 1], "no more blocks than rows");
  assert.deepEqual(plan(32768, "f32", 10, A100, "rms").grid, [10, 1, 1]);
  // LayerNorm past 512-thread blocks: a 1024-thread block up to 128 KB rows from one row per SM (132 on the H200),
  // with the L2 prefetch; else a cluster per row.
  assert.deepEqual([plan(32768).mapping, plan(32768).tpr, plan(32768).grid[0], plan(32768).prefetch], [
    "block",
    1024,
    1000,
    16,
  ], "LayerNorm, 1000 rows");
  assert.deepEqual(
    [plan(65536, "bf16", 132).mapping, plan(65536, "f16", 132).mapping],
    ["block", "block"],
    "from a row per SM",
  );
  assert.deepEqual([plan(32768, "f32", 1000, A100).mapping, plan(32768, "f32", 1000, A100).grid[0]], ["wide", 108]);
  assert.deepEqual([plan(32769).mapping, plan(65537, "bf16").mapping, plan(131072).mapping], [
    "cluster",
    "cluster",
    "cluster",
  ], "past 128 KB: a cluster");
  assert.deepEqual([plan(131072).cluster, plan(131072).tpr], [8, 512]);
  // Rows of 1024 × 9–16 whole chunks with weights of x's dtype, from a row per SM: one block, part of the row in shared
  // memory (`stash`); f32 weights on 16-bit x, and rows that are not whole chunks or not whole warps, keep the cluster.
  const stash = (d: number, dtype: DType, rows = 1000, kind: "layer" | "rms" = "layer", limits = H200) =>
    planOf(planNorm({ kind, rows, d, inputDtype: dtype, outputDtype: dtype, paramDtype: dtype }, limits));
  for (
    const [d, dtype, threads, nv] of [[65536, "f32", 1024, 16], [131072, "bf16", 1024, 16], [40960, "f32", 1024, 10], [
      98304,
      "f16",
      1024,
      12,
    ], [36864, "f32", 768, 12]] as const
  ) {
    for (const kind of ["layer", "rms"] as const) {
      const p = stash(d, dtype, 1000, kind);
      assert.deepEqual([p.mapping, p.kernel, p.block[0], p.tpr, p.nv, p.grid[0], p.cluster, p.prefetch, p.fullKernel], [
        "stash",
        `nk_${kind === "layer" ? "ln" : "rms"}_stash_${dtype}_${dtype}_${dtype}`,
        threads,
        threads,
        nv,
        1000,
        1,
        0,
        null,
      ], `${kind} ${dtype} D=${d}`);
      assert.equal(p.sharedBytes, stashShared(threads, nv));
      assert.equal(p.sharedBytes, STAGE_OFFSET_BYTES + (nv - STASH_REG_CHUNKS) * threads * 16);
      assert.ok(p.sharedBytes <= 227 * 1024, "within what an sm_90 block may opt in to");
      assert.equal(p.nv * p.tpr * (16 / (dtype === "f32" ? 4 : 2)), d, "whole chunks, every thread full");
    }
  }
  assert.deepEqual(
    [plan(65536).mapping, plan(65536).cluster, plan(65536).tpr],
    ["stash", 1, 1024],
    "f32 x, f32 weights (the default)",
  );
  assert.deepEqual(
    [plan(131072, "bf16").mapping, plan(131072, "bf16").cluster],
    ["cluster", 8],
    "16-bit x with f32 weights: no stash",
  );
  assert.equal(stash(65536, "f32", 131).mapping, "cluster", "fewer rows than SMs: the cluster spreads a row over SMs");
  assert.equal(stash(65536, "f32", 1000, "layer", A100).mapping, "wide", "compute capability 9 only");
  assert.equal(stash(65540, "f32").mapping, "cluster", "16385 chunks: no whole-warp geometry");
  assert.equal(stash(65537, "bf16").mapping, "cluster", "not whole chunks");
  assert.equal(stash(32768, "f32").mapping, "block", "1024 × 8 chunks fit a block's registers");
  assert.equal(stash(131072, "f32").mapping, "cluster", "1024 × 32 chunks: past the stash");
  assert.deepEqual([plan(262144, "bf16", 132).mapping, plan(262144, "bf16", 132).cluster], ["cluster", 8]);
  assert.deepEqual(
    [plan(262144, "f32", 132).mapping, plan(262144, "f32", 132).grid[0]],
    ["wide", 132],
    "no cluster of 8 holds it",
  );
  const few = (d: number, dtype: DType = "f32") => plan(d, dtype, 131);
  assert.deepEqual(
    [few(32768).mapping, few(32768).cluster, few(32768).tpr],
    ["cluster", 4, 256],
    "fewer rows than SMs: a cluster per row",
  );
  assert.deepEqual([few(32769).mapping, few(32769).cluster, few(65536).cluster, few(65536).tpr], [
    "cluster",
    8,
    8,
    256,
  ]);
  assert.deepEqual([plan(5120).mapping, plan(5120).tpr, plan(5120).nv], ["block", 160, 8]);
  assert.deepEqual([few(131072).mapping, few(131072).cluster, few(131072).nv], ["cluster", 8, 8]);
  assert.deepEqual([few(262144, "bf16").mapping, few(262144, "bf16").cluster], ["cluster", 8]);
  assert.equal(few(262144).mapping, "wide", "f32 262144 needs more than 8 CTAs: the L2 path");
  assert.deepEqual(
    [rms(131072).mapping, rms(131072).cluster],
    ["cluster", 8],
    "RMSNorm past 128 KB keeps the cluster at any row count",
  );
  assert.equal(plan(65536, "f32", 10, A100).mapping, "wide");
  assert.equal(plan(262144, "bf16", 10, A100).mapping, "wide");
});

test("a few rows take the latency mapping: one row per block, ≤ 4 chunks per thread, ≥ 128 threads where the row has them", () => {
  const geo = (d: number, dtype: DType, rows: number, kind: "layer" | "rms" = "layer", limits = H200) => {
    const p = plan(d, dtype, rows, limits, kind);
    return [p.mapping, p.block[0], p.nv, p.grid[0]];
  };
  // The shapes of bench/latency.ts (H200 choices in bench/RESULTS.md, issue 5).
  assert.deepEqual(geo(2048, "bf16", 1), ["latency", 128, 2, 1]);
  assert.deepEqual(geo(4096, "bf16", 8, "rms"), ["latency", 128, 4, 8]);
  assert.deepEqual(geo(8192, "bf16", 64), ["latency", 256, 4, 64]);
  assert.deepEqual(geo(2048, "f32", 64), ["latency", 128, 4, 64]);
  assert.deepEqual(geo(8192, "f32", 1, "rms"), ["latency", 512, 4, 1]);
  assert.deepEqual(geo(100, "f32", 1), ["latency", 32, 1, 1], "never more threads than chunks (rounded to a warp)");
  assert.deepEqual(geo(16384, "bf16", 3), ["latency", 512, 4, 3], "the longest row it takes: 512 threads × 4 chunks");
  assert.equal(plan(16385, "bf16", 3).mapping, "block", "past 512 × 4 chunks: the block mapping");
  // Up to 2 rows per SM; past that the bandwidth mappings.
  assert.equal(plan(4096, "bf16", LATENCY_ROWS_PER_SM * 132).mapping, "latency");
  assert.equal(plan(4096, "bf16", LATENCY_ROWS_PER_SM * 132 + 1).mapping, "block");
  assert.equal(plan(4096, "bf16", 216, A100).mapping, "latency");
  assert.equal(plan(4096, "bf16", 217, A100).mapping, "block");
  const wave64 = { ...A100, warpSize: 64, ccMajor: 0 };
  assert.deepEqual(geo(2048, "bf16", 1, "layer", wave64), ["latency", 128, 2, 1], "whole waves on AMD");
  assert.deepEqual(geo(128, "bf16", 1, "layer", wave64), ["latency", 64, 1, 1]);
  assert.equal(plan(4096, "bf16", 1, { ...H200, multiprocessors: 0 }).mapping, "block", "no SM count: no latency plan");
});

test("invariants over every D from 1 to 262144 (sampled), every dtype, both devices", () => {
  const ds = [
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    9,
    31,
    33,
    127,
    128,
    129,
    1000,
    1024,
    1025,
    2048,
    2049,
    4097,
    5120,
    12288,
    32768,
    32769,
    65535,
    65537,
    131072,
    200001,
    262144,
  ];
  for (const limits of [H200, A100]) {
    for (const dtype of ["f32", "f16", "bf16"] as DType[]) {
      for (const d of ds) {
        for (const [rows, kind] of [1, 3, 1000, 100_000].flatMap((r) => [[r, "layer"], [r, "rms"]] as const)) {
          const p = plan(d, dtype, rows, limits, kind);
          const vec = dtype === "f32" ? 4 : 8, chunks = Math.ceil(d / vec);
          const [g] = p.grid, [b] = p.block;
          const where = `${kind} ${dtype} d=${d} rows=${rows} cc=${limits.ccMajor}: ${JSON.stringify(p)}`;
          assert.ok(b % limits.warpSize === 0 && b <= limits.maxThreadsPerBlock, `block ${where}`);
          if (p.mapping !== "wide") {
            assert.ok(b <= (p.mapping === "block" ? 1024 : 512), `CTAs within their launch bound: ${where}`);
          }
          if (p.mapping === "block" && b > 512) {
            assert.ok(
              limits.ccMajor === 9 && chunks > 512 * MAXV_BLOCK,
              `1024-thread blocks only past 512 x 8 chunks, on sm_90: ${where}`,
            );
          }
          assert.ok(g >= 1 && g <= limits.maxGridX && g % p.cluster === 0, `grid ${where}`);
          // The L2 prefetch: rows and block on Hopper, rows of ≥ 512 bytes, about 2 MiB of x ahead; else none.
          const rowBytes = d * (dtype === "f32" ? 4 : 2);
          const prefetching = limits.ccMajor === 9 && (p.mapping === "rows" || p.mapping === "block") &&
            rowBytes >= 512 &&
            !(p.mapping === "block" && b > 512 && kind === "rms");
          assert.equal(p.prefetch, prefetching ? Math.ceil(PREFETCH_AHEAD_BYTES / rowBytes) : 0, `prefetch ${where}`);
          assert.ok(p.prefetch * rowBytes < PREFETCH_AHEAD_BYTES + rowBytes && Number.isInteger(p.prefetch), where);
          // The vector-only kernel: LayerNorm's block and cluster, the plan's kernel name with `full` after the mapping;
          // either kind's rows of D ≤ 128 in a power-of-two count of whole chunks, the tile (`rowstile`), on its own grid.
          const hasFull = kind === "layer" && (p.mapping === "block" || p.mapping === "cluster");
          const tile = p.mapping === "rows" && d <= (kind === "layer" ? 128 : 64) && d % vec === 0 &&
            [1, 2, 4, 8, 16, 32].includes(d / vec);
          const wantFull = hasFull
            ? p.kernel.replace(`_${p.mapping}_`, `_${p.mapping}full_`)
            : tile
            ? p.kernel.replace(/_rows(twopass)?_/, "_rowstile_")
            : null;
          assert.equal(p.fullKernel, wantFull, `fullKernel ${where}`);
          if (tile) {
            // 8 groups of 32 lanes, each 4 loads of 32 / n rows per step: about 2 steps per CTA, every row covered.
            const perStep = 8 * (32 / (d / vec)) * 4;
            assert.ok(
              p.fullGridX * perStep * 2 >= rows && (p.fullGridX - 1) * perStep * 2 < rows,
              `tile grid ${where}`,
            );
          } else {
            assert.equal(p.fullGridX, g, `fullGridX ${where}`);
          }
          if (p.mapping === "rows") {
            const twoPass = kind === "layer" && p.tpr <= TWO_PASS_MAX_TPR;
            assert.equal(p.kernel.split("_")[2], twoPass ? "rowstwopass" : "rows", `two-pass rows kernel: ${where}`);
            assert.ok(p.tpr >= 1 && p.tpr <= 32 && (p.tpr & (p.tpr - 1)) === 0 && p.nv <= MAXV_ROWS, where);
            assert.ok(p.tpr * p.nv >= chunks, `covers the row: ${where}`);
            assert.ok(g * (b / p.tpr) >= Math.min(rows, 1), where);
            assert.equal(p.sharedBytes, 0);
          } else if (p.mapping === "latency") {
            assert.ok(rows <= LATENCY_ROWS_PER_SM * limits.multiprocessors, `latency only for a few rows: ${where}`);
            assert.ok(p.tpr === b && p.nv >= 1 && p.nv <= MAXV_LATENCY && p.tpr * p.nv >= chunks, where);
            assert.equal(g, rows, `one block per row: ${where}`);
            assert.equal(p.sharedBytes, 2 * (b / 32) * 4, where);
          } else if (p.mapping === "block" || p.mapping === "cluster") {
            assert.ok(p.tpr === b && p.nv >= 1 && p.nv <= MAXV_BLOCK, where);
            assert.ok(p.cluster * p.tpr * p.nv >= chunks, `covers the row: ${where}`);
            assert.ok(p.sharedBytes >= 2 * (b / 32) * 4, where);
            if (p.mapping === "cluster") {
              assert.ok(limits.ccMajor >= 9 && p.cluster <= 8, where);
              // Never where `wide` streams the row: rows ≤ 128 KB (LayerNorm: with a row per SM).
              const rowBytes = d * (dtype === "f32" ? 4 : 2);
              assert.ok(
                rowBytes > WIDE_MAX_ROW_BYTES || (kind === "layer" && rows < limits.multiprocessors),
                `cluster, not wide: ${where}`,
              );
              assert.equal(
                p.sharedBytes,
                2 * (b / 32) * 4 + CLUSTER_SUM_BYTES,
                `reductions, then the cluster exchange: ${where}`,
              );
            } else {
              // LayerNorm's f32 blocks of more than 512 threads (f32 weights: the default here): the reductions' 256
              // bytes, then 128 bytes of weight/bias slots per thread (stagedShared); every other block, the reductions.
              const staged = kind === "layer" && dtype === "f32" && b > 512; // (16-bit x here: f32 weights, none)
              assert.equal(p.sharedBytes, staged ? 256 + 128 * b : 2 * (b / 32) * 4, `shared memory: ${where}`);
              assert.ok(p.sharedBytes <= 227 * 1024, `within an sm_90 block's opt-in: ${where}`);
            }
          } else {
            assert.equal(p.mapping, "wide");
            assert.ok(chunks > 512 * MAXV_BLOCK, `wide only past one block's register cache: ${where}`);
            const fitsCluster = limits.ccMajor >= 9 && chunks <= 8 * 512 * MAXV_BLOCK;
            const streamed = d * (dtype === "f32" ? 4 : 2) <= WIDE_MAX_ROW_BYTES &&
              (kind === "rms" || rows >= limits.multiprocessors);
            assert.ok(
              !fitsCluster || streamed,
              `a cluster where one fits, but for rows ≤ 128 KB (LayerNorm: with a row per SM): ${where}`,
            );
            assert.equal(g, Math.min(rows, limits.multiprocessors), `a block per SM, never more than rows: ${where}`);
          }
        }
      }
    }
  }
});

test("L2 prefetch distance: 2 MiB of x ahead for rows and block on cc 9.x, none for 256-byte rows, clusters, wide, latency", () => {
  // The measured cases (bench/RESULTS.md): the rows ahead the H200 grid launches with.
  assert.equal(plan(128, "f32", 1_048_576).prefetch, 4096, "f32 D=128: 512-byte rows");
  assert.equal(plan(128, "bf16", 2_097_152).prefetch, 0, "bf16 D=128: 256-byte rows lost with it");
  assert.equal(plan(768, "bf16", 349_526).prefetch, 1366);
  assert.equal(plan(4096, "bf16", 65_536).prefetch, 256);
  assert.equal(plan(16384, "f32", 8192).prefetch, 32);
  assert.equal(plan(4096, "bf16", 65_536, A100).prefetch, 0, "no bulk prefetch before sm_90");
  assert.equal(plan(131072, "bf16", 2048, H200, "rms").mapping, "cluster");
  assert.equal(plan(131072, "bf16", 2048, H200, "rms").prefetch, 0, "clusters: no gain measured");
  assert.equal(plan(65536, "f32", 2048, H200, "rms").mapping, "stash");
  assert.equal(plan(65536, "f32", 2048, H200, "rms").prefetch, 0, "stash: none measured");
  assert.equal(plan(262144, "f32", 4096).mapping, "wide");
  assert.equal(plan(262144, "f32", 4096).prefetch, 0, "wide re-reads x from L2");
  assert.deepEqual(
    [plan(32768, "f32", 4096).mapping, plan(32768, "f32", 4096).tpr, plan(32768, "f32", 4096).prefetch],
    ["block", 1024, 16],
  );
  assert.equal(
    plan(32768, "f32", 4096, H200, "rms").prefetch,
    0,
    "RMSNorm's 1024-thread blocks: none (lost up to 8 points)",
  );
});

test("LayerNorm's big blocks get the weight/bias staging slots where weights have x's dtype; RMSNorm and 512-thread blocks none", () => {
  const ln = (d: number, tin: DType, tw: DType, rows = 4096, limits = H200, kind: "layer" | "rms" = "layer") =>
    planOf(planNorm({ kind, rows, d, inputDtype: tin, outputDtype: tin, paramDtype: tw }, limits));
  assert.equal(STAGE_OFFSET_BYTES + STAGE_THREAD_BYTES * 1024, 131_328);
  const big = ln(32768, "f32", "f32");
  assert.deepEqual([big.mapping, big.block[0], big.sharedBytes, big.fullKernel], [
    "block",
    1024,
    stagedShared(1024),
    "nk_ln_blockfull_f32_f32_f32",
  ]);
  assert.equal(ln(20000, "f32", "f32").sharedBytes, stagedShared(640), "640 threads x 8 chunks");
  assert.equal(
    planOf(planNorm({ kind: "layer", rows: 4096, d: 32768, inputDtype: "f32", outputDtype: "bf16" }, H200)).sharedBytes,
    stagedShared(1024),
    "any output dtype",
  );
  assert.equal(ln(16384, "f32", "f32").sharedBytes, 2 * 16 * 4, "512-thread blocks: none");
  assert.equal(
    ln(32768, "f32", "f32", 4096, H200, "rms").sharedBytes,
    2 * 32 * 4,
    "RMSNorm: none (v42/v43 lost 1-5 points)",
  );
  for (const tin of ["bf16", "f16"] as DType[]) {
    assert.equal(stagesParams(tin, tin), true);
    assert.equal(ln(65536, tin, tin).sharedBytes, stagedShared(1024), `${tin} x and weights: staged`);
    assert.equal(ln(40000, tin, tin).sharedBytes, stagedShared(640), `${tin} x and weights, 640 threads: staged`);
    assert.equal(stagesParams(tin, "f32"), false);
    assert.equal(ln(65536, tin, "f32").sharedBytes, 2 * 32 * 4, `${tin} x, f32 weights: none (no staged variant)`);
  }
  assert.equal(ln(32768, "f32", "f32", 64).mapping, "cluster", "fewer rows than SMs: the cluster, no slots");
  assert.equal(plan(4096, "bf16", 8).mapping, "latency");
  assert.equal(plan(4096, "bf16", 8).prefetch, 0, "latency: a few rows");
  assert.equal(prefetchRows("block", PREFETCH_MIN_ROW_BYTES - 2, 9), 0);
  assert.equal(prefetchRows("block", PREFETCH_MIN_ROW_BYTES, 9), PREFETCH_AHEAD_BYTES / PREFETCH_MIN_ROW_BYTES);
  assert.equal(prefetchRows("rows", 3 * 1024 * 1024, 9), 1, "a row longer than the distance: the next one");
  assert.equal(prefetchRows("rows", 4096, 9), 512);
  for (const cc of [8, 10, 12]) assert.equal(prefetchRows("rows", 4096, cc), 0, `cc ${cc}.x: not measured there`);
});

test("the cluster exchange's shared memory mirrors the kernels' (kernels/norm_fwd.cuh, NK_CLUSTER_SUM_BYTES)", () => {
  const src = readFileSync(new URL("../../kernels/fwd_common.cuh", import.meta.url), "utf8");
  const ranks = Number(src.match(/#define NK_CLUSTER_SUM_RANKS (\d+)/)?.[1]);
  assert.equal(ranks, 16);
  // Two 8-byte mbarriers, then two halves of `ranks` × (at most) 2 floats.
  assert.match(src, /#define NK_CLUSTER_SUM_BYTES \(16 \+ 2 \* NK_CLUSTER_SUM_RANKS \* 2 \* 4\)/);
  assert.equal(CLUSTER_SUM_BYTES, 16 + 2 * ranks * 2 * 4);
  const p = plan(131072, "bf16", 2048);
  assert.deepEqual([p.mapping, p.sharedBytes], ["cluster", 2 * (p.block[0] / 32) * 4 + CLUSTER_SUM_BYTES]);
  assert.ok(p.cluster <= ranks);
});

test("grid: rows mapping packs 256/tpr rows per block; grids are clamped to the device's limit", () => {
  const p = plan(128, "f32", 1000); // tpr 8 → 32 rows per block
  assert.equal(p.grid[0], Math.ceil(1000 / (256 / p.tpr)));
  const small = { ...H200, maxGridX: 65535 };
  assert.equal(plan(4096, "f32", 1_000_000, small).grid[0], 65535);
  const c = plan(262144, "bf16", 100_000, small, "rms"); // a cluster of 8 per row, clamped
  assert.deepEqual([c.cluster, c.grid[0]], [8, Math.floor(65535 / 8) * 8]);
  const tiny = { ...small, maxGridX: 100 }; // fewer blocks than SMs allowed: `wide` and clusters stay within the limit
  assert.deepEqual([plan(262144, "f32", 100_000, tiny).mapping, plan(262144, "f32", 100_000, tiny).grid[0]], [
    "wide",
    100,
  ]);
  assert.deepEqual([plan(262144, "bf16", 100_000, tiny).mapping, plan(262144, "bf16", 100_000, tiny).grid[0]], [
    "cluster",
    96,
  ]);
  // A grid limit below every cluster size: no cluster fits, so `wide` (RMSNorm past 128 KB would take a cluster).
  const one = plan(262144, "bf16", 100, { ...H200, maxGridX: 1 }, "rms");
  assert.deepEqual([one.mapping, one.grid[0]], ["wide", 1]);
  const four = plan(20000, "f32", 10, { ...H200, maxGridX: 4 }); // LayerNorm, fewer rows than SMs: a 4-CTA cluster
  assert.deepEqual([four.mapping, four.cluster, four.grid[0]], ["cluster", 4, 4]);
});

test("unsupported: weight/bias dtype other than f32 or the input dtype, no rows, D = 0", () => {
  const bad = (p: PlanInput): string => {
    const r = planNorm(p, H200);
    assert.ok("unsupported" in r, JSON.stringify(r));
    assert.ok(r.unsupported.length > 15);
    return r.unsupported;
  };
  assert.match(
    bad({ kind: "layer", rows: 2, d: 64, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "f16" }),
    /weight/,
  );
  assert.match(bad({ kind: "layer", rows: 0, d: 64, inputDtype: "f32", outputDtype: "f32" }), /rows/);
  assert.match(bad({ kind: "rms", rows: 3, d: 0, inputDtype: "f32", outputDtype: "f32" }), /d must/);
});

test("tileRows: rows of 1, 2, 4, ... whole 16-byte chunks, LayerNorm D ≤ 128, RMSNorm D ≤ 64 (the nk_{ln|rms}_rowstile_* kernels' domain)", () => {
  assert.deepEqual(TILE_MAX_D, { layer: 128, rms: 64 });
  for (const d of [8, 16, 32, 64, 128]) assert.equal(tileRows("layer", d, "bf16"), true, `bf16 ${d}`);
  for (const d of [4, 8, 16, 32, 64, 128]) assert.equal(tileRows("layer", d, "f32"), true, `f32 ${d}`);
  assert.equal(tileRows("layer", 128, "f16"), true);
  for (const d of [8, 16, 32, 64]) assert.equal(tileRows("rms", d, "bf16"), true, `RMSNorm bf16 ${d}`);
  for (const d of [4, 8, 16, 32, 64]) assert.equal(tileRows("rms", d, "f32"), true, `RMSNorm f32 ${d}`);
  // not whole chunks, not a power of two, past 128 (16-bit D = 256 is 32 chunks, where the tile lost); RMSNorm past 64
  for (const d of [1, 4, 100, 127, 96, 24, 256, 512, 264]) {
    assert.equal(tileRows("layer", d, "bf16"), false, `bf16 ${d}`);
  }
  for (const d of [1, 2, 3, 12, 127, 256, 129]) assert.equal(tileRows("layer", d, "f32"), false, `f32 ${d}`);
  for (
    const [d, t] of [[128, "bf16"], [128, "f32"], [128, "f16"], [24, "bf16"], [12, "f32"], [1, "f32"]] as [
      number,
      DType,
    ][]
  ) {
    assert.equal(tileRows("rms", d, t), false, `RMSNorm ${t} ${d}`);
  }
  // On the grid's D = 128 (2^21 or 2^20 rows): LayerNorm's `rows` plan with the tile as its fullKernel, RMSNorm's
  // `rows` kernel alone; below it RMSNorm's tile.
  assert.equal(plan(128, "bf16", 2 ** 21).fullKernel, "nk_ln_rowstile_bf16_bf16_f32");
  assert.equal(plan(128, "f32", 2 ** 20).fullKernel, "nk_ln_rowstile_f32_f32_f32");
  assert.equal(plan(128, "bf16", 2 ** 21, H200, "rms").fullKernel, null);
  assert.equal(plan(64, "f16", 2 ** 22, H200, "rms").fullKernel, "nk_rms_rowstile_f16_f16_f32");
  assert.equal(plan(8, "f32", 2 ** 22, H200, "rms").fullKernel, "nk_rms_rowstile_f32_f32_f32");
  assert.equal(plan(127, "bf16", 2 ** 21).fullKernel, null);
  // The tile's own grid: 2 steps of 8 × (32 / n) × 4 rows per CTA. 16-bit D = 8 (n = 1): 2^25 rows / 2048 = 16384 CTAs,
  // where the `rows` plan has 2^25 / 256 = 131072; D = 128 (n = 16): 2^21 / 128 = 16384, as the plan.
  assert.deepEqual([plan(8, "bf16", 2 ** 25).grid[0], plan(8, "bf16", 2 ** 25).fullGridX], [131072, 16384]);
  assert.deepEqual([plan(128, "bf16", 2 ** 21).grid[0], plan(128, "bf16", 2 ** 21).fullGridX], [16384, 16384]);
  assert.equal(plan(128, "f32", 300).fullGridX, 5, "300 rows of 32 chunks: 32 rows per CTA step, 2 steps: 64 per CTA");
});

/**
 * The rows nk_fwd_rowstile (kernels/norm_fwd.cuh) writes, launched with `grid` CTAs of `block` threads: its loops
 * written out (32-lane groups; group g of CTA b starts at row (b · groups + g) · rpg and strides by grid · groups ·
 * rpg; load i of lane l holds row base + i · (32 / n) + l / n). Counts per row.
 */
function tileWrites(rows: number, n: number, block: number, grid: number): Uint8Array {
  const seen = new Uint8Array(rows), groups = block / 32, rpi = 32 / n, rpg = rpi * TILE_LOADS;
  for (let b = 0; b < grid; b++) {
    for (let g = 0; g < groups; g++) {
      for (let base = (b * groups + g) * rpg; base < rows; base += grid * groups * rpg) {
        for (let i = 0; i < TILE_LOADS; i++) {
          for (let lane = 0; lane < 32; lane += n) { // one lane per row: the row's chunk-0 lane (c = lane % n = 0)
            const row = base + i * rpi + lane / n;
            if (row < rows) seen[row]++;
          }
        }
      }
    }
  }
  return seen;
}

test("tileGrid: with the kernel's loops, every row once, for any n, on the plan's grid, a clamped one and one CTA", () => {
  for (const n of [1, 2, 4, 8, 16, 32]) {
    for (const rows of [1, 31, 300, 1100, 4097]) {
      // n chunks: 16-bit D = 8n up to 16 chunks, f32 D = 128 for 32 (the plan's tile stops at D = 128)
      const [d, dtype]: [number, DType] = n <= 16 ? [8 * n, "bf16"] : [128, "f32"];
      assert.equal(tileRows("layer", d, dtype), true);
      for (const grid of [tileGrid(rows, d, dtype, 256, 2147483647), tileGrid(rows, d, dtype, 256, 3), 1]) {
        const seen = tileWrites(rows, n, 256, grid);
        assert.ok(seen.every((c) => c === 1), `n=${n} rows=${rows} grid=${grid}`);
      }
    }
  }
  assert.equal(tileGrid(100_000, 8, "bf16", 256, 3), 3, "the device's grid limit");
  assert.equal(tileGrid(1, 8, "bf16", 256, 2147483647), 1);
  assert.equal(tileGrid(2048, 8, "bf16", 256, 2147483647), 1, "n = 1: 1024 rows per CTA step, 2 steps");
  assert.equal(tileGrid(2049, 8, "bf16", 256, 2147483647), 2);
});

test("fwdFull: the kernels' nk_fwd_full (D a multiple of the chunk, 16-byte x/w/b, y aligned to its chunk, strides keeping it)", () => {
  const A = 0x7f0000000000n; // a cuMemAlloc-like base: 256-byte aligned
  // d, input, output, x, xStride, y, yStride, weight, bias
  assert.equal(fwdFull(4096, "bf16", "bf16", A, 4096, A + 1048576n, 4096, A + 256n, A + 512n), true);
  assert.equal(fwdFull(4096, "bf16", "bf16", A, 4096, A, 4096, 0n, 0n), true, "no weight, no bias (in place)");
  assert.equal(fwdFull(4100, "bf16", "bf16", A, 4100, A, 4100, 0n, 0n), false, "D not a multiple of 8 (16-bit chunk)");
  assert.equal(fwdFull(4100, "f32", "f32", A, 4100, A, 4100, 0n, 0n), true, "D a multiple of 4 (f32 chunk)");
  assert.equal(fwdFull(4096, "f32", "f32", A, 4098, A, 4096, 0n, 0n), false, "x stride of 8 bytes past 16");
  assert.equal(fwdFull(4096, "f32", "f32", A + 4n, 4096, A, 4096, 0n, 0n), false, "x offset by one element");
  assert.equal(fwdFull(4096, "f32", "f32", A, 4096, A, 4096, A + 8n, 0n), false, "weight 8-byte aligned");
  assert.equal(fwdFull(4096, "f32", "f32", A, 4096, A, 4096, A, A + 24n), false, "bias 8-byte aligned");
  assert.equal(
    fwdFull(4096, "bf16", "f32", A, 4096, A + 16n, 4100, 0n, 0n),
    true,
    "f32 y of 16-bit x: 16-byte chunks, stride 4100 x 4 bytes",
  );
  assert.equal(fwdFull(4096, "bf16", "f32", A, 4096, A + 8n, 4096, 0n, 0n), false, "f32 y of 16-bit x at 8 bytes");
  // f32 input to a 16-bit output: a chunk of y is 4 x 2 = 8 bytes, so y needs only 8-byte alignment.
  assert.equal(fwdFull(4096, "f32", "bf16", A, 4096, A + 8n, 4100, 0n, 0n), true, "16-bit y of f32 x: 8-byte chunks");
  assert.equal(fwdFull(4096, "f32", "bf16", A, 4096, A + 4n, 4096, 0n, 0n), false, "16-bit y of f32 x at 4 bytes");
  assert.equal(fwdFull(4096, "f32", "f16", A, 4096, A, 4098, 0n, 0n), false, "y stride of 4 bytes past 8");
});

test("the weight/bias staging slots mirror the kernels' (kernels/norm_fwd.cuh, NK_STAGE_*)", () => {
  const src = ["fwd_row_cache.cuh", "fwd_block.cuh"].map((f) =>
    readFileSync(new URL(`../../kernels/${f}`, import.meta.url), "utf8")
  ).join("");
  assert.equal(Number(src.match(/#define NK_STAGE_OFFSET_BYTES (\d+)/)?.[1]), STAGE_OFFSET_BYTES);
  assert.equal(Number(src.match(/#define NK_STAGE_THREAD_BYTES (\d+)/)?.[1]), STAGE_THREAD_BYTES);
  // The offset holds the block reduction's two buffers of one float per warp (at most 32 warps), 16-byte aligned.
  assert.ok(STAGE_OFFSET_BYTES >= 2 * 32 * 4 && STAGE_OFFSET_BYTES % 16 === 0);
  // The kernel stages iff the launch's dynamic shared memory holds offset + 128 bytes per thread.
  assert.match(
    src,
    /nk_dynamic_smem_bytes\(\) >= NK_STAGE_OFFSET_BYTES \+ NK_STAGE_THREAD_BYTES \* nk_block_dim_x\(\)/,
  );
});

test("the stash geometry mirrors the kernel's (kernels/norm_fwd.cuh, NK_STASH_*, nk_stash_built)", () => {
  const src = readFileSync(new URL("../../kernels/fwd_stash.cuh", import.meta.url), "utf8");
  const nr = Number(src.match(/#define NK_STASH_NR (\d+)/)?.[1]),
    maxs = Number(src.match(/#define NK_STASH_MAXS (\d+)/)?.[1]);
  assert.deepEqual([nr, nr + maxs], [STASH_REG_CHUNKS, STASH_MAX_CHUNKS]);
  // Slots after the block reduction's buffers, 16 bytes per stashed chunk per thread; the stashed chunks go out in pairs.
  assert.match(
    src,
    /nk_dynamic_smem_bytes\(\) < NK_STAGE_OFFSET_BYTES \+ \(unsigned\)\(nv - NK_STASH_NR\) \* T \* 16u/,
  );
  assert.match(src, /\(nv - NK_STASH_NR\) % NK_STAGE_GROUP/);
  // Built for weights of x's dtype with y in x's dtype or f32: the same rule as stashBuilt.
  assert.match(src, /YES = nk_same<TW, TI>::YES && \(nk_same<TO, TI>::YES \|\| nk_same<TO, nk_f32>::YES\)/);
  const built = (["f32", "f16", "bf16"] as DType[]).flatMap((tin) =>
    (["f32", "f16", "bf16"] as DType[]).flatMap((tout) =>
      (["f32", tin] as DType[]).filter((tw, i, a) => a.indexOf(tw) === i && stashBuilt(tin, tout, tw)).map((tw) =>
        `${tin}_${tout}_${tw}`
      )
    )
  );
  assert.deepEqual(built, ["f32_f32_f32", "f16_f32_f16", "f16_f16_f16", "bf16_f32_bf16", "bf16_bf16_bf16"]);
  // Every geometry the plan makes fits an sm_90 block's opt-in shared memory and the kernel's contract.
  for (let nv = STASH_REG_CHUNKS + 2; nv <= STASH_MAX_CHUNKS; nv += 2) {
    for (const threads of [32, 512, 768, 1024]) {
      const g = stashGeometry(threads * nv * 4, "f32", "f32", "f32", 1024, 32);
      assert.ok(g !== null && g.nv <= nv && g.nv * g.threads === threads * nv && (g.nv - STASH_REG_CHUNKS) % 2 === 0);
      assert.ok(stashShared(g.threads, g.nv) <= 227 * 1024);
    }
  }
  assert.equal(stashGeometry(65536, "bf16", "bf16", "f32", 1024, 32), null, "16-bit x with f32 weights");
  assert.equal(stashGeometry(65536, "bf16", "f16", "bf16", 1024, 32), null, "bf16 to f16: not built");
});
