/**
 * The fused options of rmsNorm / layerNorm on the CPU backend (the same checks run on CUDA in tests/gpu/fused.test.ts):
 * results against the float64 reference (tests/fixtures/fused_cases.ts states the tolerances), in-place and view
 * semantics, QK-norm over views equal to the norm over copies, the residual backward, and what is refused.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ArgumentError,
  Device,
  layerNorm,
  layerNormBackward,
  loadKernels,
  type QuantOptions,
  RMSNorm,
  rmsNorm,
  rmsNormBackward,
  type Tensor,
  UnsupportedError,
} from "../../mod.ts";
import { normForward } from "../../ops/cpu.ts";
import { normBackward } from "../../ops/cpu_bwd.ts";
import { describeCase, fusedGrid, quantError, runFusedCase } from "../fixtures/fused_cases.ts";
import { checkHeadMajorViews, checkQkViews } from "../fixtures/qk_views.ts";
import { randoms } from "../fixtures/random.ts";

// The grid at 7 and 83 rows (4096 rows below and on the GPU): every D, dtype, residual and quant mode, a test per kind
// and dtype (each well within a runner's time limit).
const CASES = fusedGrid([7, 83]);
for (const kind of ["rms", "layer"] as const) {
  for (const dtype of ["bf16", "f16", "f32"] as const) {
    const cases = CASES.filter((c) => c.kind === kind && c.dtype === dtype);
    test(`fused ${kind} ${dtype} on the CPU backend: ${cases.length} cases (D, residual, quant, strided rows) against float64`, () => {
      using dev = Device.open({ backend: "cpu" });
      for (const c of cases) {
        try {
          runFusedCase(dev, c);
        } catch (e) {
          throw new Error(`${describeCase(c)}: ${(e as Error).message}`);
        }
      }
    });
  }
}

test("4096 rows against float64: both kinds in bf16 at D 768, with a residual, quant none / dynamic fp8e4m3 / static int8", () => {
  using dev = Device.open({ backend: "cpu" });
  const cases = fusedGrid([4096], [768]).filter((c) =>
    c.dtype === "bf16" && c.residual &&
    (c.quant === "none" || (c.quant === "dynamic" && c.qdtype === "fp8e4m3") ||
      (c.quant === "static" && c.qdtype === "int8"))
  );
  assert.equal(cases.length, 6);
  for (const c of cases) runFusedCase(dev, c);
});

test("LayerNorm rows whose first element lies far from their mean, beside ordinary rows, against float64", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const dtype of ["bf16", "f16", "f32"] as const) {
    for (const d of [128, 770, 5120]) {
      runFusedCase(dev, { kind: "layer", dtype, d, rows: 9, residual: d === 770, quant: "none", outlier: true });
      runFusedCase(dev, {
        kind: "layer",
        dtype,
        d,
        rows: 9,
        residual: false,
        quant: "dynamic",
        qdtype: "int8",
        outlier: true,
      });
    }
  }
});

test("h to a residualOut apart from the residual: the separate add, the residual unchanged, y against float64", () => {
  using dev = Device.open({ backend: "cpu" });
  const quants = [{ quant: "none" }, { quant: "dynamic", qdtype: "fp8e4m3" }] as const;
  for (const kind of ["rms", "layer"] as const) {
    for (const dtype of ["bf16", "f16", "f32"] as const) {
      for (const d of [128, 770, 4096]) {
        for (const q of quants) runFusedCase(dev, { kind, dtype, d, rows: 9, residual: true, ...q, hApart: true });
      }
    }
  }
});

test("zero rows get the floor scale and q = 0; a NaN row quantizes to NaN (fp8) and 0 (int8) with the floor scale", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const qdtype of ["fp8e4m3", "fp8e5m2", "int8"] as const) {
    for (const kind of ["rms", "layer"] as const) {
      runFusedCase(dev, {
        kind,
        dtype: "bf16",
        d: 770,
        rows: 5,
        residual: true,
        quant: "dynamic",
        qdtype,
        special: true,
      });
    }
  }
  using x = dev.tensor(new Float32Array(2 * 16), [2, 16], { dtype: "bf16" });
  using r = rmsNorm(x, { quant: { dtype: "fp8e4m3" } });
  assert.deepEqual(Array.from(r.scale.readSync()), [Math.fround(1 / (448 * 512)), Math.fround(1 / (448 * 512))]);
  assert.deepEqual(Array.from(r.y.readSync()), new Array(32).fill(0));
});

test("residual: in place by default; residualOut elsewhere; out over x; equals the separate add then the norm", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 6, d = 40, xv = randoms(rows * d, 1), rv = randoms(rows * d, 2);
  using w = dev.tensor(randoms(d, 3, 0.5, 1.5), [d], { dtype: "f16" });
  for (const where of ["residual", "elsewhere", "out over x"] as const) {
    using x = dev.tensor(xv, [rows, d], { dtype: "f16" });
    using res = dev.tensor(rv, [rows, d], { dtype: "f16" });
    using h = dev.empty([rows, d], { dtype: "f16" });
    const y = where === "residual"
      ? rmsNorm(x, { weight: w, residual: res })
      : where === "elsewhere"
      ? rmsNorm(x, { weight: w, residual: res, residualOut: h })
      : rmsNorm(x, { weight: w, residual: res, residualOut: h, out: x });
    using _y = where === "out over x" ? undefined : y;
    const hGot = (where === "residual" ? res : h).readSync();
    // The separate add, then the unfused norm of the same dtype.
    using sum = dev.tensor(hGot, [rows, d], { dtype: "f16" });
    using plain = rmsNorm(sum, { weight: w });
    assert.deepEqual(Array.from(y.readSync()), Array.from(plain.readSync()), where);
    if (where === "elsewhere") {
      assert.deepEqual(Array.from(res.readSync()), Array.from(dev.tensor(rv, [rows, d], { dtype: "f16" }).readSync()));
    }
    if (where === "out over x") assert.equal(y, x);
  }
});

test("QK-norm over views of a fused QKV buffer, in place, equals the norms over copies; V is untouched", () => {
  using dev = Device.open({ backend: "cpu" });
  const tokens = 5, hq = 4, hkv = 2, hd = 16, width = (hq + 2 * hkv) * hd;
  const values = randoms(tokens * width, 11);
  using qkv = dev.tensor(values, [tokens, width], { dtype: "bf16" });
  const before = qkv.readSync();
  using qw = dev.tensor(randoms(hd, 12, 0.5, 1.5), [hd], { dtype: "bf16" });
  using kw = dev.tensor(randoms(hd, 13, 0.5, 1.5), [hd], { dtype: "bf16" });
  const q = qkv.view([tokens, hq, hd], { strides: [width, hd, 1] });
  const k = qkv.view([tokens, hkv, hd], { strides: [width, hd, 1], offset: hq * hd });
  // Copies of Q and K, normalized separately.
  using qCopy = dev.tensor(q.readSync(), [tokens, hq, hd], { dtype: "bf16" });
  using kCopy = dev.tensor(k.readSync(), [tokens, hkv, hd], { dtype: "bf16" });
  using qRef = rmsNorm(qCopy, { weight: qw });
  using kRef = rmsNorm(kCopy, { weight: kw });
  // The query heads alone, read through the view into a contiguous output.
  using qOut = rmsNorm(q, { weight: qw });
  assert.deepEqual(Array.from(qOut.readSync()), Array.from(qRef.readSync()));
  const qk = qkv.view([tokens, hq + hkv, hd], { strides: [width, hd, 1] });
  const out = rmsNorm(qk, { weight: qw, weight2: kw, split: hq, out: qk });
  assert.equal(out, qk);
  assert.deepEqual(Array.from(q.readSync()), Array.from(qRef.readSync()));
  assert.deepEqual(Array.from(k.readSync()), Array.from(kRef.readSync()));
  const after = qkv.readSync();
  for (let t = 0; t < tokens; t++) {
    for (let i = (hq + hkv) * hd; i < width; i++) {
      assert.equal(after[t * width + i], before[t * width + i], "V untouched");
    }
  }
});

test("QK-norm over views, LayerNorm with a bias, a residual, quantized outputs: bitwise the calls over copies", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const tokens of [1, 5]) checkQkViews(dev, tokens, 4, 2, 16);
});

test("norms over a transposed view (head-major buffer in token order): bitwise the calls over copies", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const tokens of [1, 5]) checkHeadMajorViews(dev, tokens, 4, 16);
});

test("batchInvariant: a row's result is bitwise the same alone and in any batch (CPU backend)", () => {
  using dev = Device.open({ backend: "cpu" });
  const d = 770, rows = 33, xv = randoms(rows * d, 21);
  using w = dev.tensor(randoms(d, 22, 0.5, 1.5), [d]);
  using all = dev.tensor(xv, [rows, d], { dtype: "bf16" });
  using yAll = layerNorm(all, { weight: w, batchInvariant: true });
  const ys = yAll.readSync();
  for (const r of [0, 17, 32]) {
    using one = dev.tensor(xv.subarray(r * d, (r + 1) * d), [1, d], { dtype: "bf16" });
    using y1 = layerNorm(one, { weight: w, batchInvariant: true });
    assert.deepEqual(Array.from(y1.readSync()), Array.from(ys.subarray(r * d, (r + 1) * d)), `row ${r}`);
  }
});

test("residual backward: dx = normBackward(dy) + dResidual (dx2 any view); the module keeps a copy of h, adds dResidual", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 4, d = 24, xv = randoms(rows * d, 31), rv = randoms(rows * d, 32), dyv = randoms(rows * d, 33);
  const drv = randoms(rows * d, 34);
  using x = dev.tensor(xv, [rows, d]);
  using res = dev.tensor(rv, [rows, d]);
  using w = dev.tensor(randoms(d, 35, 0.5, 1.5), [d]);
  using fwd = rmsNorm(x, { weight: w, residual: res, stats: true });
  using dy = dev.tensor(dyv, [rows, d]);
  using dRes = dev.tensor(drv, [rows, d]);
  const g = rmsNormBackward(dy, res, { rstd: fwd.rstd, weight: w, dResidual: dRes });
  using _dx = g.dx, _dw = g.dweight;
  const h = res.readSync();
  const ref = normBackward({
    kind: "rms",
    rows,
    d,
    x: h,
    xStride: d,
    dy: Float32Array.from(dyv),
    dyStride: d,
    rstd: fwd.rstd.readSync(),
    weight: w.readSync(),
  });
  const dx = g.dx.readSync();
  // The norm's dx rounded to f32, then the f32 sum: the unfused backward followed by the add.
  for (let i = 0; i < dx.length; i++) {
    assert.equal(dx[i], Math.fround(Math.fround(ref.dx[i]) + Math.fround(drv[i])), `dx[${i}]`);
  }
  // Written to both when asked: dx2 (here with padded rows) gets the same values.
  using dx2 = dev.empty([rows, d], { rowStride: d + 5 });
  dx2.write(new Float32Array(rows * d).fill(NaN));
  const g2 = rmsNormBackward(dy, res, { rstd: fwd.rstd, weight: w, dResidual: dRes, dx2 });
  using _dx3 = g2.dx, _dw3 = g2.dweight;
  assert.deepEqual(Array.from(dx2.readSync()), Array.from(g2.dx.readSync()));
  assert.deepEqual(Array.from(g2.dx.readSync()), Array.from(dx));
  assert.throws(
    () => rmsNormBackward(dy, res, { rstd: fwd.rstd, dResidual: dRes, dx2: dRes }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "dx2",
  );

  // dx2 as a view of rows on two levels ([2, 2, d] inside a wider buffer) gets the same values too.
  using wide = dev.empty([2 * 2 * (d + 7) + 5]);
  const dx2v = wide.view([2, 2, d], { strides: [2 * (d + 7), d + 7, 1], offset: 5 });
  const flat = (t: Tensor) => t.view([2, 2, d]);
  const g4 = rmsNormBackward(flat(dy), flat(res), { rstd: fwd.rstd, weight: w, dResidual: flat(dRes), dx2: dx2v });
  using _dx4 = g4.dx, _dw4 = g4.dweight;
  assert.deepEqual(Array.from(dx2v.readSync()), Array.from(dx));
  // normalizedShape over two dimensions: dResidual and dx2 are viewed flat as dx is.
  using dx5 = dev.empty([rows, 4, d / 4]);
  const g5 = rmsNormBackward(dy.view([rows, 4, d / 4]), res.view([rows, 4, d / 4]), {
    rstd: fwd.rstd,
    weight: w.view([4, d / 4]),
    dResidual: dRes.view([rows, 4, d / 4]),
    dx2: dx5,
    normalizedShape: [4, d / 4],
  });
  using _dx6 = g5.dx, _dw6 = g5.dweight;
  assert.deepEqual(Array.from(g5.dx.readSync()), Array.from(dx));
  assert.deepEqual(Array.from(dx5.readSync()), Array.from(dx));

  using m = new RMSNorm(dev, d);
  using x2 = dev.tensor(xv, [rows, d]);
  using res2 = dev.tensor(rv, [rows, d]);
  using y = m.forward(x2, { residual: res2 });
  assert.deepEqual(Array.from(res2.readSync()), Array.from(h), "h written into the residual");
  // The next layer's add overwrites the residual buffer before this layer's backward: the module kept its own h.
  res2.write(randoms(rows * d, 36));
  using dxm = m.backward(dy, { dResidual: dRes });
  const want = normBackward({
    kind: "rms",
    rows,
    d,
    x: h,
    xStride: d,
    dy: Float32Array.from(dyv),
    dyStride: d,
    rstd: normForward({ kind: "rms", rows, d, x: h, xStride: d, eps: 1e-6 }).rstd,
    weight: new Float32Array(d).fill(1),
  });
  const got = dxm.readSync();
  for (let i = 0; i < got.length; i++) {
    assert.ok(Math.abs(got[i] - (want.dx[i] + drv[i])) <= 1e-5 * (1 + Math.abs(want.dx[i])), `module dx[${i}]`);
  }
  void y;
});

test("residual backward in 16 bits: the norm's dx rounded to the dtype, then the sum rounded (the unfused backward + add)", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 5, d = 40;
  for (const dtype of ["bf16", "f16"] as const) {
    for (const kind of ["rms", "layer"] as const) {
      using h = dev.tensor(randoms(rows * d, 41), [rows, d], { dtype });
      using w = dev.tensor(randoms(d, 42, 0.5, 1.5), [d]);
      using b = dev.tensor(randoms(d, 43), [d]);
      using dy = dev.tensor(randoms(rows * d, 44), [rows, d], { dtype });
      // dResidual of the norm's dx's magnitude, so that the sums cancel and a single rounding would differ.
      using dRes = dev.tensor(randoms(rows * d, 45, -3, 3), [rows, d], { dtype });
      using fwd = kind === "rms"
        ? rmsNorm(h, { weight: w, stats: true })
        : layerNorm(h, { weight: w, bias: b, stats: true });
      const back = (dResidual?: Tensor) =>
        kind === "rms"
          ? rmsNormBackward(dy, h, { rstd: fwd.rstd, weight: w, dResidual })
          : layerNormBackward(dy, h, { mean: fwd.mean!, rstd: fwd.rstd, weight: w, bias: b, dResidual });
      const plain = back(), fused = back(dRes);
      using _p = plain.dx,
        _pw = plain.dweight,
        _pb = plain.dbias,
        _f = fused.dx,
        _fw = fused.dweight,
        _fb = fused.dbias;
      // The add in the dtype on the device: the same tensor written with the f32 sums rounds them once more.
      const normDx = plain.dx.readSync(), add = dRes.readSync();
      using want = dev.tensor(normDx.map((v, i) => Math.fround(v + add[i])), [rows, d], { dtype });
      assert.deepEqual(fused.dx.readBitsSync(), want.readBitsSync(), `${kind} ${dtype}`);
      assert.deepEqual(fused.dweight!.readSync(), plain.dweight!.readSync(), `${kind} ${dtype} dweight`);
    }
  }
});

test("the modules on a head view (rows on two levels): forward keeps a copy, backward equals the contiguous one's", () => {
  using dev = Device.open({ backend: "cpu" });
  const tokens = 3, heads = 4, hd = 8, width = 6 * hd; // heads 0..3 of 6 per token, the rest left out
  using qkv = dev.tensor(randoms(tokens * width, 41), [tokens, width]);
  const q = qkv.view([tokens, heads, hd], { strides: [width, hd, 1] });
  using qc = dev.tensor(q.readSync(), [tokens, heads, hd]);
  using dy = dev.tensor(randoms(tokens * heads * hd, 42), [tokens, heads, hd]);
  const wv = randoms(hd, 43, 0.5, 1.5);
  const grads: Float32Array[][] = [];
  for (const x of [q, qc]) {
    using m = new RMSNorm(dev, hd);
    m.load({ weight: wv });
    using y = m.forward(x, { residual: null as never });
    using dx = m.backward(dy);
    grads.push([y.readSync(), dx.readSync(), m.weightGrad!.readSync()]);
  }
  for (let k = 0; k < 3; k++) assert.deepEqual(grads[0][k], grads[1][k], ["y", "dx", "dweight"][k]);
});

test("fused options refused with a typed error naming the argument; a refused call writes nothing", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 3, d = 16;
  using x = dev.tensor(randoms(rows * d, 41), [rows, d], { dtype: "bf16" });
  using res = dev.tensor(randoms(rows * d, 42), [rows, d], { dtype: "bf16" });
  using resF32 = dev.tensor(randoms(rows * d, 43), [rows, d]);
  using w = dev.tensor(randoms(d, 44), [d]);
  using q8 = dev.empty([rows, d], { dtype: "int8" });
  using scaleT = dev.tensor([0.5, 0.5], [2]);
  const before = res.readSync();
  const arg = (name: string) => (e: unknown) => e instanceof ArgumentError && e.argument === name;
  assert.throws(() => rmsNorm(x, { residual: resF32 }), arg("residual.dtype"));
  assert.throws(() => rmsNorm(x, { residual: x }), arg("residual"));
  assert.throws(() => rmsNorm(x, { residualOut: res }), arg("residualOut"));
  assert.throws(() => rmsNorm(x, { residual: res, residualOut: resF32 }), arg("residualOut.dtype"));
  assert.throws(() => rmsNorm(x, { residual: res, quant: { dtype: "fp4" as never } }), arg("quant.dtype"));
  assert.throws(() => rmsNorm(x, { residual: res, quant: "fp8" as never }), arg("quant"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8", scale: 0 } }), arg("quant.scale"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8", scale: 1e-50 } }), arg("quant.scale"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8", scale: NaN } }), arg("quant.scale"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8", scale: scaleT } }), arg("quant.scale"));
  assert.throws(
    () => rmsNorm(x, { quant: { dtype: "int8", scale: 1, scaleUpperBound: 2 } as never }),
    arg("quant.scaleUpperBound"),
  );
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8", scaleUpperBound: -1 } }), arg("quant.scaleUpperBound"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8", scaleOut: w } }), arg("quant.scaleOut"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8" }, outDtype: "f32" } as never), arg("outDtype"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "fp8e4m3" }, out: q8 }), arg("out.dtype"));
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8" }, out: x }), arg("out.dtype"));
  assert.throws(() => rmsNorm(x, { residual: res, batchInvariant: "yes" as never }), arg("batchInvariant"));
  assert.throws(() => rmsNorm(x, { batchInvariant: 1 as never }), arg("batchInvariant"));
  for (const split of [0, 3, 1.5, "1", undefined]) { // x [3, 16]: 3 "heads", split from 1 to 2
    assert.throws(() => rmsNorm(x, { weight: w, weight2: w, split: split as number }), arg("split"));
  }
  assert.throws(() => rmsNorm(x, { weight2: w, split: 1 }), arg("weight"));
  assert.throws(() => rmsNorm(x, { weight: w, split: 1 }), arg("split"));
  assert.throws(() => rmsNorm(x, { residual: res, outDtype: "f32" }), UnsupportedError);
  assert.throws(() => layerNorm(x, { residual: res, check: true }), UnsupportedError);
  assert.throws(() => rmsNorm(q8, { residual: res }), arg("x.dtype"));
  assert.deepEqual(Array.from(res.readSync()), Array.from(before), "nothing written by a refused call");
});

test("null tensor options are not given: a plain call stays plain (its row limit, outDtype, normalizedShape)", () => {
  using dev = Device.open({ backend: "cpu" });
  using x = dev.tensor(randoms(32, 1), [4, 8], { dtype: "bf16" });
  const none = { residual: null, residualOut: null, weight2: null } as unknown as Record<never, never>;
  using plain = rmsNorm(x, { outDtype: "f32" });
  using nulls = rmsNorm(x, { ...none, outDtype: "f32" });
  assert.deepEqual(nulls.readSync(), plain.readSync());
  using plainLn = layerNorm(x, { normalizedShape: [4, 8] });
  using nullsLn = layerNorm(x, { ...none, normalizedShape: [4, 8] });
  assert.deepEqual(nullsLn.readSync(), plainLn.readSync());
  // Past the fused kernels' row limit (f32: 32768) but within the plain norms' (262144).
  using long = dev.tensor(randoms(40000, 2), [1, 40000]);
  using y = rmsNorm(long, none);
  assert.equal(y.d, 40000);
});

test("loadKernels({ fused, quant }) checks its options; the fused kernels on the CPU need no loading", async () => {
  using dev = Device.open({ backend: "cpu" });
  await loadKernels(dev, { fused: true });
  await loadKernels(dev, { quant: true });
  await assert.rejects(
    () => loadKernels(dev, { fused: "yes" as never }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "fused",
  );
  await assert.rejects(
    () => loadKernels(dev, { quant: 1 as never }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "quant",
  );
  void ({} as Tensor);
  void layerNormBackward;
});

test("result types follow the call: dynamic quant → { y, scale }, static → y, stats → NormResult", () => {
  using dev = Device.open({ backend: "cpu" });
  using x = dev.tensor(randoms(2 * 8, 51), [2, 8]);
  using r = rmsNorm(x, { quant: { dtype: "int8" } });
  const scale: Tensor = r.scale; // typed QuantNormResult: the scales are there without a cast
  using q = layerNorm(x, { quant: { dtype: "fp8e5m2", scale: 0.1 } });
  const y: Tensor = q; // typed Tensor
  using s = rmsNorm(x, { quant: { dtype: "int8", scale: 0.1 }, stats: true });
  const rstd: Tensor = s.rstd; // typed NormResult
  assert.deepEqual([scale.numel, y.dtype, rstd.numel, s.y.dtype], [2, "fp8e5m2", 2, "int8"]);
  // Dynamic with stats: the scales and the statistics, typed QuantNormResult.
  using ds = layerNorm(x, { quant: { dtype: "fp8e4m3" }, stats: true });
  const dsScale: Tensor = ds.scale;
  assert.deepEqual([dsScale.numel, ds.mean?.numel, ds.rstd?.numel], [2, 2, 2]);
  // A QuantOptions value (kind unknown to the type): either result, told apart by `scale`.
  const quant: QuantOptions = { dtype: "int8" };
  using u = rmsNorm(x, { quant, stats: true });
  assert.ok("scale" in u && u.scale.numel === 2 && u.rstd?.numel === 2);
  // A static scale with a dynamic-only option is a type error, and refused at run time.
  assert.throws(
    // @ts-expect-error scaleUpperBound is dynamic-only
    () => rmsNorm(x, { quant: { dtype: "int8", scale: 0.1, scaleUpperBound: 1 } }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "quant.scaleUpperBound",
  );
  // quant with outDtype (quant.dtype is y's dtype) is a type error in every form, and refused at run time.
  const isOutDtype = (e: unknown) => e instanceof ArgumentError && e.argument === "outDtype";
  // @ts-expect-error outDtype with dynamic quant
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8" }, outDtype: "f32" }), isOutDtype);
  // @ts-expect-error outDtype with static quant
  assert.throws(() => layerNorm(x, { quant: { dtype: "int8", scale: 0.1 }, outDtype: "f16" }), isOutDtype);
  // @ts-expect-error outDtype with static quant and stats
  assert.throws(() => rmsNorm(x, { quant: { dtype: "int8", scale: 0.1 }, stats: true, outDtype: "f32" }), isOutDtype);
  // @ts-expect-error outDtype with a QuantOptions value
  assert.throws(() => layerNorm(x, { quant, outDtype: "f32" }), isOutDtype);
  // Without quant, outDtype stays a plain option (typed Tensor).
  using f = rmsNorm(x, { outDtype: "f16" });
  assert.equal(f.dtype, "f16");
});

test("quantError: one step of the dtype, plus 8 f32 ulps of y's terms carried into q (the near-cancellation an H100 showed)", () => {
  // LayerNorm f32 [140, 5120] → fp8e5m2, dynamic, row 68: y = t·w + b = 1.74e-7 with t·w ≈ −0.964 and b ≈ 0.964; the
  // kernel gives q 2 steps from float64's: y's f32 error (a few ulps of 0.964) over the scale 7.15e-5.
  const y = 1.7410233565939848e-7, b = 0.9643197059631348, scale = 0.0000714658381184563;
  assert.ok(quantError(0.0048828125, 0.00244140625, y, b, scale, "fp8e5m2") <= 1);
  // The same codes without the cancellation (no bias): wrong.
  assert.ok(quantError(0.0048828125, 0.00244140625, y, 0, scale, "fp8e5m2") > 1);
  // A row of zeros with no bias (the floor scale) gets no slack: two steps from 0 are caught.
  const floor = 1 / (57344 * 512);
  assert.equal(quantError(0, 0, 0, 0, floor, "fp8e5m2"), 0);
  assert.ok(quantError(2 ** -15, 0, 0, 0, floor, "fp8e5m2") > 1, "two subnormal steps where 0 is expected");
  // int8 at a small scale (row max 1e-3): two codes apart is wrong.
  assert.ok(quantError(5, 3, 3 * (1e-3 / 127), 0, 1e-3 / 127, "int8") > 1);
  // fp8e5m2 at a row max of 4: 0.125 against 0.0078 is wrong.
  assert.ok(quantError(0.125, 0.0078125, 0.0078125 * (4 / 57344), 0.5, 4 / 57344, "fp8e5m2") > 1);
  // One step (the larger ulp of the two) is allowed at any magnitude.
  assert.ok(quantError(448, 416, 4.48, 0, 0.01, "fp8e4m3") <= 1);
  assert.ok(quantError(2 * 448, 448, 4.48, 0, 0.01, "fp8e4m3") > 1, "a code twice the reference");
});
