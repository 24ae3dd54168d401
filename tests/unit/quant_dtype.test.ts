/**
 * The 1-byte dtypes (fp8e4m3, fp8e5m2, int8): every byte's value, the conversion from numbers (round to nearest
 * even, SATFINITE, NaN handling) against a brute-force reference written from the format definitions, the bulk
 * encode/decode, and tensors of them on the CPU backend.
 *
 * Round trips are exact for every byte except: NaN bytes come back as the canonical NaN byte of their sign (e4m3
 * 0x7f/0xff, e5m2 0x7e/0xfe; an engine may also drop a NaN's sign), and e5m2's ±Infinity bytes 0x7c/0xfc come back
 * as ±max (0x7b/0xfb), since the conversion saturates.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  decode,
  dtypeBytes,
  DTYPES,
  encode,
  fromQuantBits,
  isDType,
  isQuantDType,
  isTensorDType,
  QUANT_DTYPES,
  type QuantDType,
  quantMax,
  roundTo,
  toQuantBits,
  ulpOf,
} from "../../runtime/dtype.ts";
import { Device } from "../../runtime/device.ts";
import { ArgumentError } from "../../runtime/errors.ts";
import { mulberry32 } from "../fixtures/random.ts";

/** An FP8 format from its definition: exponent and mantissa widths, bias, and whether exponent all-ones is Inf/NaN. */
interface RefFp8 {
  dtype: "fp8e4m3" | "fp8e5m2";
  e: number;
  m: number;
  bias: number;
  ieee: boolean; // e5m2: IEEE-like top exponent; e4m3: only S.1111.111 is NaN
  nan: number;
}
const E4M3: RefFp8 = { dtype: "fp8e4m3", e: 4, m: 3, bias: 7, ieee: false, nan: 0x7f };
const E5M2: RefFp8 = { dtype: "fp8e5m2", e: 5, m: 2, bias: 15, ieee: true, nan: 0x7e };

/** A byte's value with Math.pow, independent of runtime/dtype.ts. */
function refValue(b: number, f: RefFp8): number {
  const sign = b & 0x80 ? -1 : 1;
  const ex = (b >> f.m) & ((1 << f.e) - 1);
  const mt = b & ((1 << f.m) - 1);
  const top = (1 << f.e) - 1;
  if (f.ieee && ex === top) return mt === 0 ? sign * Infinity : NaN;
  if (!f.ieee && ex === top && mt === (1 << f.m) - 1) return NaN;
  if (ex === 0) return sign * mt * Math.pow(2, 1 - f.bias - f.m);
  return sign * (1 + mt / (1 << f.m)) * Math.pow(2, ex - f.bias);
}

/** The non-negative finite values in byte order (values grow with the byte). */
function finitePositives(f: RefFp8): number[] {
  const v: number[] = [];
  for (let b = 0; b < 0x80; b++) {
    const x = refValue(b, f);
    if (Number.isFinite(x)) v.push(x);
  }
  return v;
}

const signBit = (x: number): number => (x < 0 || Object.is(x, -0) || (x !== x && signOfNaN(x)) ? 0x80 : 0);
function signOfNaN(x: number): boolean {
  const f = new Float64Array([x]);
  return (new Uint32Array(f.buffer)[1] >>> 31) === 1;
}

/** The brute-force conversion: nearest finite value, ties to the even byte, saturated at max; NaN → NaN byte. */
function refConvert(x: number, f: RefFp8, vals: number[]): number {
  const s = signBit(x);
  if (x !== x) return s | f.nan;
  const a = Math.abs(x);
  if (a >= vals[vals.length - 1]) return s | (vals.length - 1); // SATFINITE (far out, all distances tie in f64)
  let best = 0;
  for (let b = 1; b < vals.length; b++) {
    const d = Math.abs(a - vals[b]), db = Math.abs(a - vals[best]);
    if (d < db || (d === db && b % 2 === 0)) best = b;
  }
  return s | best;
}

/** int8 by brute force: the nearest integer in [-128, 127], ties to even; NaN → 0. */
function refInt8(x: number): number {
  if (x !== x) return 0;
  if (x >= 127 || x <= -128) return x > 0 ? 127 : -128; // far out, all distances tie in f64
  let best = -128;
  for (let n = -127; n <= 127; n++) {
    const d = Math.abs(x - n), db = Math.abs(x - best);
    if (d < db || (d === db && n % 2 === 0)) best = n;
  }
  return best;
}

/** Inputs that probe a format: every value, every midpoint and just either side, out-of-range and random ones. */
function probes(vals: number[], seed: number): number[] {
  const out: number[] = [];
  const max = vals[vals.length - 1];
  for (let i = 0; i < vals.length; i++) {
    out.push(vals[i]);
    if (i + 1 < vals.length) {
      const mid = (vals[i] + vals[i + 1]) / 2;
      const eps = (vals[i + 1] - vals[i]) * 2 ** -20;
      out.push(mid, mid - eps, mid + eps);
    }
  }
  const step = vals[vals.length - 1] - vals[vals.length - 2];
  out.push(max + step / 2, max + step, max * 2, 1e30, Infinity, vals[1] / 4, 1e-300, 5e-324);
  const next = mulberry32(seed);
  for (let i = 0; i < 2000; i++) out.push(max * 1.2 * next() * Math.pow(2, -Math.floor(next() * 24)));
  return out.flatMap((v) => [v, -v]);
}

for (const f of [E4M3, E5M2]) {
  test(`${f.dtype}: every byte decodes to its value from the format definition`, () => {
    for (let b = 0; b < 256; b++) {
      const want = refValue(b, f), got = fromQuantBits(b, f.dtype);
      if (want !== want) assert.ok(got !== got, `byte 0x${b.toString(16)} should be NaN, got ${got}`);
      else assert.ok(Object.is(got, want), `byte 0x${b.toString(16)}: ${got} != ${want}`);
    }
    assert.equal(quantMax(f.dtype), finitePositives(f).at(-1));
  });

  test(`${f.dtype}: every byte re-encodes to itself (NaN canonical, e5m2 Inf saturates)`, () => {
    const vals = finitePositives(f);
    const maxBits = vals.length - 1;
    for (let b = 0; b < 256; b++) {
      const v = fromQuantBits(b, f.dtype), back = toQuantBits(v, f.dtype);
      const hex = `0x${b.toString(16)}`;
      if (v !== v) assert.ok((back & 0x7f) === f.nan, `NaN byte ${hex} re-encodes to a NaN byte, got ${back}`);
      else if (Math.abs(v) === Infinity) assert.equal(back, (b & 0x80) | maxBits, `Inf byte ${hex} saturates`);
      else assert.equal(back, b, `byte ${hex} (${v})`);
    }
  });

  test(`${f.dtype}: conversion is RNE with SATFINITE, by brute force`, () => {
    const vals = finitePositives(f);
    for (const x of probes(vals, f.m)) {
      assert.equal(toQuantBits(x, f.dtype), refConvert(x, f, vals), `x = ${x}`);
    }
    assert.equal(toQuantBits(NaN, f.dtype) & 0x7f, f.nan);
  });

  test(`${f.dtype}: midpoints round to the even byte, subnormals and saturation`, () => {
    const vals = finitePositives(f);
    const tiny = vals[1]; // smallest subnormal
    assert.equal(toQuantBits(tiny / 2, f.dtype), 0x00); // tie with 0 → 0 (even)
    assert.equal(toQuantBits(-tiny / 2, f.dtype), 0x80); // the sign of a zero is kept
    assert.equal(toQuantBits(tiny * 1.5, f.dtype), 0x02); // tie between bytes 1 and 2 → 2
    assert.equal(toQuantBits(tiny * 2.5, f.dtype), 0x02); // tie between 2 and 3 → 2
    assert.equal(toQuantBits((vals[8] + vals[9]) / 2, f.dtype), 0x08);
    assert.equal(toQuantBits((vals[9] + vals[10]) / 2, f.dtype), 0x0a);
    const max = quantMax(f.dtype), maxBits = vals.length - 1;
    for (const big of [max, max * 1.01, max * 2, Infinity]) {
      assert.equal(toQuantBits(big, f.dtype), maxBits);
      assert.equal(toQuantBits(-big, f.dtype), 0x80 | maxBits);
    }
    assert.equal(roundTo(-Infinity, f.dtype), -max);
    assert.ok(Number.isNaN(roundTo(NaN, f.dtype)));
  });

  test(`${f.dtype}: ulpOf is the spacing of neighbouring values`, () => {
    const vals = finitePositives(f);
    for (let i = 0; i + 1 < vals.length; i++) {
      assert.equal(ulpOf(vals[i], f.dtype), vals[i + 1] - vals[i], `at ${vals[i]}`);
    }
  });
}

test("fp8: e4m3 and e5m2 known values (OCP FP8 tables)", () => {
  assert.equal(toQuantBits(1, "fp8e4m3"), 0x38);
  assert.equal(toQuantBits(-2, "fp8e4m3"), 0xc0);
  assert.equal(toQuantBits(448, "fp8e4m3"), 0x7e);
  assert.equal(fromQuantBits(0x01, "fp8e4m3"), 2 ** -9);
  assert.equal(toQuantBits(1, "fp8e5m2"), 0x3c);
  assert.equal(toQuantBits(57344, "fp8e5m2"), 0x7b);
  assert.equal(fromQuantBits(0x7c, "fp8e5m2"), Infinity);
  assert.equal(fromQuantBits(0x01, "fp8e5m2"), 2 ** -16);
});

test("int8: round half to even, clamp, NaN → 0, by brute force", () => {
  const next = mulberry32(7);
  const xs = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 200, -128.5, -129, -1e9, Infinity, -Infinity, NaN];
  for (let i = 0; i < 3000; i++) xs.push((next() - 0.5) * 300, Math.round((next() - 0.5) * 300) + 0.5);
  for (const x of xs) {
    const want = refInt8(x);
    assert.equal(toQuantBits(x, "int8"), want & 0xff, `x = ${x}`);
    assert.equal(roundTo(x, "int8"), want, `x = ${x}`);
  }
  for (let b = 0; b < 256; b++) assert.equal(toQuantBits(fromQuantBits(b, "int8"), "int8"), b);
  assert.equal(fromQuantBits(0x80, "int8"), -128);
  assert.equal(fromQuantBits(0xff, "int8"), -1);
  assert.equal(ulpOf(5, "int8"), 1);
});

test("dtype metadata of the 1-byte dtypes", () => {
  assert.deepEqual([...QUANT_DTYPES], ["fp8e4m3", "fp8e5m2", "int8"]);
  assert.deepEqual(QUANT_DTYPES.map(dtypeBytes), [1, 1, 1]);
  assert.deepEqual(QUANT_DTYPES.map(quantMax), [448, 57344, 127]);
  for (const q of QUANT_DTYPES) {
    assert.equal(isQuantDType(q), true);
    assert.equal(isTensorDType(q), true);
    assert.equal(isDType(q), false, "isDType is the float dtypes a norm takes");
  }
  for (const t of DTYPES) assert.equal(isQuantDType(t) || !isTensorDType(t), false);
  assert.equal(isQuantDType("fp8"), false);
  assert.equal(isTensorDType("uint8"), false);
});

test("bulk encode/decode equal the scalar conversions, unaligned too", () => {
  const next = mulberry32(11);
  for (const q of QUANT_DTYPES) {
    const values = new Float64Array(301).map(() => (next() - 0.5) * 2 * quantMax(q) * 1.3);
    values[3] = NaN;
    values[4] = -0;
    const bytes = encode(values, q);
    assert.equal(bytes.length, values.length);
    for (let i = 0; i < values.length; i++) assert.equal(bytes[i], toQuantBits(values[i], q));
    const into = new Uint8Array(values.length + 1);
    encode(values, q, into.subarray(1));
    assert.deepEqual(into.subarray(1), bytes);
    const back = decode(into.subarray(1), q), back64 = decode(bytes, q, new Float64Array(values.length));
    for (let i = 0; i < values.length; i++) {
      const want = roundTo(values[i], q);
      if (want !== want) assert.ok(back[i] !== back[i] && back64[i] !== back64[i]);
      else {
        assert.ok(Object.is(back[i], want), `${q}[${i}]: ${back[i]} != ${want}`);
        assert.ok(Object.is(back64[i], want));
      }
    }
  }
});

const cpu = () => Device.open({ backend: "cpu", sanityCheck: false });

test("tensors of 1-byte dtypes: values in, decoded values and raw bytes out", () => {
  using dev = cpu();
  const next = mulberry32(5);
  for (const q of QUANT_DTYPES) {
    const values = Array.from({ length: 12 }, () => (next() - 0.5) * quantMax(q) * 0.5);
    using t = dev.tensor(values, [3, 4], { dtype: q });
    assert.equal(t.bytesPerElement, 1);
    assert.equal(`${t}`, `Tensor(${q} [3, 4] on ${dev.id})`);
    const got = t.readSync();
    assert.ok(got instanceof Float32Array);
    assert.deepEqual([...got], values.map((v) => roundTo(v, q)));
    const bits = t.readBitsSync();
    assert.ok(q === "int8" ? bits instanceof Int8Array : bits instanceof Uint8Array, `${q} bits type`);
    assert.deepEqual([...new Uint8Array(bits.buffer, bits.byteOffset, 12)], [...encode(values, q)]);
  }
});

test("tensors of 1-byte dtypes: empty, padded rows, bits in", () => {
  using dev = cpu();
  using e = dev.empty([2, 3], { dtype: "fp8e4m3", rowStride: 5 });
  e.write([1, -2, 3.3, 448, 1000, -0.01]);
  assert.deepEqual([...e.readSync()], [1, -2, 3.25, 448, 448, roundTo(-0.01, "fp8e4m3")]);
  e.write(new Uint8Array([0x38, 0x40, 0x7f, 0x01, 0x80, 0xfe]), { bits: true });
  const v = e.readSync();
  assert.deepEqual([v[0], v[1], v[3], v[5]], [1, 2, 2 ** -9, -448]);
  assert.ok(Number.isNaN(v[2]) && Object.is(v[4], -0));
  using i8 = dev.tensor(new Int8Array([-128, -1, 0, 127]), [4], { dtype: "int8", bits: true });
  assert.deepEqual([...i8.readSync()], [-128, -1, 0, 127]);
  using i8n = dev.tensor(new Int8Array([-128, -1, 0, 127]), [4], { dtype: "int8" }); // numbers: the same bytes
  assert.deepEqual([...i8n.readBitsSync()], [-128, -1, 0, 127]);
  using e5 = dev.tensor(new Uint8Array([0x3c, 0x7c]), [2], { dtype: "fp8e5m2", bits: true });
  assert.deepEqual([...e5.readSync()], [1, Infinity]);
});

test("tensors of 1-byte dtypes: ambiguous or wrong bits arrays are refused", () => {
  using dev = cpu();
  const refuses = (fn: () => unknown, argument: string) =>
    assert.throws(fn, (e: unknown) => e instanceof ArgumentError && e.argument === argument);
  refuses(() => dev.tensor(new Uint8Array([1, 2]), [2], { dtype: "fp8e4m3" }), "bits");
  refuses(() => dev.tensor(new Uint8Array([1, 2]), [2], { dtype: "int8" }), "bits");
  refuses(() => dev.tensor(new Uint16Array([1, 2]), [2], { dtype: "fp8e5m2", bits: true }), "values");
  refuses(() => dev.tensor(new Int8Array([1, 2]), [2], { dtype: "fp8e4m3", bits: true }), "values");
  refuses(() => dev.tensor([1, 2], [2], { dtype: "fp8" as QuantDType }), "dtype");
  using ok = dev.tensor(new Uint8Array([3, 200]), [2], { dtype: "int8", bits: false });
  assert.deepEqual([...ok.readSync()], [3, 127]);
});

test("tensors of 1-byte dtypes: a view of heads reads and writes its own bytes", () => {
  using dev = cpu();
  const tokens = 3, heads = 4, hd = 5, width = heads * hd + 3; // 3 padding bytes per token
  const values = Array.from({ length: tokens * width }, (_, i) => ((i * 37) % 255) - 127);
  using base = dev.tensor(values, [tokens, width], { dtype: "int8" });
  const odd = base.view([tokens, 2, hd], { strides: [width, 2 * hd, 1], offset: hd }); // heads 1 and 3
  const want: number[] = [];
  for (let t = 0; t < tokens; t++) {
    for (const h of [1, 3]) for (let i = 0; i < hd; i++) want.push(values[t * width + h * hd + i]);
  }
  assert.deepEqual([...odd.readSync()], want);
  assert.deepEqual([...odd.readBitsSync()], want);
  odd.write(want.map((v) => -v - 1)); // ~v: in range for every int8
  const after = base.readSync();
  for (let t = 0; t < tokens; t++) {
    for (let c = 0; c < width; c++) {
      const h = Math.floor(c / hd), inView = c < heads * hd && h % 2 === 1, v = values[t * width + c];
      assert.equal(after[t * width + c], inView ? -v - 1 : v, `token ${t} column ${c}`);
    }
  }
});
