/**
 * The float64 reference of the fused features (ops/cpu.ts, ops/cpu_bwd.ts): the residual add and its rounding,
 * QK-norm's split weights, and quantization of y (static and dynamic scales, zero and NaN rows, the scale bound,
 * saturation). Hand-computed cases pin the formulas; random rows check the properties. GPU results are compared
 * with this reference elsewhere: q within one quantization step, scales within 1e-5 relative.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { dynamicScale, normForward, type NormKind, quantizeRow } from "../../ops/cpu.ts";
import { normBackward } from "../../ops/cpu_bwd.ts";
import { DTYPES, QUANT_DTYPES, quantMax, roundTo, toQuantBits, ulpOf } from "../../runtime/dtype.ts";
import { randoms, roundedTo } from "../fixtures/random.ts";

const KINDS: NormKind[] = ["layer", "rms"];
const f32 = Math.fround;

/** Asserts two arrays are equal element by element (NaN equals NaN; -0 equals 0). */
function sameValues(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const ok = got[i] === want[i] || (got[i] !== got[i] && want[i] !== want[i]);
    assert.ok(ok, `${what}[${i}]: ${got[i]} != ${want[i]}`);
  }
}

test("residual: h is the f32 sum rounded to the dtype, and y, mean, rstd are the norm of h", () => {
  const rows = 5, d = 96;
  for (const dtype of DTYPES) {
    for (const kind of KINDS) {
      const x = roundedTo(randoms(rows * d, 1, -3, 3), dtype), r = roundedTo(randoms(rows * d, 2, -3, 3), dtype);
      const weight = randoms(d, 3, 0.5, 1.5), bias = randoms(d, 4);
      const fused = normForward({ kind, rows, d, x, xStride: d, residual: r, dtype, weight, bias, eps: 1e-5 });
      // The separate add: an f32 add (Float32Array store), then rounding to the dtype.
      const sum = new Float32Array(rows * d);
      for (let i = 0; i < sum.length; i++) sum[i] = x[i] + r[i];
      const h = roundedTo(sum, dtype);
      sameValues(fused.h!, h, `${dtype} ${kind} h`);
      const plain = normForward({ kind, rows, d, x: h, xStride: d, weight, bias, eps: 1e-5 });
      sameValues(fused.y, plain.y, `${dtype} ${kind} y`);
      sameValues(fused.mean, plain.mean, "mean");
      sameValues(fused.rstd, plain.rstd, "rstd");
      if (dtype !== "f32") {
        // The rounding of h matters: the norm of the unrounded sum differs somewhere.
        const exact = new Float64Array(rows * d).map((_, i) => x[i] + r[i]);
        const unrounded = normForward({ kind, rows, d, x: exact, xStride: d, weight, bias, eps: 1e-5 });
        assert.ok(unrounded.y.some((v, i) => v !== fused.y[i]), `${dtype}: y is the norm of the rounded h`);
      }
    }
  }
});

test("residual: hand cases (ties to even after the f32 add), strides and offsets", () => {
  // bf16 has 7 mantissa bits: 1 + 2^-8 is a tie → 1; 1 + 3·2^-8 is a tie → 1 + 2^-6 (even).
  const bf = normForward({
    kind: "rms",
    rows: 1,
    d: 3,
    x: [1, 1, 4],
    xStride: 3,
    residual: [2 ** -8, 3 * 2 ** -8, -1],
    dtype: "bf16",
    eps: 1e-6,
  });
  assert.deepEqual([...bf.h!], [1, 1 + 2 ** -6, 3]);
  // f32: 1 + 2^-24 is a tie → 1.
  const f = normForward({ kind: "rms", rows: 1, d: 2, x: [1, 3], xStride: 2, residual: [2 ** -24, 1], eps: 0.5 });
  assert.deepEqual([...f.h!], [1, 4]);
  // rms of h = [1, 4]: mean of squares 8.5, + eps 0.5 → rstd 1/3.
  assert.equal(f.rstd[0], 1 / 3);
  assert.deepEqual([...f.y], [1 / 3, 4 / 3]);
  // Padded rows of x and residual: the same h as contiguous ones.
  const x = randoms(2 * 8, 5), r = randoms(2 * 8, 6);
  const xPad = new Float64Array(1 + 2 * 11), rPad = new Float64Array(3 + 2 * 9).fill(7);
  for (let row = 0; row < 2; row++) {
    for (let j = 0; j < 8; j++) {
      xPad[1 + row * 11 + j] = x[row * 8 + j];
      rPad[3 + row * 9 + j] = r[row * 8 + j];
    }
  }
  const contiguous = normForward({ kind: "layer", rows: 2, d: 8, x, xStride: 8, residual: r, eps: 1e-5 });
  const padded = normForward({
    kind: "layer",
    rows: 2,
    d: 8,
    x: xPad,
    xOffset: 1,
    xStride: 11,
    residual: rPad,
    residualOffset: 3,
    residualStride: 9,
    eps: 1e-5,
  });
  sameValues(padded.h!, contiguous.h!, "h");
  sameValues(padded.y, contiguous.y, "y");
  assert.throws(
    () => normForward({ kind: "rms", rows: 2, d: 8, x, xStride: 8, residual: r, residualStride: 9, eps: 1e-5 }),
    RangeError,
  );
});

test("QK split: heads below split take weight, the others weight2", () => {
  const tokens = 3, heads = 5, d = 16, rows = tokens * heads;
  const x = randoms(rows * d, 10), w = randoms(d, 11, 0.5, 2), w2 = randoms(d, 12, -2, -0.5), b = randoms(d, 13);
  for (const kind of KINDS) {
    for (const split of [0, 2, heads]) {
      const got = normForward({
        kind,
        rows,
        d,
        x,
        xStride: d,
        weight: w,
        weight2: w2,
        heads,
        split,
        bias: b,
        eps: 1e-6,
      });
      for (let r = 0; r < rows; r++) {
        const weight = r % heads < split ? w : w2;
        const one = normForward({
          kind,
          rows: 1,
          d,
          x: x.subarray(r * d, (r + 1) * d),
          xStride: d,
          weight,
          bias: b,
          eps: 1e-6,
        });
        sameValues(got.y.subarray(r * d, (r + 1) * d), one.y, `${kind} split ${split} row ${r}`);
      }
    }
  }
  const bad = (heads: number, split: number) => () =>
    normForward({ kind: "rms", rows, d, x, xStride: d, weight: w, weight2: w2, heads, split, eps: 1e-6 });
  assert.throws(bad(0, 0), RangeError);
  assert.throws(bad(5, 6), RangeError);
  assert.throws(bad(5, -1), RangeError);
  assert.throws(bad(2.5, 1), RangeError);
});

test("static quant: hand case, q = convert(f32(f32(y) / scale))", () => {
  // rms of [3, 4] with eps 0: rstd = 1/sqrt(12.5), y = [0.8485…, 1.1314…]; y / (1/64) = [54.30…, 72.40…].
  const x = [3, 4];
  const fp8 = normForward({
    kind: "rms",
    rows: 1,
    d: 2,
    x,
    xStride: 2,
    eps: 2 ** -60,
    quant: { dtype: "fp8e4m3", scale: 1 / 64 },
  });
  assert.deepEqual([...fp8.quant!.q], [56, 72]); // e4m3 spacing 4 in [32, 64), 8 in [64, 128)
  assert.deepEqual([...fp8.quant!.bytes], [toQuantBits(56, "fp8e4m3"), toQuantBits(72, "fp8e4m3")]);
  assert.deepEqual([...fp8.quant!.scale], [1 / 64]);
  const i8 = normForward({
    kind: "rms",
    rows: 1,
    d: 2,
    x,
    xStride: 2,
    eps: 2 ** -60,
    quant: { dtype: "int8", scale: 1 / 64 },
  });
  assert.deepEqual([...i8.quant!.q], [54, 72]);
  const e5 = normForward({
    kind: "rms",
    rows: 1,
    d: 2,
    x,
    xStride: 2,
    eps: 2 ** -60,
    quant: { dtype: "fp8e5m2", scale: 1 / 64 },
  });
  assert.deepEqual([...e5.quant!.q], [56, 80]); // e5m2 spacing 8 in [32, 64), 16 in [64, 128)
  // The static scale is used as an f32.
  const odd = quantizeRow([0.1, -0.7], "int8", { scale: 0.01 });
  assert.equal(odd.scale, f32(0.01));
  assert.deepEqual([...odd.q], [Math.round(f32(f32(0.1) / f32(0.01))), -70]);
});

test("dynamic quant: the scale in f32 steps, the row's largest |y| maps to ±qmax", () => {
  const rows = 6, d = 200;
  for (const dtype of QUANT_DTYPES) {
    const qmax = quantMax(dtype);
    for (const kind of KINDS) {
      const x = randoms(rows * d, 20, -4, 4), weight = randoms(d, 21, -1.5, 1.5);
      const out = normForward({ kind, rows, d, x, xStride: d, weight, eps: 1e-5, quant: { dtype } });
      const { q, scale } = out.quant!;
      for (let r = 0; r < rows; r++) {
        const y = out.y.subarray(r * d, (r + 1) * d);
        let amax = 0;
        for (const v of y) amax = Math.max(amax, Math.abs(f32(v)));
        const want = Math.max(f32(amax / qmax), f32(1 / (qmax * 512)));
        assert.equal(scale[r], want, `${dtype} ${kind} row ${r} scale`);
        assert.equal(dynamicScale(amax, dtype), want);
        const row = q.subarray(r * d, (r + 1) * d);
        assert.equal(Math.max(...row.map(Math.abs)), qmax, `${dtype} row ${r}: max |q|`);
        // Each q is yf / scale rounded: within half a step of the dtype there.
        for (let j = 0; j < d; j++) {
          const v = f32(f32(y[j]) / scale[r]);
          const step = Math.max(ulpOf(v, dtype), ulpOf(row[j], dtype));
          assert.ok(Math.abs(v - row[j]) <= step / 2, `${dtype} row ${r}[${j}]: ${v} → ${row[j]}`);
        }
        // A row quantized alone is the same (the scale is per row).
        const alone = quantizeRow(y, dtype);
        sameValues(alone.q, row, "row alone");
        assert.equal(alone.scale, scale[r]);
      }
    }
  }
});

test("dynamic quant: zero rows take the scale floor and q = 0; other rows are unaffected", () => {
  const rows = 4, d = 64;
  for (const dtype of QUANT_DTYPES) {
    for (const kind of KINDS) {
      const x = randoms(rows * d, 30);
      x.fill(0, 2 * d, 3 * d);
      const weight = randoms(d, 31); // some negative: a zero row's y has -0s
      const out = normForward({ kind, rows, d, x, xStride: d, weight, eps: 1e-5, quant: { dtype } });
      const { q, bytes, scale } = out.quant!;
      assert.equal(scale[2], f32(1 / (quantMax(dtype) * 512)), `${dtype} ${kind} zero-row scale`);
      for (let j = 2 * d; j < 3 * d; j++) {
        assert.ok(q[j] === 0, `q = ${q[j]}`); // +0 or -0
        assert.ok((bytes[j] & 0x7f) === 0, `a zero byte (+0 or, fp8, -0): ${bytes[j]}`);
      }
      for (const r of [0, 1, 3]) {
        const alone = quantizeRow(out.y.subarray(r * d, (r + 1) * d), dtype);
        assert.equal(scale[r], alone.scale);
        assert.ok(scale[r] > f32(1 / (quantMax(dtype) * 512)));
      }
    }
  }
});

test("dynamic quant: NaN is ignored by amax and quantizes to NaN (fp8) or 0 (int8)", () => {
  // A NaN weight makes one column NaN: the row's scale comes from the other elements.
  const d = 8, x = randoms(2 * d, 40), weight = Float64Array.from(randoms(d, 41, 0.5, 1.5));
  weight[3] = NaN;
  for (const dtype of QUANT_DTYPES) {
    const out = normForward({ kind: "rms", rows: 2, d, x, xStride: d, weight, eps: 1e-5, quant: { dtype } });
    const { q, bytes, scale } = out.quant!;
    for (let r = 0; r < 2; r++) {
      const finite = [...out.y.subarray(r * d, (r + 1) * d)].filter((v) => v === v);
      const amax = Math.max(...finite.map((v) => Math.abs(f32(v))));
      assert.equal(scale[r], f32(amax / quantMax(dtype)), `${dtype} row ${r}`);
      const j = r * d + 3;
      if (dtype === "int8") assert.equal(q[j], 0);
      else assert.ok(Number.isNaN(q[j]) && (bytes[j] & 0x7f) === toQuantBits(NaN, dtype), `${dtype} NaN byte`);
    }
  }
  // A NaN in x makes the whole row NaN: amax 0 → the floor; every q NaN (fp8) or 0 (int8).
  const xn = Float64Array.from(randoms(2 * d, 42));
  xn[d + 5] = NaN;
  for (const dtype of QUANT_DTYPES) {
    const out = normForward({ kind: "layer", rows: 2, d, x: xn, xStride: d, eps: 1e-5, quant: { dtype } });
    assert.equal(out.quant!.scale[1], f32(1 / (quantMax(dtype) * 512)));
    for (let j = d; j < 2 * d; j++) {
      const v = out.quant!.q[j];
      assert.ok(dtype === "int8" ? v === 0 : Number.isNaN(v), `${dtype} [${j}] = ${v}`);
    }
    assert.ok(out.quant!.scale[0] > out.quant!.scale[1], "the finite row keeps its own scale");
  }
  // Infinity: amax is Inf, so is the scale without a bound (finite yf → 0, Inf/Inf → NaN); a bound caps it.
  const inf = quantizeRow([1, Infinity, -2], "fp8e4m3");
  assert.equal(inf.scale, Infinity);
  assert.ok(inf.q[0] === 0 && Number.isNaN(inf.q[1]) && inf.q[2] === 0);
  const capped = quantizeRow([1, Infinity, -2], "fp8e4m3", { scaleUpperBound: 1 });
  assert.deepEqual([...capped.q], [1, 448, -2]);
});

test("dynamic quant: scaleUpperBound clamps the scale, and q saturates", () => {
  const d = 32, x = randoms(3 * d, 50, -2, 2);
  for (const dtype of QUANT_DTYPES) {
    const free = normForward({ kind: "layer", rows: 3, d, x, xStride: d, eps: 1e-5, quant: { dtype } }).quant!;
    const ub = Math.min(...free.scale) / 4;
    const out = normForward({
      kind: "layer",
      rows: 3,
      d,
      x,
      xStride: d,
      eps: 1e-5,
      quant: { dtype, scaleUpperBound: ub },
    });
    const qmax = quantMax(dtype);
    for (let r = 0; r < 3; r++) {
      assert.equal(out.quant!.scale[r], f32(ub));
      const row = out.quant!.q.subarray(r * d, (r + 1) * d);
      const y = out.y.subarray(r * d, (r + 1) * d);
      for (let j = 0; j < d; j++) {
        const v = f32(f32(y[j]) / f32(ub));
        if (v >= qmax) assert.equal(row[j], qmax);
        else if (v <= -qmax) assert.equal(row[j], dtype === "int8" && v <= -128 ? -128 : -qmax);
        else assert.equal(row[j], roundTo(v, dtype));
      }
      assert.ok(row.some((v) => Math.abs(v) >= qmax), `${dtype}: some element saturates`);
    }
  }
});

test("int8: round half to even and clamp to [-128, 127]", () => {
  const got = quantizeRow([0.5, 1.5, 2.5, -2.5, 300, -300, 126.6], "int8", { scale: 1 });
  assert.deepEqual([...got.q], [0, 2, 2, -2, 127, -128, 127]);
  assert.deepEqual([...got.bytes], [0, 2, 2, 254, 127, 128, 127]);
});

test("quant options are checked", () => {
  const x = randoms(8, 60);
  const run = (quant: object) => () =>
    normForward({ kind: "rms", rows: 1, d: 8, x, xStride: 8, eps: 1e-5, quant: quant as never });
  for (const scale of [0, -1, NaN, Infinity, 1e-50, 1e39]) assert.throws(run({ dtype: "int8", scale }), RangeError);
  for (const scaleUpperBound of [0, -1, NaN]) assert.throws(run({ dtype: "int8", scaleUpperBound }), RangeError);
  assert.throws(run({ dtype: "f16" }), RangeError);
});

test("backward: dResidual is added to dx", () => {
  const rows = 3, d = 24;
  for (const kind of KINDS) {
    const h = randoms(rows * d, 70), dy = randoms(rows * d, 71), weight = randoms(d, 72);
    const dr = randoms(rows * 30, 73);
    const base = normBackward({ kind, rows, d, x: h, xStride: d, dy, dyStride: d, weight, eps: 1e-5 });
    const fused = normBackward({
      kind,
      rows,
      d,
      x: h,
      xStride: d,
      dy,
      dyStride: d,
      weight,
      eps: 1e-5,
      dResidual: dr,
      dResidualStride: 30,
    });
    for (let r = 0; r < rows; r++) {
      for (let j = 0; j < d; j++) assert.equal(fused.dx[r * d + j], base.dx[r * d + j] + dr[r * 30 + j]);
    }
    sameValues(fused.dweight, base.dweight, "dweight");
    sameValues(fused.dbias, base.dbias, "dbias");
    assert.throws(
      () =>
        normBackward({ kind, rows, d, x: h, xStride: d, dy, dyStride: d, eps: 1e-5, dResidual: dr.subarray(0, 50) }),
      RangeError,
    );
  }
});
