/**
 * Kernel.activeClusters (cuOccupancyMaxActiveClusters, which sizes the forward and backward persistent cluster grids)
 * without a GPU: argument checks, the refusal before compute capability 9.0, the value handed through from
 * the driver, and the opt-in to more than 48 KiB of dynamic shared memory before it and Kernel.occupancy ask
 * the driver, against the fake CUDA driver of tests/fixtures/fake_cuda.ts; and which backward kernel, geometry and flags a
 * call launches (the staged variant where its rows qualify).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { FAKE_H200, fakeCudaDevice } from "../fixtures/fake_cuda.ts";
import { devicePlanBackward, NORM_BWD_ARGS } from "../../ops/backward.ts";
import { normKernel, planLimits } from "../../ops/kernels.ts";
import { planNorm } from "../../ops/plan.ts";
import { layerNorm, layerNormBackward, rmsNormBackward, type Tensor } from "../../mod.ts";
import { ffi } from "../../ffi/runtime.ts";
import { LaunchConfig } from "../../runtime/module.ts";
import { ArgumentError, DisposedError, GpuError, UnsupportedError } from "../../runtime/errors.ts";

const NAME = "nk_ln_bwd_cluster_bf16_bf16_bf16";

test("Kernel.activeClusters: the driver's count for 2–16 CTAs; other sizes are an ArgumentError naming cluster", async () => {
  const { dev } = await fakeCudaDevice(() => null);
  try {
    const k = normKernel(dev, NAME, NORM_BWD_ARGS);
    assert.equal(k.activeClusters(512, 48, 2), 66);
    assert.equal(k.activeClusters(512, 48, 8), 16);
    assert.equal(k.activeClusters(512, 48, 16), 8);
    for (const bad of [1, 17, 2.5, 0]) {
      assert.throws(() => k.activeClusters(512, 48, bad), (e: unknown) => e instanceof ArgumentError && /cluster/.test(e.message));
    }
  } finally {
    dev.close();
  }
});

test("Kernel.activeClusters and occupancy opt in to more than 48 KiB of dynamic shared memory before asking the driver", async () => {
  // Without the opt-in the driver counts a launch that cannot run (0): a persistent grid sized from it is one
  // cluster on the first call and the real size on the next (another parameter-sum order, other bits).
  const calls: string[] = [];
  const { dev, driver } = await fakeCudaDevice(() => null);
  const raw = driver as unknown as Record<string, unknown>;
  raw.setKernelMaxDynamicShared = (_fn: bigint, bytes: number) => calls.push(`optin ${bytes}`);
  raw.activeClusters = (_fn: bigint, _t: number, shared: number) => (calls.push(`clusters ${shared}`), 7);
  raw.occupancy = (_fn: bigint, _t: number, shared: number) => (calls.push(`occupancy ${shared}`), 1);
  try {
    const k = normKernel(dev, NAME, NORM_BWD_ARGS);
    assert.equal(k.activeClusters(512, 1000, 2), 7); // under 48 KiB: no opt-in
    assert.equal(k.activeClusters(512, 100_000, 2), 7);
    assert.equal(k.activeClusters(512, 90_000, 2), 7); // already opted in to more
    assert.equal(k.occupancy(256, 150_000), 1);
    assert.deepEqual(calls, ["clusters 1000", "optin 100000", "clusters 100000", "clusters 90000", "optin 150000", "occupancy 150000"]);
  } finally {
    dev.close();
  }
});

test("clusters above 8 CTAs: the kernel opts in to non-portable sizes once, before the query or launch that needs it", async () => {
  const calls: string[] = [];
  const { dev, driver, made } = await fakeCudaDevice((d) => d.stream, { record: true });
  const raw = driver as unknown as Record<string, unknown>;
  raw.allowNonPortableClusters = () => calls.push("non-portable");
  raw.activeClusters = (_fn: bigint, _t: number, _s: number, c: number) => (calls.push(`clusters ${c}`), 1);
  const launchEx = raw.launchEx as (...a: unknown[]) => void;
  raw.launchEx = (...a: unknown[]) => (calls.push(`launch ${a[10]}`), launchEx(...a));
  try {
    const k = normKernel(dev, NAME, NORM_BWD_ARGS);
    k.activeClusters(512, 48, 8); // portable: no opt-in
    k.activeClusters(512, 48, 16);
    k.activeClusters(512, 48, 16);
    assert.deepEqual(calls, ["clusters 8", "non-portable", "clusters 16", "clusters 16"]);
    const k2 = normKernel(dev, "nk_rms_bwd_cluster_f32_f32_f32", NORM_BWD_ARGS);
    calls.length = 0;
    const zeros = Array.from({ length: NORM_BWD_ARGS.length }, (_, i) => (NORM_BWD_ARGS[i] === "ptr" ? null : 0));
    k2.launch(made, new LaunchConfig({ grid: [32, 1, 1], block: [352, 1, 1], cluster: 16 }), zeros as never);
    k2.launch(made, new LaunchConfig({ grid: [32, 1, 1], block: [352, 1, 1], cluster: 16 }), zeros as never);
    assert.deepEqual(calls, ["non-portable", "launch 16", "launch 16"]);
  } finally {
    dev.close();
  }
  assert.throws(() => new LaunchConfig({ grid: 17, block: 32, cluster: 17 }), (e: unknown) => e instanceof ArgumentError && /1–16/.test(e.message));
});

test("backward: a plan of 16-CTA clusters the GPU cannot hold (0 resident) falls back to the portable plan", async () => {
  // LayerNorm f32 D = 131072: 16 CTAs on the fake H200; with the driver answering 0 clusters of 16, `split`.
  const input = { kind: "layer", d: 131072, xDtype: "f32", dyDtype: "f32", weightDtype: "f32", paramGrads: true } as const;
  // "refused": the driver fails the query (or the opt-in before it) with a GpuError.
  for (const [resident16, mapping, cluster] of [[8, "cluster", 16], [0, "split", 1], ["refused", "split", 1]] as const) {
    const { dev, driver } = await fakeCudaDevice(() => null);
    const raw = driver as unknown as Record<string, unknown>;
    let queries = 0;
    raw.activeClusters = (_fn: bigint, _t: number, _s: number, c: number) => {
      queries++;
      if (c === 16 && resident16 === "refused") throw new GpuError("cuda", "cuOccupancyMaxActiveClusters", 1, "CUDA_ERROR_INVALID_VALUE", "refused");
      return c === 16 ? resident16 : 4;
    };
    try {
      for (let i = 0; i < 3; i++) {
        const r = devicePlanBackward(dev, input);
        assert.ok("plan" in r);
        assert.deepEqual([r.plan.mapping, r.plan.cluster], [mapping, cluster], `resident ${resident16}`);
        // Its staged variant (16 CTAs too, its own kernel) is kept only where its clusters fit as well.
        assert.equal(r.plan.staged?.cluster, resident16 === 8 ? 16 : undefined, `staged, resident ${resident16}`);
      }
      // One driver query per kernel and geometry, whatever the number of calls: the staged variant in its own geometry
      // (16 × 416, lnF32Staged) and the plan's kernel; where that variant does not fit, also the staged kernel in the
      // plan's geometry (16 × 512).
      assert.equal(queries, resident16 === 8 ? 2 : 3, "one driver query per kernel and geometry");
    } finally {
      dev.close();
    }
  }
});

test("Kernel.activeClusters: refused with UnsupportedError before compute capability 9.0, and once the module is closed", async () => {
  const a100 = { ...FAKE_H200, name: "fake A100", arch: "sm_80", computeCapability: [8, 0] as [number, number], multiprocessors: 108 };
  const { dev } = await fakeCudaDevice(() => null, { info: a100 });
  try {
    const k = normKernel(dev, NAME, NORM_BWD_ARGS);
    assert.throws(() => k.activeClusters(256, 0, 2), (e: unknown) => e instanceof UnsupportedError && /9\.0/.test(e.message));
    k.module.close();
    assert.throws(() => k.activeClusters(256, 0, 2), DisposedError);
  } finally {
    dev.close();
  }
});

test("forward `cluster` plans launch min(plan clusters, resident clusters) × C CTAs (fake H200)", async () => {
  // LayerNorm bf16 D = 131072 (256 KB rows): a cluster of 8 CTAs per row, its vector-only kernel here (aligned
  // rows). The fake driver says 132 / 8 - 1 = 15 clusters of that kernel are resident: 2048 rows launch 15 clusters
  // (each loops over rows), 5 rows launch 5.
  for (const [rows, clusters] of [[2048, 15], [5, 5]]) {
    const { dev, made, launches } = await fakeCudaDevice((d) => ({
      x: d.empty([rows, 131072], { dtype: "bf16" }),
      y: d.empty([rows, 131072], { dtype: "bf16" }),
    }), { record: true });
    try {
      layerNorm(made.x, { out: made.y });
      layerNorm(made.x, { out: made.y }); // a cached plan: the same grid
      assert.equal(launches.length, 2);
      for (const l of launches) {
        assert.deepEqual([l.kernel, l.grid[0], l.cluster, l.block[0]], ["nk_ln_clusterfull_bf16_bf16_f32", clusters * 8, 8, 256], `rows ${rows}`);
      }
      const p = planNorm({ kind: "layer", rows, d: 131072, inputDtype: "bf16", outputDtype: "bf16" }, planLimits(dev));
      assert.ok("plan" in p && p.plan.mapping === "cluster" && p.plan.grid[0] === rows * 8, "the plan: a cluster per row");
    } finally {
      dev.close();
    }
  }
});

test("backward on the fake H200: qualifying calls launch the plan's staged kernel, geometry and flags; others the register kernel", async () => {
  // The launches of layerNormBackward / rmsNormBackward: kernel, cluster, block, and flags, the last of the 15 parameters (NORM_BWD_ARGS; each in an 8-byte slot): bit 0 the L2 prefetch, bits 4..7 the
  // staged rows (NK_BWD_STAGES_SHIFT), read from the parameter array at launch time.
  const flagsOf = (params: bigint): number => {
    const slots = new BigUint64Array(ffi!.viewMemory(params, 15 * 8).slice(0));
    return new DataView(ffi!.viewMemory(slots[14], 4).slice(0)).getInt32(0, true);
  };
  const cases = [
    // LN f32 D = 65536: 8 CTAs; staged (416 threads × 5 chunks, lnF32Staged) with aligned rows, the register kernel
    // (512 × 4) with padded rows.
    { d: 65536, kind: "layer", pad: 0, want: ["nk_ln_bwd_clusterstaged_f32_f32_f32", 8, 416] },
    { d: 65536, kind: "layer", pad: 1, want: ["nk_ln_bwd_cluster_f32_f32_f32", 8, 512] },
    // LN f32 D = 32768: the plan's 4 × 512 register clusters; staged in 4 × 416.
    { d: 32768, kind: "layer", pad: 0, want: ["nk_ln_bwd_clusterstaged_f32_f32_f32", 4, 416] },
    { d: 32768, kind: "layer", pad: 2, want: ["nk_ln_bwd_cluster_f32_f32_f32", 4, 512] }, // rows 8 bytes off 16
    // RMS f32 D = 8192: one-row blocks, never staged.
    { d: 8192, kind: "rms", pad: 0, want: ["nk_rms_bwd_cached_f32_f32_f32", 1, 352] },
  ] as const;
  for (const c of cases) {
    const rows = 6, stride = c.d + c.pad;
    const { dev, made, launches, driver } = await fakeCudaDevice((dv) => ({
      x: dv.empty([rows, c.d], { dtype: "f32", rowStride: stride }),
      dy: dv.empty([rows, c.d], { dtype: "f32", rowStride: stride }),
      dx: dv.empty([rows, c.d], { dtype: "f32", rowStride: stride }),
      rstd: dv.empty([rows], { dtype: "f32" }),
      mean: dv.empty([rows], { dtype: "f32" }),
    }), { record: true, snapshot: flagsOf });
    (driver as unknown as Record<string, unknown>).occupancy = () => 4; // one-row blocks size their grid from it
    try {
      // No weight or bias (no parameter sums, hence no workspace: the fake driver allocates nothing) and dx given.
      const m = made as { x: Tensor; dy: Tensor; dx: Tensor; rstd: Tensor; mean: Tensor };
      const opts = { rstd: m.rstd, dx: m.dx };
      if (c.kind === "layer") layerNormBackward(m.dy, m.x, { ...opts, mean: m.mean });
      else rmsNormBackward(m.dy, m.x, opts);
      const k = launches.find((l) => l.kernel.includes("_bwd_") && !l.kernel.includes("finalize"));
      assert.ok(k, `d ${c.d}: a backward launch`);
      assert.deepEqual([k.kernel, k.cluster, k.block[0]], c.want, `d ${c.d} pad ${c.pad}`);
      const staged = k.kernel.includes("staged");
      // 2 rows in flight for the staged kernels (no prefetch bit: it is the register kernels'); none otherwise.
      assert.equal((k.args as number) >> 4, staged ? 2 : 0, `d ${c.d} pad ${c.pad}: staged rows in flags`);
      // Shared memory: the staged variant's (its stages) or the register plan's.
      const plan = devicePlanBackward(dev, { kind: c.kind, d: c.d, xDtype: "f32", dyDtype: "f32", paramGrads: false });
      assert.ok("plan" in plan);
      assert.equal(k.shared, staged ? plan.plan.staged!.sharedBytes : plan.plan.sharedBytes);
      if (staged) assert.ok(k.shared > plan.plan.sharedBytes + 2 * 2 * c.d * 4 / k.cluster, "two stages of x and dy slices");
    } finally {
      dev.close();
    }
  }
});

test("backward: a staged variant of 16 CTAs the GPU cannot hold falls back to staging in the plan's own geometry", async () => {
  // RMS bf16 D = 65536: 4 × 512 register clusters, staged in 16 × 128 (smallStagedCtas); with no cluster of 16 resident,
  // staged in 4 × 512. LN f32 D = 131072: 16 × 512 register clusters, staged in 16 × 416 (lnF32Staged); not resident:
  // `split`, unstaged (as before).
  for (const [kind, x, d, resident16, want] of [
    ["rms", "bf16", 65536, 8, [4, 512, 16, 128]], ["rms", "bf16", 65536, 0, [4, 512, 4, 512]],
    ["layer", "f32", 131072, 8, [16, 512, 16, 416]], ["layer", "f32", 131072, 0, [1, 256, undefined, undefined]],
  ] as const) {
    const { dev, driver } = await fakeCudaDevice(() => null);
    (driver as unknown as Record<string, unknown>).activeClusters = (_fn: bigint, _t: number, _s: number, c: number) => (c === 16 ? resident16 : 4);
    try {
      const r = devicePlanBackward(dev, { kind, d, xDtype: x, dyDtype: x, weightDtype: x, paramGrads: true });
      assert.ok("plan" in r);
      const p = r.plan;
      assert.deepEqual([p.cluster, p.block, p.staged?.cluster, p.staged?.block], [...want], `d ${d}, ${resident16} resident`);
    } finally {
      dev.close();
    }
  }
});

test("backward: a staged variant in clusters of up to 8 CTAs the GPU cannot hold is dropped; the register plan stays", async () => {
  // A GPU that holds no cluster of 8 (the driver counts 0; register plans of up to 8 CTAs are not asked about): LN f32
  // D = 65536 keeps its 8 × 512 register clusters, unstaged (staged 8 × 416, then 8 × 512 in its own geometry: 2
  // queries); RMS bf16 D = 32768 its 2 × 512 (staged 8 × 128; the plan's own geometry does not stage: 1 query). Where
  // the GPU holds them, LN f32 keeps its staged 8 × 416 (1 query).
  const cases = [
    { kind: "layer", x: "f32", d: 65536, resident8: 0, want: [8, 512, undefined], queries: 2 },
    { kind: "rms", x: "bf16", d: 32768, resident8: 0, want: [2, 512, undefined], queries: 1 },
    { kind: "layer", x: "f32", d: 65536, resident8: 2, want: [8, 512, 416], queries: 1 },
  ] as const;
  for (const c of cases) {
    const { dev, driver } = await fakeCudaDevice(() => null);
    let queries = 0;
    (driver as unknown as Record<string, unknown>).activeClusters = (_fn: bigint, _t: number, _s: number, cl: number) => {
      queries++;
      return cl === 8 ? c.resident8 : 4;
    };
    try {
      for (let i = 0; i < 3; i++) {
        const r = devicePlanBackward(dev, { kind: c.kind, d: c.d, xDtype: c.x, dyDtype: c.x, weightDtype: c.x, paramGrads: true });
        assert.ok("plan" in r);
        assert.deepEqual([r.plan.cluster, r.plan.block, r.plan.staged?.block], [...c.want], `${c.kind} ${c.x} d ${c.d}, ${c.resident8} resident`);
      }
      assert.equal(queries, c.queries, `${c.kind} ${c.x} d ${c.d}: one driver query per kernel and geometry`);
    } finally {
      dev.close();
    }
  }
});
