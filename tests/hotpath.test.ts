/**
 * The hot path: a norm with `out`, called again with the same shape and dtypes, plans nothing, allocates
 * nothing (host-driver or device) and makes exactly one launch call.
 *
 * Without a GPU: the plan cache itself (ops/plan_cache.ts). With CUDA: the driver's allocating calls are
 * counted over 1000 calls of each norm (a positive control shows the counter sees allocations).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, layerNorm, rmsNorm } from "../mod.ts";
import { LaunchConfig } from "../gpu.ts";
import { cachedNormPlan, MAX_CACHED_PLANS, PlannedLaunch } from "../ops/plan_cache.ts";
import { type PlanInput, type PlanLimits, planNorm } from "../ops/plan.ts";
import type { Driver } from "../runtime/driver.ts";
import { gpuTest, randoms } from "./helpers.ts";

const H200: PlanLimits = { maxGridX: 2 ** 31 - 1, maxThreadsPerBlock: 1024, warpSize: 32, ccMajor: 9 };
const P: PlanInput = { kind: "rms", rows: 8, d: 4096, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "bf16" };

test("plan cache: one planning per problem; the same PlannedLaunch (and LaunchConfig) after that", () => {
  const cache = new Map<string, unknown>();
  let planned = 0;
  const limits = () => (planned++, H200);
  const first = cachedNormPlan(cache, P, limits);
  assert.ok(first instanceof PlannedLaunch);
  for (let i = 0; i < 1000; i++) assert.equal(cachedNormPlan(cache, { ...P }, limits), first);
  assert.equal(planned, 1, "limits (and planNorm) asked once");
  // The cached plan is exactly what planNorm says, and its LaunchConfig carries it.
  const fresh = planNorm(P, H200);
  assert.ok("plan" in fresh);
  assert.deepEqual(first.plan, fresh.plan);
  assert.ok(first.config instanceof LaunchConfig);
  assert.deepEqual([first.config.grid, first.config.block, first.config.sharedBytes, first.config.cluster],
    [fresh.plan.grid, fresh.plan.block, fresh.plan.sharedBytes, fresh.plan.cluster]);
});

test("plan cache: every part of the key matters", () => {
  const cache = new Map<string, unknown>();
  const limits = () => H200;
  const base = cachedNormPlan(cache, P, limits);
  const variants: PlanInput[] = [
    { ...P, kind: "layer" },
    { ...P, rows: 9 },
    { ...P, d: 4104 },
    { ...P, inputDtype: "f16", paramDtype: "f16" },
    { ...P, outputDtype: "f32" },
    { ...P, paramDtype: "f32" },
    { ...P, paramDtype: undefined },
  ];
  const seen = new Set([base]);
  for (const v of variants) {
    const got = cachedNormPlan(cache, v, limits);
    assert.ok(!seen.has(got), `a distinct entry for ${JSON.stringify(v)}`);
    seen.add(got);
    const want = planNorm(v, H200);
    assert.ok("plan" in want && got instanceof PlannedLaunch);
    assert.deepEqual(got.plan, want.plan);
  }
  // paramDtype undefined and "f32" plan the same kernel but are separate keys: harmless, and kept simple.
  assert.equal(cachedNormPlan(cache, { ...P, kind: "layer" }, limits), [...seen][1]);
});

test("plan cache: refusals are cached too, with planNorm's reason", () => {
  const cache = new Map<string, unknown>();
  let planned = 0;
  const bad: PlanInput = { ...P, inputDtype: "bf16", paramDtype: "f16" };
  const r1 = cachedNormPlan(cache, bad, () => (planned++, H200));
  const r2 = cachedNormPlan(cache, bad, () => (planned++, H200));
  assert.ok(!(r1 instanceof PlannedLaunch) && "unsupported" in r1);
  assert.equal(r1, r2);
  assert.equal(planned, 1);
  const want = planNorm(bad, H200);
  assert.ok("unsupported" in want);
  assert.equal(r1.unsupported, want.unsupported);
});

test(`plan cache: bounded at ${MAX_CACHED_PLANS} entries per device (many row counts do not grow it forever)`, () => {
  const cache = new Map<string, unknown>();
  for (let rows = 1; rows <= 3 * MAX_CACHED_PLANS; rows++) cachedNormPlan(cache, { ...P, rows }, () => H200);
  const plans = [...cache.values()][0] as Map<string, unknown>;
  assert.equal(cache.size, 1, "one cache entry on the device");
  assert.ok(plans.size >= 1 && plans.size <= MAX_CACHED_PLANS, `${plans.size} plans kept`);
  // The newest is still there.
  const last = cachedNormPlan(cache, { ...P, rows: 3 * MAX_CACHED_PLANS }, () => assert.fail("should be cached"));
  assert.ok(last instanceof PlannedLaunch);
});

test("CPU backend: norms work without touching the plan cache", () => {
  using dev = Device.open({ backend: "cpu" });
  using x = dev.tensor(randoms(2 * 16, 3), [2, 16]);
  using y = dev.empty([2, 16]);
  rmsNorm(x, { out: y });
  assert.equal(dev.cache.size, 0);
});

// ---- CUDA ---------------------------------------------------------------------------------------------

const COUNTED = ["memAlloc", "memFree", "hostAlloc", "hostFree", "moduleLoad", "moduleFunction", "streamCreate", "eventCreate",
  "streamSynchronize", "synchronize", "launch", "launchCluster"] as const;
type Counted = (typeof COUNTED)[number];

/** Counts calls of the driver's allocating (and synchronizing, launching) methods until restore(). */
function spy(driver: Driver): { counts: Record<Counted, number>; reset(): void; restore(): void } {
  const counts = Object.fromEntries(COUNTED.map((k) => [k, 0])) as Record<Counted, number>;
  const d = driver as unknown as Record<Counted, (...a: unknown[]) => unknown>;
  const originals = COUNTED.map((k) => [k, d[k]] as const);
  for (const [k, f] of originals) {
    d[k] = (...a: unknown[]) => {
      counts[k]++;
      return f.apply(driver, a);
    };
  }
  return {
    counts,
    reset: () => COUNTED.forEach((k) => (counts[k] = 0)),
    restore: () => originals.forEach(([k, f]) => (d[k] = f)),
  };
}

gpuTest("hot path: 1000 layerNorm + 1000 rmsNorm calls with out allocate nothing and launch once each", () => {
  using dev = Device.open({ backend: "cuda" });
  using stream = dev.createStream();
  const rows = 8, d = 4096;
  using x = dev.tensor(randoms(rows * d, 1, -2, 2), [rows, d], { dtype: "bf16" });
  using w = dev.tensor(randoms(d, 2, 0.5, 1.5), [d], { dtype: "bf16" });
  using b = dev.tensor(randoms(d, 3), [d], { dtype: "bf16" });
  using y = dev.empty([rows, d], { dtype: "bf16" });
  // Warm-up: module load, kernels, plans, the stream's first use.
  layerNorm(x, { weight: w, bias: b, out: y, stream });
  rmsNorm(x, { weight: w, out: y, stream });
  stream.synchronize();

  const s = spy(dev.activeDriver!);
  try {
    // Positive control: the counter sees what an allocating call does.
    rmsNorm(x, { weight: w, stream }).close();
    assert.equal(s.counts.memAlloc, 1, "a norm without out allocates its output once");
    assert.equal(s.counts.memFree, 1);
    s.reset();

    const free0 = dev.memoryInfo().free;
    for (let i = 0; i < 1000; i++) {
      layerNorm(x, { weight: w, bias: b, out: y, stream });
      rmsNorm(x, { weight: w, out: y, stream });
      if (i % 250 === 249) stream.synchronize(); // keep the queue short; counted below
    }
    stream.synchronize();
    const c = s.counts;
    console.log(`# driver calls over 2000 norms: ${JSON.stringify(c)}`);
    for (const k of ["memAlloc", "memFree", "hostAlloc", "hostFree", "moduleLoad", "moduleFunction", "streamCreate", "eventCreate", "synchronize"] as const) {
      assert.equal(c[k], 0, `${k} calls on the hot path`);
    }
    assert.equal(c.launch + c.launchCluster, 2000, "one launch per call");
    assert.equal(c.streamSynchronize, 5, "only the test's own synchronizations");
    assert.equal(dev.memoryInfo().free, free0, "device memory unchanged");
  } finally {
    s.restore();
  }
});

gpuTest("hot path: replaying a captured graph calls the driver once per replay and allocates nothing", () => {
  using dev = Device.open({ backend: "cuda" });
  using stream = dev.createStream();
  const rows = 1, d = 8192;
  using x = dev.tensor(randoms(rows * d, 4), [rows, d], { dtype: "bf16" });
  using y = dev.empty([rows, d], { dtype: "bf16" });
  rmsNorm(x, { out: y, stream });
  using graph = stream.capture(() => {
    for (let i = 0; i < 100; i++) rmsNorm(x, { out: y, stream });
  });
  using exec = graph.instantiate();
  exec.launch(stream);
  stream.synchronize();
  const driver = dev.activeDriver!;
  const s = spy(driver);
  let replays = 0;
  const g = driver.graphs!;
  const launch0 = g.launch;
  g.launch = (e, st) => (replays++, launch0(e, st));
  try {
    for (let i = 0; i < 100; i++) exec.launch(stream);
    stream.synchronize();
    assert.equal(replays, 100);
    assert.equal(s.counts.memAlloc + s.counts.hostAlloc + s.counts.moduleLoad + s.counts.launch + s.counts.launchCluster, 0);
  } finally {
    g.launch = launch0;
    s.restore();
  }
});
