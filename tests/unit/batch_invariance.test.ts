/**
 * What fixes a row's summation order in the tuned forward kernels (scripts/reduction_geometry.ts) on known plans, the
 * audit over row counts (scripts/batch_invariance_audit.ts), and that docs/batch-invariance.md holds its output.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { type LaunchPlan, type NormKind, type PlanInput, planNorm } from "../../ops/plan.ts";
import { bwdReductionGeometry, reductionGeometry, sameReduction } from "../../scripts/reduction_geometry.ts";
import { planNormBackward } from "../../ops/plan_bwd.ts";
import type { DType } from "../../runtime/dtype.ts";
import {
  auditCase,
  auditSection,
  H200_LIMITS,
  probeRows,
  sameUpToFormat,
  withAuditSection,
} from "../../scripts/batch_invariance_audit.ts";

const input = (kind: NormKind, d: number, dtype: DType, rows: number): PlanInput => ({
  kind,
  rows,
  d,
  inputDtype: dtype,
  outputDtype: dtype,
  paramDtype: dtype,
});
function planFor(p: PlanInput): LaunchPlan {
  const r = planNorm(p, H200_LIMITS);
  assert.ok("plan" in r, JSON.stringify(r));
  return r.plan;
}
const geometryAt = (kind: NormKind, d: number, dtype: DType, rows: number, full = true) => {
  const p = input(kind, d, dtype, rows);
  return reductionGeometry(p, planFor(p), full);
};

test("one plan gives one fingerprint; different thread counts give different ones", () => {
  const a = geometryAt("rms", 768, "bf16", 1), b = geometryAt("rms", 768, "bf16", 1);
  assert.deepEqual(a, b);
  assert.match(a.order, /^[0-9a-f]{16}$/);
  // 264 rows: `latency`, 96 threads a chunk each; 265: `rows`, 16 lanes of 6 chunks.
  const lat = geometryAt("rms", 768, "bf16", 264), rows = geometryAt("rms", 768, "bf16", 265);
  assert.deepEqual([lat.family, lat.threads, rows.family, rows.threads], ["block", 96, "lanes", 16]);
  assert.equal(sameReduction(lat, rows), false);
});

test("plans that differ in name but add in the same order compare equal", () => {
  // One chunk (D = 8 bf16): `latency` (32 threads, 31 of them adding zeros) and one lane of `rows` sum alike.
  assert.ok(sameReduction(geometryAt("rms", 8, "bf16", 1), geometryAt("rms", 8, "bf16", 100_000)));
  // f32 D = 8 (two chunks): `latency` adds chunk 0 and chunk 1 in one step, as the `rows` tile's two lanes do...
  assert.ok(sameReduction(geometryAt("rms", 8, "f32", 1), geometryAt("rms", 8, "f32", 100_000, true)));
  // ...while `rows` (one lane, both chunks in turn) on the masked path does not.
  assert.equal(
    sameReduction(geometryAt("rms", 8, "f32", 1, false), geometryAt("rms", 8, "f32", 100_000, false)),
    false,
  );
  // `latency` and `block` share nk_fwd_block: the same threads, the same order whatever the chunk cap (MAXV 4 or 8).
  const p = input("rms", 4096, "bf16", 1), lat = planFor(p);
  assert.equal(lat.mapping, "latency");
  const asBlock: LaunchPlan = { ...lat, mapping: "block", kernel: lat.kernel.replace("_latency_", "_block_"), nv: 8 };
  assert.ok(sameReduction(reductionGeometry(p, lat, true), reductionGeometry({ ...p, rows: 1000 }, asBlock, true)));
});

test("the same tree with another statistics formula is another result", () => {
  // LN bf16 D = 128: `latency` (one pass) and the `rows` tile (two passes, no shift) hold one chunk a thread alike.
  const lat = geometryAt("layer", 128, "bf16", 264), tile = geometryAt("layer", 128, "bf16", 265);
  assert.equal(lat.order, tile.order);
  assert.deepEqual([lat.stats, tile.stats, tile.family], ["one-pass", "tile-no-shift", "tile"]);
  assert.equal(sameReduction(lat, tile), false);
  assert.equal(geometryAt("layer", 128, "f32", 265).stats, "tile-shift");
  assert.equal(geometryAt("layer", 768, "bf16", 265, false).stats, "centred");
});

test("stash folds each chunk first: another order than a block of the same threads", () => {
  const p = input("rms", 131072, "bf16", 1000), stash = planFor(p);
  assert.deepEqual([stash.mapping, stash.tpr, stash.nv], ["stash", 1024, 16]);
  const asBlock: LaunchPlan = { ...stash, mapping: "block", kernel: stash.kernel.replace("_stash_", "_block_") };
  const s = reductionGeometry(p, stash, true), b = reductionGeometry(p, asBlock, true);
  assert.deepEqual([s.fold, b.fold, s.threads, b.threads], ["chunk", "element", 1024, 1024]);
  assert.notEqual(s.order, b.order);
  // Its masked calls run `wide`'s loop on the same launch: element by element, as a block of 1024 would.
  assert.equal(reductionGeometry(p, stash, false).order, b.order);
});

test("clusters: CTA slices added in rank order", () => {
  const c = geometryAt("layer", 65536, "bf16", 131), blk = geometryAt("layer", 65536, "bf16", 132);
  assert.deepEqual([c.family, c.cluster, c.threads], ["cluster", 4, 256]);
  assert.deepEqual([blk.family, blk.threads], ["block", 1024]);
  assert.equal(sameReduction(c, blk), false);
});

test("LayerNorm's one-pass `rows` kernel decides for 32 / tpr rows at once", () => {
  assert.equal(geometryAt("layer", 512, "bf16", 1000).sharedDecision, 4); // 8 lanes
  assert.equal(geometryAt("layer", 512, "bf16", 1000, false).sharedDecision, 1); // masked: centred always
  assert.equal(geometryAt("layer", 2048, "bf16", 1000).sharedDecision, 1); // 32 lanes: a warp per row
  assert.equal(geometryAt("layer", 128, "bf16", 1000, false).sharedDecision, 1); // two-pass kernel
  assert.equal(geometryAt("rms", 512, "bf16", 1000).sharedDecision, 1);
});

test("the audit finds the rules' row-count thresholds and nothing else", () => {
  const rows = probeRows(H200_LIMITS);
  assert.ok(rows.includes(264) && rows.includes(265) && rows.includes(131) && rows.includes(132));
  assert.deepEqual(auditCase("layer", ["bf16", "bf16", "bf16"], 768, "vector").boundaries, [265]);
  assert.deepEqual(auditCase("layer", ["bf16", "bf16", "bf16"], 65536, "vector").boundaries, [132]);
  assert.deepEqual(auditCase("rms", ["f32", "f32", "f32"], 8192, "masked").boundaries, [265]);
  const one = auditCase("layer", ["bf16", "bf16", "f32"], 32768, "vector");
  assert.deepEqual([one.boundaries, one.segments.length, one.segments[0].from, one.segments[0].to], [[], 1, 1, 1e6]);
  const same = auditCase("rms", ["bf16", "bf16", "bf16"], 8, "vector");
  assert.deepEqual([same.boundaries, same.segments.map((s) => s.rule)], [[], ["fwd.latency", "fwd.rows"]]);
});

test("docs/batch-invariance.md holds the audit's current tables", () => {
  const page = readFileSync(new URL("../../docs/batch-invariance.md", import.meta.url), "utf8");
  assert.ok(sameUpToFormat(withAuditSection(page, auditSection()), page), "stale: run scripts/batch-invariance.ts");
  assert.equal(sameUpToFormat("| a |  b |\n|---|--:|", "| a | b |\n| - | --: |"), false);
  assert.ok(sameUpToFormat("| a | b |\n|---|---:|\nsome\nprose", "| a   | b |\n| --- | -----: |\nsome prose"));
});

test("backward: one dx geometry per (kind, D, dtypes), whatever the row count; the staged variant by alignment", () => {
  assert.equal(planNormBackward.length, 2, "planNormBackward(input, limits): no row count");
  const limits = { maxThreadsPerBlock: 1024, warpSize: 32, maxSharedPerBlockOptin: 232448, ccMajor: 9, maxCluster: 16 };
  const r = planNormBackward(
    { kind: "rms", d: 32768, xDtype: "bf16", dyDtype: "bf16", weightDtype: "bf16", paramGrads: true },
    limits,
  );
  assert.ok("plan" in r && r.plan.staged, JSON.stringify(r));
  const plain = bwdReductionGeometry(r.plan, false), staged = bwdReductionGeometry(r.plan, true);
  assert.deepEqual([plain.mapping, plain.cluster, plain.threads], ["cluster", r.plan.cluster, r.plan.block]);
  // RMSNorm 16-bit stages in clusters of 128-thread CTAs (bwd.staged-rms16-small): another order than the plan's.
  assert.deepEqual([plain.cluster, plain.threads, staged.cluster, staged.threads], [2, 512, 8, 128]);
  const rows = planNormBackward(
    { kind: "rms", d: 256, xDtype: "f32", dyDtype: "f32", paramGrads: false },
    limits,
  );
  assert.ok("plan" in rows);
  assert.deepEqual(bwdReductionGeometry(rows.plan, true), bwdReductionGeometry(rows.plan, false));
  assert.ok(rows.plan.rowsPerBlock > 1 && rows.plan.tpr <= 32);
});
