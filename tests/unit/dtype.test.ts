import { mulberry32 } from "../fixtures/random.ts";
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  decode,
  type DType,
  dtypeBytes,
  DTYPES,
  encode,
  fromBf16Bits,
  fromF16Bits,
  isDType,
  roundTo,
  toBf16Bits,
  toF16Bits,
  ulpOf,
} from "../../runtime/dtype.ts";

// Independent decoders written from the format definitions with Math.pow,
// so the reference below does not share code with runtime/dtype.ts.
function refDecode(h: number, p: number, bias: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h & 0x7fff) >> p;
  const m = h & ((1 << p) - 1);
  const emaxBits = (1 << (15 - p)) - 1;
  if (e === emaxBits) return m === 0 ? sign * Infinity : NaN;
  if (e === 0) return sign * m * Math.pow(2, 1 - bias - p);
  return sign * (1 + m / (1 << p)) * Math.pow(2, e - bias);
}

interface RefFmt {
  name: string;
  p: number;
  bias: number;
  maxBits: number;
  toBits: (x: number) => number;
  fromBits: (h: number) => number;
}
const FMTS: RefFmt[] = [
  { name: "f16", p: 10, bias: 15, maxBits: 0x7bff, toBits: toF16Bits, fromBits: fromF16Bits },
  { name: "bf16", p: 7, bias: 127, maxBits: 0x7f7f, toBits: toBf16Bits, fromBits: fromBf16Bits },
];

/** All non-negative finite values in bit order, plus the overflow point 2^(emax+1). */
function positives(f: RefFmt): Float64Array {
  const v = new Float64Array(f.maxBits + 2);
  for (let h = 0; h <= f.maxBits; h++) v[h] = refDecode(h, f.p, f.bias);
  v[f.maxBits + 1] = Math.pow(2, f.bias + 1); // bit pattern maxBits+1 is +Inf
  return v;
}

/** Reference RNE: binary-search the neighbours, pick the nearest, ties to even bits. */
function refRound(x: number, vals: Float64Array): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  let lo = 0;
  let hi = vals.length - 1;
  if (a >= vals[hi]) return sign | hi;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (vals[mid] <= a) lo = mid;
    else hi = mid;
  }
  const dLo = a - vals[lo]; // exact: neighbours are close and a has <= 53 bits
  const dHi = vals[hi] - a;
  if (dLo < dHi) return sign | lo;
  if (dHi < dLo) return sign | hi;
  return sign | (lo % 2 === 0 ? lo : hi);
}

const hex = (n: number): string => "0x" + n.toString(16).padStart(4, "0");
const isNaNBits = (h: number, expMask: number): boolean => (h & expMask) === expMask && (h & ~expMask & 0x7fff) !== 0;

test("dtype metadata", () => {
  assert.deepEqual([...DTYPES], ["f32", "f16", "bf16"]);
  assert.deepEqual(DTYPES.map(dtypeBytes), [4, 2, 2]);
  assert.equal(isDType("f16"), true);
  assert.equal(isDType("fp16"), false);
  assert.equal(isDType(undefined), false);
});

test("f16 known bit patterns", () => {
  const cases: [number, number][] = [
    [1, 0x3c00],
    [-2, 0xc000],
    [65504, 0x7bff],
    [65519.99, 0x7bff],
    [65520, 0x7c00], // halfway to 2^16: ties to even -> Inf
    [-65520, 0xfc00],
    [1e10, 0x7c00],
    [2 ** -14, 0x0400],
    [2 ** -24, 0x0001],
    [2 ** -25, 0x0000], // tie between 0 and 2^-24 -> even (0)
    [2 ** -25 + 2 ** -60, 0x0001],
    [3 * 2 ** -25, 0x0002], // tie between 1 and 2 -> 2
    [5 * 2 ** -25, 0x0002], // tie between 2 and 3 -> 2
    [1 + 2 ** -11, 0x3c00], // tie -> even
    [1 + 3 * 2 ** -11, 0x3c02],
    // f64 -> f32 would round this to exactly 1 + 2^-11 (a tie) and then to 0x3c00.
    [1 + 2 ** -11 + 2 ** -40, 0x3c01],
    [0.1, 0x2e66],
    [0, 0x0000],
    [-0, 0x8000],
    [Infinity, 0x7c00],
    [-Infinity, 0xfc00],
    [1e-300, 0x0000],
    [-5e-324, 0x8000],
  ];
  for (const [x, bits] of cases) assert.equal(hex(toF16Bits(x)), hex(bits), `toF16Bits(${x})`);
  assert.equal(fromF16Bits(0x3c00), 1);
  assert.equal(fromF16Bits(0x0001), 2 ** -24);
  assert.equal(fromF16Bits(0x7bff), 65504);
  assert.equal(fromF16Bits(0xfc00), -Infinity);
  assert.ok(Object.is(fromF16Bits(0x8000), -0));
  assert.ok(Number.isNaN(fromF16Bits(0x7e00)));
  assert.ok(Number.isNaN(fromF16Bits(0xfc01)));
});

test("bf16 known bit patterns", () => {
  const max = (2 - 2 ** -7) * 2 ** 127;
  const cases: [number, number][] = [
    [1, 0x3f80],
    [-1, 0xbf80],
    [1 + 2 ** -8, 0x3f80], // tie -> even
    [1 + 3 * 2 ** -8, 0x3f82], // tie -> even (up)
    [1 + 2 ** -7, 0x3f81],
    // Double-rounding traps: f32 rounding lands exactly on the bf16 midpoint.
    [1 + 2 ** -8 + 2 ** -30, 0x3f81],
    [-(1 + 2 ** -8 + 2 ** -30), 0xbf81],
    [1 + 3 * 2 ** -8 - 2 ** -30, 0x3f81],
    [2 ** -133, 0x0001], // smallest subnormal
    [2 ** -134, 0x0000], // tie -> 0
    [3 * 2 ** -134, 0x0002],
    [2 ** -134 + 2 ** -160, 0x0001], // f32 would flush the 2^-160 and tie to 0
    [2 ** -126, 0x0080],
    [max, 0x7f7f],
    [2 ** 128 - 2 ** 119, 0x7f80], // halfway to 2^128: ties to even -> Inf
    [2 ** 128 - 2 ** 119 - 2 ** 80, 0x7f7f],
    [3.4028234663852886e38, 0x7f80], // f32 max rounds up to Inf in bf16
    [1e39, 0x7f80],
    [-1e300, 0xff80],
    [-0, 0x8000],
    [Infinity, 0x7f80],
    [-Infinity, 0xff80],
    [Math.PI, 0x4049],
  ];
  for (const [x, bits] of cases) assert.equal(hex(toBf16Bits(x)), hex(bits), `toBf16Bits(${x})`);
  assert.equal(fromBf16Bits(0x3f80), 1);
  assert.equal(fromBf16Bits(0x7f7f), max);
  assert.equal(fromBf16Bits(0x0001), 2 ** -133);
  assert.ok(Object.is(fromBf16Bits(0x8000), -0));
  assert.ok(Number.isNaN(fromBf16Bits(0x7fc0)));
});

test("NaN stays a quiet NaN with its sign, Inf and -0 round-trip", () => {
  const negNaN = new Float64Array(new BigUint64Array([0xfff8000000000000n]).buffer)[0];
  // JavaScriptCore (Bun) canonicalises NaN when it is read out of a typed
  // array, so a negative NaN cannot exist as a JS number there.
  const probe = new Float64Array([negNaN]);
  const engineKeepsNaNSign = new Uint8Array(probe.buffer)[7] === 0xff;
  for (
    const [to, from, expMask, quiet] of [
      [toF16Bits, fromF16Bits, 0x7c00, 0x0200],
      [toBf16Bits, fromBf16Bits, 0x7f80, 0x0040],
    ] as const
  ) {
    const h = to(NaN);
    assert.ok(isNaNBits(h, expMask) && (h & quiet) !== 0, hex(h));
    assert.equal(h & 0x8000, 0);
    const hn = to(negNaN);
    assert.ok(isNaNBits(hn, expMask), hex(hn));
    if (engineKeepsNaNSign) assert.equal(hn & 0x8000, 0x8000, "sign of NaN kept");
    assert.ok(Number.isNaN(from(h)));
    for (const v of [Infinity, -Infinity, -0, 0]) assert.ok(Object.is(from(to(v)), v), String(v));
  }
});

test("exhaustive: decode then encode returns every f16 / bf16 bit pattern", () => {
  for (const f of FMTS) {
    const expMask = f.name === "f16" ? 0x7c00 : 0x7f80;
    for (let h = 0; h < 65536; h++) {
      const v = f.fromBits(h);
      const back = f.toBits(v);
      if (isNaNBits(h, expMask)) {
        assert.ok(Number.isNaN(v) && isNaNBits(back, expMask), `${f.name} ${hex(h)} -> ${hex(back)}`);
      } else if (back !== h) {
        assert.fail(`${f.name} ${hex(h)} -> ${v} -> ${hex(back)}`);
      } else if (!Object.is(v, refDecode(h, f.p, f.bias))) {
        assert.fail(`${f.name} ${hex(h)} decodes to ${v}, reference ${refDecode(h, f.p, f.bias)}`);
      }
    }
  }
});

/** Deterministic PRNG (mulberry32) so failures reproduce. */
function rng(seed: number): () => number {
  return mulberry32(seed);
}

/** The tempting f64 -> f32 -> bf16 conversion, which double-rounds. */
function naiveBf16(x: number): number {
  const u = new Uint32Array(new Float32Array([x]).buffer)[0];
  return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
}

test("random float64 values match an enumerated nearest-value reference", () => {
  const rand = rng(1234);
  let naiveWrong = 0;
  for (const f of FMTS) {
    const vals = positives(f);
    const n = vals.length - 1;
    let mismatches = 0;
    for (let i = 0; i < 60000; i++) {
      const kind = i % 4;
      let x: number;
      if (kind === 0) {
        // Log-uniform over (and beyond) the whole format range.
        x = Math.pow(2, (rand() * 2 - 1) * (f.bias + 12)) * (1 + rand());
      } else {
        // A midpoint (or a neighbour) nudged by a tiny amount either way, which
        // is where double rounding and tie handling go wrong.
        const k = Math.floor(rand() * n);
        const mid = (vals[k] + vals[k + 1]) / 2;
        const nudge = kind === 1 ? 0 : (kind === 2 ? 1 : -1) * mid * Math.pow(2, -25 - rand() * 25);
        x = (rand() < 0.5 ? mid : vals[k]) + nudge;
      }
      if (rand() < 0.5) x = -x;
      const got = f.toBits(x);
      const want = refRound(x, vals);
      if (f.name === "bf16" && Number.isFinite(x) && naiveBf16(x) !== want) naiveWrong++;
      if (got !== want && mismatches++ < 5) {
        assert.fail(`${f.name}(${x}) = ${hex(got)}, reference ${hex(want)}`);
      }
    }
  }
  // The sample must contain double-rounding traps, or it proves little.
  assert.ok(naiveWrong > 100, `only ${naiveWrong} double-rounding traps sampled`);
});

test("roundTo and ulpOf", () => {
  assert.equal(roundTo(0.1, "f32"), Math.fround(0.1));
  assert.equal(roundTo(0.1, "f16"), fromF16Bits(0x2e66));
  assert.equal(roundTo(1 + 2 ** -8 + 2 ** -30, "bf16"), 1 + 2 ** -7);
  assert.equal(roundTo(70000, "f16"), Infinity);
  assert.equal(ulpOf(1, "f32"), 2 ** -23);
  assert.equal(ulpOf(1, "f16"), 2 ** -10);
  assert.equal(ulpOf(1.99, "bf16"), 2 ** -7);
  assert.equal(ulpOf(-1024, "f16"), 1);
  assert.equal(ulpOf(65504, "f16"), 32);
  assert.equal(ulpOf(0, "f16"), 2 ** -24);
  assert.equal(ulpOf(1e-30, "bf16"), 2 ** -107);
  assert.equal(ulpOf(1e-39, "bf16"), 2 ** -133);
  assert.equal(ulpOf(1e-45, "f32"), 2 ** -149);
  assert.equal(ulpOf(Infinity, "f16"), Infinity);
  assert.ok(Number.isNaN(ulpOf(NaN, "f32")));
});

/** Byte-by-byte reference encoder via DataView. */
function refEncode(values: number[], dtype: DType): Uint8Array {
  const b = new Uint8Array(values.length * dtypeBytes(dtype));
  const dv = new DataView(b.buffer);
  values.forEach((v, i) => {
    if (dtype === "f32") dv.setFloat32(i * 4, v, true);
    else dv.setUint16(i * 2, dtype === "f16" ? toF16Bits(v) : toBf16Bits(v), true);
  });
  return b;
}

test("encode/decode: aligned, unaligned byteOffset, out buffers", () => {
  const rand = rng(7);
  const values = Array.from({ length: 257 }, () => (rand() - 0.5) * 1000);
  values.push(-0, Infinity, -Infinity, 1e-7, 65519, 3e38);
  for (const dtype of DTYPES) {
    const want = refEncode(values, dtype);
    assert.deepEqual(encode(values, dtype), want, `${dtype} fresh`);
    for (const offset of [0, 1, 2, 3, 4]) {
      const big = new Uint8Array(want.length + 9).fill(0xee);
      const got = encode(new Float64Array(values), dtype, big.subarray(offset));
      assert.equal(got.byteOffset, offset);
      assert.equal(got.length, want.length);
      assert.deepEqual(got, want, `${dtype} offset ${offset}`);
      assert.equal(big[offset + want.length], 0xee, "no write past count*bytes");
      for (const out of [undefined, new Float64Array(values.length + 2)]) {
        const dec = decode(got, dtype, out);
        assert.ok(out === undefined ? dec instanceof Float32Array : dec instanceof Float64Array);
        assert.equal(dec.length, values.length);
        values.forEach((v, i) => {
          const r = dtype === "f32" ? Math.fround(v) : roundTo(v, dtype);
          assert.ok(Object.is(dec[i], r), `${dtype}@${offset} [${i}] ${dec[i]} != ${r}`);
        });
      }
    }
  }
  assert.throws(() => encode([1, 2], "f32", new Uint8Array(7)), RangeError);
  assert.throws(() => decode(new Uint8Array(3), "f16"), RangeError);
  assert.throws(() => decode(new Uint8Array(8), "f32", new Float32Array(1)), RangeError);
});

test("decode preserves NaN in every path", () => {
  const bytes = new Uint8Array(5);
  new DataView(bytes.buffer).setUint16(1, 0x7e00, true);
  assert.ok(Number.isNaN(decode(bytes.subarray(1, 3), "f16")[0]));
  new DataView(bytes.buffer).setUint16(1, 0xffc1, true);
  assert.ok(Number.isNaN(decode(bytes.subarray(1, 3), "bf16")[0]));
  assert.ok(Number.isNaN(decode(bytes.subarray(1, 3), "bf16", new Float64Array(1))[0]));
});

test("bulk encode/decode of 1M elements is fast and matches scalar conversion", () => {
  const n = 1 << 20;
  const rand = rng(99);
  const v = new Float64Array(n);
  for (let i = 0; i < n; i++) v[i] = (rand() - 0.5) * 200;
  for (const dtype of DTYPES) {
    const t0 = performance.now();
    const dec = decode(encode(v, dtype), dtype);
    const ms = performance.now() - t0;
    assert.ok(ms < 1500, `${dtype} took ${ms} ms`);
    for (let i = 0; i < n; i += 997) assert.equal(dec[i], roundTo(v[i], dtype));
  }
});
