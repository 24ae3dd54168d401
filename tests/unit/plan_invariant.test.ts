/**
 * planNormInvariant (ops/plan.ts): the tuned plan `batchInvariant: true` takes for a plain norm. At every row count of
 * the batch-invariance audit (scripts/batch_invariance_audit.ts) it is the same kernel, threads per row, chunks per
 * thread and block (what fixes a row's summation order: scripts/reduction_geometry.ts), so that order never changes on
 * either path; no row decides for another; RMSNorm sums alike on the vector and the masked path; and it is the plain
 * norm's own plan at prefill.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { INVARIANT_RULE_ROWS, type PlanInput, type PlanLimits, planNorm, planNormInvariant } from "../../ops/plan.ts";
import { reductionGeometry, sameReduction } from "../../scripts/reduction_geometry.ts";
import { AUDIT_DS, H200_LIMITS, MAX_ROWS, probeRows, TRIPLES } from "../../scripts/batch_invariance_audit.ts";

const DEVICES: readonly [string, PlanLimits][] = [
  ["H200", H200_LIMITS],
  ["H100 (114 SMs)", { ...H200_LIMITS, multiprocessors: 114 }],
  ["A100", { ...H200_LIMITS, ccMajor: 8, multiprocessors: 108 }],
  ["MI300X (wave 64)", { ...H200_LIMITS, ccMajor: 0, warpSize: 64, multiprocessors: 304 }],
];
const DS = [...AUDIT_DS, 262_144];

test("planNormInvariant: one geometry at every row count on each path, the prefill plan", () => {
  const pinned = { rms: 0, layer: 0 }, fused = { rms: 0, layer: 0 };
  for (const [dev, limits] of DEVICES) {
    const rows = probeRows(limits);
    assert.ok(rows.includes(1) && rows.includes(MAX_ROWS) && rows.length > 1000, `${dev}: ${rows.length} row counts`);
    for (const d of DS) {
      for (const [inputDtype, outputDtype, paramDtype] of TRIPLES) {
        for (const kind of ["rms", "layer"] as const) {
          const at = (n: number): PlanInput => ({ kind, rows: n, d, inputDtype, outputDtype, paramDtype });
          const what = `${dev} ${kind} D=${d} ${inputDtype}→${outputDtype} w ${paramDtype}`;
          const first = planNormInvariant(at(1), limits);
          if (first === null) {
            // Only where the prefill plan is not `rows` or `block`, or its vector path is the tile.
            const prefill = planNorm(at(INVARIANT_RULE_ROWS), limits);
            assert.ok("plan" in prefill, what);
            const p = prefill.plan;
            assert.ok(
              (p.mapping !== "rows" && p.mapping !== "block") || reductionGeometry(at(1), p, true).family === "tile",
              `${what}: ${p.kernel} ${p.fullKernel}`,
            );
            for (const n of rows) assert.equal(planNormInvariant(at(n), limits), null, `${what} rows=${n}`);
            fused[kind]++;
            continue;
          }
          assert.ok("plan" in first, `${what}: ${JSON.stringify(first)}`);
          const p1 = first.plan;
          assert.ok(p1.mapping === "rows" || p1.mapping === "block", `${what}: ${p1.mapping}`);
          const vector = reductionGeometry(at(1), p1, true), masked = reductionGeometry(at(1), p1, false);
          if (kind === "rms") {
            assert.ok(sameReduction(vector, masked), `${what}: the vector and the masked path sum alike`);
          }
          assert.deepEqual([vector.sharedDecision, masked.sharedDecision], [1, 1], `${what}: each row decides alone`);
          for (const n of rows) {
            const r = planNormInvariant(at(n), limits);
            assert.ok(r !== null && "plan" in r, `${what} rows=${n}`);
            const p = r.plan;
            assert.deepEqual(
              [p.kernel, p.mapping, p.tpr, p.nv, p.block, p.sharedBytes, p.cluster, p.fullKernel],
              [p1.kernel, p1.mapping, p1.tpr, p1.nv, p1.block, p1.sharedBytes, p1.cluster, p1.fullKernel],
              `${what}: rows=${n} against 1`,
            );
            // The grid strides over the rows: every row has a block (block) or a group of a block (`rows`).
            const perBlock = p.mapping === "rows" ? p.block[0] / p.tpr : 1;
            assert.equal(p.grid[0], Math.min(Math.ceil(n / perBlock), limits.maxGridX), `${what} rows=${n}: grid`);
          }
          // From 2 rows per SM on (past the latency mapping), the plain norm's own plan: invariance costs nothing.
          // LayerNorm rows of fewer lanes than a warp: the same launch on the two-pass kernel.
          const twoPass = kind === "layer" && p1.mapping === "rows" && p1.tpr < limits.warpSize;
          assert.equal(p1.kernel.startsWith("nk_ln_rowstwopass_"), twoPass, `${what}: ${p1.kernel}`);
          for (const n of rows.filter((n) => n > 2 * limits.multiprocessors)) {
            const tuned = planNorm(at(n), limits), inv = planNormInvariant(at(n), limits)!;
            assert.ok("plan" in tuned && "plan" in inv);
            const kernel = twoPass ? tuned.plan.kernel.replace("_rows_", "_rowstwopass_") : tuned.plan.kernel;
            assert.deepEqual(inv.plan, { ...tuned.plan, kernel }, `${what} rows=${n}: the prefill plan`);
          }
          pinned[kind]++;
        }
      }
    }
  }
  console.log(
    `# planNormInvariant: (device, D, dtypes) cases on the tuned kernels ${JSON.stringify(pinned)}, on the fused ones ${
      JSON.stringify(fused)
    }`,
  );
  assert.ok(pinned.rms > fused.rms, "most RMSNorm rows take the tuned kernels");
  assert.ok(pinned.layer > fused.layer, "most LayerNorm rows take the tuned kernels");
});

test("planNormInvariant on LayerNorm: the prefill plan; the two-pass kernel where rows share a warp; not the tile", () => {
  const at = (d: number, rows: number): PlanInput => ({
    kind: "layer",
    rows,
    d,
    inputDtype: "bf16",
    outputDtype: "bf16",
    paramDtype: "bf16",
  });
  const cases: [number, string, string | null][] = [
    [512, "nk_ln_rowstwopass_bf16_bf16_bf16", null], // 8 lanes a row: 4 rows a warp
    [768, "nk_ln_rowstwopass_bf16_bf16_bf16", null], // 16 lanes
    [2048, "nk_ln_rows_bf16_bf16_bf16", null], // a warp a row
    [4096, "nk_ln_block_bf16_bf16_bf16", "nk_ln_blockfull_bf16_bf16_bf16"],
  ];
  for (const rows of [1, 1000]) {
    assert.equal(planNormInvariant(at(128, rows), H200_LIMITS), null, "D 128: the tile");
    for (const [d, kernel, full] of cases) {
      const r = planNormInvariant(at(d, rows), H200_LIMITS);
      assert.ok(r !== null && "plan" in r, `D=${d}`);
      assert.deepEqual([r.plan.kernel, r.plan.fullKernel], [kernel, full], `D=${d} rows=${rows}`);
    }
  }
});

test("planNormInvariant refuses what planNorm refuses, with its reason", () => {
  const p: PlanInput = { kind: "rms", rows: 4, d: 1024, inputDtype: "f16", outputDtype: "f16", paramDtype: "bf16" };
  assert.deepEqual(planNormInvariant(p, H200_LIMITS), planNorm({ ...p, rows: INVARIANT_RULE_ROWS }, H200_LIMITS));
  assert.ok(!("plan" in planNormInvariant(p, H200_LIMITS)!));
});
