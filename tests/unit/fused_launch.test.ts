/**
 * The fused ops' launches over the fake CUDA driver (tests/fixtures/fake_cuda.ts): the kernel each call picks, its 28
 * arguments (FUSED_PARAMS) as written into the parameter array, and the grid and block from the fused plan. No GPU.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { layerNorm, loadKernels, rmsNorm, rmsNormBackward, UnsupportedError } from "../../mod.ts";
import { ffi } from "../../ffi/runtime.ts";
import { FUSED_ADD_THREADS, FUSED_PARAMS, fusedArgs } from "../../ops/fused_abi.ts";
import { fusedGeometry, fusedLaunch, fusedTree } from "../../ops/plan_fused.ts";
import { planLimits, setDependentLaunch } from "../../ops/kernels.ts";
import { planNormInvariant } from "../../ops/plan.ts";
import { fakeCudaDevice } from "../fixtures/fake_cuda.ts";

/** The fused kernel's arguments by name, read back from a parameter array at launch time. */
function readFused(params: bigint, kernel: string): Record<string, bigint | number> | undefined {
  // Other kernels' parameter arrays are shorter: reading 28 slots of one would follow garbage addresses.
  if (/^nk_fused_(ln|rms)_/.test(kernel)) return readParams(params);
  return /^nk_(ln|rms)_/.test(kernel) ? readNormGeometry(params) : undefined;
}
/** Some of a tuned forward kernel's arguments (NORM_FWD_ARGS: rstd 5, rows 6, x and y strides 8 and 9, tpr 11, nv 12). */
function readNormGeometry(params: bigint): Record<string, bigint | number> {
  const slots = new BigUint64Array(ffi!.viewMemory(params, 14 * 8).slice(0));
  const view = (i: number) => new DataView(ffi!.viewMemory(slots[i], 8).slice(0));
  const i32 = (i: number) => view(i).getInt32(0, true), i64 = (i: number) => Number(view(i).getBigInt64(0, true));
  return {
    rstd: view(5).getBigUint64(0, true),
    rows: i32(6),
    x_stride: i64(8),
    y_stride: i64(9),
    tpr: i32(11),
    nv: i32(12),
  };
}
function readParams(params: bigint): Record<string, bigint | number> {
  const n = FUSED_PARAMS.length;
  const slots = new BigUint64Array(ffi!.viewMemory(params, n * 8).slice(0));
  const out: Record<string, bigint | number> = {};
  FUSED_PARAMS.forEach((p, i) => {
    const v = new DataView(ffi!.viewMemory(slots[i], 8).slice(0));
    out[p.name] = p.type === "ptr"
      ? v.getBigUint64(0, true)
      : p.type === "i64"
      ? Number(v.getBigInt64(0, true))
      : p.type === "f32"
      ? v.getFloat32(0, true)
      : v.getInt32(0, true);
  });
  return out;
}

const tokens = 3, hq = 4, hkv = 2, hd = 128, width = (hq + 2 * hkv) * hd, d = 2048, rows = 5;

function setup() {
  return fakeCudaDevice((dev) => ({
    qkv: dev.empty([tokens, width], { dtype: "bf16" }),
    qw: dev.empty([hd], { dtype: "bf16" }),
    kw: dev.empty([hd], { dtype: "bf16" }),
    x: dev.empty([rows, d], { dtype: "bf16" }),
    res: dev.empty([rows, d], { dtype: "bf16" }),
    h: dev.empty([rows, d], { dtype: "bf16" }),
    w: dev.empty([d]),
    q8: dev.empty([rows, d], { dtype: "fp8e4m3" }),
    scales: dev.empty([rows]),
    one: dev.empty([1]),
    many: dev.empty([1000, d], { dtype: "bf16" }),
    manyOut: dev.empty([1000, d], { dtype: "bf16" }),
  }), { record: true, snapshot: readFused, load: false });
}

test("fused calls before loadKernels(dev, { fused: true }), quantized ones before { quant: true }, say which call loads them", async () => {
  const { dev, made: m, launches } = await setup();
  using _dev = dev;
  await loadKernels(dev); // the norm kernels only
  assert.throws(
    () => rmsNorm(m.x, { weight: m.w, residual: m.res, out: m.x }),
    (e: unknown) => e instanceof UnsupportedError && /loadKernels\(dev, \{ fused: true \}\)/.test(e.message),
  );
  // The fused image alone: a float y runs, a quantized one is refused before anything is launched.
  await loadKernels(dev, { fused: true });
  rmsNorm(m.x, { weight: m.w, residual: m.res, residualOut: m.h, out: m.x });
  assert.equal(launches.length, 1);
  const quantized = () =>
    rmsNorm(m.x, { weight: m.w, residual: m.res, residualOut: m.h, out: m.q8, quant: { dtype: "fp8e4m3", scale: 1 } });
  assert.throws(
    quantized,
    (e: unknown) => e instanceof UnsupportedError && /loadKernels\(dev, \{ quant: true \}\)/.test(e.message),
  );
  assert.equal(launches.length, 1);
  await loadKernels(dev, { quant: true });
  quantized();
  assert.deepEqual(launches.map((l) => l.kernel), [
    "nk_fused_rms_bf16_bf16_f32_nv2",
    "nk_fused_rms_bf16_fp8e4m3_f32_nv2",
  ]);
});

test("QK-norm over a head view: one launch, the heads on the inner level, split and both weights", async () => {
  const { dev, made: m, launches } = await setup();
  using _dev = dev;
  await loadKernels(dev, { fused: true });
  const qk = m.qkv.view([tokens, hq + hkv, hd], { strides: [width, hd, 1] });
  rmsNorm(qk, { weight: m.qw, weight2: m.kw, split: hq, out: qk, eps: 1e-6 });
  assert.equal(launches.length, 1);
  const l = launches[0], a = l.args as Record<string, bigint | number>;
  const g = fusedGeometry("rms", hd, "bf16", planLimits(dev), tokens * (hq + hkv), "cuda");
  assert.ok(!("unsupported" in g));
  assert.equal(l.kernel, "nk_fused_rms_bf16_bf16_bf16_nv2", "a chunk a lane (fused.wave): the few-chunk kernel");
  const launch = fusedLaunch(g, tokens * (hq + hkv), planLimits(dev));
  assert.deepEqual(l.grid, launch.grid);
  assert.deepEqual(l.block, launch.block);
  assert.deepEqual(
    [a.x, a.y, a.weight, a.weight2, a.residual, a.h, a.bias, a.mean, a.rstd, a.scale],
    [qk.ptr, qk.ptr, m.qw.ptr, m.kw.ptr, 0n, 0n, 0n, 0n, 0n, 0n],
  );
  assert.deepEqual([a.n0, a.n1, a.d, a.x_s0, a.x_s1, a.y_s0, a.y_s1], [tokens, hq + hkv, hd, width, hd, width, hd]);
  assert.deepEqual([a.split, a.quant, a.tpr, a.nv], [hq, 0, g.tpr, g.nv]);
  assert.equal(a.eps, Math.fround(1e-6));
  // Programmatic dependent launch, as the forward kernels on compute capability 9.0; off when turned off.
  assert.equal(l.dependent, true);
  setDependentLaunch(dev, false);
  rmsNorm(qk, { weight: m.qw, weight2: m.kw, split: hq, out: qk, eps: 1e-6 });
  assert.equal(launches[1].dependent, false);
});

test("a transposed view (head-major buffer in token order), in place: its strides as they are", async () => {
  const { dev, made: m, launches } = await setup();
  using _dev = dev;
  await loadKernels(dev, { fused: true });
  const heads = hq + 2 * hkv; // the buffer read as [heads, tokens, hd]
  const v = m.qkv.view([tokens, heads, hd], { strides: [hd, tokens * hd, 1] });
  rmsNorm(v, { weight: m.qw, out: v });
  assert.equal(launches.length, 1);
  const a = launches[0].args as Record<string, bigint | number>;
  assert.deepEqual([a.x, a.y], [v.ptr, v.ptr]);
  assert.deepEqual([a.n0, a.n1, a.d, a.x_s0, a.x_s1, a.y_s0, a.y_s1], [
    tokens,
    heads,
    hd,
    hd,
    tokens * hd,
    hd,
    tokens * hd,
  ]);
});

test("residual + dynamic fp8: h into residualOut, the scales into scaleOut, the bound as f32; static scales by value or tensor", async () => {
  const { dev, made: m, launches } = await setup();
  using _dev = dev;
  await loadKernels(dev, { quant: true });
  const r = rmsNorm(m.x, {
    weight: m.w,
    residual: m.res,
    residualOut: m.h,
    out: m.q8,
    quant: { dtype: "fp8e4m3", scaleOut: m.scales, scaleUpperBound: 2.5 },
  });
  assert.equal(r.y, m.q8);
  assert.equal(r.scale, m.scales);
  let a = launches[0].args as Record<string, bigint | number>;
  assert.equal(launches[0].kernel, "nk_fused_rms_bf16_fp8e4m3_f32_nv2", "5 rows of D 2048: a chunk a thread");
  assert.deepEqual([a.x, a.residual, a.h, a.y, a.weight, a.scale], [
    m.x.ptr,
    m.res.ptr,
    m.h.ptr,
    m.q8.ptr,
    m.w.ptr,
    m.scales.ptr,
  ]);
  assert.deepEqual([a.quant, a.scale_ub, a.n0, a.n1, a.x_s1, a.r_s1, a.h_s1, a.y_s1], [2, 2.5, 1, rows, d, d, d, d]);

  rmsNorm(m.x, { weight: m.w, residual: m.res, out: m.q8, quant: { dtype: "fp8e4m3", scale: 0.1 } });
  a = launches[1].args as Record<string, bigint | number>;
  assert.deepEqual(
    [a.h, a.quant, a.scale, a.scale_value],
    [m.res.ptr, 1, 0n, Math.fround(0.1)],
    "h in place over residual",
  );
  rmsNorm(m.x, { weight: m.w, out: m.q8, quant: { dtype: "fp8e4m3", scale: m.one } });
  a = launches[2].args as Record<string, bigint | number>;
  assert.deepEqual([a.residual, a.h, a.quant, a.scale], [0n, 0n, 1, m.one.ptr]);
  layerNorm(m.x, { weight: m.w, out: m.q8, quant: { dtype: "fp8e4m3", scaleOut: m.scales } });
  assert.equal(launches[3].kernel, "nk_fused_ln_bf16_fp8e4m3_f32_nv2");
});

test("batchInvariant on LayerNorm rows of the tile: the fused kernel; 1 row and 16000 split one tree", async () => {
  const { dev, made: m, launches } = await setup();
  using _dev = dev;
  await loadKernels(dev, { fused: true });
  // D 128 bf16: the tuned prefill plan's vector path is the `rows` tile, which sums in an order of its own.
  const short = 128, n = 16000, many = m.many.view([n, short]), manyOut = m.manyOut.view([n, short]);
  const w = m.w.view([short]), limits = planLimits(dev);
  const p = { kind: "layer", rows: n, d: short, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "f32" } as const;
  assert.equal(planNormInvariant(p, limits), null);
  const one = many.view([1, short]), oneOut = manyOut.view([1, short]);
  layerNorm(one, { weight: w, out: oneOut, batchInvariant: true });
  layerNorm(many, { weight: w, out: manyOut, batchInvariant: true });
  layerNorm(many, { weight: w, out: manyOut }); // the tuned plan
  const [a, b] = launches.map((l) => l.args as Record<string, number>);
  const tree = fusedTree("layer", short, "bf16", limits);
  assert.ok("leaves" in tree);
  for (const [args, l, rows] of [[a, launches[0], 1], [b, launches[1], n]] as const) {
    assert.match(l.kernel, /^nk_fused_ln_bf16_bf16_f32_nv[24]$/, `rows=${rows}`);
    const g = fusedGeometry("layer", short, "bf16", limits, rows, "cuda");
    assert.ok(!("unsupported" in g));
    assert.deepEqual([args.tpr, args.nv, l.block[0]], [g.tpr, g.nv, g.block], `rows=${rows}`);
    assert.equal(g.tpr * g.nv, tree.leaves, `rows=${rows}: the same tree`);
  }
  assert.notDeepEqual([a.tpr, a.nv], [b.tpr, b.nv], "one row and 16000 split the tree differently");
  assert.ok(launches[1].grid[0] > launches[0].grid[0]);
  assert.match(launches[2].kernel, /^nk_ln_rowstile_/);
});

test("batchInvariant on LayerNorm rows of a few lanes: the two-pass kernel in the prefill geometry", async () => {
  const { dev, made: m, launches } = await setup();
  using _dev = dev;
  await loadKernels(dev, { fused: true });
  // D 512 bf16: the prefill plan gives a row 8 lanes; its one-pass kernel decides the pass for a warp's 4 rows.
  const short = 512, n = 4000, many = m.many.view([n, short]), manyOut = m.manyOut.view([n, short]);
  const w = m.w.view([short]);
  layerNorm(many.view([1, short]), { weight: w, out: manyOut.view([1, short]), batchInvariant: true });
  layerNorm(many, { weight: w, out: manyOut, batchInvariant: true });
  layerNorm(many, { weight: w, out: manyOut }); // the tuned plan
  const [a, b, tuned] = launches.map((l) => l.args as Record<string, number>);
  assert.deepEqual(launches.map((l) => l.kernel), [
    "nk_ln_rowstwopass_bf16_bf16_f32",
    "nk_ln_rowstwopass_bf16_bf16_f32",
    "nk_ln_rows_bf16_bf16_f32",
  ]);
  for (const args of [a, b]) assert.deepEqual([args.tpr, args.nv], [tuned.tpr, tuned.nv]);
  assert.deepEqual([launches[0].grid[0], launches[1].grid[0]], [1, launches[2].grid[0]]);
});

for (const kind of ["rms", "layer"] as const) {
  const name = kind === "rms" ? "RMSNorm" : "LayerNorm";
  test(`batchInvariant on ${name}: the tuned kernel of the prefill plan, the same geometry at 1 and 1000 rows`, async () => {
    const { dev, made: m, launches } = await setup();
    using _dev = dev;
    await loadKernels(dev, { fused: true });
    const norm = kind === "rms" ? rmsNorm : layerNorm;
    const one = m.many.view([1, d]), oneOut = m.manyOut.view([1, d]);
    norm(one, { weight: m.w, out: oneOut, batchInvariant: true });
    norm(m.many, { weight: m.w, out: m.manyOut, batchInvariant: true });
    norm(m.many, { weight: m.w, out: m.manyOut }); // the tuned plan at 1000 rows
    norm(one, { weight: m.w, out: oneOut }); // the tuned plan at 1 row
    const p = { kind, d, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "f32" } as const;
    const inv = planNormInvariant({ ...p, rows: 1000 }, planLimits(dev));
    assert.ok(inv !== null && "plan" in inv);
    assert.equal(inv.plan.mapping, "rows", "D 2048 bf16: lanes a row");
    assert.equal(inv.plan.tpr, 32, "a warp a row (LayerNorm: so it decides its pass alone)");
    const [a, b, tuned, tunedOne] = launches.map((l) => l.args as Record<string, number>);
    for (const [i, args] of [a, b, tuned].entries()) {
      assert.equal(launches[i].kernel, inv.plan.kernel, `launch ${i}`);
      assert.deepEqual([args.tpr, args.nv, launches[i].block[0]], [inv.plan.tpr, inv.plan.nv, inv.plan.block[0]]);
    }
    assert.equal(launches[0].grid[0], 1, "one row: one block");
    assert.equal(launches[1].grid[0], launches[2].grid[0], "1000 rows: the plain norm's own launch");
    assert.notEqual(launches[3].kernel, inv.plan.kernel, "the plain norm of one row takes another mapping");
    assert.notDeepEqual([tunedOne.tpr, tunedOne.nv], [a.tpr, a.nv]);

    // Rows of one stride (every other row of `many`) into packed rows: the tuned kernel, each tensor's stride passed.
    const every2 = m.many.view([500, d], { strides: [2 * d, 1] }), packed = m.manyOut.view([500, d]);
    norm(every2, { weight: m.w, out: packed, batchInvariant: true });
    const s = launches[4].args as Record<string, bigint | number>;
    assert.equal(launches[4].kernel, inv.plan.kernel);
    assert.deepEqual([s.rows, s.x_stride, s.y_stride, s.rstd], [500, 2 * d, d, 0n]);
    // Rows on two levels (a head view): the fused kernel, which takes them.
    const heads = m.many.view([500, 2, d / 2], { strides: [2 * d, d / 2, 1] });
    norm(heads, { weight: m.w.view([d / 2]), out: heads, batchInvariant: true });
    assert.match(launches[5].kernel, kind === "rms" ? /^nk_fused_rms_/ : /^nk_fused_ln_/);
  });
}

test("backward with dResidual: the backward kernels, then nk_fused_add_* over dx", async () => {
  const { dev, made: m, launches, driver } = await setup();
  using _dev = dev;
  await loadKernels(dev, { fused: true, backward: true });
  (driver as unknown as Record<string, unknown>).occupancy = () => 4; // one-row blocks size their grid from it
  // No weight (no parameter sums, hence no workspace: the fake driver allocates nothing) and dx given.
  const g = rmsNormBackward(m.x, m.res, { rstd: m.scales, dx: m.h, dResidual: m.many.view([rows, d]) });
  const last = launches[launches.length - 1];
  assert.equal(last.kernel, "nk_fused_add_bf16");
  assert.equal(last.dependent, false, "the add kernel has no griddepcontrol.wait");
  assert.deepEqual(last.block, [FUSED_ADD_THREADS, 1, 1]);
  assert.deepEqual(last.grid, [rows, 1, 1]);
  assert.ok(launches.length >= 2, "the backward kernels first");
  assert.equal(g.dx, m.h);
});

test("backward with dResidual before loadKernels(dev, { fused: true }): refused before any launch, dx untouched", async () => {
  const { dev, made: m, launches, driver } = await setup();
  using _dev = dev;
  await loadKernels(dev, { backward: true }); // the norm kernels only, forward and backward
  (driver as unknown as Record<string, unknown>).occupancy = () => 4;
  const bytes = m.h.buffer.hostBytes;
  bytes.set(bytes.map((_, i) => (i * 37 + 11) & 0xff));
  const before = bytes.slice();
  assert.throws(
    () => rmsNormBackward(m.x, m.res, { rstd: m.scales, dx: m.h, dResidual: m.many.view([rows, d]) }),
    (e: unknown) => e instanceof UnsupportedError && /loadKernels\(dev, \{ fused: true \}\)/.test(e.message),
  );
  assert.equal(launches.length, 0, "nothing launched");
  assert.deepEqual(m.h.buffer.hostBytes, before, "dx untouched");
});

test("fusedArgs puts each named value at its parameter's place (FUSED_PARAMS)", () => {
  const ptr = (i: number) => BigInt(0x1000 * (i + 1));
  const values = {
    x: ptr(0),
    residual: ptr(1),
    h: ptr(2),
    y: ptr(3),
    weight: ptr(4),
    bias: ptr(5),
    weight2: ptr(6),
    mean: ptr(7),
    rstd: ptr(8),
    scale: ptr(9),
    n0: 10,
    n1: 11,
    d: 12,
    xStrides: [13, 14],
    rStrides: [15, 16],
    hStrides: [17, 18],
    yStrides: [19, 20],
    eps: 21,
    scaleValue: 22,
    scaleUpperBound: 23,
    quant: 24,
    split: 25,
    tpr: 26,
    nv: 27,
  } as const;
  const byName: Record<string, unknown> = {
    ...values,
    scale_value: 22,
    scale_ub: 23,
    x_s0: 13,
    x_s1: 14,
    r_s0: 15,
    r_s1: 16,
    h_s0: 17,
    h_s1: 18,
    y_s0: 19,
    y_s1: 20,
  };
  const args = fusedArgs(values);
  assert.equal(args.length, FUSED_PARAMS.length);
  FUSED_PARAMS.forEach((p, i) => {
    assert.equal(args[i], byName[p.name], p.name);
    assert.equal(typeof args[i], p.type === "ptr" ? "bigint" : "number", p.name);
  });
});
