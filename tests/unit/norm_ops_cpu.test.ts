import { mulberry32 } from "../fixtures/random.ts";
/**
 * layerNorm / rmsNorm on the CPU device, against cpuNormForward (ops/cpu.ts) computed here from the float64
 * inputs (rounded to the tensors' dtypes, as the device stores them).
 *
 * Tolerances (stated once, used everywhere):
 *   - f32 output:       |y − ref| ≤ 1e-5 · (1 + |ref|)
 *   - f16/bf16 output:  |y − roundTo(ref, dtype)| ≤ 1 ulp of dtype at roundTo(ref, dtype)   (ulpOf, runtime/dtype.ts)
 *   - mean / rstd (f32): as f32 output.
 * Inputs come from a seeded PRNG and are never zero; every `out` is poisoned with NaN bits first, so an
 * element that is not written fails (NaN never passes a ≤ comparison).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { cpuNormForward, layerNorm, rmsNorm } from "../../mod.ts";
import { Device } from "../../runtime/device.ts";
import { type DType, roundTo, ulpOf } from "../../runtime/dtype.ts";
import { ArgumentError, DisposedError } from "../../runtime/errors.ts";
import { Tensor } from "../../runtime/tensor.ts";

const F32_REL = 1e-5;
const DTYPES: readonly DType[] = ["f32", "f16", "bf16"];
type Kind = "layer" | "rms";
const KINDS: readonly Kind[] = ["layer", "rms"];
const NAN32 = 0x7fc00000;

/** mulberry32, mapped to ±[0.05, 2): never zero, both signs. */
function rng(seed: number): () => number {
  const next = mulberry32(seed);
  return () => {
    const u = next();
    const mag = 0.05 + 1.95 * Math.abs(u * 2 - 1);
    return u < 0.5 ? -mag : mag;
  };
}

function randoms(n: number, seed: number, scale = 1, shift = 0): number[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => r() * scale + shift);
}

/** Fills the tensor's whole buffer with NaN bits (f32 0x7fc00000; for 2-byte dtypes 0x7fc0 halves / 0xffff: NaN). */
function poison(t: Tensor): void {
  if (t.buffer.byteLength % 4 === 0) t.buffer.fill32(NAN32);
  else t.buffer.fill(0xff);
}

function bufferBytes(t: Tensor): Uint8Array {
  const b = new Uint8Array(t.buffer.byteLength);
  t.buffer.read(b);
  return b;
}

interface RefOptions {
  kind: Kind;
  x: number[];
  shape: readonly number[];
  xDtype: DType;
  weight?: number[];
  wDtype?: DType;
  bias?: number[];
  bDtype?: DType;
  eps: number;
}

/** The float64 reference of the stored (rounded) inputs. */
function reference(o: RefOptions) {
  const d = o.shape[o.shape.length - 1];
  const rows = o.shape.slice(0, -1).reduce((a, n) => a * n, 1);
  return cpuNormForward({
    kind: o.kind,
    rows,
    d,
    x: o.x.map((v) => roundTo(v, o.xDtype)),
    xStride: d,
    weight: o.weight?.map((v) => roundTo(v, o.wDtype ?? "f32")),
    bias: o.kind === "layer" ? o.bias?.map((v) => roundTo(v, o.bDtype ?? "f32")) : undefined,
    eps: o.eps,
  });
}

function assertMatches(got: ArrayLike<number>, want: ArrayLike<number>, dtype: DType, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const r = want[i];
    let expect: number, tol: number;
    if (dtype === "f32") {
      expect = r;
      tol = F32_REL * (1 + Math.abs(r));
    } else {
      expect = roundTo(r, dtype);
      tol = ulpOf(expect, dtype);
    }
    const ok = Math.abs(got[i] - expect) <= tol; // false for NaN (an unwritten, poisoned element)
    if (!ok) assert.fail(`${what}[${i}]: got ${got[i]}, expected ${expect} ± ${tol} (${dtype}, float64 ref ${r})`);
  }
}

type ErrorClass = new (...args: never[]) => Error;

function throwsNaming(fn: () => unknown, cls: ErrorClass, argument: string): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e instanceof Error ? `${e.name}: ${e.message}` : e}`);
    assert.ok(e.message.includes(argument), `message "${e.message}" should name ${argument}`);
    if (e instanceof ArgumentError) assert.equal(e.argument, argument);
    return true;
  });
}

const norm = (kind: Kind) => (kind === "layer" ? layerNorm : rmsNorm);

// ---- results ------------------------------------------------------------------------------------------------

test("f32: layerNorm/rmsNorm with weight and bias match the float64 reference (into a poisoned out and a new tensor)", () => {
  using dev = Device.open({ backend: "cpu" });
  let seed = 10;
  for (const kind of KINDS) {
    for (const [rows, d] of [[1, 1], [3, 2], [5, 7], [4, 64], [2, 1000], [1, 4099]]) {
      const x = randoms(rows * d, seed++, 3, 0.5);
      const w = randoms(d, seed++);
      const b = randoms(d, seed++);
      using xt = dev.tensor(x, [rows, d]);
      using wt = dev.tensor(w, [d]);
      using bt = dev.tensor(b, [d]);
      const ref = reference({ kind, x, shape: [rows, d], xDtype: "f32", weight: w, bias: b, eps: 1e-5 });
      using out = dev.empty([rows, d]);
      poison(out);
      const y = norm(kind)(xt, { weight: wt, bias: kind === "layer" ? bt : undefined, eps: 1e-5, out });
      assert.equal(y, out, "returns out");
      assertMatches(out.readSync(), ref.y, "f32", `${kind} [${rows},${d}] out`);
      using fresh = norm(kind)(xt, { weight: wt, bias: kind === "layer" ? bt : undefined, eps: 1e-5 });
      assert.notEqual(fresh, xt);
      assert.deepEqual(fresh.shape, [rows, d]);
      assert.equal(fresh.dtype, "f32");
      assertMatches(fresh.readSync(), ref.y, "f32", `${kind} [${rows},${d}] new`);
      assertMatches(xt.readSync(), x.map(Math.fround), "f32", "x is not modified");
    }
  }
});

test("without weight/bias; rmsNorm with weight only; layerNorm with bias only", () => {
  using dev = Device.open({ backend: "cpu" });
  const x = randoms(6 * 33, 3, 2, -1);
  using xt = dev.tensor(x, [6, 33]);
  for (const kind of KINDS) {
    using out = dev.empty([6, 33]);
    poison(out);
    norm(kind)(xt, { out, eps: 1e-3 });
    assertMatches(out.readSync(), reference({ kind, x, shape: [6, 33], xDtype: "f32", eps: 1e-3 }).y, "f32", kind);
  }
  const w = randoms(33, 4);
  using wt = dev.tensor(w, [33]);
  using out = dev.empty([6, 33]);
  poison(out);
  rmsNorm(xt, { weight: wt, out, eps: 1e-3 });
  assertMatches(
    out.readSync(),
    reference({ kind: "rms", x, shape: [6, 33], xDtype: "f32", weight: w, eps: 1e-3 }).y,
    "f32",
    "rms w",
  );
  poison(out);
  layerNorm(xt, { bias: wt, out, eps: 1e-3 });
  assertMatches(
    out.readSync(),
    reference({ kind: "layer", x, shape: [6, 33], xDtype: "f32", bias: w, eps: 1e-3 }).y,
    "f32",
    "layer bias only",
  );
});

test("default eps: 1e-5 for layerNorm, 1e-6 for rmsNorm (rows with tiny variance, where eps matters)", () => {
  using dev = Device.open({ backend: "cpu" });
  // variance ~1e-6 and mean square ~1e-6: eps 1e-5 vs 1e-6 changes y by a factor of ~2–3
  const x = randoms(4 * 16, 5, 1e-3);
  using xt = dev.tensor(x, [4, 16]);
  for (const [kind, eps] of [["layer", 1e-5], ["rms", 1e-6]] as const) {
    using out = dev.empty([4, 16]);
    poison(out);
    norm(kind)(xt, { out });
    assertMatches(
      out.readSync(),
      reference({ kind, x, shape: [4, 16], xDtype: "f32", eps }).y,
      "f32",
      `${kind} default eps`,
    );
    const other = reference({ kind, x, shape: [4, 16], xDtype: "f32", eps: kind === "layer" ? 1e-6 : 1e-5 }).y;
    assert.ok(Math.abs(out.readSync()[0] - other[0]) > 1e-2, "the test input is sensitive to eps");
  }
});

test("f16/bf16/f32 inputs × output dtypes × param dtypes (f32 or x's)", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 3, d = 50;
  let seed = 100;
  for (const kind of KINDS) {
    for (const xDtype of DTYPES) {
      for (const outDtype of DTYPES) {
        for (const pDtype of new Set<DType>(["f32", xDtype])) {
          const x = randoms(rows * d, seed++, 4, 1);
          const w = randoms(d, seed++);
          const b = randoms(d, seed++);
          using xt = dev.tensor(x, [rows, d], { dtype: xDtype });
          using wt = dev.tensor(w, [d], { dtype: pDtype });
          using bt = dev.tensor(b, [d], { dtype: pDtype });
          const ref = reference({
            kind,
            x,
            shape: [rows, d],
            xDtype,
            weight: w,
            wDtype: pDtype,
            bias: b,
            bDtype: pDtype,
            eps: 1e-5,
          });
          const what = `${kind} x=${xDtype} out=${outDtype} params=${pDtype}`;
          // into a poisoned out (its dtype is the output dtype)
          using out = dev.empty([rows, d], { dtype: outDtype });
          poison(out);
          norm(kind)(xt, { weight: wt, bias: kind === "layer" ? bt : undefined, out, eps: 1e-5 });
          assertMatches(out.readSync(), ref.y, outDtype, `${what} (out)`);
          // a new tensor of outDtype
          using y = norm(kind)(xt, { weight: wt, bias: kind === "layer" ? bt : undefined, outDtype, eps: 1e-5 });
          assert.equal(y.dtype, outDtype);
          assertMatches(y.readSync(), ref.y, outDtype, `${what} (outDtype)`);
        }
      }
      // no outDtype and no out: the output has x's dtype
      using xt = dev.tensor(randoms(d, seed++), [1, d], { dtype: xDtype });
      using y = norm(kind)(xt);
      assert.equal(y.dtype, xDtype);
    }
  }
});

test("stats: true gives mean and rstd per row (rmsNorm: mean is 0)", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const kind of KINDS) {
    for (const xDtype of DTYPES) {
      const x = randoms(2 * 3 * 40, 7, 2, 0.75);
      using xt = dev.tensor(x, [2, 3, 40], { dtype: xDtype });
      const ref = reference({ kind, x, shape: [2, 3, 40], xDtype, eps: 1e-5 });
      using out = dev.empty([2, 3, 40], { dtype: xDtype });
      poison(out);
      const r = norm(kind)(xt, { stats: true, out, eps: 1e-5 });
      try {
        assert.equal(r.y, out);
        assert.deepEqual(r.mean.shape, [2, 3], "stats have the leading dimensions");
        assert.deepEqual(r.rstd.shape, [2, 3]);
        assert.equal(r.mean.dtype, "f32");
        assert.equal(r.rstd.dtype, "f32");
        assertMatches(out.readSync(), ref.y, xDtype, `${kind} ${xDtype} y`);
        assertMatches(r.mean.readSync(), ref.mean, "f32", `${kind} ${xDtype} mean`);
        assertMatches(r.rstd.readSync(), ref.rstd, "f32", `${kind} ${xDtype} rstd`);
        if (kind === "rms") assert.deepEqual([...r.mean.readSync()], [0, 0, 0, 0, 0, 0]);
        else assert.ok(r.mean.readSync().every((m) => m !== 0), "layer means of shifted data are not 0");
      } finally {
        r.mean.close();
        r.rstd.close();
      }
    }
  }
  // a 1-D x has one row: stats of shape [1]
  const x = randoms(9, 8);
  using xt = dev.tensor(x, [9]);
  const r = layerNorm(xt, { stats: true });
  using _y = r.y, _m = r.mean, _r = r.rstd;
  assert.deepEqual(r.mean.shape, [1]);
  const ref = reference({ kind: "layer", x, shape: [9], xDtype: "f32", eps: 1e-5 });
  assertMatches(r.mean.readSync(), ref.mean, "f32", "1-D mean");
  assertMatches(r.rstd.readSync(), ref.rstd, "f32", "1-D rstd");
});

test("in place (out: x) gives the result of the original values", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const kind of KINDS) {
    for (const dtype of DTYPES) {
      const x = randoms(4 * 24, 9, 3);
      const w = randoms(24, 10);
      const ref = reference({ kind, x, shape: [4, 24], xDtype: dtype, weight: w, wDtype: dtype, eps: 1e-5 });
      using xt = dev.tensor(x, [4, 24], { dtype });
      using wt = dev.tensor(w, [24], { dtype });
      const y = norm(kind)(xt, { out: xt, weight: wt });
      assert.equal(y, xt);
      assertMatches(xt.readSync(), ref.y, dtype, `${kind} ${dtype} in place`);
    }
  }
  // in place on a row-strided x: the padding stays as it was
  const x = randoms(3 * 5, 11);
  using xt = dev.tensor(x, [3, 5], { rowStride: 8 });
  const raw = bufferBytes(xt);
  const padding = new Float32Array(raw.buffer);
  for (let r = 0; r < 2; r++) padding.fill(NaN, r * 8 + 5, r * 8 + 8);
  xt.buffer.write(raw);
  rmsNorm(xt, { out: xt });
  assertMatches(
    xt.readSync(),
    reference({ kind: "rms", x, shape: [3, 5], xDtype: "f32", eps: 1e-6 }).y,
    "f32",
    "strided in place",
  );
  const after = new Float32Array(bufferBytes(xt).buffer);
  for (let r = 0; r < 2; r++) {
    assert.ok(after.subarray(r * 8 + 5, r * 8 + 8).every(Number.isNaN), `row ${r} padding kept`);
  }
});

test("strided rows: x with rowStride > d; strided out keeps its padding poisoned", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const kind of KINDS) {
    for (const dtype of DTYPES) {
      const rows = 5, d = 13;
      const x = randoms(rows * d, 12, 2, -0.5);
      using xt = dev.tensor(x, [rows, d], { dtype, rowStride: 20 });
      // the gaps of x hold garbage that must not be read
      const raw = bufferBytes(xt);
      const w = dtype === "f32" ? 4 : 2;
      for (let r = 0; r < rows - 1; r++) raw.fill(0x7b, (r * 20 + d) * w, (r + 1) * 20 * w);
      xt.buffer.write(raw);
      const ref = reference({ kind, x, shape: [rows, d], xDtype: dtype, eps: 1e-5 });
      using out = dev.empty([rows, d], { dtype });
      poison(out);
      norm(kind)(xt, { out, eps: 1e-5 });
      assertMatches(out.readSync(), ref.y, dtype, `${kind} ${dtype} strided x`);
      using sout = dev.empty([rows, d], { dtype, rowStride: 16 });
      poison(sout);
      const poisoned = bufferBytes(sout);
      norm(kind)(xt, { out: sout, eps: 1e-5 });
      assertMatches(sout.readSync(), ref.y, dtype, `${kind} ${dtype} strided out`);
      const bytes = bufferBytes(sout);
      for (let r = 0; r < rows - 1; r++) {
        const [a, z] = [(r * 16 + d) * w, (r + 1) * 16 * w];
        assert.deepEqual(bytes.subarray(a, z), poisoned.subarray(a, z), `${dtype} out padding row ${r} untouched`);
      }
    }
  }
});

test("x and out at element offsets inside larger buffers (views built with new Tensor)", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 3, d = 10;
  const x = randoms(rows * d, 13);
  using buf = dev.alloc(4 * 200);
  buf.fill32(NAN32);
  const xt = new Tensor(buf, [rows, d], { offset: 7 });
  xt.write(x);
  const out = new Tensor(buf, [rows, d], { offset: 100, rowStride: 12 }); // after x: no overlap
  layerNorm(xt, { out });
  assertMatches(
    out.readSync(),
    reference({ kind: "layer", x, shape: [rows, d], xDtype: "f32", eps: 1e-5 }).y,
    "f32",
    "offset",
  );
  const all = new Float32Array(200);
  buf.read(all);
  assert.ok(all.subarray(0, 7).every(Number.isNaN), "before x untouched");
  assert.ok(all.subarray(37, 100).every(Number.isNaN), "between x and out untouched");
  assert.ok(all.subarray(100 + 2 * 12 + d).every(Number.isNaN), "after out untouched");
});

test("3-D input: rows are the product of the leading dimensions", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const kind of KINDS) {
    const x = randoms(2 * 3 * 4 * 17, 14, 5);
    const w = randoms(17, 15);
    using xt = dev.tensor(x, [2, 3, 4, 17]);
    using wt = dev.tensor(w, [17]);
    using out = dev.empty([2, 3, 4, 17]);
    poison(out);
    norm(kind)(xt, { out, weight: wt });
    const eps = kind === "layer" ? 1e-5 : 1e-6;
    assertMatches(
      out.readSync(),
      reference({ kind, x, shape: [2, 3, 4, 17], xDtype: "f32", weight: w, eps }).y,
      "f32",
      kind,
    );
    using y = norm(kind)(xt, { weight: wt });
    assert.deepEqual(y.shape, [2, 3, 4, 17]);
  }
});

test("empty batch (shape [0, 8]): no error, an empty result (and empty stats)", () => {
  using dev = Device.open({ backend: "cpu" });
  using xt = dev.tensor([], [0, 8]);
  using wt = dev.tensor(randoms(8, 16), [8]);
  for (const kind of KINDS) {
    using y = norm(kind)(xt, { weight: wt });
    assert.deepEqual(y.shape, [0, 8]);
    assert.equal(y.readSync().length, 0);
    const r = norm(kind)(xt, { stats: true });
    using _y = r.y, _m = r.mean, _r = r.rstd;
    assert.deepEqual(r.mean.shape, [0]);
    assert.equal(r.rstd.readSync().length, 0);
    using x3 = dev.tensor([], [2, 0, 8]);
    using y3 = norm(kind)(x3, { out: dev.empty([2, 0, 8]) });
    assert.deepEqual(y3.shape, [2, 0, 8]);
  }
});

test("D = 262144 (the maximum) works", () => {
  using dev = Device.open({ backend: "cpu" });
  const d = 262144;
  const x = randoms(d, 17, 1, 3);
  using xt = dev.tensor(x, [1, d]);
  using out = dev.empty([1, d]);
  poison(out);
  layerNorm(xt, { out });
  assertMatches(
    out.readSync(),
    reference({ kind: "layer", x, shape: [1, d], xDtype: "f32", eps: 1e-5 }).y,
    "f32",
    "D max",
  );
});

// ---- validation: each case throws the right class naming the argument, and writes / allocates nothing ----

interface Setup {
  dev: Device;
  x: Tensor;
  out: Tensor;
  /** Checks: out still fully poisoned and x unchanged. */
  untouched(): void;
}

function setup(dev: Device, shape: readonly number[] = [4, 8], dtype: DType = "f32"): Setup {
  const n = shape.reduce((a, b) => a * b, 1);
  const x = dev.tensor(randoms(n, 99), shape, { dtype });
  const out = dev.empty(shape, { dtype });
  poison(out);
  const xBefore = bufferBytes(x);
  const outBefore = bufferBytes(out);
  return {
    dev,
    x,
    out,
    untouched() {
      assert.deepEqual(bufferBytes(out), outBefore, "out is still poisoned");
      assert.deepEqual(bufferBytes(x), xBefore, "x is unchanged");
    },
  };
}

/** fn throws `cls` naming `argument`; out and x are untouched and nothing was allocated on the device. */
function rejectsOnce(s: Setup, fn: () => unknown, cls: ErrorClass, argument: string): void {
  const live = s.dev.owner.liveCount;
  throwsNaming(fn, cls, argument);
  assert.equal(s.dev.owner.liveCount, live, "nothing was allocated (or leaked)");
  s.untouched();
}

/** rejectsOnce for layerNorm and rmsNorm, each given the poisoned out. */
function rejects(s: Setup, run: (kind: Kind, out: Tensor) => unknown, cls: ErrorClass, argument: string): void {
  for (const kind of KINDS) rejectsOnce(s, () => run(kind, s.out), cls, argument);
}

test("validation: weight length ≠ D (and weight not 1-row) → ArgumentError(weight)", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev);
  using w7 = dev.tensor(randoms(7, 1), [7]);
  using w9 = dev.tensor(randoms(9, 1), [9]);
  using w2x4 = dev.tensor(randoms(8, 1), [2, 4]);
  for (const w of [w7, w9, w2x4]) rejects(s, (k, out) => norm(k)(s.x, { weight: w, out }), ArgumentError, "weight");
  rejectsOnce(s, () => layerNorm(s.x, { bias: w9 }), ArgumentError, "bias"); // no out: nothing allocated either
});

test("validation: bias (or weight) with a dtype that is neither f32 nor x's → ArgumentError(bias.dtype)", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev);
  using b16 = dev.tensor(randoms(8, 2), [8], { dtype: "f16" });
  using bb16 = dev.tensor(randoms(8, 2), [8], { dtype: "bf16" });
  rejectsOnce(s, () => layerNorm(s.x, { bias: b16, out: s.out }), ArgumentError, "bias.dtype");
  rejectsOnce(s, () => layerNorm(s.x, { bias: bb16, out: s.out }), ArgumentError, "bias.dtype");
  rejects(s, (k, out) => norm(k)(s.x, { weight: b16, out }), ArgumentError, "weight.dtype");
  // an f16 x accepts f32 params but not bf16 ones
  const h = setup(dev, [2, 8], "f16");
  rejects(h, (k, out) => norm(k)(h.x, { weight: bb16, out }), ArgumentError, "weight.dtype");
});

test("validation: weight and bias of different dtypes → ArgumentError(bias.dtype) (the kernels read both as one)", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev, [4, 8], "bf16");
  using w = dev.tensor(randoms(8, 2), [8], { dtype: "f32" });
  using b = dev.tensor(randoms(8, 3), [8], { dtype: "bf16" });
  rejectsOnce(s, () => layerNorm(s.x, { weight: w, bias: b, out: s.out }), ArgumentError, "bias.dtype");
  rejectsOnce(s, () => layerNorm(s.x, { weight: b, bias: w, out: s.out }), ArgumentError, "bias.dtype");
});

test("validation: eps ≤ 0, NaN, ±Infinity or not a number → ArgumentError(eps)", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev);
  for (const eps of [0, -0, -1e-5, -Infinity, NaN, Infinity, "1e-5", 1n]) {
    // deno-lint-ignore no-explicit-any
    rejects(s, (k, out) => norm(k)(s.x, { eps: eps as any, out }), ArgumentError, "eps");
  }
});

test("validation: D = 0 → ArgumentError(x)", () => {
  using dev = Device.open({ backend: "cpu" });
  using buf = dev.alloc(64);
  buf.fill32(NAN32);
  using x = dev.tensor([], [3, 0]);
  const out = new Tensor(buf, [3, 0]);
  const live = dev.owner.liveCount;
  for (const kind of KINDS) {
    throwsNaming(() => norm(kind)(x, { out }), ArgumentError, "x");
    throwsNaming(() => norm(kind)(x), ArgumentError, "x");
  }
  assert.ok(new Float32Array(bufferBytes(out).buffer).every(Number.isNaN), "nothing written");
  assert.equal(dev.owner.liveCount, live);
});

test("validation: D > 262144 → ArgumentError(x)", () => {
  using dev = Device.open({ backend: "cpu" });
  using x = dev.empty([1, 262145]);
  x.buffer.fill32(0x3f800000);
  using out = dev.empty([1, 262145]);
  poison(out);
  const live = dev.owner.liveCount;
  for (const kind of KINDS) throwsNaming(() => norm(kind)(x, { out }), ArgumentError, "x");
  assert.ok(out.readSync().every(Number.isNaN), "nothing written");
  assert.equal(dev.owner.liveCount, live);
});

test("validation: out of the wrong shape → ArgumentError(out)", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev, [4, 8]);
  for (const shape of [[4, 9], [8, 4], [32], [1, 4, 8], [3, 8]]) {
    using bad = dev.empty(shape);
    poison(bad);
    const before = bufferBytes(bad);
    for (const kind of KINDS) rejectsOnce(s, () => norm(kind)(s.x, { out: bad }), ArgumentError, "out");
    assert.deepEqual(bufferBytes(bad), before, `out [${shape}] still poisoned`);
  }
});

test("validation: out of the wrong dtype → ArgumentError(out.dtype)", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev, [4, 8], "f32");
  using o16 = dev.empty([4, 8], { dtype: "f16" });
  poison(o16);
  const before = bufferBytes(o16);
  for (const kind of KINDS) {
    rejectsOnce(s, () => norm(kind)(s.x, { out: o16, outDtype: "f32" }), ArgumentError, "out.dtype");
    rejectsOnce(s, () => norm(kind)(s.x, { out: s.out, outDtype: "bf16" }), ArgumentError, "out.dtype");
    // deno-lint-ignore no-explicit-any
    rejectsOnce(s, () => norm(kind)(s.x, { out: s.out, outDtype: "f64" as any }), ArgumentError, "outDtype");
  }
  assert.deepEqual(bufferBytes(o16), before);
});

test("validation: out partially overlapping x (same DeviceBuffer) → ArgumentError(out)", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 4, d = 8;
  using buf = dev.alloc(4 * (2 * rows * d));
  buf.fill32(NAN32);
  const x = new Tensor(buf, [rows, d], { offset: 0 });
  x.write(randoms(rows * d, 5));
  const before = new Uint8Array(buf.byteLength);
  buf.read(before);
  const live = dev.owner.liveCount;
  const overlapping = [
    new Tensor(buf, [rows, d], { offset: d }), // shifted by a row
    new Tensor(buf, [rows, d], { offset: 1 }), // shifted by an element
    new Tensor(buf, [rows, d], { offset: 0, rowStride: d + 2 }), // same start, different stride
    new Tensor(buf, [rows, d], { offset: rows * d - 1 }), // last element of x
  ];
  for (const out of overlapping) {
    for (const kind of KINDS) throwsNaming(() => norm(kind)(x, { out }), ArgumentError, "out");
  }
  const after = new Uint8Array(buf.byteLength);
  buf.read(after);
  assert.deepEqual(after, before, "nothing written");
  assert.equal(dev.owner.liveCount, live);
  // right after x is fine
  const adjacent = new Tensor(buf, [rows, d], { offset: rows * d });
  rmsNorm(x, { out: adjacent });
  assertMatches(
    adjacent.readSync(),
    reference({ kind: "rms", x: randoms(rows * d, 5), shape: [rows, d], xDtype: "f32", eps: 1e-6 }).y,
    "f32",
    "adjacent out",
  );
});

test("validation: tensors from different devices → ArgumentError naming weight / bias / out", () => {
  using dev = Device.open({ backend: "cpu" });
  using dev2 = Device.open({ backend: "cpu" });
  const s = setup(dev);
  using w2 = dev2.tensor(randoms(8, 3), [8]);
  using out2 = dev2.empty([4, 8]);
  poison(out2);
  const before2 = bufferBytes(out2);
  rejects(s, (k, out) => norm(k)(s.x, { weight: w2, out }), ArgumentError, "weight");
  rejectsOnce(s, () => layerNorm(s.x, { bias: w2, out: s.out }), ArgumentError, "bias");
  for (const kind of KINDS) rejectsOnce(s, () => norm(kind)(s.x, { out: out2 }), ArgumentError, "out");
  assert.deepEqual(bufferBytes(out2), before2, "the other device's out is still poisoned");
});

test("validation: a stream of another device is rejected, naming stream", () => {
  using dev = Device.open({ backend: "cpu" });
  using dev2 = Device.open({ backend: "cpu" });
  const s = setup(dev);
  const stream2 = dev2.createStream();
  rejects(s, (k, out) => norm(k)(s.x, { stream: stream2, out }), ArgumentError, "stream");
});

test("validation: disposed x (or weight) → DisposedError naming it", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev);
  using w = dev.tensor(randoms(8, 4), [8]);
  w.close();
  rejects(s, (k, out) => norm(k)(s.x, { weight: w, out }), DisposedError, "weight");
  const xBytes = s.x.buffer.hostBytes;
  s.x.close();
  const outBefore = bufferBytes(s.out);
  const live = dev.owner.liveCount;
  for (const kind of KINDS) throwsNaming(() => norm(kind)(s.x, { out: s.out }), DisposedError, "x");
  for (const kind of KINDS) throwsNaming(() => norm(kind)(s.x), DisposedError, "x");
  assert.deepEqual(bufferBytes(s.out), outBefore, "out is still poisoned");
  assert.equal(dev.owner.liveCount, live);
  assert.ok(xBytes.length > 0);
});

test("validation: x of a closed device → DisposedError(x)", () => {
  const dev = Device.open({ backend: "cpu" });
  const s = setup(dev);
  // keep the host bytes (the CPU backend's memory) to check them after the device is gone
  const outBytes = s.out.buffer.hostBytes;
  const poisoned = outBytes.slice();
  dev.close();
  for (const kind of KINDS) {
    throwsNaming(() => norm(kind)(s.x, { out: s.out }), DisposedError, "x");
    throwsNaming(() => norm(kind)(s.x), DisposedError, "x");
  }
  assert.deepEqual(outBytes, poisoned, "out's memory was not written");
});

test("validation: x that is not a Tensor → ArgumentError(x)", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = setup(dev);
  const fake = { shape: [4, 8], dtype: "f32", device: dev, buffer: s.x.buffer, d: 8, rows: 4, rowStride: 8, offset: 0 };
  for (const x of [null, undefined, 42, new Float32Array(32), [1, 2, 3], fake, s.x.buffer]) {
    // deno-lint-ignore no-explicit-any
    rejects(s, (k, out) => norm(k)(x as any, { out }), ArgumentError, "x");
  }
  // and a non-Tensor weight / out
  // deno-lint-ignore no-explicit-any
  rejects(s, (k, out) => norm(k)(s.x, { weight: new Float32Array(8) as any, out }), ArgumentError, "weight");
  // deno-lint-ignore no-explicit-any
  rejectsOnce(s, () => layerNorm(s.x, { out: new Float32Array(32) as any }), ArgumentError, "out");
});
