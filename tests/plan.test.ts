/** The pure launch-plan function (ops/plan.ts): kernel names, geometry, shared memory, unsupported cases. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { type LaunchPlan, type PlanInput, type PlanLimits, planNorm, type PlanResult } from "../ops/plan.ts";
import type { DType } from "../runtime/dtype.ts";

const H200: PlanLimits = { maxGridX: 2147483647, maxThreadsPerBlock: 1024, warpSize: 32 };
const f32 = { inputDtype: "f32", outputDtype: "f32" } as const;

function planOf(r: PlanResult): LaunchPlan {
  assert.ok("plan" in r, `expected a plan, got ${JSON.stringify(r)}`);
  return r.plan;
}

function unsupportedOf(r: PlanResult): string {
  assert.ok("unsupported" in r, `expected unsupported, got ${JSON.stringify(r)}`);
  assert.equal(typeof r.unsupported, "string");
  assert.ok(r.unsupported.length > 15, `a sentence, got "${r.unsupported}"`);
  return r.unsupported;
}

test("kernel names: layer → ln_fwd_f32_simple, rms → rms_fwd_f32_simple", () => {
  assert.equal(planOf(planNorm({ kind: "layer", rows: 4, d: 768, ...f32 }, H200)).kernel, "ln_fwd_f32_simple");
  assert.equal(planOf(planNorm({ kind: "rms", rows: 4, d: 768, ...f32 }, H200)).kernel, "rms_fwd_f32_simple");
});

test("block is 256 threads, shared bytes = (block / warp) * 8, one block per row", () => {
  for (const kind of ["layer", "rms"] as const) {
    for (const [rows, d] of [[1, 1], [7, 1000], [4096, 8192], [3, 262144]]) {
      const p = planOf(planNorm({ kind, rows, d, ...f32 }, H200));
      assert.deepEqual(p.block, [256, 1, 1]);
      assert.equal(p.sharedBytes, (256 / 32) * 8);
      assert.equal(p.sharedBytes, 64);
      assert.deepEqual(p.grid, [rows, 1, 1]);
    }
  }
});

test("shared bytes follow the warp size (64-wide warps: 32 bytes) and the block follows small thread limits", () => {
  const wide = planOf(planNorm({ kind: "layer", rows: 2, d: 64, ...f32 }, { ...H200, warpSize: 64 }));
  assert.deepEqual(wide.block, [256, 1, 1]);
  assert.equal(wide.sharedBytes, (256 / 64) * 8);
  const small = planOf(planNorm({ kind: "rms", rows: 2, d: 64, ...f32 }, { ...H200, maxThreadsPerBlock: 128 }));
  assert.deepEqual(small.block, [128, 1, 1], "never more threads than the device allows");
  assert.equal(small.sharedBytes, (128 / 32) * 8);
});

test("grid is clamped to maxGridX when rows exceed it (rows are grid-strided)", () => {
  const limits = { ...H200, maxGridX: 65535 };
  assert.deepEqual(planOf(planNorm({ kind: "layer", rows: 65535, d: 32, ...f32 }, limits)).grid, [65535, 1, 1]);
  assert.deepEqual(planOf(planNorm({ kind: "layer", rows: 65536, d: 32, ...f32 }, limits)).grid, [65535, 1, 1]);
  assert.deepEqual(planOf(planNorm({ kind: "rms", rows: 10_000_000, d: 32, ...f32 }, limits)).grid, [65535, 1, 1]);
  assert.deepEqual(planOf(planNorm({ kind: "rms", rows: 65534, d: 32, ...f32 }, limits)).grid, [65534, 1, 1]);
});

test("f32 params are fine; f16/bf16 inputs, outputs or params are unsupported, with a sentence naming them", () => {
  assert.ok("plan" in planNorm({ kind: "layer", rows: 2, d: 8, ...f32, paramDtype: "f32" }, H200));
  const cases: [DType, DType, DType | undefined][] = [
    ["f16", "f32", undefined],
    ["bf16", "f32", undefined],
    ["f32", "f16", undefined],
    ["f32", "bf16", undefined],
    ["f32", "f32", "f16"],
    ["f32", "f32", "bf16"],
    ["f16", "f16", "f16"],
    ["bf16", "bf16", "f32"],
  ];
  for (const [inputDtype, outputDtype, paramDtype] of cases) {
    for (const kind of ["layer", "rms"] as const) {
      const msg = unsupportedOf(planNorm({ kind, rows: 2, d: 8, inputDtype, outputDtype, paramDtype }, H200));
      const bad = [inputDtype, outputDtype, paramDtype].find((t) => t !== undefined && t !== "f32")!;
      assert.ok(msg.includes(bad), `"${msg}" should name ${bad}`);
    }
  }
});

test("rows < 1 or d < 1 is unsupported (no launch of an empty grid)", () => {
  for (const [rows, d] of [[0, 8], [4, 0], [0, 0], [-1, 8]]) {
    for (const kind of ["layer", "rms"] as const) {
      const msg = unsupportedOf(planNorm({ kind, rows, d, ...f32 }, H200));
      assert.match(msg, /rows|d/);
    }
  }
});

test("pure: same input, same plan; inputs are not modified", () => {
  const input: PlanInput = Object.freeze({ kind: "layer", rows: 33, d: 4096, ...f32 });
  const limits: PlanLimits = Object.freeze({ ...H200 });
  const a = planNorm(input, limits);
  const b = planNorm(input, limits);
  assert.deepEqual(a, b);
  assert.notEqual(planOf(a).grid, planOf(b).grid, "each plan gets its own arrays");
  assert.deepEqual(input, { kind: "layer", rows: 33, d: 4096, ...f32 });
});
