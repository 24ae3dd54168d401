// The sanitizer's case selection (scripts/sanitize_cases.ts) covers every plan-table id and kernel the forward and
// backward plans reach on an H200, at sizes the sanitizer can afford.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  coveredKernels,
  coveredTags,
  fusedCases,
  h200Limits,
  MAX_X_BYTES,
  planUnits,
  runBackward,
  runDiag,
  runForward,
  selectCases,
  TRIPLES,
  worst,
} from "../../scripts/sanitize_cases.ts";
import { Device } from "../../mod.ts";
import { FUSED_KERNELS, fusedGeometry, fusedKernelFor } from "../../ops/plan_fused.ts";

/** The limits of the GPUs the sanitizer runs on (H100 and H200: 132 SMs). */
const H100 = { maxThreadsPerBlock: 1024, warpSize: 32, multiprocessors: 132 };
import { CLUSTER_GEOMETRIES, MAPPING_RULES, VARIANTS } from "../../ops/plan.ts";
import { BWD_CLUSTER_SIZES, BWD_MAPPING_RULES, STAGED_GEOMETRIES } from "../../ops/plan_bwd.ts";

const lim = h200Limits();
const ROWS = [1, 2, 8, 64, 132, 200, 264, 265, 300, 1024, 4096, 65536];
const DS = [
  1,
  7,
  16,
  32,
  64,
  100,
  128,
  256,
  512,
  1000,
  1024,
  2048,
  4096,
  5120,
  8192,
  12288,
  16384,
  20480,
  24576,
  32768,
  33280,
  40960,
  49152,
  65536,
  66560,
  98304,
  131072,
  140000,
  200000,
  262144,
];

/** What the plans reach over a wide scan of the shapes a norm accepts (D ≤ MAX_D), per family. */
function reachable(family: "fwd" | "bwd"): { tags: Set<string>; kernels: Set<string> } {
  const tags = new Set<string>(), kernels = new Set<string>();
  for (const kind of ["layer", "rms"] as const) {
    for (const t of TRIPLES) {
      for (const affine of [true, false]) {
        for (const rows of family === "fwd" ? ROWS : [8]) {
          for (const d of DS) {
            const u = planUnits(family, kind, rows, d, t, affine, lim);
            u?.tags.forEach((x) => tags.add(x));
            u?.kernels.forEach((x) => kernels.add(x));
          }
        }
      }
    }
  }
  return { tags, kernels };
}

const tableIds = new Set([
  ...MAPPING_RULES.map((r) => r.id),
  ...CLUSTER_GEOMETRIES.map((r) => r.id),
  ...VARIANTS.map((r) => r.id),
  ...BWD_MAPPING_RULES.map((r) => r.id),
  ...BWD_CLUSTER_SIZES.map((r) => r.id),
  ...STAGED_GEOMETRIES.map((r) => r.id),
]);

for (const family of ["fwd", "bwd"] as const) {
  test(`sanitize cases: every ${family} mapping and kernel the H200 plans reach is launched`, () => {
    const cases = selectCases(family, lim.fwd, lim.bwd);
    const { tags, kernels } = reachable(family);
    // Every mapping of the tables shows up in the scan (so the scan is wide enough to mean something).
    const mappings = family === "fwd"
      ? MAPPING_RULES.map((r) => `fwd.${r.mapping}`)
      : BWD_MAPPING_RULES.map((r) => r.id);
    for (const m of mappings) assert.ok(tags.has(m), `${m} reached by the scan`);
    for (const t of tags) assert.ok(tableIds.has(t), `${t} is a plan-table id`);
    const gotTags = new Set(coveredTags(cases)), gotKernels = new Set(coveredKernels(cases));
    assert.deepEqual([...tags].filter((t) => !gotTags.has(t)), [], "plan ids the cases miss");
    assert.deepEqual([...kernels].filter((k) => !gotKernels.has(k)), [], "kernels the cases miss");
    for (const c of cases) {
      assert.ok(
        c.rows * c.d * (c.triple[0] === "f32" ? 4 : 2) <= MAX_X_BYTES,
        `${c.rows} × ${c.d} within the size limit`,
      );
    }
    // Odd D (the masked tail) and both kinds are among the cases.
    assert.ok(
      cases.some((c) => c.d % 2 === 1 && c.kind === "layer") && cases.some((c) => c.d % 2 === 1 && c.kind === "rms"),
    );
  });
}

test("sanitize cases: the variants and geometries an H200 reaches are the expected ones", () => {
  const fwd = coveredTags(selectCases("fwd", lim.fwd, lim.bwd)),
    bwd = coveredTags(selectCases("bwd", lim.fwd, lim.bwd));
  for (const v of VARIANTS) assert.ok(fwd.includes(v.id), v.id);
  for (const c of BWD_CLUSTER_SIZES) assert.ok(bwd.includes(c.id), c.id);
  for (const g of STAGED_GEOMETRIES) assert.ok(bwd.includes(g.id), g.id);
  // Unreachable on an H200, by the tables: block takes every row a 2-CTA cluster would (chunks ≤ 4096), and
  // block-1024 / stash every row `wide-l2` would (≤ 128 KB).
  assert.ok(!fwd.includes("fwd.cluster-2") && !fwd.includes("fwd.wide-l2"));
});

test("sanitize cases: the result checks pass on the CPU backend and catch a wrong value", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const family of ["fwd", "bwd"] as const) {
    // The small cases (the CPU backend is a float64 loop): strided and aligned, odd D among them.
    const cases = selectCases(family, lim.fwd, lim.bwd).filter((c) => c.rows * c.d <= 40_000);
    assert.ok(cases.length >= 10 && cases.some((c) => c.d % 2 === 1), `${family}: ${cases.length} small cases`);
    for (const c of cases) {
      for (const strided of [false, true]) {
        const e = family === "fwd" ? runForward(dev, c, strided) : runBackward(dev, c, strided);
        assert.ok(e <= 1, `${family} ${c.kind} ${c.triple} [${c.rows}, ${c.d}] strided ${strided}: ${e} × tolerance`);
      }
    }
  }
  assert.equal(runDiag(dev), 0);
  // The comparison: within tolerance passes, a wrong value or a NaN does not.
  assert.ok(worst([1.00005], [1], "f32") <= 1);
  assert.ok(worst([1.001], [1], "f32") > 1);
  assert.equal(worst([NaN], [1], "bf16"), Infinity);
});

test("the fused family's cases reach every nk_fused_* kernel (every variant), each through the op's own choice", () => {
  const reached = new Set<string>();
  for (const c of fusedCases()) {
    const to = c.quant === "none" ? c.dtype : c.qdtype!;
    const tw = c.paramsOfX ? c.dtype : "f32";
    const g = fusedGeometry(c.kind, c.d, c.dtype, H100, c.rows, "cuda");
    assert.ok(!("unsupported" in g), JSON.stringify(c));
    const choice = fusedKernelFor(c.kind, c.dtype, to, tw, g, "cuda");
    assert.ok("kernel" in choice, JSON.stringify(c));
    reached.add(choice.kernel);
  }
  assert.deepEqual([...reached].sort(), [...FUSED_KERNELS].sort());
});
