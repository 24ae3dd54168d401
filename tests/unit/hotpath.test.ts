/**
 * The hot path: a norm with `out`, called again with the same shape and dtypes, plans nothing, allocates
 * nothing (host-driver or device) and makes exactly one launch call.
 *
 * Without a GPU: the plan cache itself (ops/plan_cache.ts). With CUDA: the driver's allocating calls are
 * counted over 1000 calls of each norm (a positive control shows the counter sees allocations).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { ArgumentError, Device, DisposedError, layerNorm, rmsNorm, Tensor } from "../../mod.ts";
import { Kernel, LaunchConfig, type Stream } from "../../gpu.ts";
import {
  cachedNormPlan,
  cachedPlanCount,
  lookupNormPlan,
  MAX_CACHED_PLANS,
  NO_INVARIANT_PLAN,
  PlannedLaunch,
} from "../../ops/plan_cache.ts";
import { planLimits } from "../../ops/kernels.ts";
import { ffi } from "../../ffi/runtime.ts";
import { fakeCudaDevice, type FakeLaunch } from "../fixtures/fake_cuda.ts";
import { type PlanInput, type PlanLimits, planNorm, stagedShared, stashShared } from "../../ops/plan.ts";
import type { Driver } from "../../runtime/driver.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

const H200: PlanLimits = {
  maxGridX: 2 ** 31 - 1,
  maxThreadsPerBlock: 1024,
  warpSize: 32,
  ccMajor: 9,
  multiprocessors: 132,
};
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
  assert.deepEqual([first.config.grid, first.config.block, first.config.sharedBytes, first.config.cluster], [
    fresh.plan.grid,
    fresh.plan.block,
    fresh.plan.sharedBytes,
    fresh.plan.cluster,
  ]);
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
  const kept = cachedPlanCount(cache);
  assert.equal(cache.size, 1, "one cache entry on the device");
  assert.ok(kept >= 1 && kept <= MAX_CACHED_PLANS, `${kept} plans kept`);
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

// ---- the GPU path over a fake CUDA driver (tests/fixtures/fake_cuda.ts): no GPU needed ------------------------

/** The 14 forward-kernel arguments (NORM_FWD_ARGS) read back from a parameter array (at launch time). */
function readArgs(params: bigint): (bigint | number)[] {
  const slots = new BigUint64Array(ffi!.viewMemory(params, 14 * 8).slice(0));
  const at = (i: number) => new DataView(ffi!.viewMemory(slots[i], 8).slice(0));
  const out: (bigint | number)[] = [];
  for (let i = 0; i < 6; i++) out.push(at(i).getBigUint64(0, true));
  out.push(
    at(6).getInt32(0, true),
    at(7).getInt32(0, true),
    Number(at(8).getBigInt64(0, true)),
    Number(at(9).getBigInt64(0, true)),
  );
  out.push(at(10).getFloat32(0, true), at(11).getInt32(0, true), at(12).getInt32(0, true), at(13).getInt32(0, true));
  return out;
}

/** Views at distinct offsets of one buffer (every pointer argument distinct and non-zero); x has padded rows. */
function fakeViews() {
  return fakeCudaDevice((dev) => {
    const rows = 8, d = 4096, xs = d + 8;
    const buf = dev.alloc(2 * (16 + rows * xs + rows * d + 3 * d));
    const view = (offset: number, shape: number[], rowStride?: number) =>
      new Tensor(buf, shape, { dtype: "bf16", offset, rowStride });
    let at = 16;
    const x = view(at, [rows, d], xs);
    const y = view(at += rows * xs, [rows, d]);
    const w = view(at += rows * d, [d]);
    const w2 = view(at += d, [d]);
    const b = view(at += d, [d]);
    return { s: dev.createStream(), x, y, w, w2, b, rows, d, buf };
  }, { record: true, snapshot: readArgs });
}

test("fake CUDA: a repeated call launches with exactly the arguments of a validated one, also after other calls", async () => {
  const { dev, made: m, launches } = await fakeViews();
  try {
    const want = (
      w: Tensor,
      b: Tensor | undefined,
      eps: number,
    ) => [m.x.ptr, m.y.ptr, w.ptr, b ? b.ptr : 0n, 0n, 0n, m.rows, m.d, m.x.rowStride, m.y.rowStride, Math.fround(eps)];
    const args = (i: number) => launches[i].args as (bigint | number)[];
    rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
    assert.equal(launches.length, 1);
    assert.deepEqual(args(0).slice(0, 11), want(m.w, undefined, 1e-6));
    assert.ok(m.x.ptr !== 0n && m.x.ptr !== m.y.ptr && m.w.ptr !== m.w2.ptr && m.x.rowStride !== m.y.rowStride);
    for (let i = 0; i < 3; i++) rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
    assert.deepEqual(args(3), args(0), "the repeated call's block");
    // Other calls in between (another weight; layerNorm with its own eps), then back.
    rmsNorm(m.x, { weight: m.w2, out: m.y, stream: m.s });
    assert.deepEqual(args(4).slice(0, 11), want(m.w2, undefined, 1e-6));
    layerNorm(m.x, { weight: m.w, bias: m.b, out: m.y, stream: m.s, eps: 1e-3 });
    assert.deepEqual(args(5).slice(0, 11), want(m.w, m.b, 1e-3));
    rmsNorm(m.x, { weight: m.w2, out: m.y, stream: m.s });
    rmsNorm(m.x, { weight: m.w2, out: m.y, stream: m.s });
    assert.deepEqual(args(7), args(4));
    // Each validated call repeats from a block of its own (written on its first repeat): taking turns rewrites nothing.
    assert.notEqual(launches[7].params, launches[3].params, "w2's repeats and w's repeats launch different blocks");
    assert.equal(launches[7].params, launches[6].params);
    assert.notEqual(
      launches[6].params,
      launches[4].params,
      "the full validation launched from the kernel's block, the repeat from its own",
    );
    rmsNorm(m.x, { weight: m.w2, out: m.y, stream: m.s, eps: 1e-2 });
    assert.deepEqual(args(8).slice(0, 11), want(m.w2, undefined, 1e-2));
    layerNorm(m.x, { weight: m.w, bias: m.b, out: m.y, stream: m.s, eps: 1e-3 });
    assert.deepEqual(args(9), args(5));
    const geometry = (l: FakeLaunch) => [l.fn, l.grid, l.block, l.shared, l.cluster, l.stream];
    assert.deepEqual(geometry(launches[7]), geometry(launches[0]));
    // Someone else launching the same prepared kernel (the public Kernel.launch) writes the kernel's own block;
    // the repeats launch their own blocks, which it leaves as they were.
    const planned = cachedNormPlan(dev.cache, {
      kind: "layer",
      rows: m.rows,
      d: m.d,
      inputDtype: "bf16",
      outputDtype: "bf16",
      paramDtype: "bf16",
    }, () => assert.fail("cached"));
    assert.ok(planned instanceof PlannedLaunch);
    const k = planned.kernel(dev);
    k.launch(m.s, planned.config, [m.y, m.x, null, null, null, null, 1, 2, 3, 4, 0.5, 1, 1, 0]);
    assert.deepEqual(args(10).slice(0, 11), [m.y.ptr, m.x.ptr, 0n, 0n, 0n, 0n, 1, 2, 3, 4, 0.5]);
    layerNorm(m.x, { weight: m.w, bias: m.b, out: m.y, stream: m.s, eps: 1e-3 });
    assert.deepEqual(args(11), args(5));
    assert.equal(launches[11].params, launches[9].params, "the repeat's own block, as before the other launch");
    assert.notEqual(launches[11].params, launches[10].params, "not the kernel's block that Kernel.launch wrote");
    // 1000 repeats: one launch each and no other driver call (the strict fake fails on any other call).
    for (let i = 0; i < 1000; i++) layerNorm(m.x, { weight: m.w, bias: m.b, out: m.y, stream: m.s });
    assert.equal(launches.length, 1012);
    assert.deepEqual(args(1011).slice(0, 11), want(m.w, m.b, 1e-5));
  } finally {
    dev.close();
  }
});

test("fake CUDA: the plan's prefetch distance reaches the kernel (argument 13), on the first call and its repeats", async () => {
  // 300 rows of 4096 bf16 on the fake H200: the `block` mapping with rows ahead to prefetch (ops/plan.ts).
  const f = await fakeCudaDevice((d) => ({
    s: d.createStream(),
    x: d.empty([300, 4096], { dtype: "bf16" }),
    y: d.empty([300, 4096], { dtype: "bf16" }),
    w: d.empty([4096], { dtype: "bf16" }),
  }), { record: true, snapshot: readArgs });
  try {
    const m = f.made;
    const p = planNorm(
      { kind: "rms", rows: 300, d: 4096, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "bf16" },
      planLimits(f.dev),
    );
    assert.ok("plan" in p);
    assert.equal(p.plan.mapping, "block");
    assert.equal(p.plan.prefetch, 256, "2 MiB of 8 KiB rows");
    for (let i = 0; i < 3; i++) rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
    const args = f.launches.map((l) => l.args as (bigint | number)[]);
    assert.equal(args.length, 3);
    for (const a of args) assert.deepEqual(a.slice(11), [p.plan.tpr, p.plan.nv, 256], "tpr, nv, prefetch");
  } finally {
    f.dev.close();
  }
});

test("fake CUDA: LayerNorm's 128 KB rows launch blockfull with the weight/bias staging slots, opted in once; RMSNorm's without", async () => {
  // 140 rows (past one per SM on the fake H200) of 32768 f32: one 1024-thread block per row (ops/plan.ts).
  const f = await fakeCudaDevice((d) => ({
    s: d.createStream(),
    x: d.empty([140, 32768]),
    y: d.empty([140, 32768]),
    w: d.empty([32768]),
    b: d.empty([32768]),
  }), { record: true });
  const optIns: number[] = [];
  f.driver.setKernelMaxDynamicShared = (_fn, bytes) => void optIns.push(bytes);
  try {
    const m = f.made;
    for (let i = 0; i < 3; i++) layerNorm(m.x, { weight: m.w, bias: m.b, out: m.y, stream: m.s });
    for (const l of f.launches) {
      assert.deepEqual([l.kernel, l.block[0], l.shared], ["nk_ln_blockfull_f32_f32_f32", 1024, stagedShared(1024)]);
    }
    assert.equal(f.launches.length, 3);
    // Above the kernel's 48 KiB default the Kernel opts in before its first launch, and only then.
    assert.deepEqual(optIns, [stagedShared(1024)]);
    rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
    assert.deepEqual([f.launches[3].kernel, f.launches[3].shared], ["nk_rms_block_f32_f32_f32", 2 * 32 * 4]);
  } finally {
    f.dev.close();
  }
});

test("fake CUDA: 256 KB rows launch the stash kernel (one 1024-thread block per row, 8 chunks' slots per thread), opted in once", async () => {
  // 140 rows (past one per SM on the fake H200) of 65536 f32 (16 chunks per thread at 1024 threads; ops/plan.ts), and of
  // 131072 bf16 with bf16 weights; bf16 with f32 weights keeps the cluster (no stash kernel built for it).
  const f = await fakeCudaDevice((d) => ({
    s: d.createStream(),
    x: d.empty([140, 65536]),
    y: d.empty([140, 65536]),
    w: d.empty([65536]),
    b: d.empty([65536]),
    xh: d.empty([140, 131072], { dtype: "bf16" }),
    yh: d.empty([140, 131072], { dtype: "bf16" }),
    wh: d.empty([131072], { dtype: "bf16" }),
    wf: d.empty([131072]),
  }), { record: true });
  const optIns: number[] = [];
  f.driver.setKernelMaxDynamicShared = (_fn, bytes) => void optIns.push(bytes);
  try {
    const m = f.made;
    const slots = stashShared(1024, 16);
    assert.equal(slots, 256 + 8 * 1024 * 16);
    for (let i = 0; i < 2; i++) layerNorm(m.x, { weight: m.w, bias: m.b, out: m.y, stream: m.s });
    rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
    rmsNorm(m.xh, { weight: m.wh, out: m.yh, stream: m.s });
    const got = f.launches.map((l) => [l.kernel, l.grid[0], l.block[0], l.shared, l.cluster]);
    assert.deepEqual(got, [
      ["nk_ln_stash_f32_f32_f32", 140, 1024, slots, 1],
      ["nk_ln_stash_f32_f32_f32", 140, 1024, slots, 1],
      ["nk_rms_stash_f32_f32_f32", 140, 1024, slots, 1],
      ["nk_rms_stash_bf16_bf16_bf16", 140, 1024, slots, 1],
    ]);
    assert.deepEqual(optIns, [slots, slots, slots], "each kernel opts in before its first launch, and only then");
    rmsNorm(m.xh, { weight: m.wf, out: m.yh, stream: m.s });
    assert.deepEqual([f.launches[4].kernel, f.launches[4].cluster], ["nk_rms_cluster_bf16_bf16_f32", 8]);
  } finally {
    f.dev.close();
  }
});

test("fake CUDA: the op launches the vector-only kernel (LN blockfull, clusterfull; LN and RMS rowstile) exactly when every row qualifies", async () => {
  // CPU buffers start at address 0 in the fake: a view's address is its byte offset.
  const f = await fakeCudaDevice((d) => {
    const buf = d.alloc(2 * (300 * 4104 + 16));
    const t = (offset: number, shape: number[], rowStride?: number) =>
      new Tensor(buf, shape, { dtype: "bf16", offset, rowStride });
    return {
      s: d.createStream(),
      x: t(0, [300, 4096]), // block: 300 rows of 4096
      xOdd: t(1, [300, 4096]), // 2-byte aligned
      xPad: t(0, [300, 4096], 4100), // rows 8200 bytes apart: row 1 not 16-byte aligned
      x4100: t(0, [300, 4100]), // D not a multiple of the 8-element chunk
      w: d.empty([4096], { dtype: "bf16" }),
      y: d.empty([300, 4096], { dtype: "bf16" }),
      y4100: d.empty([300, 4100], { dtype: "bf16" }),
      xc: d.empty([264, 131072], { dtype: "bf16" }), // cluster: rows past 128 KB
      yc: d.empty([264, 131072], { dtype: "bf16" }),
      xcOdd: new Tensor(d.alloc(2 * (264 * 131072 + 8)), [264, 131072], { dtype: "bf16", offset: 1 }),
      xr: d.empty([3000, 128], { dtype: "bf16" }), // rows: the tile where aligned
      yr: d.empty([3000, 128], { dtype: "bf16" }),
      xrOdd: new Tensor(d.alloc(2 * (3000 * 128 + 8)), [3000, 128], { dtype: "bf16", offset: 1 }),
      x8: d.empty([3000, 8], { dtype: "bf16" }),
      y8: d.empty([3000, 8], { dtype: "bf16" }),
      x8Odd: new Tensor(d.alloc(2 * (3000 * 8 + 8)), [3000, 8], { dtype: "bf16", offset: 1 }),
    };
  }, { record: true });
  try {
    const m = f.made;
    const last = () => f.launches[f.launches.length - 1];
    layerNorm(m.x, { weight: m.w, bias: m.w, out: m.y, stream: m.s });
    assert.equal(last().kernel, "nk_ln_blockfull_bf16_bf16_bf16");
    // The first use loads both variants: a later call with other alignments (e.g. inside a graph capture) loads nothing.
    for (const name of ["nk_ln_block_bf16_bf16_bf16", "nk_ln_blockfull_bf16_bf16_bf16"]) {
      assert.ok(f.dev.cache.has(`normkit.norm.kernel.${name}`), `${name} loaded`);
    }
    for (let i = 0; i < 3; i++) layerNorm(m.x, { weight: m.w, bias: m.w, out: m.y, stream: m.s });
    assert.equal(last().kernel, "nk_ln_blockfull_bf16_bf16_bf16", "the repeated call");
    const full = last();
    layerNorm(m.xOdd, { weight: m.w, out: m.y, stream: m.s });
    assert.equal(last().kernel, "nk_ln_block_bf16_bf16_bf16", "x at 2 bytes");
    const masked = last();
    assert.deepEqual(
      [masked.grid, masked.block, masked.shared],
      [full.grid, full.block, full.shared],
      "the same geometry",
    );
    layerNorm(m.xPad, { weight: m.w, out: m.y, stream: m.s });
    assert.equal(last().kernel, "nk_ln_block_bf16_bf16_bf16", "x stride of 8200 bytes");
    layerNorm(m.x4100, { out: m.y4100, stream: m.s });
    assert.equal(last().kernel, "nk_ln_block_bf16_bf16_f32", "D = 4100");
    layerNorm(m.x, {
      weight: m.w,
      bias: new Tensor(m.x.buffer, [4096], { dtype: "bf16", offset: 4 }),
      out: m.y,
      stream: m.s,
    });
    assert.equal(last().kernel, "nk_ln_block_bf16_bf16_bf16", "bias at 8 bytes");
    layerNorm(m.x, { out: m.x, stream: m.s });
    assert.equal(last().kernel, "nk_ln_blockfull_bf16_bf16_f32", "in place, no parameters");
    rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
    assert.equal(last().kernel, "nk_rms_block_bf16_bf16_bf16", "RMSNorm's block has none");
    // Each variant's grid: as many clusters as the fake says are resident for it (one fewer for `*full` kernels).
    layerNorm(m.xc, { out: m.yc, stream: m.s });
    assert.equal(last().kernel, "nk_ln_clusterfull_bf16_bf16_f32");
    assert.deepEqual([last().cluster, last().grid[0]], [8, 8 * (Math.floor(132 / 8) - 1)]);
    layerNorm(m.xcOdd, { out: m.yc, stream: m.s });
    assert.equal(last().kernel, "nk_ln_cluster_bf16_bf16_f32");
    assert.deepEqual([last().cluster, last().grid[0]], [8, 8 * Math.floor(132 / 8)]);
    layerNorm(m.xc, { out: m.yc, stream: m.s });
    assert.deepEqual([last().kernel, last().grid[0]], [
      "nk_ln_clusterfull_bf16_bf16_f32",
      8 * (Math.floor(132 / 8) - 1),
    ]);
    // `rows`: the tile for aligned rows of 16 chunks on its own grid (2 steps of 64 rows per CTA: 3000 / 128 -> 24 CTAs),
    // the two-pass rows kernel otherwise (128 rows per CTA: 24 as well at this D), with the same blocks.
    layerNorm(m.xr, { out: m.yr, stream: m.s });
    const tile = last();
    assert.equal(tile.kernel, "nk_ln_rowstile_bf16_bf16_f32");
    assert.deepEqual([tile.grid[0], tile.block[0], tile.shared], [24, 256, 0]);
    layerNorm(m.xrOdd, { out: m.yr, stream: m.s });
    assert.equal(last().kernel, "nk_ln_rowstwopass_bf16_bf16_f32", "x at 2 bytes");
    assert.deepEqual([last().grid[0], last().block[0], last().shared], [24, 256, 0]);
    layerNorm(m.x8, { out: m.y8, stream: m.s });
    assert.deepEqual(
      [last().kernel, last().grid[0]],
      ["nk_ln_rowstile_bf16_bf16_f32", 2],
      "D = 8: 3000 / 2048 rows per CTA",
    );
    layerNorm(m.x8Odd, { out: m.y8, stream: m.s });
    assert.deepEqual(
      [last().kernel, last().grid[0]],
      ["nk_ln_rowstwopass_bf16_bf16_f32", 12],
      "the plan's grid: 3000 / 256",
    );
    // RMSNorm's rows have the tile up to D = 64 (TILE_MAX_D), on the same grid; its `rows` kernel otherwise.
    rmsNorm(m.x8, { weight: new Tensor(m.w.buffer, [8], { dtype: "bf16" }), out: m.y8, stream: m.s });
    assert.deepEqual(
      [last().kernel, last().grid[0], last().block[0]],
      ["nk_rms_rowstile_bf16_bf16_bf16", 2, 256],
      "RMSNorm D = 8",
    );
    rmsNorm(m.x8Odd, { out: m.y8, stream: m.s });
    assert.deepEqual(
      [last().kernel, last().grid[0]],
      ["nk_rms_rows_bf16_bf16_f32", 12],
      "RMSNorm D = 8, x at 2 bytes: 3000 / 256",
    );
    rmsNorm(m.xr, { out: m.yr, stream: m.s });
    assert.deepEqual(
      [last().kernel, last().grid[0]],
      ["nk_rms_rows_bf16_bf16_f32", 47],
      "RMSNorm D = 128: its rows plan, 4 lanes a row, 3000 / 64",
    );
  } finally {
    f.dev.close();
  }
});

test("fake CUDA: after a validated call, changed options are still refused before launch with the usual errors", async () => {
  const { dev, made: m, launches } = await fakeViews();
  try {
    const refused = (f: () => unknown, err: new (...a: never[]) => Error, re: RegExp) => {
      rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
      rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s });
      const n = launches.length;
      assert.throws(f, (e: unknown) => e instanceof err && re.test((e as Error).message), re.source);
      assert.equal(launches.length, n, `nothing launched for ${re.source}`);
    };
    refused(() => rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s, eps: -1 }), ArgumentError, /eps/);
    refused(() => rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s, eps: NaN }), ArgumentError, /eps/);
    refused(
      () => rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s, check: "yes" as unknown as boolean }),
      ArgumentError,
      /check/,
    );
    refused(() => rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s, outDtype: "f32" }), ArgumentError, /out\.dtype/);
    refused(() => rmsNorm(m.x, { weight: m.w, out: m.w, stream: m.s }), ArgumentError, /out/);
    refused(() => rmsNorm(m.x, { weight: m.w, out: m.y, stream: {} as Stream }), ArgumentError, /stream/);
    refused(() => rmsNorm(m.x, { weight: m.y, out: m.y, stream: m.s }), ArgumentError, /weight/);
    // A closed stream; the default stream closed is replaced by a fresh one and the call goes through.
    m.s.close();
    assert.throws(() => rmsNorm(m.x, { weight: m.w, out: m.y, stream: m.s }), DisposedError);
    rmsNorm(m.x, { weight: m.w, out: m.y });
    const n = launches.length;
    dev.stream.close();
    rmsNorm(m.x, { weight: m.w, out: m.y });
    assert.equal(launches.length, n + 1);
    // The buffer under every view closed: x first.
    m.buf.close();
    assert.throws(
      () => rmsNorm(m.x, { weight: m.w, out: m.y }),
      (e: unknown) => e instanceof DisposedError && /^x /.test(argName(e)),
    );
    assert.equal(launches.length, n + 1);
  } finally {
    dev.close();
  }
});

/** The part of a DisposedError message naming what was closed. */
function argName(e: unknown): string {
  return String((e as Error).message).replace(/^[^:]*:\s*/, "").replace(/^(the )?/, "");
}

test("fake CUDA: calls taking turns with several weights repeat each weight's validated call (right arguments, closures seen)", async () => {
  const f = await fakeCudaDevice((d) => ({
    s: d.createStream(),
    x: d.empty([4, 256], { dtype: "bf16" }),
    y: d.empty([4, 256], { dtype: "bf16" }),
    ws: Array.from({ length: 5 }, () => d.empty([256], { dtype: "bf16" })),
  }), { record: true, snapshot: readArgs });
  const m = f.made;
  // The full validation ends in Kernel.checkLaunch; a repeated call does not call it.
  const checkLaunch = Kernel.prototype.checkLaunch;
  let validated = 0;
  Kernel.prototype.checkLaunch = function (this: Kernel, ...a: Parameters<Kernel["checkLaunch"]>) {
    validated++;
    return checkLaunch.apply(this, a);
  };
  try {
    const weightArg = (i: number) => (f.launches[i].args as bigint[])[2];
    for (let round = 0; round < 3; round++) {
      m.ws.forEach((w, i) => {
        rmsNorm(m.x, { weight: w, out: m.y, stream: m.s });
        assert.equal(weightArg(f.launches.length - 1), w.ptr, `round ${round} weight ${i}`);
      });
      // Round 0 validates each weight's call; rounds 1 and 2 repeat them.
      assert.equal(validated, 5, `validated calls after round ${round}`);
    }
    assert.equal(f.launches.length, 15);
    // LayerNorm with a bias only: keyed by the bias.
    const bias2 = m.ws[0];
    layerNorm(m.x, { bias: m.ws[2], out: m.y, stream: m.s });
    layerNorm(m.x, { bias: bias2, out: m.y, stream: m.s });
    layerNorm(m.x, { bias: m.ws[2], out: m.y, stream: m.s });
    assert.equal(validated, 7);
    assert.equal((f.launches[17].args as bigint[])[3], m.ws[2].ptr);
    f.launches.splice(15, 3);
    // Another eps is another call: validated in full, and remembered in turn.
    rmsNorm(m.x, { weight: m.ws[1], out: m.y, stream: m.s, eps: 1e-3 });
    assert.equal((f.launches[15].args as number[])[10], Math.fround(1e-3));
    rmsNorm(m.x, { weight: m.ws[2], out: m.y, stream: m.s });
    rmsNorm(m.x, { weight: m.ws[1], out: m.y, stream: m.s, eps: 1e-3 });
    assert.deepEqual(f.launches[17].args, f.launches[15].args);
    // A weight closed since its call: DisposedError naming it, nothing launched; the others still launch.
    m.ws[3].close();
    assert.throws(
      () => rmsNorm(m.x, { weight: m.ws[3], out: m.y, stream: m.s }),
      (e: unknown) => e instanceof DisposedError && /weight/.test((e as Error).message),
    );
    assert.equal(f.launches.length, 18);
    rmsNorm(m.x, { weight: m.ws[4], out: m.y, stream: m.s });
    assert.equal(weightArg(18), m.ws[4].ptr);
    // A bad weight (no tensor) goes the full way and is refused as ever.
    assert.throws(
      () => rmsNorm(m.x, { weight: 7 as never, out: m.y, stream: m.s }),
      (e: unknown) => e instanceof ArgumentError && /weight/.test((e as Error).message),
    );
  } finally {
    Kernel.prototype.checkLaunch = checkLaunch;
    f.dev.close();
  }
});

test("fake CUDA: a weight, bias, out or device closed after a validated call is DisposedError naming it", async () => {
  for (const which of ["weight", "bias", "out", "device", "another buffer"] as const) {
    const f = await fakeCudaDevice((d) => ({
      s: d.createStream(),
      x: d.empty([4, 256], { dtype: "bf16" }),
      y: d.empty([4, 256], { dtype: "bf16" }),
      w: d.empty([256], { dtype: "bf16" }),
      b: d.empty([256], { dtype: "bf16" }),
      other: d.empty([256], { dtype: "bf16" }),
    }), { record: true });
    const m = f.made;
    const call = () => layerNorm(m.x, { weight: m.w, bias: m.b, out: m.y, stream: m.s });
    try {
      call();
      call();
      const n = f.launches.length;
      assert.equal(n, 2);
      if (which === "another buffer") {
        // A release elsewhere makes the repeated call look at its own objects again: all open, so it launches.
        m.other.close();
        call();
        call();
        assert.equal(f.launches.length, n + 2);
        continue;
      }
      ({ weight: m.w, bias: m.b, out: m.y, device: f.dev })[which].close();
      const name = { weight: /weight/, bias: /bias/, out: /out/, device: /x's device/ }[which];
      assert.throws(call, (e: unknown) => e instanceof DisposedError && name.test((e as Error).message), which);
      assert.equal(f.launches.length, n);
    } finally {
      f.dev.close();
    }
  }
});

// ---- CUDA ---------------------------------------------------------------------------------------------

const COUNTED = [
  "memAlloc",
  "memFree",
  "hostAlloc",
  "hostFree",
  "moduleLoad",
  "moduleFunction",
  "streamCreate",
  "eventCreate",
  "streamSynchronize",
  "synchronize",
  "launch",
  "launchEx",
] as const;
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
    for (
      const k of [
        "memAlloc",
        "memFree",
        "hostAlloc",
        "hostFree",
        "moduleLoad",
        "moduleFunction",
        "streamCreate",
        "eventCreate",
        "synchronize",
      ] as const
    ) {
      assert.equal(c[k], 0, `${k} calls on the hot path`);
    }
    assert.equal(c.launch + c.launchEx, 2000, "one launch per call");
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
    assert.equal(s.counts.memAlloc + s.counts.hostAlloc + s.counts.moduleLoad + s.counts.launch + s.counts.launchEx, 0);
  } finally {
    g.launch = launch0;
    s.restore();
  }
});

test("plan cache: the invariant plan of a problem is cached apart from its tuned plan (planNormInvariant)", () => {
  const cache = new Map<string, unknown>();
  const rms: PlanInput = { kind: "rms", rows: 3, d: 4096, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "bf16" };
  const look = (p: PlanInput, invariant: boolean) =>
    lookupNormPlan(
      cache,
      p.kind,
      p.rows,
      p.d,
      p.inputDtype,
      p.outputDtype,
      p.paramDtype,
      () => H200,
      undefined,
      invariant,
    );
  const tuned = look(rms, false), inv = look(rms, true);
  assert.ok(tuned instanceof PlannedLaunch && inv instanceof PlannedLaunch);
  assert.notEqual(tuned, inv);
  assert.equal(tuned.plan.mapping, "latency", "3 rows: the latency mapping");
  assert.equal(inv.plan.mapping, "block", "the prefill mapping at 3 rows");
  assert.equal(look(rms, true), inv, "a hit");
  assert.equal(look(rms, false), tuned, "a hit");
  // Where there is none (the tile's rows: D 64 bf16 is 8 whole chunks), one refusal, cached: the op then takes the
  // fused kernels.
  const tile = look({ ...rms, d: 64 }, true);
  assert.equal(tile, NO_INVARIANT_PLAN);
  assert.equal(look({ ...rms, d: 64 }, true), tile, "a hit");
  assert.equal(cachedPlanCount(cache), 3);
});
